//! A real process kill on a fleet host (issue 24): the `vk-observer` binary, publishing to a real
//! `nats-server`, is killed with SIGKILL mid-ingest and restarted on the same data dir several
//! times per seed, while a fleet node (in process) follows it. Afterwards the fleet holds exactly
//! what VK holds (nothing lost, nothing extra), then exactly what the host's store holds once the
//! binary is stopped, and its activity feed, followed by `since_token` throughout, has no gap and
//! no duplicate. The same for the fleet node: the `vk-observer serve --fleet` binary is killed with
//! SIGKILL while it applies a host's stream and restarted on the same data dir and address; an
//! MCP client follows its feed by `since_token` across the kills (never reset, its token never
//! back), and the fleet converges to the host's store with a feed that has no gap and no
//! duplicate. Seeds: `VK_FLEET_KILL_SEEDS` (default 3) from `VK_FLEET_KILL_SEED_BASE`.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use support::fleet::{fleet_node, host_daemon, host_truth};
use support::nats::NatsServer;
use vk_observer_sim::{AttemptScript, Sim, Truth};
use vk_observer_store::events::{HOST_FIELD, HOSTS_FIELD};
use vk_observer_store::{Retention, StoreOwner};

const CONVERGE: Duration = Duration::from_secs(40);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn spawn_host(sim: &Sim, nats: &NatsServer, host: &str, dir: &std::path::Path) -> Child {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_vk-observer"))
        .args(["serve", "--upstream", &sim.base_url(), "--listen"])
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(dir)
        .env("VK_OBSERVER_FLEET__URLS", &nats.url)
        .env("VK_OBSERVER_FLEET__HOST", host)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts")
}

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The fleet-node binary on `dir`, its MCP endpoint on `addr`.
fn spawn_fleet_node(nats: &NatsServer, dir: &std::path::Path, addr: std::net::SocketAddr) -> Child {
    Command::new(env!("CARGO_BIN_EXE_vk-observer"))
        .args(["serve", "--fleet", "--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(dir)
        .env("VK_OBSERVER_FLEET__URLS", &nats.url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts")
}

/// The scripted attempts of one seed, played into the simulator.
fn play(sim: &Sim, project: uuid::Uuid, rng: &mut StdRng) -> tokio::task::JoinHandle<()> {
    let sim = sim.clone();
    let scripts: Vec<AttemptScript> = (0..3)
        .map(|_| AttemptScript {
            normalized_entries: rng.random_range(10..80),
            raw_entries: rng.random_range(1..20),
            replacements: rng.random_range(0..3),
            ..AttemptScript::default()
        })
        .collect();
    tokio::spawn(async move {
        for (i, s) in scripts.into_iter().enumerate() {
            let t = sim.add_task(project, &format!("task {i}"), None);
            sim.run_attempt_script(t, s).await;
        }
    })
}

/// The simulator's truth as the fleet should hold it (projects, tasks and attempts name the host;
/// projects also list it in `hosts`).
fn tagged_truth(sim: &Sim, host: &str) -> Truth {
    let mut truth = sim.truth();
    let tag = |v: &mut Value| v[HOST_FIELD] = Value::String(host.to_owned());
    for p in truth.projects.values_mut() {
        p[HOSTS_FIELD] = serde_json::json!([host]);
    }
    truth.projects.values_mut().for_each(tag);
    truth.tasks.values_mut().for_each(tag);
    truth.attempts.values_mut().for_each(tag);
    truth
}

async fn run_kills(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let nats = NatsServer::start("fleet kill").expect("nats-server is installed");
    let (dir_h, dir_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let fleet = fleet_node(dir_f.path(), &nats.url).await;
    let sim = support::sim().await;
    let project = sim.add_project("kill project", &["repo"]);
    let stop = Arc::new(AtomicBool::new(false));
    let current = Arc::new(RwLock::new(Some(fleet.store.clone())));
    let feed = support::feed::follow_feed(current, stop.clone(), project);
    let host = format!("k{seed}");
    let mut child = spawn_host(&sim, &nats, &host, dir_h.path());
    let player = play(&sim, project, &mut rng);
    let mut kills = 0;
    while !player.is_finished() || kills < 2 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(150..600))).await;
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        kills += 1;
        child = spawn_host(&sim, &nats, &host, dir_h.path());
    }
    player.await.unwrap();
    converge_on(
        &fleet.store,
        || tagged_truth(&sim, &host),
        seed,
        "VK's truth",
    )
    .await;
    support::terminate(child);
    let owner = StoreOwner::open(dir_h.path(), Retention::default()).unwrap();
    let mut union = Truth::default();
    host_truth(&owner.store(), &host, &mut union);
    converge_on(&fleet.store, || union.clone(), seed, "the host's store").await;
    support::feed::check_store_feed(&fleet.store, &sim, project, seed, &stop, feed).await;
    eprintln!("fleet kill seed {seed}: {kills} SIGKILLs, converged");
    fleet.shutdown().await;
}

/// The fleet node's store once the binary is stopped (SIGTERM) and it equals the host's store;
/// restarted and stopped again until then. The binary is left stopped.
async fn converged_fleet_store(
    nats: &NatsServer,
    dir: &std::path::Path,
    addr: std::net::SocketAddr,
    node: Child,
    want: &Truth,
    seed: u64,
) -> StoreOwner {
    let start = Instant::now();
    support::terminate(node);
    loop {
        let owner = StoreOwner::open(dir, Retention::default()).unwrap();
        let diff = support::cache_diff(&owner.store(), want);
        if diff.is_empty() {
            return owner;
        }
        assert!(
            start.elapsed() < CONVERGE,
            "seed {seed}: the fleet node binary did not converge to the host's store (replay: \
             VK_FLEET_KILL_SEED_BASE={seed} VK_FLEET_KILL_SEEDS=1 cargo test --test fleet_kill \
             fleet_node):\n{}",
            diff.iter().take(12).cloned().collect::<Vec<_>>().join("\n")
        );
        drop(owner);
        let node = spawn_fleet_node(nats, dir, addr);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        support::terminate(node);
    }
}

/// One seed of fleet-node kills: the binary SIGKILLed mid-stream several times, then every
/// invariant.
async fn run_fleet_node_kills(seed: u64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut rng = StdRng::seed_from_u64(seed);
    let nats = NatsServer::start("fleet node kill").expect("nats-server is installed");
    let (dir_h, dir_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let addr = free_addr();
    let mut node = spawn_fleet_node(&nats, dir_f.path(), addr);
    let since = support::fleet_feed::first_token(addr).await;
    let sim = support::sim().await;
    let project = sim.add_project("fleet kill project", &["repo"]);
    let host = format!("n{seed}");
    let daemon = host_daemon(&sim, dir_h.path(), &nats.url, &host).await;
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let feed = support::fleet_feed::follow(addr, project, since, stop.clone(), progress.clone());
    let player = play(&sim, project, &mut rng);
    let mut kills = 0;
    while !player.is_finished() || kills < 2 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(150..600))).await;
        let _ = node.kill(); // SIGKILL
        let _ = node.wait();
        kills += 1;
        node = spawn_fleet_node(&nats, dir_f.path(), addr);
    }
    player.await.unwrap();
    support::converge(&daemon.store, &sim, CONVERGE, &format!("host {host}")).await;
    let mut union = Truth::default();
    host_truth(&daemon.store, &host, &mut union);
    let owner = converged_fleet_store(&nats, dir_f.path(), addr, node, &union, seed).await;
    drop(owner);
    // Up again, so the follower reads the feed to its end before it is checked.
    let node = spawn_fleet_node(&nats, dir_f.path(), addr);
    let last = support::fleet_tokens::progress(&support::fleet_feed::first_token(addr).await);
    let start = Instant::now();
    while progress.load(Ordering::Relaxed) < last {
        assert!(
            start.elapsed() < CONVERGE,
            "seed {seed}: the feed follower stayed at {} below the fleet's token {last}",
            progress.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let seen = feed.await.unwrap();
    support::terminate(node);
    let owner = StoreOwner::open(dir_f.path(), Retention::default()).unwrap();
    let done = Arc::new(AtomicBool::new(true));
    let seen = tokio::spawn(async move { seen });
    support::feed::check_store_feed(&owner.store(), &sim, project, seed, &done, seen).await;
    eprintln!("fleet node kill seed {seed}: {kills} SIGKILLs, converged");
    daemon.shutdown().await;
}

async fn converge_on(
    store: &vk_observer_store::Store,
    want: impl Fn() -> Truth,
    seed: u64,
    what: &str,
) {
    let start = Instant::now();
    loop {
        let diff = support::cache_diff(store, &want());
        if diff.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < CONVERGE,
            "seed {seed}: the fleet is not {what} after {CONVERGE:?} (replay: \
             VK_FLEET_KILL_SEED_BASE={seed} VK_FLEET_KILL_SEEDS=1 cargo test --test fleet_kill):\n{}",
            diff.iter().take(12).cloned().collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_host_binary_loses_nothing_on_the_fleet() {
    if NatsServer::start("fleet kill").is_none() {
        return;
    }
    let n = env_u64("VK_FLEET_KILL_SEEDS", 3);
    let base = env_u64("VK_FLEET_KILL_SEED_BASE", 0);
    for seed in base..base + n {
        run_kills(seed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_fleet_node_binary_loses_nothing_and_its_feed_goes_on() {
    if NatsServer::start("fleet node kill").is_none() {
        return;
    }
    let n = env_u64("VK_FLEET_KILL_SEEDS", 3);
    let base = env_u64("VK_FLEET_KILL_SEED_BASE", 0);
    for seed in base..base + n {
        run_fleet_node_kills(seed).await;
    }
}
