//! Phase A: 100 attempts in the simulator, one daemon; runs status, wake, throughput, waiters, RSS.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure};
use serde_json::json;
use uuid::Uuid;
use vk_observer_sim::{AgentOutcome, AttemptScript, RunReason, Sim};

use crate::client::Mcp;
use crate::daemon::DaemonProc;
use crate::data::{note, out_dir, sim_config};
use crate::opts::Opts;
use crate::proxy;
use crate::report::Report;
use crate::status::phase_status;
use crate::throughput::phase_throughput;
use crate::waiters::{phase_waiters, phase_waiters_session};
use crate::wake::{phase_wake, phase_wake_status};

pub(crate) struct ScenarioA {
    pub(crate) sim: Sim,
    pub(crate) attempts: Vec<Uuid>,
    /// Attempts with a running coding agent, and its process id.
    pub(crate) running: Vec<(Uuid, Uuid)>,
}

pub(crate) async fn build_scenario_a() -> anyhow::Result<ScenarioA> {
    let sim = Sim::start(sim_config(5000)).await?;
    let project = sim.add_project("Bench", &["bench"]);
    let mut attempts = Vec::new();
    let mut running = Vec::new();
    let mut scripts = Vec::new();
    for i in 0..100u64 {
        let task = sim.add_task(project, &format!("Bench task {i}"), None);
        match i {
            0..50 => {
                let s = sim.clone();
                let agent = if i < 40 {
                    AgentOutcome::Succeed
                } else {
                    AgentOutcome::Fail
                };
                scripts.push(tokio::spawn(async move {
                    s.run_attempt_script(
                        task,
                        AttemptScript {
                            agent,
                            ..AttemptScript::default()
                        },
                    )
                    .await
                    .attempt_id
                }));
            }
            50..80 => {
                let ids = sim.create_attempt(task, "CLAUDE_CODE");
                let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
                ensure!(!pid.is_nil(), "process starts");
                for k in 0..5 {
                    sim.append_log(pid, vk_observer_sim::Channel::Normalized, note(k));
                }
                attempts.push(ids.attempt_id);
                running.push((ids.attempt_id, pid));
            }
            _ => attempts.push(sim.create_attempt(task, "CLAUDE_CODE").attempt_id),
        }
    }
    let mut scripted = Vec::new();
    for s in scripts {
        scripted.push(s.await?);
    }
    scripted.extend(attempts);
    Ok(ScenarioA {
        sim,
        attempts: scripted,
        running,
    })
}

/// Until the daemon's batch status agrees with the simulator's `/status` for every attempt.
pub(crate) async fn wait_cache_holds(
    mcp: &Mcp,
    a: &ScenarioA,
    timeout: Duration,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let truth = a.sim.truth();
    let mut last = String::new();
    while t.elapsed() < timeout {
        if let Ok(v) = mcp
            .call("get_attempt_status", &json!({"attempt_ids": a.attempts}))
            .await
        {
            let got: BTreeMap<String, String> = v["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| {
                    (
                        s["attempt_id"].as_str().unwrap_or("").to_string(),
                        s["state"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            let missing: Vec<_> = a
                .attempts
                .iter()
                .filter(|id| {
                    let want = truth.attempt_status[id]["state"].as_str().unwrap_or("");
                    got.get(&id.to_string()).map(String::as_str) != Some(want)
                })
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            last = format!("{} attempts not yet as in VK", missing.len());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("cache did not hold the scenario after {timeout:?}: {last}")
}

/// Run a latency measurement on a thread of its own with a single-threaded runtime, the way
/// wrk's event loop runs: the timing client's wakeups need no hand-off between worker threads,
/// so what is timed is the server under test. The simulator and the REST-proxy baseline keep
/// running on the main runtime; both servers are timed by the same client.
pub(crate) fn on_client_thread<T: Send>(
    f: impl FnOnce(&tokio::runtime::Runtime) -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                f(&rt)
            })
            .join()
            .map_err(|_| anyhow!("client thread panicked"))?
        })
    })
}

pub(crate) async fn phase_a(r: &mut Report, o: &Opts) -> anyhow::Result<()> {
    let wants = [
        "status",
        "wake",
        "throughput",
        "waiters",
        "waiters_session",
        "resource_wake",
        "task_wake",
        "waiters_progress",
        "lean_waiters",
    ];
    if !wants.iter().any(|p| o.runs(p)) {
        return Ok(());
    }
    println!(
        "\n== scenario: 100 attempts (40 completed, 10 failed, 30 running, 20 idle) in the simulator"
    );
    let a = build_scenario_a().await?;
    let (dir, qdir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let spawned = Instant::now();
    let mut d = DaemonProc::spawn(
        &a.sim.base_url(),
        dir.path(),
        true,
        None,
        &out_dir().join("daemon-a.log"),
    )?;
    // A second daemon on the same simulator, only for the log-level comparison of d.
    let mut quiet = DaemonProc::spawn(
        &a.sim.base_url(),
        qdir.path(),
        true,
        Some("warn"),
        &out_dir().join("daemon-a-quiet.log"),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let ready = spawned.elapsed();
    let mcp = d.mcp();
    wait_cache_holds(&mcp, &a, Duration::from_secs(60)).await?;
    quiet.wait_ready(Duration::from_secs(60)).await?;
    wait_cache_holds(&quiet.mcp(), &a, Duration::from_secs(60)).await?;
    println!(
        "  daemon pid {} ready {:.2} s after spawn; cache holds the scenario",
        d.pid(),
        ready.as_secs_f64()
    );
    r.row(
        "daemon spawn → /readyz (100 attempts, VK idle)",
        format!("{:.2} s", ready.as_secs_f64()),
        "—",
        None,
    );
    if let Some(secs) = std::env::var("VK_BENCH_PAUSE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        println!(
            "  pausing {secs} s (VK_BENCH_PAUSE): attach a profiler to pid {}",
            d.pid()
        );
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    // f. idle RSS after bootstrap.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = d.rss_kb();
    r.row(
        "idle RSS of the daemon binary after bootstrap (100 attempts, 30 live log streams)",
        format!("{:.1} MB", idle as f64 / 1024.0),
        "≤ 50 MB",
        Some(idle <= 50 * 1024),
    );
    r.detail("idle_rss_kb", idle);

    let proxy_addr = proxy::serve(a.sim.base_url()).await?;
    let proxy = Mcp::new(&format!("http://{proxy_addr}/mcp"));
    if o.runs("status") {
        let (cache_url, proxy_url) = (mcp.url.clone(), proxy.url.clone());
        on_client_thread(|rt| {
            rt.block_on(async {
                let cache = Mcp::bare(&cache_url).await?;
                let proxy = Mcp::bare(&proxy_url).await?;
                phase_status(r, o, &a, &cache, &proxy).await
            })
        })?;
    }
    if o.runs("wake") {
        phase_wake(r, o, &a, &mcp).await?;
    }
    if o.runs("throughput") {
        phase_throughput(r, o, &a, &d, &quiet).await?;
    }
    quiet.stop().await?;
    if o.runs("waiters") {
        phase_waiters(r, o, &a, &d).await?;
    }
    if o.runs("waiters_session") {
        phase_waiters_session(r, o, &a).await?;
    }
    if o.runs("resource_wake") {
        crate::resources::phase_resource_wake(r, o, &a).await?;
    }
    if o.runs("task_wake") {
        crate::task_wake::phase_task_wake(r, o, &a).await?;
    }
    if o.runs("waiters_progress") {
        crate::resources::phase_waiters_progress(r, o, &a).await?;
    }
    if o.runs("lean_waiters") {
        crate::lean::phase_lean(r, o, &a).await?;
    }
    // Last: it ends the running agents the phases above wait on.
    if o.runs("wake") {
        phase_wake_status(r, &a, &mcp).await?;
    }
    let rss_end = d.rss_kb();
    r.detail("rss_after_phase_a_kb", rss_end);
    let log_bytes = d.log_bytes();
    d.stop().await?;
    r.detail("daemon_a_log_bytes", log_bytes);
    // The shipped log level writes per-call lines; do not leave hundreds of MB behind.
    if log_bytes > 16 << 20 {
        std::fs::write(
            out_dir().join("daemon-a.log"),
            format!("(log of {log_bytes} bytes removed by the bench)\n"),
        )?;
    }
    a.sim.shutdown().await;
    Ok(())
}
