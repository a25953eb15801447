//! Phase idle (issue 14): what an idle VK costs. The simulator holds 100 tasks with an attempt
//! each and sends what a real idle VK sends — a `:` keep-alive every 15 s on SSE, a ping every
//! 30 s on each WebSocket, nothing else — while one client polls a batch status of the 100
//! attempts once a second. Measured over the window: the daemon's CPU (user + system, from
//! `/proc/<pid>/stat`), the requests it made to VK (REST GETs, SSE and WS connections, from
//! the simulator's counters), and whether every answer said `upstream: connected`. A first window
//! of half the length with no client at all gives the daemon's own idle cost beside it.

use std::time::{Duration, Instant};

use anyhow::ensure;
use serde_json::json;
use vk_observer_sim::Sim;

use crate::daemon::{DaemonProc, cpu_secs};
use crate::data::{out_dir, sim_config};
use crate::opts::Opts;
use crate::report::Report;

pub(crate) async fn phase_idle(r: &mut Report, o: &Opts) -> anyhow::Result<()> {
    let window = Duration::from_secs(if o.quick { 20 } else { 120 });
    println!("\n== idle VK: 100 tasks, keep-alives only, one batch status a second for {window:?}");
    let sim = Sim::start(sim_config(5000)).await?;
    let project = sim.add_project("Idle", &["idle"]);
    let attempts: Vec<_> = (0..100)
        .map(|i| {
            let task = sim.add_task(project, &format!("Idle task {i}"), None);
            sim.create_attempt(task, "CLAUDE_CODE").attempt_id
        })
        .collect();
    let dir = tempfile::tempdir()?;
    let mut d = DaemonProc::spawn(
        &sim.base_url(),
        dir.path(),
        true,
        None,
        &out_dir().join("daemon-idle.log"),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let mcp = d.mcp();
    let args = json!({"attempt_ids": attempts});
    // Settle: the bootstrap's process streams linger out, the first keep-alive arrives.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let pid = d.pid().to_string();
    // First nobody asks anything: what the daemon costs on its own beside an idle VK.
    let quiet_window = window / 2;
    let quiet0 = cpu_secs(&pid);
    tokio::time::sleep(quiet_window).await;
    let quiet_cpu = cpu_secs(&pid) - quiet0;
    let before = sim.counters();
    let cpu0 = cpu_secs(&pid);
    let start = Instant::now();
    let (mut answers, mut connected) = (0u64, 0u64);
    while start.elapsed() < window {
        let v = mcp.call("get_attempt_status", &args).await?;
        ensure!(
            v["attempts"].as_array().map(Vec::len) == Some(100),
            "a batch of 100 statuses"
        );
        answers += 1;
        connected += u64::from(v["freshness"]["upstream"] == "connected");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_secs(&pid) - cpu0;
    let after = sim.counters();
    d.stop().await?;
    sim.shutdown().await;

    let pct = 100.0 * cpu / elapsed;
    let quiet_pct = 100.0 * quiet_cpu / quiet_window.as_secs_f64();
    r.row(
        "idle VK, 100 tasks, no client: daemon CPU",
        format!(
            "{quiet_pct:.3} % of a core ({quiet_cpu:.2} s CPU in {:.0} s)",
            quiet_window.as_secs_f64()
        ),
        "—",
        None,
    );
    let requests = (after.rest_gets - before.rest_gets)
        + (after.sse_connections - before.sse_connections)
        + (after.ws_connections - before.ws_connections);
    r.row(
        "idle VK, 100 tasks, batch status 1/s: daemon CPU",
        format!("{pct:.3} % of a core ({cpu:.2} s CPU in {elapsed:.0} s)"),
        "≤ 0.2 %",
        Some(pct <= 0.2),
    );
    r.row(
        "idle VK: requests the daemon sent VK over the window (REST + SSE/WS connects)",
        format!("{requests}"),
        "0",
        Some(requests == 0),
    );
    r.row(
        "idle VK: answers saying upstream connected",
        format!("{connected} of {answers}"),
        "all",
        Some(connected == answers),
    );
    r.detail(
        "idle",
        json!({"window_s": elapsed, "cpu_s": cpu, "cpu_pct": pct, "requests": requests,
               "quiet_window_s": quiet_window.as_secs_f64(), "quiet_cpu_s": quiet_cpu,
               "rest_gets": after.rest_gets - before.rest_gets,
               "sse_connections": after.sse_connections - before.sse_connections,
               "ws_connections": after.ws_connections - before.ws_connections,
               "answers": answers, "connected": connected}),
    );
    Ok(())
}
