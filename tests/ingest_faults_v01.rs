//! Fault schedules on VK 0.1.x's dialect, property-style: for each seed, scripted attempts run
//! on the simulator's second dialect while a seeded injector drops every connection, restarts
//! VK (every later log socket of an ended process is then a replay that renumbers the entries),
//! sends garbage frames on the object and log sockets, cuts log sockets after a few frames, and
//! restarts the daemon on its data dir. Afterwards the cache must hold exactly the simulator's
//! workspaces, sessions, processes and log entries (each log gapless from 0, no entry twice,
//! none lost, in the daemon's own numbering), every log index must still hold the entry it
//! first showed, and the store's token must never have gone back.
//! Seeds: `VK_FAULT_SEEDS` (default 200, two at a time) from `VK_FAULT_SEED_BASE` (default 0);
//! a failure names its seed for replay.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vk_observer_sim::{AgentOutcome, AttemptScript, Faults};
use vk_observer_store::Store;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

type Served = BTreeMap<support::workspaces::Place, String>;

/// Samples the current store every 2 ms, across daemon restarts: its token never goes back,
/// and (every 25th sample) what each log index first showed is recorded, as a client tailing
/// the logs would have seen it.
fn watch(
    current: Arc<RwLock<Option<Store>>>,
    stop: Arc<AtomicBool>,
    served: Arc<Mutex<Served>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = 0;
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let store = current.read().unwrap().clone();
            if let Some(store) = store {
                let t = store.current_token();
                assert!(t >= last, "token went from {last} to {t}");
                last = t;
                n += 1;
                if n.is_multiple_of(25) {
                    let seen = support::workspaces::identities(&store);
                    let mut served = served.lock().unwrap();
                    for (k, v) in seen {
                        served.entry(k).or_insert(v);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

fn scripts(rng: &mut StdRng) -> Vec<AttemptScript> {
    (0..3)
        .map(|_| AttemptScript {
            normalized_entries: rng.random_range(5..50),
            raw_entries: rng.random_range(1..25),
            replacements: rng.random_range(0..4),
            agent: if rng.random_bool(0.2) {
                AgentOutcome::Fail
            } else {
                AgentOutcome::Succeed
            },
            ..AttemptScript::default()
        })
        .collect()
}

async fn run_schedule(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let sim = support::workspaces::sim().await;
    let project = sim.add_project("Faults", &["alpha"]);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = support::workspaces::daemon(&sim, dir.path()).await;
    let current = Arc::new(RwLock::new(Some(daemon.store.clone())));
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(Mutex::new(Served::new()));
    let watcher = watch(current.clone(), stop.clone(), served.clone());

    let player = {
        let (sim, scripts) = (sim.clone(), scripts(&mut rng));
        tokio::spawn(async move {
            for (i, s) in scripts.into_iter().enumerate() {
                let t = sim.add_task(project, &format!("task {i}"), None);
                sim.run_attempt_script(t, s).await;
            }
        })
    };
    let mut daemon_restarted = false;
    while !player.is_finished() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(10..120))).await;
        let fault = rng.random_range(0..7);
        if std::env::var("VK_FAULT_TRACE").is_ok() {
            eprintln!("seed {seed}: fault {fault}");
        }
        match fault {
            0 => sim.drop_connections(),
            1 => sim.restart(),
            2 => sim.set_faults(Faults {
                garbage_ws: true,
                ..Faults::default()
            }),
            3 => sim.set_faults(Faults {
                drop_log_ws_after: Some(rng.random_range(1..8)),
                ..Faults::default()
            }),
            4 if !daemon_restarted => {
                daemon_restarted = true;
                let before = daemon.store.current_token();
                *current.write().unwrap() = None;
                daemon.shutdown().await;
                daemon = support::daemon_reopen(&sim, dir.path()).await;
                *current.write().unwrap() = Some(daemon.store.clone());
                assert!(
                    daemon.store.current_token() >= before,
                    "seed {seed}: token went back across a restart"
                );
            }
            _ => sim.set_faults(Faults::default()),
        }
    }
    player.await.unwrap();
    sim.set_faults(Faults::default());
    let context = format!("seed {seed} (replay: VK_FAULT_SEED_BASE={seed} VK_FAULT_SEEDS=1)");
    support::workspaces::converge(&daemon.store, &sim, Duration::from_secs(30), &context).await;
    // A daemon restarted on a complete cache converges before it has asked VK's dialect.
    let asked = std::time::Instant::now();
    while daemon.health.dialect().dialect != "workspaces" {
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "{context}: {:?}",
            daemon.health.dialect()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    let moved = support::workspaces::moved(&served.lock().unwrap(), &daemon.store);
    assert!(
        moved.is_empty(),
        "{context}: served indices changed meaning:\n{}",
        moved.join("\n")
    );
    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_fault_schedules_converge_on_vk_0_1_x() {
    use futures::StreamExt;
    let n = env_u64("VK_FAULT_SEEDS", 200);
    let base = env_u64("VK_FAULT_SEED_BASE", 0);
    let started = std::time::Instant::now();
    futures::stream::iter(base..base + n)
        .for_each_concurrent(2, |seed| async move {
            eprintln!("VK 0.1.x fault schedule seed {seed} (replay: VK_FAULT_SEED_BASE={seed} VK_FAULT_SEEDS=1)");
            run_schedule(seed).await;
        })
        .await;
    eprintln!("{n} VK 0.1.x fault schedules in {:?}", started.elapsed());
}
