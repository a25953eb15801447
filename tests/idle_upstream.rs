//! An idle VK (issue 14): keep-alive comments and pings are liveness, and a reconnect with
//! nothing missed costs nothing. The windows are shortened by configuration: the simulator
//! sends a keep-alive every 200 ms and a ping every 300 ms, the daemon calls a stream stalled
//! after 1 s of silence, and each test holds for well over three stall windows.

mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vk_observer_daemon::Daemon;
use vk_observer_ingest::IngestConfig;
use vk_observer_query::Query;
use vk_observer_sim::{AgentOutcome, AttemptScript, Faults, Sim, SimConfig};
use vk_observer_telemetry::health::UpstreamState;

const STALL: Duration = Duration::from_secs(1);

async fn quiet_sim() -> Sim {
    Sim::start(SimConfig {
        keepalive: Duration::from_millis(200),
        ws_ping: Duration::from_millis(300),
        step_delay: Duration::from_millis(5),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts")
}

async fn daemon(sim: &Sim, dir: &std::path::Path) -> Daemon {
    let settings = vk_observer_config::Settings {
        ingest: IngestConfig {
            stall_after: STALL,
            ws_stall_after: STALL,
            ..support::fast_ingest()
        },
        ..support::settings(&sim.base_url(), dir, Default::default())
    };
    let valid = settings.validate().expect("valid settings");
    Daemon::start(valid, None).await.expect("daemon starts")
}

/// The board's project, added before the daemon starts: adding a project reloads VK's config,
/// which moves `loaded_at_unix_ms`, the only run identity VK offers (docs/vk-contract.md), so a
/// project added after the daemon's first connection makes its next reconnect resync (safe,
/// but not what these tests measure).
fn board_project(sim: &Sim) -> uuid::Uuid {
    sim.add_project("Idle", &["demo"])
}

/// A board with a few tasks and one finished attempt, fully cached.
async fn settled_board(sim: &Sim, daemon: &Daemon, project: uuid::Uuid) {
    for i in 0..5 {
        sim.add_task(project, &format!("task {i}"), None);
    }
    let t = sim.add_task(project, "done", None);
    sim.run_attempt_script(
        t,
        AttemptScript {
            normalized_entries: 5,
            raw_entries: 2,
            agent: AgentOutcome::Succeed,
            ..AttemptScript::default()
        },
    )
    .await;
    support::converge(&daemon.store, sim, Duration::from_secs(20), "idle board").await;
    let start = Instant::now();
    while !daemon.health.bootstrapped() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never bootstrapped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the finished attempt's process stream linger out and the seq be persisted.
    tokio::time::sleep(Duration::from_millis(800)).await;
}

struct Counts {
    reconnects: u64,
    resyncs: u64,
    sse_connections: u64,
    ws_connections: u64,
    rest_gets: u64,
}

fn counts(daemon: &Daemon, sim: &Sim) -> Counts {
    let c = sim.counters();
    Counts {
        reconnects: daemon.health.reconnects.load(Ordering::Relaxed),
        resyncs: daemon.health.resyncs.load(Ordering::Relaxed),
        sse_connections: c.sse_connections,
        ws_connections: c.ws_connections,
        rest_gets: c.rest_gets,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_alone_keep_an_idle_vk_connected() {
    let sim = quiet_sim().await;
    let project = board_project(&sim);
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon(&sim, dir.path()).await;
    settled_board(&sim, &daemon, project).await;
    let before = counts(&daemon, &sim);
    let query = Query::new(daemon.store.clone(), daemon.health.clone());

    // Four stall windows with nothing on the wire but keep-alives and pings.
    let start = Instant::now();
    let mut answers = 0;
    while start.elapsed() < STALL * 4 {
        let f = query.freshness();
        assert_eq!(
            f.upstream,
            UpstreamState::Connected,
            "after {:?}",
            start.elapsed()
        );
        let age = f.upstream_age_ms.expect("VK has sent bytes");
        assert!(
            age < 600,
            "last byte {age} ms ago, keep-alives come every 200 ms"
        );
        answers += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = counts(&daemon, &sim);
    assert!(answers >= 35);
    assert_eq!(after.reconnects, before.reconnects, "no stream reconnected");
    assert_eq!(after.resyncs, before.resyncs, "nothing resynced");
    assert_eq!(after.sse_connections, before.sse_connections);
    assert_eq!(after.ws_connections, before.ws_connections);
    assert_eq!(after.rest_gets, before.rest_gets, "VK was asked nothing");
    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_stream_reconnects_and_resumes_without_a_resync() {
    let sim = quiet_sim().await;
    let project = board_project(&sim);
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon(&sim, dir.path()).await;
    settled_board(&sim, &daemon, project).await;
    let before = counts(&daemon, &sim);
    let stored_seq = daemon.store.read().upstream_seq().unwrap();
    assert!(
        stored_seq.is_some(),
        "the probe's watermark is the resume point"
    );
    // The first connection asked VK for its watermark; none asked for a replay from scratch.
    let resumes = sim.counters().sse_resumes;
    assert_eq!(resumes[0], Some(u64::MAX), "{resumes:?}");

    // The SSE stream goes silent (no keep-alive, no event) and new connections hang.
    sim.set_faults(Faults {
        stall_sse: true,
        ..Faults::default()
    });
    let start = Instant::now();
    let mut saw_reconnecting = false;
    while start.elapsed() < STALL * 3 {
        saw_reconnecting |= daemon.health.state() != UpstreamState::Connected;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        saw_reconnecting,
        "freshness says so while the stream is dead"
    );
    assert!(daemon.health.reconnects.load(Ordering::Relaxed) > before.reconnects);
    // VK comes back; the daemon resumes from the stored seq.
    sim.set_faults(Faults::default());
    let start = Instant::now();
    let connects_before = sim.counters().sse_resumes.len();
    // A connection made after the fault ended, resuming from a stored seq (the seq may have
    // moved on since it was read above, if a late event was persisted meanwhile).
    let resumed = |resumes: &[Option<u64>]| {
        resumes.len() > connects_before
            && resumes
                .last()
                .copied()
                .flatten()
                .is_some_and(|r| r != u64::MAX && Some(r) >= stored_seq)
    };
    while daemon.health.state() != UpstreamState::Connected || !resumed(&sim.counters().sse_resumes)
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never resumed: {:?}",
            sim.counters().sse_resumes
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A change made now arrives through the resumed stream as usual.
    let project = daemon.store.read().projects().unwrap()[0].id;
    sim.add_task(project, "after the stall", None);
    support::converge(&daemon.store, &sim, Duration::from_secs(10), "after resume").await;
    let after = counts(&daemon, &sim);
    assert_eq!(
        after.resyncs, before.resyncs,
        "a resume with nothing missed resyncs nothing"
    );
    assert!(
        sim.counters()
            .sse_resumes
            .iter()
            .skip(1)
            .all(|r| r.is_some_and(|r| r != u64::MAX && Some(r) >= stored_seq)),
        "every reconnect resumed from a stored seq, none probed again: {:?}",
        sim.counters().sse_resumes
    );
    daemon.shutdown().await;
    sim.shutdown().await;
}
