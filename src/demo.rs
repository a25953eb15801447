//! The script `vk-observer demo` plays: a daemon beside the simulator; at start the five roads
//! (`roads`: success, failure, approval, rebase conflict, long-running, each found by its title),
//! then a new simulated task with one attempt (editing one file) every few seconds, so a newcomer
//! sees the tools work without a VK install. `fleet` plays several hosts behind a fleet node
//! (`demo --hosts N`).

pub mod fleet;
pub mod roads;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use tokio::task::JoinHandle;

use vk_observer_config::SettingsArgs;
use vk_observer_daemon::Daemon;
use vk_observer_sim::{AttemptScript, Sim, SimConfig, SimDialect, SimFile};

/// Run the demo until `stop` resolves. `flags` are the daemon's settings (the upstream is the
/// simulator; no data dir means a fresh temporary one); `every` is the pause between attempts;
/// `dialect` the simulated VK's (the fork's, or VK 0.1.x's workspace-first one, where the
/// project is `demo`, the repo's, and each road's workspace stands as its task).
pub async fn run(
    mut flags: SettingsArgs,
    every: Duration,
    dialect: SimDialect,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let sim = Sim::start(SimConfig {
        step_delay: Duration::from_millis(300),
        dialect,
        ..SimConfig::default()
    })
    .await?;
    let project = sim.add_project("Demo", &["demo"]);
    flags.upstream = Some(sim.base_url());
    flags.data_dir.get_or_insert_with(demo_data_dir);
    let settings = flags.over_defaults()?.validate()?;
    let dir = settings.data_dir.clone();
    let daemon = Daemon::start(settings, metrics).await?;
    let speaks = match dialect {
        SimDialect::Fork => "the fork's dialect",
        SimDialect::Workspaces => "VK 0.1.x's dialect",
    };
    eprintln!(
        "vk-observer demo: simulated VK ({speaks}) at {} · daemon at http://{} · cache in {}",
        sim.base_url(),
        daemon.addr,
        dir.display()
    );
    let repo = sim.project_repo_ids(project)[0];
    let roads = roads::start(&sim, project, repo);
    let script = tokio::spawn(play(sim.clone(), project, every));
    stop.await;
    script.abort();
    roads.iter().for_each(JoinHandle::abort);
    daemon.shutdown().await;
    sim.shutdown().await;
    Ok(())
}

/// Task `n`, attempt, pause, task `n + 1`, … until aborted.
pub(crate) async fn play(sim: Sim, project: uuid::Uuid, every: Duration) {
    for n in 1u64.. {
        let task = sim.add_task(
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
        let script = AttemptScript {
            files,
            ..AttemptScript::default()
        };
        sim.run_attempt_script(task, script).await;
        tokio::time::sleep(every).await;
    }
}

pub(crate) fn demo_data_dir() -> PathBuf {
    std::env::temp_dir().join(format!("vk-observer-demo-{}", std::process::id()))
}
