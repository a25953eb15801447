//! End to end: the daemon against the simulator on real sockets; after scripted attempts the
//! cache holds exactly the simulator's state, field by field, logs and replacements included.

mod support;

use std::time::Duration;

use vk_observer_sim::{AgentOutcome, AttemptScript, SimFile};
use vk_observer_store::keys::Channel;

fn files(n: usize) -> Vec<SimFile> {
    (0..n)
        .map(|i| SimFile {
            repo: "demo".into(),
            path: format!("src/f{i}.rs"),
            change: "added".into(),
            additions: 2 + i as u64,
            deletions: 0,
            content: format!("fn f{i}() {{}}\n"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_attempt_is_mirrored_exactly() {
    let sim = support::sim().await;
    let project = sim.add_project("Demo", &["demo", "docs"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;

    let t1 = sim.add_task(
        project,
        "Add a greeting file",
        Some("Please write a greeting file."),
    );
    let ok = sim
        .run_attempt_script(
            t1,
            AttemptScript {
                normalized_entries: 40,
                raw_entries: 30,
                replacements: 5,
                files: files(3),
                dev_server: true,
                ..AttemptScript::default()
            },
        )
        .await;
    let t2 = sim.add_task(project, "Task that should FAIL", None);
    sim.run_attempt_script(
        t2,
        AttemptScript {
            agent: AgentOutcome::Fail,
            ..AttemptScript::default()
        },
    )
    .await;
    sim.follow_up_script(
        ok.session_id,
        "now add a second line",
        AttemptScript {
            normalized_entries: 10,
            replacements: 2,
            ..AttemptScript::default()
        },
    )
    .await;

    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(20),
        "after scripted attempts",
    )
    .await;
    assert!(daemon.health.bootstrapped());
    let truth = sim.truth();
    // The comparison above covered real content, not empty maps.
    assert_eq!(truth.tasks.len(), 2);
    assert_eq!(truth.attempts.len(), 2);
    assert!(
        truth.processes.len() >= 6,
        "processes: {}",
        truth.processes.len()
    );
    let normalized: usize = truth.normalized_logs.values().map(Vec::len).sum();
    let raw: usize = truth.raw_logs.values().map(Vec::len).sum();
    assert!(
        normalized >= 50 && raw >= 30,
        "normalized {normalized}, raw {raw}"
    );
    assert_eq!(truth.changes.len(), 2);

    // Replacements were applied in place and recorded for token-based readers.
    let r = daemon.store.read();
    let replaced: usize = sim
        .truth()
        .processes
        .keys()
        .map(|p| r.replaced_since(*p, Channel::Normalized, 0).unwrap().len())
        .sum();
    assert!(replaced >= 5, "replacements recorded: {replaced}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_started_after_the_fact_backfills_history() {
    let sim = support::sim().await;
    let project = sim.add_project("Late", &["demo"]);
    let t = sim.add_task(project, "Done before the daemon", None);
    sim.run_attempt_script(
        t,
        AttemptScript {
            normalized_entries: 2500,
            raw_entries: 1200,
            replacements: 3,
            files: files(2),
            ..AttemptScript::default()
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "history backfill",
    )
    .await;
    daemon.shutdown().await;

    // A restart on the same data dir keeps the tokens and changes nothing.
    let token_before = {
        let d = support::daemon(&sim, dir.path()).await;
        let t = d.store.current_token();
        support::converge(&d.store, &sim, Duration::from_secs(20), "restart").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = d.store.current_token();
        d.shutdown().await;
        (t, after)
    };
    assert_eq!(
        token_before.0, token_before.1,
        "a resync with nothing new must not move the token"
    );
}

/// VK replays only its in-memory window of a log (VK_LOG_HISTORY_MAX_ENTRIES) on connect; with
/// logs in VK's database, older entries are in history pages. A daemon that connects late to a
/// long running log, or reconnects after the window moved past what it has, reads the gap from
/// history: every entry ends up cached, and the log completes when the process ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_older_than_vks_replay_window_come_from_history() {
    use vk_observer_sim::{Channel as SimChannel, ProcessStatus, RunReason, SimConfig};
    let sim = vk_observer_sim::Sim::start(SimConfig {
        keepalive: Duration::from_millis(500),
        step_delay: Duration::from_millis(5),
        history_max_entries: 40,
        log_db: true,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let project = sim.add_project("Window", &["demo"]);
    let ids = sim.create_attempt(sim.add_task(project, "long log", None), "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    let entry = |i: u64| {
        serde_json::json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
            "entry_type": {"type": "system_message"}, "content": format!("line {i}")}})
    };
    for i in 0..2_500 {
        sim.append_log(pid, SimChannel::Normalized, entry(i));
    }
    // Started late: the socket replays entries 2460..2499 only.
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "late start").await;
    // Cut off while the window moves 300 entries on (faster than the daemon reconnects): the
    // reconnect replays 2760..2799 and 2500..2759 come from history.
    sim.drop_connections();
    for i in 2_500..2_800 {
        sim.append_log(pid, SimChannel::Normalized, entry(i));
    }
    for i in 2_800..2_810 {
        sim.append_log(pid, SimChannel::Normalized, entry(i));
    }
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "after the window moved",
    )
    .await;
    let reader = daemon.store.read();
    assert_eq!(reader.log_count(pid, Channel::Normalized), 2_810);
    assert_eq!(
        reader.log_bounds(pid, Channel::Normalized).unwrap(),
        Some((0, 2_809))
    );
    daemon.shutdown().await;
}

/// A daemon starting from empty reads each ended attempt's change summary once (its task's
/// refresh), not a second time when the processes snapshot shows the attempt's process ended:
/// the summary it holds was read after that end. A restart reads none (nothing ended while it
/// was away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_attempts_change_summary_is_read_once_at_bootstrap() {
    const ROUTE: &str = "GET /api/task-attempts/{id}/changes";
    let sim = support::sim().await;
    let project = sim.add_project("Ended", &["demo"]);
    for i in 0..3 {
        let t = sim.add_task(project, &format!("Ended {i}"), None);
        let script = AttemptScript {
            normalized_entries: 5,
            files: files(1),
            ..AttemptScript::default()
        };
        sim.run_attempt_script(t, script).await;
    }
    // VK's `completed_at` and the daemon's read stamps are both this host's clock: leave the
    // ends behind the debounce, as a real bootstrap finds them.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let reads = || sim.counters().by_route.get(ROUTE).copied().unwrap_or(0);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "bootstrap").await;
    // A re-read owed would run `changes_debounce` (300 ms) after the snapshot.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(reads(), 3, "one summary read per ended attempt");
    daemon.shutdown().await;

    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "restart").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(reads(), 3, "a restart re-reads no summary it already holds");
    daemon.shutdown().await;
}

/// A daemon starting on a board of ended attempts opens a processes stream per attempt to
/// learn its processes, and closes each as soon as its snapshot showed only ended processes
/// and the attempt is inactive, without the linger a stream that saw a process run keeps
/// (issue 27: a bootstrap's lingering sockets and documents were its peak memory). The linger
/// is an hour here, so only that rule closes them; the running attempt's stream stays open.
/// One history reader at a time (`log_backfills` 1): the ended logs wait their turn and are
/// all read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_attempts_process_streams_close_without_linger_at_bootstrap() {
    use vk_observer_sim::RunReason;
    let sim = support::sim().await;
    let project = sim.add_project("Ended", &["demo"]);
    for i in 0..4 {
        let t = sim.add_task(project, &format!("Ended {i}"), None);
        let script = AttemptScript {
            normalized_entries: 30,
            raw_entries: 10,
            ..AttemptScript::default()
        };
        sim.run_attempt_script(t, script).await;
    }
    let live = sim.create_attempt(sim.add_task(project, "Running", None), "CLAUDE_CODE");
    sim.start_process(live.session_id, RunReason::CodingAgent);
    let dir = tempfile::tempdir().unwrap();
    let mut settings = support::settings(&sim.base_url(), dir.path(), Default::default());
    settings.ingest.process_stream_linger = Duration::from_secs(3600);
    settings.ingest.log_backfills = 1;
    let daemon = vk_observer_daemon::Daemon::start(settings.validate().unwrap(), None)
        .await
        .unwrap();
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "bootstrap").await;
    let open = || sim.counters().processes_ws_open;
    let start = std::time::Instant::now();
    while open() != 1 && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        open(),
        1,
        "only the running attempt's processes stream is open"
    );
    daemon.shutdown().await;
}
