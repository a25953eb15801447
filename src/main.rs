//! The `vk-observer` command: `serve` (the daemon), `demo` (the daemon plus the built-in VK
//! simulator playing scripted attempts, so a newcomer can try it without VK), `mcp` (a stdio
//! bridge to the daemon) and the terminal commands `status`, `watch`, `doctor`, `token` and
//! `audit` (crates/cli).
//! Only clap types and dispatch live here: settings resolve in `config`, the demo's script
//! is `demo` (src/demo.rs).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use vk_observer_cli::{DaemonArgs, audit, doctor, status, token, watch};
use vk_observer_config::{self as config, IdempotencyArgs, SettingsArgs};
use vk_observer_daemon::Daemon;

/// jemalloc instead of glibc's malloc, measured side by side on the same code
/// (docs/performance.md, Findings): 10 k parked waits 234 → 167 MB, a batch of 100 statuses
/// 0.72 → 0.55 ms back to back, 1 M-entry catch-up 11.8 → 9.8 daemon CPU-seconds; idle RSS
/// 30 → 38 MB.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation (the `malloc_conf` string; the symbol carries
/// the `_rjem_` prefix of tikv-jemallocator's build; `_RJEM_MALLOC_CONF` in the environment
/// still overrides it). A background thread hands freed pages back to the OS 1 s after they were
/// freed, without a later allocation to trigger it (the default waits 10 + 10 s and only
/// purges on allocation): a daemon that caught up a big board and then idles drops to its live
/// set instead of keeping the catch-up's high-water mark (issue 27, idle RSS). One arena
/// instead of four per CPU: fewer partly used pages after the catch-up (idle RSS −6 to −8 MB
/// on the scale board, daemon CPU within the runs' spread; docs/performance.md, session 11);
/// the daemon's allocating threads are few and mostly served by their thread caches. A big
/// many-core host can set `_RJEM_MALLOC_CONF=narenas:<n>`.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8; 70] =
    b"narenas:1,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

#[cfg(feature = "heap-stats")]
mod heap_stats;

#[derive(Parser)]
#[command(
    name = "vk-observer",
    version,
    about = "Observe Vibe Kanban, cache it in sled, serve MCP task tools from the cache"
)]
struct Cli {
    /// Log as JSON lines instead of text.
    #[arg(long, global = true, env = "VK_OBSERVER_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon against a VK server.
    Serve {
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// Serve MCP on stdio, forwarding to a running daemon (for clients that spawn servers).
    Mcp {
        #[command(flatten)]
        to: DaemonArgs,
        /// Directory to report for `get_context` (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Show attempts: a table of every task's latest attempt, or one attempt with its last log
    /// lines (asks the running daemon).
    Status {
        /// An attempt id (full UUID, or the 8-character prefix the table shows).
        attempt: Option<String>,
        #[command(flatten)]
        to: DaemonArgs,
        /// Only this project's tasks (project UUID).
        #[arg(long)]
        project: Option<uuid::Uuid>,
        /// Print the tools' structured JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Follow an attempt's normalized log live until it completes or fails (asks the running
    /// daemon).
    Watch {
        /// An attempt id (full UUID, or the 8-character prefix `status` shows).
        attempt: String,
        #[command(flatten)]
        to: DaemonArgs,
        /// Seconds to keep waiting after the attempt ended, for a cleanup script or follow-up.
        #[arg(long, default_value_t = 2.0)]
        linger: f64,
    },
    /// Check the config, VK, the daemon, the listen port, the data dir and the versions.
    Doctor {
        #[command(flatten)]
        settings: SettingsArgs,
        /// The daemon's MCP endpoint (default: /mcp on the listen address).
        #[arg(long, env = "VK_OBSERVER_DAEMON")]
        daemon: Option<String>,
    },
    /// Run the daemon beside the built-in VK simulator playing scripted attempts.
    Demo(DemoArgs),
    /// The audit trail of mutations, newest first (asks the running daemon).
    Audit {
        #[command(flatten)]
        to: DaemonArgs,
        /// Only this attempt's mutations.
        #[arg(long)]
        attempt: Option<uuid::Uuid>,
        /// Only this caller's: a token's name, `mcp-token` or `loopback`.
        #[arg(long = "token-name")]
        caller: Option<String>,
        /// Only this tool's (e.g. merge_attempt).
        #[arg(long)]
        tool: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print the daemon's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create, list or revoke scoped MCP tokens (kept hashed in `[mcp] tokens_file`).
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
        #[command(flatten)]
        settings: SettingsArgs,
    },
}

/// `demo`'s own flags: no environment besides the idempotency lifetimes, no config file.
#[derive(clap::Args)]
struct DemoArgs {
    #[arg(long, default_value = config::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Cache directory (default: a fresh temporary directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Seconds between scripted attempts.
    #[arg(long, default_value_t = 20)]
    every: u64,
    /// Play this many VK hosts behind a fleet node on NATS JetStream (needs nats-server; the
    /// fleet node serves on --listen).
    #[arg(long, default_value_t = 1)]
    hosts: usize,
    /// The simulated VK's dialect: `fork` (local projects and tasks) or `workspaces` (VK 0.1.x:
    /// workspaces only; see docs/agent-guide.md "Which VK").
    #[arg(long, value_enum, default_value = "fork")]
    dialect: DemoDialect,
    #[command(flatten)]
    idempotency: IdempotencyArgs,
}

/// `demo --dialect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DemoDialect {
    Fork,
    Workspaces,
}

impl DemoArgs {
    /// The settings layer these flags fill (the demo adds the simulator as upstream).
    fn settings(&self) -> SettingsArgs {
        SettingsArgs {
            listen: Some(self.listen),
            data_dir: self.data_dir.clone(),
            idempotency: self.idempotency,
            ..SettingsArgs::default()
        }
    }
}

fn init_tracing(json: bool, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    #[cfg(feature = "heap-stats")]
    heap_stats::start();
    init_tracing(cli.log_json, log_level(&cli.command));
    match cli.command {
        Command::Serve { settings } => serve(settings).await?,
        Command::Demo(args) => demo(args).await?,
        Command::Mcp { to, workspace } => {
            let workspace = workspace.or_else(|| std::env::current_dir().ok());
            if let Err(e) =
                vk_observer_mcp::transport::bridge::run(&to.daemon, workspace, to.token).await
            {
                eprintln!("vk-observer mcp: {e:#}");
                std::process::exit(1);
            }
        }
        Command::Status {
            attempt,
            to,
            project,
            json,
        } => {
            let opts = status::StatusOptions {
                daemon: to.daemon,
                token: to.token,
                attempt,
                project,
                json,
            };
            exit_with("status", status::run(opts).await);
        }
        Command::Watch {
            attempt,
            to,
            linger,
        } => {
            let opts = watch::WatchOptions {
                daemon: to.daemon,
                token: to.token,
                attempt,
                linger: Duration::from_secs_f64(linger.clamp(0.0, 50.0)),
            };
            exit_with("watch", watch::run(opts).await);
        }
        Command::Audit {
            to,
            attempt,
            caller,
            tool,
            limit,
            json,
        } => {
            let opts = audit::AuditOptions {
                daemon: to.daemon,
                token: to.token,
                attempt,
                caller,
                tool,
                limit,
                json,
            };
            exit_with("audit", audit::run(opts).await);
        }
        Command::Token { command, settings } => {
            let path = settings
                .load_file()
                .and_then(|file| settings.layered(file.as_ref()))
                .map(|s| s.tokens_path());
            exit_with("token", path.and_then(|p| token::run(&p, command)));
        }
        Command::Doctor { settings, daemon } => {
            let opts = doctor::DoctorOptions { settings, daemon };
            exit_with("doctor", doctor::run(opts).await);
        }
    }
    Ok(())
}

/// The default log filter of a command. The stdio bridge shares stderr with the client's logs,
/// and the terminal commands with a person: only warnings by default.
fn log_level(command: &Command) -> &'static str {
    match command {
        // rmcp logs every session/request at info: per-request noise in stateless mode.
        Command::Serve { .. } | Command::Demo { .. } => "info,rmcp=warn",
        Command::Mcp { .. } => "warn",
        // They report failures themselves; rmcp's transport errors would repeat them.
        _ => "warn,rmcp=off",
    }
}

/// Install the Prometheus recorder and register every metric at its starting value.
fn metrics() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .ok();
    if handle.is_some() {
        vk_observer_telemetry::register();
    }
    handle
}

/// Run the daemon until SIGINT or SIGTERM.
async fn serve(settings: SettingsArgs) -> anyhow::Result<()> {
    let settings = settings.resolve()?;
    if settings.fleet.node {
        let node = vk_observer_daemon::fleet_node::FleetNode::start(settings, metrics()).await?;
        eprintln!("vk-observer: fleet node serving on http://{}", node.addr);
        wait_for_signal().await;
        node.shutdown().await;
        return Ok(());
    }
    let upstream = settings.upstream.clone();
    let daemon = Daemon::start(settings, metrics()).await?;
    eprintln!(
        "vk-observer: serving on http://{} (upstream {upstream})",
        daemon.addr
    );
    wait_for_signal().await;
    daemon.shutdown().await;
    Ok(())
}

/// End a terminal command: its exit code, or 1 with the error on stderr.
fn exit_with(command: &str, r: anyhow::Result<i32>) -> ! {
    let code = match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vk-observer {command}: {e:#}");
            1
        }
    };
    std::process::exit(code)
}

#[cfg(feature = "sim")]
async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let every = Duration::from_secs(args.every);
    let dialect = match args.dialect {
        DemoDialect::Fork => vk_observer_sim::SimDialect::Fork,
        DemoDialect::Workspaces => vk_observer_sim::SimDialect::Workspaces,
    };
    if args.hosts != 1 {
        anyhow::ensure!(
            args.dialect == DemoDialect::Fork,
            "demo --hosts plays the fork's dialect only; drop --dialect or --hosts"
        );
        let (settings, hosts) = (args.settings(), args.hosts);
        let stop = wait_for_signal();
        return vk_observer::demo::fleet::run(settings, hosts, every, metrics(), stop).await;
    }
    let stop = wait_for_signal();
    vk_observer::demo::run(args.settings(), every, dialect, metrics(), stop).await
}

#[cfg(not(feature = "sim"))]
async fn demo(_: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("this build has no simulator: rebuild with the `sim` feature")
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
