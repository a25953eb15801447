//! Hostile upstream: while attempts run, VK (the simulator) also sends an unknown JSON Patch op,
//! a 20 MB junk frame on object sockets, a negative log index, and a 10 MB SSE line with no line
//! end, on top of the usual garbage. The daemon must count and survive all of it, keep its
//! memory bounded, and converge on the truth once VK behaves again.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use vk_observer_sim::{AttemptScript, Faults};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_are_counted_survived_and_bounded() {
    let sim = support::sim().await;
    let project = sim.add_project("Hostile", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let warm = sim.add_task(project, "warm-up", None);
    sim.run_attempt_script(warm, AttemptScript::default()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "before").await;
    let rss_before = rss_kib();

    sim.set_faults(Faults {
        hostile: true,
        garbage_sse: true,
        garbage_ws: true,
        ..Faults::default()
    });
    for i in 0..3 {
        let t = sim.add_task(project, &format!("under fire {i}"), None);
        sim.run_attempt_script(
            t,
            AttemptScript {
                normalized_entries: 20,
                raw_entries: 10,
                ..AttemptScript::default()
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_peak = rss_kib();
    sim.set_faults(Faults::default());
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(60),
        "after hostile frames",
    )
    .await;

    let garbage = daemon.health.garbage_frames.load(Ordering::Relaxed);
    assert!(garbage > 0, "hostile frames must be counted as garbage");
    // The simulator and the client share this process; the whole test stays far below what
    // buffering the junk without bounds would take (it is sent again on every frame).
    let grown_mib = rss_peak.saturating_sub(rss_before) / 1024;
    assert!(
        grown_mib < 400,
        "memory grew by {grown_mib} MiB under hostile frames"
    );
    eprintln!(
        "hostile upstream: {garbage} garbage frames counted, RSS +{grown_mib} MiB at peak, converged"
    );
    daemon.shutdown().await;
}
