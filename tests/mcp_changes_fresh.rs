//! `get_attempt_changes` follows a running coding agent: the cache re-reads VK's change summary
//! shortly after each of the agent's tool calls (ingest::fresh_changes), not only when a process
//! ends. Proven against the simulator: changes move while the process runs, a dropped log
//! socket, garbage frames and a garbage `/changes` answer are survived, and attempts whose agent
//! does not run (finished, or only a script running) cost VK no change reads at all.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::{
    AttemptScript, Channel, Faults, ProcessStatus, RunReason, Sim, SimConfig, SimFile,
};

fn file(i: usize) -> SimFile {
    SimFile {
        repo: "demo".into(),
        path: format!("src/live{i}.rs"),
        change: "added".into(),
        additions: 2,
        deletions: 0,
        content: format!("fn live{i}() {{}}\n// two\n"),
    }
}

/// A tool call as VK's Claude normalization logs it when created.
fn tool_entry(i: usize) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "tool_use", "tool_name": "Write",
            "action_type": {"action": "file_edit", "path": format!("demo/src/live{i}.rs"),
                            "changes": []},
            "status": {"status": "created"}},
        "content": format!("demo/src/live{i}.rs")}})
}

async fn changes(mcp: &Mcp, attempt: Uuid) -> Value {
    mcp.call("get_attempt_changes", json!({"attempt_id": attempt}))
        .await
        .ok()
}

/// Polls get_attempt_changes until `file_count` is `n`; returns that answer.
async fn until_files(mcp: &Mcp, attempt: Uuid, n: u64, context: &str) -> Value {
    let start = Instant::now();
    loop {
        let c = changes(mcp, attempt).await;
        if c["summary"]["file_count"] == json!(n) && c["ready"] == true {
            return c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{context}: file_count never reached {n}: {c}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn running(sim: &Sim, pid: Uuid) -> bool {
    sim.truth().processes[&pid]["status"] == "running"
}

fn reads(sim: &Sim, attempt: Uuid) -> u64 {
    sim.counters()
        .changes_reads
        .get(&attempt)
        .copied()
        .unwrap_or(0)
}

struct Live {
    sim: Sim,
    _dir: tempfile::TempDir,
    daemon: vk_observer_daemon::Daemon,
    mcp: Mcp,
    attempt: Uuid,
    pid: Uuid,
}

/// A daemon beside a simulator with one attempt whose coding agent runs until the test ends it.
async fn live_agent() -> Live {
    let sim = support::sim().await;
    let project = sim.add_project("Fresh", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let task = sim.add_task(project, "Edit while running", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "live world").await;
    let mcp = Mcp::connect(daemon.addr).await;
    Live {
        sim,
        _dir: dir,
        daemon,
        mcp,
        attempt: ids.attempt_id,
        pid,
    }
}

/// A new attempt (no process yet, so no change summary read from VK) is not an error any more
/// (issue 25; it was `changes_not_ready`): an empty summary with `ready: false` and a hint to
/// wait, at the default level too; the first summary read turns it `ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_attempt_has_an_empty_summary_not_ready() {
    let sim = support::sim().await;
    let project = sim.add_project("Fresh", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    // VK's summary is unreadable while the attempt is new (a read the daemon cannot use
    // caches nothing), which holds the window before the first summary open for the test.
    sim.set_faults(Faults {
        garbage_changes: true,
        ..Faults::default()
    });
    let task = sim.add_task(project, "Not started", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let mcp = Mcp::connect(daemon.addr).await;
    let args = json!({"attempt_id": ids.attempt_id});
    let start = Instant::now();
    // `not_found` until the cache has the attempt; then the answer, never an error.
    let compact = loop {
        match mcp.call_as_is("get_attempt_changes", args.clone()).await {
            support::mcp::Reply::Ok(v) => break v,
            support::mcp::Reply::Err(e) => {
                assert_eq!(e["code"], "not_found", "{e}");
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "attempt never cached"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(compact["ready"], false, "{compact}");
    assert_eq!(
        compact["summary"],
        json!({"file_count": 0, "added": 0, "deleted": 0, "total_bytes": 0})
    );
    assert_eq!(compact["files"], json!([]), "{compact}");
    assert!(
        compact["hint"]
            .as_str()
            .unwrap()
            .contains("wait_for_attempt_change"),
        "{compact}"
    );
    let full = mcp.call("get_attempt_changes", args.clone()).await.ok();
    assert_eq!(full["ready"], false);
    assert_eq!(full["files"], json!([]));
    assert_eq!(full["changes_token"], Value::Null);
    assert_eq!(full["blocked"], false);
    // Once a run ends, VK's summary is read and the answer is ready.
    sim.set_faults(Faults::default());
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    let ready = until_files(&mcp, ids.attempt_id, 0, "after the first run").await;
    assert!(ready["changes_token"].is_string(), "{ready}");
    let compact = mcp.call_as_is("get_attempt_changes", args).await.ok();
    assert!(
        compact.get("ready").is_none() && compact.get("hint").is_none(),
        "detail 0 leaves ready out once true: {compact}"
    );
    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_move_during_a_run_without_any_process_ending() {
    let l = live_agent().await;
    let first = until_files(&l.mcp, l.attempt, 0, "before any edit").await;
    assert_eq!(
        first["live"], true,
        "a running agent's summary is live: {first}"
    );
    let mut as_of = first["as_of"].as_str().expect("as_of is set").to_string();
    for i in 0..3 {
        l.sim.edit_file(l.attempt, file(i));
        l.sim.append_log(l.pid, Channel::Normalized, tool_entry(i));
        let c = until_files(&l.mcp, l.attempt, i as u64 + 1, "after an edit").await;
        assert!(running(&l.sim, l.pid), "no process ended");
        assert_eq!(c["live"], true);
        assert_eq!(c["summary"]["added"], json!(2 * (i as u64 + 1)));
        assert!(
            c["files"]
                .as_array()
                .unwrap()
                .contains(&json!(format!("demo/src/live{i}.rs")))
        );
        let now = c["as_of"].as_str().expect("as_of").to_string();
        assert!(
            now > as_of,
            "as_of moves with the summary: {now} after {as_of}"
        );
        as_of = now;
    }
    // Tool calls that change nothing re-read, and leave the summary, its as_of and its token
    // alone (no waiter is woken for a re-read that found nothing new).
    let token_before = changes(&l.mcp, l.attempt).await["changes_token"].clone();
    let before = reads(&l.sim, l.attempt);
    l.sim.append_log(l.pid, Channel::Normalized, tool_entry(9));
    let start = Instant::now();
    while reads(&l.sim, l.attempt) == before {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no re-read after a tool call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let same = changes(&l.mcp, l.attempt).await;
    assert_eq!(
        (same["as_of"].as_str(), &same["summary"]["file_count"]),
        (Some(as_of.as_str()), &json!(3))
    );
    assert_eq!(same["changes_token"], token_before);
    // The agent ends: the summary is no longer live.
    l.sim
        .finish_process(l.pid, vk_observer_sim::ProcessStatus::Completed, Some(0));
    let start = Instant::now();
    while changes(&l.mcp, l.attempt).await["live"] != false {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "live stayed true"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    l.daemon.shutdown().await;
    l.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_agent_edits_files_while_it_runs() {
    // Steps slower than the re-read delay (`changes_live_every`, 500 ms), so each edit can be
    // read before the next (at 250 ms the first re-read raced the third edit and could see all
    // three files at once, leaving nothing "mid-run" to observe).
    let sim = Sim::start(SimConfig {
        keepalive: Duration::from_millis(500),
        ws_ping: Duration::from_millis(500),
        step_delay: Duration::from_millis(700),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts");
    let project = sim.add_project("Scripted", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let task = sim.add_task(project, "Write three files", None);
    let script = AttemptScript {
        setup: false,
        cleanup: false,
        normalized_entries: 10,
        raw_entries: 2,
        files: (0..3).map(file).collect(),
        ..AttemptScript::default()
    };
    let run = {
        let sim = sim.clone();
        tokio::spawn(async move { sim.run_attempt_script(task, script).await })
    };
    // Mid-run: some but not all files, while the agent process still runs.
    let start = Instant::now();
    let seen_mid_run = loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never saw a mid-run summary"
        );
        let truth = sim.truth();
        let attempt = truth.attempts.keys().next().copied();
        let agent_running = truth
            .processes
            .values()
            .any(|p| p["run_reason"] == "codingagent" && p["status"] == "running");
        if let (Some(a), true) = (attempt, agent_running) {
            // Null (not cached yet) has no file_count.
            let reply = changes_or_null(&mcp, a).await;
            let n = reply["summary"]["file_count"].as_u64().unwrap_or(0);
            if (1..3).contains(&n) && reply["live"] == true {
                break n;
            }
        }
        if run.is_finished() {
            panic!("the run ended before a mid-run summary was seen");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(seen_mid_run >= 1);
    let ids = run.await.unwrap();
    until_files(&mcp, ids.attempt_id, 3, "after the run").await;
    daemon.shutdown().await;
    sim.shutdown().await;
}

/// The answer, or null while the attempt or its summary is not cached yet.
async fn changes_or_null(mcp: &Mcp, attempt: Uuid) -> Value {
    match mcp
        .call("get_attempt_changes", json!({"attempt_id": attempt}))
        .await
    {
        support::mcp::Reply::Ok(v) => v,
        support::mcp::Reply::Err(_) => Value::Null,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_sockets_and_garbage_are_survived() {
    let l = live_agent().await;
    until_files(&l.mcp, l.attempt, 0, "start").await;
    // The log socket carrying the tool calls is dropped mid-run, and garbage frames arrive.
    l.sim.set_faults(Faults {
        garbage_ws: true,
        ..Faults::default()
    });
    l.sim.drop_connections();
    l.sim.edit_file(l.attempt, file(0));
    l.sim.append_log(l.pid, Channel::Normalized, tool_entry(0));
    until_files(&l.mcp, l.attempt, 1, "after a drop, among garbage frames").await;
    // VK's /changes answers garbage: nothing is stored, the daemon retries and recovers.
    l.sim.set_faults(Faults {
        garbage_changes: true,
        ..Faults::default()
    });
    let before = reads(&l.sim, l.attempt);
    l.sim.edit_file(l.attempt, file(1));
    l.sim.append_log(l.pid, Channel::Normalized, tool_entry(1));
    let start = Instant::now();
    while reads(&l.sim, l.attempt) < before + 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a failed read is retried"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let during = changes(&l.mcp, l.attempt).await;
    assert_eq!(
        during["summary"]["file_count"],
        json!(1),
        "garbage is never stored"
    );
    l.sim.set_faults(Faults::default());
    l.sim.edit_file(l.attempt, file(2));
    l.sim.append_log(l.pid, Channel::Normalized, tool_entry(2));
    let c = until_files(&l.mcp, l.attempt, 3, "after the garbage ended").await;
    assert_eq!(c["live"], true);
    assert!(running(&l.sim, l.pid));
    l.daemon.shutdown().await;
    l.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_without_a_running_agent_cost_no_change_reads() {
    let l = live_agent().await;
    let project = l.sim.add_project("Quiet", &["demo"]);
    // A finished attempt, and one where only a setup script runs (and logs a tool-like entry).
    let done_task = l.sim.add_task(project, "Finished", None);
    let done = l
        .sim
        .run_attempt_script(done_task, AttemptScript::default())
        .await;
    let script_task = l.sim.add_task(project, "Setup only", None);
    let scripted = l.sim.create_attempt(script_task, "CLAUDE_CODE");
    let setup = l
        .sim
        .start_process(scripted.session_id, RunReason::SetupScript);
    support::converge(
        &l.daemon.store,
        &l.sim,
        Duration::from_secs(20),
        "quiet world",
    )
    .await;
    // Let the refreshes that follow the finished run settle.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let quiet_before = (
        reads(&l.sim, done.attempt_id),
        reads(&l.sim, scripted.attempt_id),
    );
    let live_before = reads(&l.sim, l.attempt);
    for i in 0..3 {
        l.sim
            .append_log(setup, Channel::Normalized, tool_entry(100 + i));
        l.sim.edit_file(l.attempt, file(i));
        l.sim.append_log(l.pid, Channel::Normalized, tool_entry(i));
        until_files(&l.mcp, l.attempt, i as u64 + 1, "live attempt").await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let quiet_after = (
        reads(&l.sim, done.attempt_id),
        reads(&l.sim, scripted.attempt_id),
    );
    assert_eq!(quiet_after, quiet_before, "idle attempts were re-read");
    let live_reads = reads(&l.sim, l.attempt) - live_before;
    assert!(
        (3..=9).contains(&live_reads),
        "the live attempt is re-read about once per tool call: {live_reads}"
    );
    // And no diff WebSocket is opened for anyone: the summary comes from /changes.
    let diff_ws = l
        .sim
        .counters()
        .by_route
        .get("GET /api/task-attempts/{id}/diff/ws")
        .copied()
        .unwrap_or(0);
    assert_eq!(diff_ws, 0);
    l.daemon.shutdown().await;
    l.sim.shutdown().await;
}
