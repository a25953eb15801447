//! What an idle daemon keeps per attempt (issue 27, idle RSS after the scale board's catch-up).
//!
//! In one process: the simulator holding a scale board (`Sim::load_scale`, log history in its
//! log database as in `mcp_load --scale`), and a daemon (`Daemon::start`, default settings) that
//! catches it up from an empty data dir. A counting allocator wraps the system allocator, so the
//! figure is the live heap (bytes allocated and not freed), not RSS: what the daemon holds, apart
//! from what an allocator keeps around. For each board size: live bytes once the board is built,
//! once the daemon has caught up and idled `VK_BENCH_IDLE_SECS` (default 10: longer than the
//! 5 s process-stream linger), and after the daemon is shut down and dropped. The daemon's idle
//! heap is the difference between the last two; bytes per attempt is its slope between sizes.
//!
//! `cargo bench --bench idle_memory` (attempts 400 and 1,600 by default, `VK_BENCH_IDLE_ATTEMPTS=
//! 400,1600`; 50 normalized entries per attempt, `VK_BENCH_IDLE_ENTRIES_PER_ATTEMPT`).
//! `VK_BENCH_IDLE_CACHE_MB=N`: sled's page cache (`[retention] cache_mb`) instead of the default.
//! `VK_BENCH_IDLE_EXIT=1` exits the process while the last daemon idles, so that
//! `heaptrack <bench binary>` reports every allocation still live then with its stack.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use vk_observer_config::Settings;
use vk_observer_daemon::Daemon;
use vk_observer_sim::scale::{ScaleRows, ScaleSpec};
use vk_observer_sim::{Sim, SimConfig};
use vk_observer_store::keys::Channel;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> i64 {
    LIVE.load(Ordering::Relaxed) as i64
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One board size's figures, in bytes.
struct Sample {
    attempts: usize,
    catch_up: Duration,
    /// The daemon's live heap while idle (idle minus after its shutdown).
    daemon_idle: i64,
    /// Live heap with the daemon idle, and after it was dropped (the simulator's board remains).
    idle: i64,
    after: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let sizes: Vec<usize> = std::env::var("VK_BENCH_IDLE_ATTEMPTS")
        .unwrap_or_else(|_| "400,1600".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let per_attempt: u64 = env_or("VK_BENCH_IDLE_ENTRIES_PER_ATTEMPT", 50);
    let idle_secs: u64 = env_or("VK_BENCH_IDLE_SECS", 10);
    let mut samples = Vec::new();
    for (i, &attempts) in sizes.iter().enumerate() {
        let last = i + 1 == sizes.len();
        samples.push(sample(attempts, per_attempt, idle_secs, last).await?);
    }
    for s in &samples {
        println!(
            "idle_memory: {} attempts: caught up in {:.1} s; daemon idle heap {:.1} MB ({:.0} B per attempt); live {:.1} MB idle, {:.1} MB after shutdown",
            s.attempts,
            s.catch_up.as_secs_f64(),
            s.daemon_idle as f64 / 1e6,
            s.daemon_idle as f64 / s.attempts as f64,
            s.idle as f64 / 1e6,
            s.after as f64 / 1e6,
        );
    }
    if let [a, .., b] = samples.as_slice() {
        let slope = (b.daemon_idle - a.daemon_idle) as f64 / (b.attempts - a.attempts) as f64;
        println!(
            "idle_memory: daemon idle heap per extra attempt ({} → {}): {slope:.0} B",
            a.attempts, b.attempts
        );
    }
    Ok(())
}

async fn sample(
    attempts: usize,
    per_attempt: u64,
    idle_secs: u64,
    last: bool,
) -> anyhow::Result<Sample> {
    let spec = ScaleSpec {
        tasks: attempts / 2,
        attempts,
        side_tasks: attempts / 20,
        small_tasks: 98,
        entries: attempts as u64 * per_attempt,
    };
    let sim = Sim::start(SimConfig {
        log_db: true,
        step_delay: Duration::from_millis(1),
        history_max_entries: 5000,
        ..SimConfig::default()
    })
    .await?;
    let rows = sim.load_scale(spec);
    let dir = tempfile::tempdir()?;
    let mut settings = Settings {
        upstream: sim.base_url(),
        listen: "127.0.0.1:0".parse()?,
        data_dir: dir.path().to_path_buf(),
        ..Settings::default()
    };
    settings.retention.cache_mb = env_or("VK_BENCH_IDLE_CACHE_MB", settings.retention.cache_mb);
    let started = Instant::now();
    let daemon = Daemon::start(settings.validate()?, None).await?;
    wait_caught_up(&daemon, &rows).await?;
    let catch_up = started.elapsed();
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let idle = live();
    if last && std::env::var("VK_BENCH_IDLE_EXIT").is_ok_and(|v| v != "0") {
        println!(
            "idle_memory: {attempts} attempts, live {:.1} MB; exiting for the heap profiler",
            idle as f64 / 1e6
        );
        std::process::exit(0);
    }
    daemon.shutdown().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = live();
    sim.shutdown().await;
    Ok(Sample {
        attempts,
        catch_up,
        daemon_idle: idle - after,
        idle,
        after,
    })
}

/// Bootstrapped, and every ended process's normalized log complete (every 100th process of the
/// board still runs: `sim::scale`).
async fn wait_caught_up(d: &Daemon, rows: &ScaleRows) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let complete = d.health.bootstrapped() && {
            let r = d.store.read();
            rows.logs
                .iter()
                .enumerate()
                .filter(|(k, _)| k % 100 != 99)
                .all(|(_, (_, p, _))| r.logs_complete(*p, Channel::Normalized).unwrap_or(false))
        };
        if complete {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(900),
            "not caught up after 900 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
