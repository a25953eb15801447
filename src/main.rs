//! The `vk-observer` command: `serve` (the daemon), `demo` (the daemon plus the built-in VK
//! simulator playing scripted attempts, so a newcomer can try it without VK), `mcp` (a stdio
//! bridge to the daemon) and the terminal commands `status`, `watch` and `doctor` (src/cli/).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use vk_observer::config::{self, FileConfig};
use vk_observer::daemon::{Daemon, DaemonOptions};
use vk_observer::ingest::IngestConfig;

/// jemalloc instead of glibc's malloc, measured side by side on the same code
/// (docs/performance.md, Findings): 10 k parked waits 234 → 167 MB, a batch of 100 statuses
/// 0.72 → 0.55 ms back to back, 1 M-entry catch-up 11.8 → 9.8 daemon CPU-seconds; idle RSS
/// 30 → 38 MB.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Where the daemon's settings come from; shared by `serve` and `doctor` (which checks them).
#[derive(clap::Args)]
struct SettingsArgs {
    /// VK's base URL, e.g. http://127.0.0.1:3000 (default: VK's port file).
    #[arg(long, env = "VK_OBSERVER_UPSTREAM")]
    upstream: Option<String>,
    /// Bearer token when VK runs with token access control.
    #[arg(long, env = "VK_OBSERVER_UPSTREAM_TOKEN", hide_env_values = true)]
    upstream_token: Option<String>,
    /// Address to serve /mcp, /healthz, /readyz and /metrics on.
    #[arg(long, env = "VK_OBSERVER_LISTEN")]
    listen: Option<SocketAddr>,
    /// Where the sled cache lives.
    #[arg(long, env = "VK_OBSERVER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// TOML config file (flags and environment override it).
    #[arg(long, env = "VK_OBSERVER_CONFIG")]
    config: Option<PathBuf>,
    /// Bearer token MCP clients must send; required to listen on a non-loopback address.
    #[arg(long, env = "VK_OBSERVER_MCP_TOKEN", hide_env_values = true)]
    mcp_token: Option<String>,
}

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
        /// Serve /mcp stateless with JSON responses (no sessions, no SSE streams).
        #[arg(long, env = "VK_OBSERVER_MCP_STATELESS")]
        mcp_stateless: bool,
    },
    /// Serve MCP on stdio, forwarding to a running daemon (for clients that spawn servers).
    Mcp {
        /// The daemon's MCP endpoint.
        #[arg(
            long,
            env = "VK_OBSERVER_DAEMON",
            default_value = "http://127.0.0.1:8765/mcp"
        )]
        daemon: String,
        /// Directory to report for `get_context` (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Bearer token of a daemon started with `[mcp] token`.
        #[arg(long, env = "VK_OBSERVER_MCP_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Show attempts: a table of every task's latest attempt, or one attempt with its last log
    /// lines (asks the running daemon).
    Status {
        /// An attempt id (full UUID, or the 8-character prefix the table shows).
        attempt: Option<String>,
        /// The daemon's MCP endpoint.
        #[arg(long, env = "VK_OBSERVER_DAEMON", default_value = vk_observer::cli::DEFAULT_DAEMON)]
        daemon: String,
        /// Bearer token the daemon wants on /mcp.
        #[arg(long, env = "VK_OBSERVER_MCP_TOKEN", hide_env_values = true)]
        token: Option<String>,
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
        /// The daemon's MCP endpoint.
        #[arg(long, env = "VK_OBSERVER_DAEMON", default_value = vk_observer::cli::DEFAULT_DAEMON)]
        daemon: String,
        /// Bearer token the daemon wants on /mcp.
        #[arg(long, env = "VK_OBSERVER_MCP_TOKEN", hide_env_values = true)]
        token: Option<String>,
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
    Demo {
        #[arg(long, default_value = config::DEFAULT_LISTEN)]
        listen: SocketAddr,
        /// Cache directory (default: a fresh temporary directory).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Seconds between scripted attempts.
        #[arg(long, default_value_t = 20)]
        every: u64,
    },
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
    // The stdio bridge shares stderr with the client's logs, and the terminal commands with a
    // person: only warnings by default.
    let level = match cli.command {
        // rmcp logs every session/request at info: per-request noise in stateless mode.
        Command::Serve { .. } | Command::Demo { .. } => "info,rmcp=warn",
        Command::Mcp { .. } => "warn",
        // They report failures themselves; rmcp's transport errors would repeat them.
        _ => "warn,rmcp=off",
    };
    init_tracing(cli.log_json, level);
    let metrics = || {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .ok();
        if handle.is_some() {
            vk_observer::telemetry::register();
        }
        handle
    };
    match cli.command {
        Command::Serve {
            settings:
                SettingsArgs {
                    upstream,
                    upstream_token,
                    listen,
                    data_dir,
                    config,
                    mcp_token,
                },
            mcp_stateless,
        } => {
            let file = match &config {
                Some(p) => FileConfig::load(p)?,
                None => FileConfig::default(),
            };
            let overrides = config::McpOverrides {
                token: mcp_token,
                stateless: mcp_stateless,
            };
            let s =
                config::resolve_with(upstream, upstream_token, listen, data_dir, overrides, file)?;
            let ingest = IngestConfig {
                raw_logs: s.raw_logs,
                ..IngestConfig::default()
            };
            let daemon = Daemon::start(DaemonOptions {
                upstream: &s.upstream,
                upstream_token: s.upstream_token,
                listen: s.listen,
                data_dir: &s.data_dir,
                retention: s.retention,
                ingest,
                metrics: metrics(),
                mcp: s.mcp.clone(),
                idempotency: vk_observer::proxy::idempotency::IdempotencyTtl::from_env(),
            })
            .await?;
            eprintln!(
                "vk-observer: serving on http://{} (upstream {})",
                daemon.addr, s.upstream
            );
            wait_for_signal().await;
            daemon.shutdown().await;
        }
        Command::Demo {
            listen,
            data_dir,
            every,
        } => demo(listen, data_dir, every, metrics()).await?,
        Command::Mcp {
            daemon,
            workspace,
            token,
        } => {
            let workspace = workspace.or_else(|| std::env::current_dir().ok());
            if let Err(e) = vk_observer::mcp::bridge::run(&daemon, workspace, token).await {
                eprintln!("vk-observer mcp: {e:#}");
                std::process::exit(1);
            }
        }
        Command::Status {
            attempt,
            daemon,
            token,
            project,
            json,
        } => {
            let opts = vk_observer::cli::status::StatusOptions {
                daemon,
                token,
                attempt,
                project,
                json,
            };
            exit_with("status", vk_observer::cli::status::run(opts).await);
        }
        Command::Watch {
            attempt,
            daemon,
            token,
            linger,
        } => {
            let opts = vk_observer::cli::watch::WatchOptions {
                daemon,
                token,
                attempt,
                linger: std::time::Duration::from_secs_f64(linger.clamp(0.0, 50.0)),
            };
            exit_with("watch", vk_observer::cli::watch::run(opts).await);
        }
        Command::Doctor {
            settings:
                SettingsArgs {
                    upstream,
                    upstream_token,
                    listen,
                    data_dir,
                    config,
                    mcp_token,
                },
            daemon,
        } => {
            let opts = vk_observer::cli::doctor::DoctorOptions {
                config,
                daemon,
                upstream,
                upstream_token,
                listen,
                data_dir,
                mcp_token,
            };
            exit_with("doctor", vk_observer::cli::doctor::run(opts).await);
        }
    }
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
async fn demo(
    listen: SocketAddr,
    data_dir: Option<PathBuf>,
    every: u64,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
) -> anyhow::Result<()> {
    use vk_observer::sim::{AttemptScript, Sim, SimConfig, SimFile};
    let sim = Sim::start(SimConfig {
        step_delay: std::time::Duration::from_millis(300),
        ..SimConfig::default()
    })
    .await?;
    let project = sim.add_project("Demo", &["demo"]);
    let tmp = tempdir_for_demo();
    let dir = data_dir.unwrap_or_else(|| tmp.clone());
    let daemon = Daemon::start(DaemonOptions {
        upstream: &sim.base_url(),
        upstream_token: None,
        listen,
        data_dir: &dir,
        retention: Default::default(),
        ingest: IngestConfig::default(),
        metrics,
        mcp: Default::default(),
        idempotency: vk_observer::proxy::idempotency::IdempotencyTtl::from_env(),
    })
    .await?;
    eprintln!(
        "vk-observer demo: simulated VK at {} · daemon at http://{} · cache in {}",
        sim.base_url(),
        daemon.addr,
        dir.display()
    );
    let player = sim.clone();
    let script = tokio::spawn(async move {
        for n in 1u64.. {
            let task = player.add_task(
                project,
                &format!("Demo task {n}"),
                Some("Scripted by the simulator."),
            );
            let files = vec![SimFile {
                repo: "demo".into(),
                path: format!("src/demo_{n}.rs"),
                change: "added".into(),
                additions: 3,
                deletions: 0,
                content: format!("// demo {n}\nfn main() {{}}\n"),
            }];
            player
                .run_attempt_script(
                    task,
                    AttemptScript {
                        files,
                        ..AttemptScript::default()
                    },
                )
                .await;
            tokio::time::sleep(std::time::Duration::from_secs(every)).await;
        }
    });
    wait_for_signal().await;
    script.abort();
    daemon.shutdown().await;
    sim.shutdown().await;
    Ok(())
}

#[cfg(feature = "sim")]
fn tempdir_for_demo() -> PathBuf {
    std::env::temp_dir().join(format!("vk-observer-demo-{}", std::process::id()))
}

#[cfg(not(feature = "sim"))]
async fn demo(
    _: SocketAddr,
    _: Option<PathBuf>,
    _: u64,
    _: Option<metrics_exporter_prometheus::PrometheusHandle>,
) -> anyhow::Result<()> {
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
