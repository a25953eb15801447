//! Phase fresh (issue 17): how long after a running coding agent edits a file the daemon's
//! `get_attempt_changes` shows it. The simulator's agent runs until the phase ends; each round
//! writes one file in its workspace and logs the tool call (a `tool_use` entry on the normalized
//! log, as VK's Claude normalization does), then polls `get_attempt_changes` every 2 ms until
//! `file_count` grows. The lag is measured from the edit to the first answer that shows it, and
//! includes the daemon's `changes_live_every` (500 ms by default: at most one re-read of VK's
//! `/changes` per half second of tool activity). Also counted: VK `/changes` reads per edit.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use serde_json::json;
use vk_observer_sim::{Channel, RunReason, Sim, SimFile};

use crate::daemon::DaemonProc;
use crate::data::{out_dir, sim_config};
use crate::opts::Opts;
use crate::report::{Report, ms, stats};

fn tool_entry(i: usize) -> serde_json::Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "tool_use", "tool_name": "Write",
            "action_type": {"action": "file_edit", "path": format!("bench/f{i}.rs"), "changes": []},
            "status": {"status": "created"}},
        "content": format!("bench/f{i}.rs")}})
}

pub(crate) async fn phase_fresh(r: &mut Report, o: &Opts) -> anyhow::Result<()> {
    let rounds = if o.quick { 8 } else { 40 };
    println!("\n== fresh changes: {rounds} file edits by a running agent → get_attempt_changes");
    let sim = Sim::start(sim_config(5000)).await?;
    let project = sim.add_project("Fresh", &["bench"]);
    let task = sim.add_task(project, "Edit files", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let agent = sim.start_process(ids.session_id, RunReason::CodingAgent);
    let dir = tempfile::tempdir()?;
    let mut d = DaemonProc::spawn(
        &sim.base_url(),
        dir.path(),
        true,
        None,
        &out_dir().join("daemon-fresh.log"),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let mcp = d.mcp();
    let args = json!({"attempt_id": ids.attempt_id});
    let files_now = |v: &serde_json::Value| v["summary"]["file_count"].as_u64();
    let ready = Instant::now();
    while mcp
        .call("get_attempt_changes", &args)
        .await
        .ok()
        .and_then(|v| files_now(&v))
        != Some(0)
    {
        ensure!(
            ready.elapsed() < Duration::from_secs(30),
            "the attempt never reached the cache"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reads0 = sim
        .counters()
        .changes_reads
        .get(&ids.attempt_id)
        .copied()
        .unwrap_or(0);
    let mut lags = Vec::with_capacity(rounds);
    for i in 0..rounds {
        // Rounds apart, so each edit is measured from a quiet start (not inside the previous
        // re-read's window).
        tokio::time::sleep(Duration::from_millis(700)).await;
        let t = Instant::now();
        sim.edit_file(
            ids.attempt_id,
            SimFile {
                repo: "bench".into(),
                path: format!("f{i}.rs"),
                change: "added".into(),
                additions: 1,
                deletions: 0,
                content: format!("fn f{i}() {{}}\n"),
            },
        );
        sim.append_log(agent, Channel::Normalized, tool_entry(i));
        loop {
            let v = mcp.call("get_attempt_changes", &args).await?;
            if files_now(&v) == Some(i as u64 + 1) {
                ensure!(v["live"] == true, "a running agent's summary is live: {v}");
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!("edit {i} never reached get_attempt_changes: {v}");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        lags.push(t.elapsed());
    }
    let reads = sim
        .counters()
        .changes_reads
        .get(&ids.attempt_id)
        .copied()
        .unwrap_or(0)
        - reads0;
    d.stop().await?;
    sim.shutdown().await;
    let s = stats(&lags);
    println!(
        "  edit → fresh summary p50 {} p99 {} max {}; {reads} /changes reads for {rounds} edits",
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.max_us)
    );
    r.row(
        "running agent's file edit → get_attempt_changes shows it (p50 / p99)",
        format!("{} / {}", ms(s.p50_us), ms(s.p99_us)),
        "≤ 1 s",
        Some(s.p99_us <= 1_000_000.0),
    );
    r.row(
        "VK /changes reads per agent file edit",
        format!("{:.2}", reads as f64 / rounds as f64),
        "≈ 1",
        None,
    );
    r.detail(
        "fresh",
        json!({"rounds": rounds, "lag": s, "changes_reads": reads}),
    );
    Ok(())
}
