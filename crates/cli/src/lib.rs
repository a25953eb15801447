//! The commands for a person at a terminal: `status` (a table of attempts, or one attempt with
//! its last log lines), `watch` (follow an attempt's normalized log live) and `doctor` (checks
//! of the config, VK, the data dir, the port and the versions). `status` and `watch` talk to the
//! running daemon over its MCP endpoint, like any other MCP client; `doctor` also talks to VK.

/// `println!` for the terminal commands: a closed stdout (`vk-observer status | head`) ends
/// the command quietly instead of panicking.
macro_rules! outln {
    () => {
        $crate::render::say(format_args!(""))
    };
    ($($t:tt)*) => {
        $crate::render::say(format_args!($($t)*))
    };
}

pub mod audit;
pub(crate) mod client;
pub mod doctor;
mod doctor_certs;
mod doctor_dialect;
pub(crate) mod render;
pub(crate) mod resolve;
pub(crate) mod settings_toml;
pub mod status;
pub mod token;
pub mod watch;

/// The daemon's MCP endpoint when none is given: `/mcp` on `config::DEFAULT_LISTEN`.
pub(crate) const DEFAULT_DAEMON: &str = "http://127.0.0.1:8765/mcp";

/// Where the running daemon is and the bearer token it wants: the flags every command that
/// talks to a daemon (`mcp`, `status`, `watch`) flattens in.
#[derive(Debug, Clone, clap::Args)]
pub struct DaemonArgs {
    /// The daemon's MCP endpoint.
    #[arg(long, global = true, env = "VK_OBSERVER_DAEMON", default_value = DEFAULT_DAEMON)]
    pub daemon: String,
    /// Bearer token the daemon wants on /mcp (a daemon started with `[mcp] token`).
    #[arg(
        long,
        global = true,
        env = "VK_OBSERVER_MCP_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_daemon_is_mcp_on_the_default_listen_address() {
        let want = format!("http://{}/mcp", vk_observer_config::DEFAULT_LISTEN);
        assert_eq!(super::DEFAULT_DAEMON, want);
    }
}
