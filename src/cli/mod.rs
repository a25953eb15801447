//! The commands for a person at a terminal: `status` (a table of attempts, or one attempt with
//! its last log lines), `watch` (follow an attempt's normalized log live) and `doctor` (checks
//! of the config, VK, the data dir, the port and the versions). `status` and `watch` talk to the
//! running daemon over its MCP endpoint, like any other MCP client; `doctor` also talks to VK.

/// `println!` for the terminal commands: a closed stdout (`vk-observer status | head`) ends
/// the command quietly instead of panicking.
macro_rules! outln {
    () => {
        $crate::cli::render::say(format_args!(""))
    };
    ($($t:tt)*) => {
        $crate::cli::render::say(format_args!($($t)*))
    };
}

pub mod client;
pub mod doctor;
pub mod render;
pub mod resolve;
pub mod settings_toml;
pub mod status;
pub mod watch;

/// The daemon's MCP endpoint when none is given.
pub const DEFAULT_DAEMON: &str = "http://127.0.0.1:8765/mcp";
