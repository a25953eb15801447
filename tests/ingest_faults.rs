//! Fault schedules, property-style: for each seed, scripted attempts run while a seeded injector
//! drops connections, restarts VK with a new sequence, injects garbage frames, cuts log sockets
//! mid-stream, stalls the event stream and restarts the daemon on its data dir (history
//! truncation, which loses data upstream for good, has its own test). Afterwards the cache must
//! equal the simulator's truth (0 lost, 0 duplicated entries), the token must never have
//! decreased, and no long-poll waiter may have missed a change after its token. One seed in ten
//! then holds VK idle (keep-alives and pings only) for longer than the stall window: no
//! reconnect, no resync, no request to VK. Seeds: `VK_FAULT_SEEDS` (default 200, two at a time) starting at
//! `VK_FAULT_SEED_BASE` (default 0); a failure names its seed for replay.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vk_observer_query::wait::WaitScope;
use vk_observer_query::{Query, Since};
use vk_observer_sim::{AgentOutcome, AttemptScript, Faults};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run_schedule(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let sim = support::sim().await;
    let project = sim.add_project("Faults", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = support::daemon(&sim, dir.path()).await;

    // Token monotonicity, sampled continuously (across the daemon restart too).
    let current: Arc<std::sync::RwLock<Option<vk_observer_store::Store>>> =
        Arc::new(std::sync::RwLock::new(Some(daemon.store.clone())));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        let current = current.clone();
        tokio::spawn(async move {
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = current.read().unwrap().as_ref().map(|s| s.current_token());
                if let Some(t) = t {
                    assert!(t >= last, "token went from {last} to {t}");
                    last = t;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };

    // The project's activity, followed by since_token the way a client would, across the
    // daemon restart (see `follow_feed`).
    let feed = support::feed::follow_feed(current.clone(), stop.clone(), project);

    let player = {
        let sim = sim.clone();
        let scripts: Vec<AttemptScript> = (0..3)
            .map(|_| AttemptScript {
                normalized_entries: rng.random_range(5..60),
                raw_entries: rng.random_range(1..30),
                replacements: rng.random_range(0..4),
                agent: if rng.random_bool(0.2) {
                    AgentOutcome::Fail
                } else {
                    AgentOutcome::Succeed
                },
                ..AttemptScript::default()
            })
            .collect();
        tokio::spawn(async move {
            for (i, s) in scripts.into_iter().enumerate() {
                let t = sim.add_task(project, &format!("task {i}"), None);
                sim.run_attempt_script(t, s).await;
            }
        })
    };

    // Long-polls on the project need the project cached first (else `not_found`, correctly).
    let known = std::time::Instant::now();
    while daemon.store.read().project(project).unwrap().is_none() {
        assert!(
            known.elapsed() < Duration::from_secs(30),
            "seed {seed}: the project never reached the cache"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut garbage_used = false;
    let mut waiters = Vec::new();
    let mut daemon_restarted = false;
    while !player.is_finished() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(10..120))).await;
        if rng.random_bool(0.3) {
            waiters.push(spawn_waiter(&daemon, project));
        }
        let fault = rng.random_range(0..9);
        if std::env::var("VK_FAULT_TRACE").is_ok() {
            eprintln!("seed {seed}: fault {fault}");
        }
        match fault {
            // History truncation is permanent loss upstream (VK's cap), so it has its own test
            // below instead of a place in schedules that demand the whole truth.
            6 => {
                sim.drop_connections();
                sim.restart();
            }
            7 => sim.set_faults(Faults {
                stall_sse: true,
                ..Faults::default()
            }),
            8 if !daemon_restarted => {
                // The daemon goes away and comes back on the same data dir mid-schedule
                // (SIGKILL of the real binary is tests/daemon_kill.rs).
                daemon_restarted = true;
                let before = daemon.store.current_token();
                for (_, w) in waiters.drain(..) {
                    w.abort();
                    let _ = w.await;
                }
                *current.write().unwrap() = None;
                daemon.shutdown().await;
                daemon = support::daemon_reopen(&sim, dir.path()).await;
                *current.write().unwrap() = Some(daemon.store.clone());
                assert!(
                    daemon.store.current_token() >= before,
                    "seed {seed}: token went back across a restart"
                );
            }
            0 => sim.drop_connections(),
            1 => sim.restart(),
            2 => {
                garbage_used = true;
                sim.set_faults(Faults {
                    garbage_sse: true,
                    garbage_ws: true,
                    ..Faults::default()
                })
            }
            3 => sim.set_faults(Faults {
                drop_log_ws_after: Some(rng.random_range(1..8)),
                ..Faults::default()
            }),
            _ => sim.set_faults(Faults::default()),
        }
    }
    player.await.unwrap();
    sim.set_faults(Faults::default());
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        &format!("seed {seed}"),
    )
    .await;
    if seed.is_multiple_of(10) {
        quiet_stretch(&daemon, &sim, seed).await;
    }
    if garbage_used {
        // Garbage may or may not have hit a live connection; it must never have broken ingest.
        let _ = daemon.health.garbage_frames.load(Ordering::Relaxed);
    }
    // No waiter missed a change: each either woke with attempts changed after its token, or
    // is still parked and nothing of the project changed after its token.
    let reader = daemon.store.read();
    let newest = reader
        .tasks_of_project(project)
        .unwrap()
        .into_iter()
        .flat_map(|t| reader.attempts_of_task(t.id).unwrap())
        .map(|a| reader.attempt_token(a.id).unwrap())
        .max()
        .unwrap_or(0);
    for (since, w) in waiters {
        // A waiter woken by the last commits may still be finishing its answer: give it a
        // moment before judging it (the token read above and `is_finished` are not in step).
        let settle = std::time::Instant::now();
        while !w.is_finished() && newest > since && settle.elapsed() < Duration::from_secs(2) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if w.is_finished() {
            let r = w.await.unwrap();
            assert!(r.changed, "seed {seed}: a waiter since {since} timed out");
        } else {
            assert!(
                newest <= since,
                "seed {seed}: a waiter since {since} slept through token {newest}"
            );
            w.abort();
        }
    }
    support::feed::check_feed(&daemon, &sim, project, seed, &stop, feed).await;
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    daemon.shutdown().await;
    sim.shutdown().await;
}

/// VK idle for longer than the stall window (keep-alives and pings only): no stream may be
/// reconnected, nothing resynced, and VK asked nothing. Streams still dropping from the last
/// fault settle first (a stalled SSE connection is dropped when its fault ends).
async fn quiet_stretch(daemon: &vk_observer_daemon::Daemon, sim: &vk_observer_sim::Sim, seed: u64) {
    let stall = support::fast_ingest().stall_after;
    let settled = std::time::Instant::now();
    while daemon.health.state() != vk_observer_telemetry::health::UpstreamState::Connected {
        assert!(
            settled.elapsed() < Duration::from_secs(30),
            "seed {seed}: never reconnected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counts = || {
        (
            daemon.health.reconnects.load(Ordering::Relaxed),
            daemon.health.resyncs.load(Ordering::Relaxed),
            sim.counters().rest_gets,
        )
    };
    // Settled: the last fault's refetches answered (under load they can take longer than a
    // fixed pause), seen as half a second with no reconnect, resync or request.
    let mut before = counts();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = counts();
        if now == before {
            break;
        }
        assert!(
            settled.elapsed() < Duration::from_secs(30),
            "seed {seed}: still reconnecting or fetching 30 s after the faults: {now:?}"
        );
        before = now;
    }
    tokio::time::sleep(stall + stall / 4).await;
    assert_eq!(
        counts(),
        before,
        "seed {seed}: an idle VK cost reconnects, resyncs or requests"
    );
}

/// A long-poll on the whole project from the current token, parked for longer than any schedule.
fn spawn_waiter(
    daemon: &vk_observer_daemon::Daemon,
    project: uuid::Uuid,
) -> (
    u64,
    tokio::task::JoinHandle<vk_observer_query::wait::WaitResult>,
) {
    let q = Query::new(daemon.store.clone(), daemon.health.clone());
    let since = q.store.current_token();
    let h = tokio::spawn(async move {
        q.wait_for_change(
            WaitScope::Project(project),
            None,
            Since::After(vk_observer_query::Cut::local(since)),
            vk_observer_query::wait::WaitClock::start(Duration::from_secs(600)),
            None,
            std::future::pending::<()>(),
        )
        .await
        .expect("wait answers")
    });
    (since, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_fault_schedules_converge() {
    use futures::StreamExt;
    let n = env_u64("VK_FAULT_SEEDS", 200);
    let base = env_u64("VK_FAULT_SEED_BASE", 0);
    let started = std::time::Instant::now();
    futures::stream::iter(base..base + n)
        .for_each_concurrent(2, |seed| async move {
            eprintln!(
                "fault schedule seed {seed} (replay: VK_FAULT_SEED_BASE={seed} VK_FAULT_SEEDS=1)"
            );
            run_schedule(seed).await;
        })
        .await;
    eprintln!(
        "fault schedules: {n} seeds from {base} converged in {:.0?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frames_are_counted_and_survived() {
    let sim = support::sim().await;
    let project = sim.add_project("Garbage", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    sim.set_faults(Faults {
        garbage_sse: true,
        garbage_ws: true,
        ..Faults::default()
    });
    let t = sim.add_task(project, "garbage everywhere", None);
    sim.run_attempt_script(t, AttemptScript::default()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "garbage").await;
    assert!(
        daemon.health.garbage_frames.load(Ordering::Relaxed) > 0,
        "garbage was injected, none counted"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_streamed_live_survive_upstream_history_truncation() {
    let sim = support::sim().await;
    let project = sim.add_project("Gap", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let t = sim.add_task(project, "long log", None);
    // Log sockets are cut every few frames, so the daemon reconnects mid-log many times.
    sim.set_faults(Faults {
        drop_log_ws_after: Some(7),
        ..Faults::default()
    });
    sim.run_attempt_script(
        t,
        AttemptScript {
            normalized_entries: 300,
            raw_entries: 100,
            replacements: 6,
            ..AttemptScript::default()
        },
    )
    .await;
    sim.set_faults(Faults::default());
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(20),
        "live with socket drops",
    )
    .await;
    // Now VK loses the older half of every history and restarts: the cache keeps everything.
    sim.set_faults(Faults {
        skip_history: true,
        ..Faults::default()
    });
    sim.restart();
    tokio::time::sleep(Duration::from_secs(1)).await;
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(20),
        "after truncation + restart",
    )
    .await;
    daemon.shutdown().await;
}

/// A normalized system message, as VK's normalizer writes one.
fn note(text: &str) -> serde_json::Value {
    serde_json::json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "system_message"}, "content": text}})
}

/// Seed 180's interleaving, forced: the agent appends entry 3, VK restarts (the process fails
/// and its log ends) before the agent's rewrite of entry 3 lands, and the rewrite comes only
/// after the daemon has read the log to its end. A real VK drops its in-memory log store when a
/// process ends and persists nothing after `finished`, so the rewrite must not exist upstream
/// either: the cache and VK agree on the content streamed before the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_racing_the_end_of_its_process_is_not_part_of_the_log() {
    use vk_observer_sim::{Channel, RunReason};
    let sim = support::sim().await;
    let project = sim.add_project("Rewrite race", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let task = sim.add_task(project, "rewrite vs restart", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    for i in 0..4 {
        sim.append_log(pid, Channel::Normalized, note(&format!("m{i}")));
    }
    sim.restart();
    let start = std::time::Instant::now();
    while !daemon
        .store
        .read()
        .logs_complete(pid, vk_observer_store::keys::Channel::Normalized)
        .unwrap()
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the daemon never read the ended log to its end"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !sim.replace_log(pid, Channel::Normalized, 3, note("m3 (rewritten)")),
        "an ended log is frozen"
    );
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(10),
        "rewrite after the end",
    )
    .await;
    daemon.shutdown().await;
    sim.shutdown().await;
}

/// A history pass that began while the process ran is a snapshot of a moving log, even if the
/// process has ended by the time the pass is over. Here the log socket is unusable (upgrades
/// refused), so the daemon reads history while the process runs; the process writes its last
/// entry and ends while that page is in flight. The daemon must read again before calling the
/// log complete, or the last entry is never fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_pass_begun_while_the_process_ran_does_not_complete_its_log() {
    use vk_observer_sim::{Channel, ProcessStatus, RunReason};
    let sim = support::sim().await;
    sim.set_faults(Faults {
        refuse_log_ws: true,
        slow_history: Some(Duration::from_millis(800)),
        ..Faults::default()
    });
    let project = sim.add_project("Moving log", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let task = sim.add_task(project, "history while running", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    for i in 0..4 {
        sim.append_log(pid, Channel::Normalized, note(&format!("m{i}")));
    }
    let route = "GET /api/execution-processes/{id}/normalized-logs/v2";
    let start = std::time::Instant::now();
    while sim.counters().by_route.get(route).copied().unwrap_or(0) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the daemon never fell back to history"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The page (m0..m3) was taken when the request arrived; it is answered 800 ms later, by
    // when the daemon has learnt from the process stream that the process ended.
    tokio::time::sleep(Duration::from_millis(100)).await;
    sim.append_log(pid, Channel::Normalized, note("m4 (last words)"));
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(10),
        "history read while running",
    )
    .await;
    daemon.shutdown().await;
    sim.shutdown().await;
}

/// Seed 77's duplicate, forced. VK reads an object stream's snapshot after it subscribed, so the
/// patches since the subscription follow a snapshot that already holds them
/// (`replay_after_snapshot` sends all of history after it: the worst case of that race). The
/// daemon, started after the attempt ran, gets each process ended in the snapshot, then its
/// earlier `running` patch, then its end again: still one start and one end per process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_a_snapshot_already_holds_start_and_end_each_process_once() {
    use vk_observer_store::feed::FeedScope;
    let sim = support::sim().await;
    let project = sim.add_project("Late snapshot", &["demo"]);
    let task = sim.add_task(project, "ran before the daemon", None);
    sim.run_attempt_script(task, AttemptScript::default()).await;
    sim.set_faults(Faults {
        replay_after_snapshot: true,
        ..Faults::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let truth = sim.truth();
    // The replay follows the snapshot on the same socket within milliseconds; the settle only
    // lets an old daemon show its duplicate (this one derives nothing from the replay at all).
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(20),
        "late snapshot",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(20),
        "after the replay",
    )
    .await;
    let reader = daemon.store.read();
    let (feed, _) = reader
        .activity_after(FeedScope::Project(project), 0, u64::MAX, usize::MAX)
        .unwrap();
    let count = |kind: &str, pid: uuid::Uuid| {
        feed.iter()
            .filter(|e| e.item.kind.as_str() == kind && e.item.process == Some(pid))
            .count()
    };
    assert!(!truth.processes.is_empty());
    for pid in truth.processes.keys() {
        assert_eq!(count("process_started", *pid), 1, "process {pid} started");
        assert_eq!(count("process_ended", *pid), 1, "process {pid} ended");
    }
    daemon.shutdown().await;
    sim.shutdown().await;
}
