//! The fleet over a real `nats-server` (issue 24, design-notes §23), side by side in one run:
//!
//! - **wake**: a log entry appended in the simulated VK of a host daemon (publishing to NATS)
//!   wakes a `wait_for_attempt_change` waiter on that host and one on a fleet node following
//!   it; p50/p99 of each (from the append) and of the fleet's extra (fleet − host, per change);
//! - **fan-in**: four host stores written through their writers (log-entry batches, as ingest
//!   writes them) while their publishers send the outboxes to NATS and one fleet node applies
//!   them: entries per second into the fleet, from the first write until the fleet has all;
//! - **backlog fan-in**: the same four hosts' writes done first, with NATS out of their reach,
//!   then their publishers and a fleet node started: entries per second into the fleet without
//!   the hosts' own writes on the clock (on a real fleet each host writes on its own machine);
//! - **catch-up**: a second fleet node from an empty store over the same streams (all entries);
//! - **wire**: JetStream's stored bytes (subject, headers, payload) per log entry, next to the
//!   entry's own JSON.
//!
//! Run: `VK_OBSERVER_NATS_SERVER=/path/to/nats-server cargo bench --bench fleet` (or
//! `nats-server` on PATH). Knobs (environment): `VK_BENCH_QUICK=1` (100 k entries, 40 wakes),
//! `VK_BENCH_FLEET_ENTRIES=N` (entries over the four hosts; default 1,000,000),
//! `VK_BENCH_FLEET_BATCH=N` (entries per host batch; default 100), `VK_BENCH_FLEET_WAKES=N`
//! (default 200), `VK_BENCH_ONLY=wake,hostwrite,fanin,backlog` (fan-in also runs catch-up and wire; hostwrite
//! times one host store's writes of a quarter of the entries with the outbox off and on),
//! `VK_BENCH_OUT=dir` (default target/perf; writes `fleet.json`),
//! `VK_BENCH_FLEET_WAYS=serial,pipelined` (default both: each phase runs the way before the
//! pipelining, `fleet::Pipelining::serial`, then the default, each on a fresh nats-server;
//! `grouped`: the default with a follower's group of messages as one writer batch, the way
//! before tokens every node reads alike; `unpacked`: the default with one message per outbox
//! batch, the way before `fleet::pack`),
//! `VK_BENCH_FLEET_TOPOLOGIES=single,tls,cluster3` (default `single`: one plain server; `tls`:
//! one server over mutual TLS; `cluster3`: three servers in one JetStream cluster, each host
//! stream at three replicas; `servers.rs`). Each phase runs on each topology side by side.

#[allow(dead_code)]
#[path = "../../tests/support/nats.rs"]
mod nats;
#[allow(dead_code)]
#[path = "../../tests/support/nats_cluster.rs"]
mod nats_cluster;
#[allow(dead_code)]
#[path = "../../tests/support/nats_tls.rs"]
mod nats_tls;
mod servers;

use servers::Servers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Value, json};
use uuid::Uuid;
use vk_observer_config::{FleetSettings, Settings};
use vk_observer_daemon::Daemon;
use vk_observer_daemon::fleet_node::FleetNode;
use vk_observer_fleet::Pipelining;
use vk_observer_fleet::node::{Node, Unheard};
use vk_observer_fleet::publisher::Publisher;
use vk_observer_query::wait::{WaitClock, WaitScope};
use vk_observer_query::{Cut, Query, Since};
use vk_observer_sim::{Channel, RunReason, Sim, SimConfig};
use vk_observer_store::events::DomainEvent;
use vk_observer_store::outbox::OutboxConfig;
use vk_observer_store::writer::WriterHandle;
use vk_observer_store::{Retention, Store, StoreOwner};
use vk_observer_telemetry::health::Health;

struct Opts {
    entries: u64,
    batch: u64,
    wakes: usize,
    only: Option<Vec<String>>,
    ways: Vec<String>,
    topologies: Vec<String>,
}

impl Opts {
    fn from_env() -> Opts {
        let var = |k: &str| std::env::var(k).ok();
        let num = |k: &str| var(k).and_then(|v| v.parse::<u64>().ok());
        let quick = var("VK_BENCH_QUICK").is_some_and(|v| v != "0");
        Opts {
            entries: num("VK_BENCH_FLEET_ENTRIES").unwrap_or(if quick {
                100_000
            } else {
                1_000_000
            }),
            batch: num("VK_BENCH_FLEET_BATCH").unwrap_or(100).max(1),
            wakes: num("VK_BENCH_FLEET_WAKES").unwrap_or(if quick { 40 } else { 200 }) as usize,
            only: var("VK_BENCH_ONLY").map(|v| v.split(',').map(|s| s.trim().into()).collect()),
            ways: var("VK_BENCH_FLEET_WAYS")
                .unwrap_or_else(|| "serial,pipelined".into())
                .split(',')
                .map(|s| s.trim().into())
                .collect(),
            topologies: var("VK_BENCH_FLEET_TOPOLOGIES")
                .unwrap_or_else(|| "single".into())
                .split(',')
                .map(|s| s.trim().into())
                .collect(),
        }
    }
    fn runs(&self, phase: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|p| p == phase))
    }
}

fn main() {
    let opts = Opts::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut report = serde_json::Map::new();
    if opts.runs("hostwrite") {
        report.insert("host_writes".into(), runtime.block_on(host_writes(&opts)));
    }
    for phase in ["wake", "fanin", "backlog"] {
        if opts.runs(phase) {
            run_phase(&runtime, &opts, phase, &mut report);
        }
    }
    Pipelining::set_process_default(None);
    let out = std::env::var("VK_BENCH_OUT").unwrap_or_else(|_| "target/perf".into());
    std::fs::create_dir_all(&out).unwrap();
    let path = format!("{out}/fleet.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&Value::Object(report)).unwrap(),
    )
    .unwrap();
    println!("raw: {path}");
}

/// One phase on each topology and each way, each on fresh servers, one after the other in this
/// process: `serial` is the way before the pipelining (fleet::Pipelining::serial), `pipelined`
/// the default. Reported under the way's name on one plain server (`single`), else under
/// "<topology> <way>".
fn run_phase(
    runtime: &tokio::runtime::Runtime,
    opts: &Opts,
    phase: &str,
    report: &mut serde_json::Map<String, Value>,
) {
    for topology in &opts.topologies {
        for way in &opts.ways {
            Pipelining::set_process_default(Some(
                Pipelining::named(way)
                    .expect("VK_BENCH_FLEET_WAYS: serial, pipelined, grouped or unpacked"),
            ));
            let servers = runtime.block_on(Servers::start(topology));
            println!("--- {phase}, {topology}, {way}");
            let column = match topology.as_str() {
                "single" => way.clone(),
                _ => format!("{topology} {way}"),
            };
            let mut add = |key: &str, value: Value| {
                let entry = report.entry(key.to_owned()).or_insert_with(|| json!({}));
                entry[column.as_str()] = value;
            };
            match phase {
                "wake" => add("wake", runtime.block_on(wake(&servers, opts.wakes))),
                "backlog" => add(
                    "fan_in_backlog",
                    runtime.block_on(backlog_fan_in(&servers, opts)),
                ),
                _ => {
                    let (fan, catch, wire) = runtime.block_on(fan_in_and_catch_up(&servers, opts));
                    add("fan_in", fan);
                    add("catch_up", catch);
                    add("wire", wire);
                }
            }
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    json!({"p50_ms": percentile(&ms, 0.5), "p99_ms": percentile(&ms, 0.99),
           "max_ms": ms[ms.len() - 1], "n": ms.len()})
}

// ---------------------------------------------------------------------------------------- wake

fn host_settings(sim: &Sim, dir: &std::path::Path, servers: &Servers) -> Settings {
    Settings {
        upstream: sim.base_url(),
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        fleet: FleetSettings {
            host: "wake".into(),
            ..servers.fleet()
        },
        ..Settings::default()
    }
}

fn node_settings(dir: &std::path::Path, servers: &Servers) -> Settings {
    Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        fleet: FleetSettings {
            node: true,
            ..servers.fleet()
        },
        ..Settings::default()
    }
}

/// A wait for a change of `attempt` after the store's current token; answers when it woke.
fn waiter(store: Store, attempt: Uuid) -> tokio::task::JoinHandle<Instant> {
    let q = Query::new(store, Arc::new(Health::new()));
    let since = q.store.current_token();
    tokio::spawn(async move {
        let r = q
            .wait_for_change(
                WaitScope::Attempts(vec![attempt]),
                None,
                Since::After(Cut::local(since)),
                WaitClock::start(Duration::from_secs(20)),
                None,
                std::future::pending::<()>(),
            )
            .await
            .expect("wait answers");
        assert!(r.changed, "the wait timed out");
        Instant::now()
    })
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "{what} never happened"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// When each message on `subject` reached a plain NATS subscriber (a probe beside the fleet
/// node's consumer: the hop host → NATS apart from NATS → fleet).
async fn nats_arrivals(
    servers: &Servers,
    subject: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<Instant> {
    use futures::StreamExt;
    let client = servers.client().await;
    let mut sub = client.subscribe(subject.to_owned()).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _client = client;
        while sub.next().await.is_some() {
            if tx.send(Instant::now()).is_err() {
                return;
            }
        }
    });
    rx
}

async fn wake(servers: &Servers, wakes: usize) -> Value {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let project = sim.add_project("wake", &["repo"]);
    let task = sim.add_task(project, "wake", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    let (dir_h, dir_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = Daemon::start(
        host_settings(&sim, dir_h.path(), servers)
            .validate()
            .unwrap(),
        None,
    )
    .await
    .unwrap();
    let fleet = FleetNode::start(
        node_settings(dir_f.path(), servers).validate().unwrap(),
        None,
    )
    .await
    .unwrap();
    let seen_on_nats = nats_arrivals(servers, "vko.wake.batch").await;
    let attempt = ids.attempt_id;
    until("the attempt on the fleet", || {
        fleet.store.read().attempt(attempt).ok().flatten().is_some()
    })
    .await;
    let (mut on_host, mut on_fleet, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    let (mut to_nats, mut from_nats) = (Vec::new(), Vec::new());
    let mut seen_on_nats = seen_on_nats;
    for i in 0..wakes + 5 {
        // Quiet first: both stores settled on the previous change.
        tokio::time::sleep(Duration::from_millis(60)).await;
        let (h, f) = (
            waiter(host.store.clone(), attempt),
            waiter(fleet.store.clone(), attempt),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        while seen_on_nats.try_recv().is_ok() {}
        let t0 = Instant::now();
        let entry = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
            "entry_type": {"type": "assistant_message"}, "content": format!("wake {i}")}});
        sim.append_log(pid, Channel::Normalized, entry);
        let (th, tf) = (h.await.unwrap(), f.await.unwrap());
        if i >= 5 {
            let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1e3;
            on_host.push(ms(th));
            on_fleet.push(ms(tf));
            extra.push(ms(tf) - ms(th));
            // Where the fleet's extra goes: host answer → the batch on NATS → fleet answer.
            if let Ok(Some(tn)) =
                tokio::time::timeout(Duration::from_secs(1), seen_on_nats.recv()).await
            {
                to_nats.push(ms(tn) - ms(th));
                from_nats.push(ms(tf) - ms(tn));
            }
        }
    }
    let report = json!({"host": summary(on_host), "fleet": summary(on_fleet),
                        "fleet_minus_host": summary(extra),
                        "host_answer_to_nats": summary(to_nats),
                        "nats_to_fleet_answer": summary(from_nats)});
    println!("wake (VK append -> waiter answers), {wakes} changes: {report}");
    fleet.shutdown().await;
    host.shutdown().await;
    sim.shutdown().await;
    report
}

// ------------------------------------------------------------------------- fan-in and catch-up

/// A host store with its outbox, writer and publisher.
struct BenchHost {
    name: String,
    store: Store,
    writer: WriterHandle,
    owner: StoreOwner,
    _dir: tempfile::TempDir,
}

fn bench_host(
    name: &str,
    servers: &Servers,
    cancel: &tokio_util::sync::CancellationToken,
) -> BenchHost {
    let host = quiet_host(name);
    host.publish(servers, cancel);
    host
}

/// A host store with its outbox and writer, its publisher not started yet (NATS unreachable:
/// what it writes waits in the outbox).
fn quiet_host(name: &str) -> BenchHost {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = StoreOwner::open(dir.path(), Retention::default()).unwrap();
    owner.enable_outbox(OutboxConfig {
        max_backlog: u64::MAX,
    });
    let (writer, _task) = owner.spawn_writer().unwrap();
    BenchHost {
        name: name.into(),
        store: owner.store(),
        writer,
        owner,
        _dir: dir,
    }
}

impl BenchHost {
    /// Start this host's publisher (its outbox to its stream on `servers`).
    fn publish(&self, servers: &Servers, cancel: &tokio_util::sync::CancellationToken) {
        let settings = FleetSettings {
            host: self.name.clone(),
            ..servers.fleet()
        };
        Publisher::new(settings, self.owner.store(), self.owner.fleet_cursor())
            .spawn(cancel.child_token());
    }
}

/// A fleet node's store and follower, from an empty dir.
fn bench_node(
    servers: &Servers,
    cancel: &tokio_util::sync::CancellationToken,
) -> (Store, StoreOwner, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = StoreOwner::open(dir.path(), Retention::default()).unwrap();
    let (writer, _task) = owner.spawn_writer().unwrap();
    let settings = FleetSettings {
        node: true,
        ..servers.fleet()
    };
    Node::new(settings, owner.store(), writer, Arc::new(Unheard)).spawn(cancel.child_token());
    (owner.store(), owner, dir)
}

/// A project, task, attempt and running process on a host, then `entries` log entries in
/// batches of `batch`.
async fn write_host(host: &BenchHost, entries: u64, batch: u64) {
    write_log(&host.writer, &host.name, entries, batch).await
}

/// [`write_host`] through any writer.
async fn write_log(writer: &WriterHandle, name: &str, entries: u64, batch: u64) {
    let (project, task, attempt, session, process) = (
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
    );
    let setup = vec![
        DomainEvent::ProjectsSnapshot {
            projects: vec![json!({"id": project, "name": name})],
        },
        DomainEvent::TasksSnapshot {
            project_id: project,
            tasks: vec![
                json!({"id": task, "project_id": project, "title": "bench", "status": "inprogress"}),
            ],
        },
        DomainEvent::AttemptsSnapshot {
            task_id: task,
            attempts: vec![json!({"id": attempt, "task_id": task})],
        },
        DomainEvent::SessionsSnapshot {
            attempt_id: attempt,
            sessions: vec![json!({"id": session, "workspace_id": attempt})],
        },
        DomainEvent::ProcessesSnapshot {
            attempt_id: attempt,
            processes: vec![
                json!({"id": process, "session_id": session, "run_reason": "codingagent", "status": "running"}),
            ],
        },
    ];
    writer.write(setup).await.unwrap();
    let mut next = 0;
    while next < entries {
        let end = (next + batch).min(entries);
        let put = (next..end)
            .map(|i| {
                (
                    i,
                    RawValue::from_string(vk_observer_sim::scale::scale_entry(i)).unwrap(),
                )
            })
            .collect();
        writer
            .write(vec![DomainEvent::LogEntriesPut {
                attempt_id: attempt,
                process_id: process,
                channel: vk_observer_store::events::Channel::Normalized,
                entries: put,
            }])
            .await
            .unwrap();
        next = end;
    }
}

/// Every host writes `per_host` entries at once.
async fn write_hosts(hosts: &[BenchHost], per_host: u64, batch: u64) {
    futures::future::join_all(hosts.iter().map(|h| write_host(h, per_host, batch))).await;
}

/// The hosts' own share of fan-in: a quarter of the entries written through one store's
/// writer with the outbox off, then on (no publisher, nothing else running): what the outbox
/// copy of each batch costs the host.
async fn host_writes(opts: &Opts) -> Value {
    let entries = opts.entries / 4;
    let mut seconds = Vec::new();
    for outbox in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut owner = StoreOwner::open(dir.path(), Retention::default()).unwrap();
        if outbox {
            owner.enable_outbox(OutboxConfig {
                max_backlog: u64::MAX,
            });
        }
        let (writer, _task) = owner.spawn_writer().unwrap();
        let start = Instant::now();
        write_log(&writer, "w", entries, opts.batch).await;
        seconds.push(start.elapsed().as_secs_f64());
    }
    let report = json!({"entries": entries, "batch": opts.batch,
        "outbox_off_s": seconds[0], "outbox_on_s": seconds[1],
        "outbox_off_entries_per_s": entries as f64 / seconds[0],
        "outbox_on_entries_per_s": entries as f64 / seconds[1]});
    println!("host writes (one store, outbox off vs on): {report}");
    report
}

/// Fan-in without the hosts' own writes: four hosts write their share while NATS is out of
/// their reach (the entries wait in their outboxes), then their publishers start with a fleet
/// node following: entries per second into the fleet from the publishers' start until the
/// node has all. On a real fleet each host writes on its own machine; here the host writers
/// are kept off the clock, while the publishers, nats-server and the node share the 2 cores.
async fn backlog_fan_in(servers: &Servers, opts: &Opts) -> Value {
    let cancel = tokio_util::sync::CancellationToken::new();
    let hosts: Vec<BenchHost> = (0..4).map(|i| quiet_host(&format!("back{i}"))).collect();
    let per_host = opts.entries / 4;
    let start = Instant::now();
    write_hosts(&hosts, per_host, opts.batch).await;
    let written = start.elapsed().as_secs_f64();
    let (node, _node_owner, _node_dir) = bench_node(servers, &cancel);
    let start = Instant::now();
    for h in &hosts {
        h.publish(servers, &cancel);
    }
    until("the fleet has every host's backlog", || {
        has_all(&node, &hosts)
    })
    .await;
    let secs = start.elapsed().as_secs_f64();
    let total = per_host * 4;
    let fan = json!({"hosts": 4, "entries": total, "batch": opts.batch, "seconds": secs,
        "entries_per_s": total as f64 / secs, "hosts_written_before_s": written});
    println!("fan-in of the hosts' backlogs: {fan}");
    cancel.cancel();
    fan
}

/// Whether the node applied every host's last token.
fn has_all(node: &Store, hosts: &[BenchHost]) -> bool {
    let positions = node.read().fleet_positions().unwrap_or_default();
    hosts.iter().all(|h| {
        let want = h.store.current_token();
        positions
            .iter()
            .any(|(n, p)| *n == h.name && p.token >= want)
    })
}

async fn fan_in_and_catch_up(servers: &Servers, opts: &Opts) -> (Value, Value, Value) {
    let cancel = tokio_util::sync::CancellationToken::new();
    let hosts: Vec<BenchHost> = (0..4)
        .map(|i| bench_host(&format!("fan{i}"), servers, &cancel))
        .collect();
    let (node, _node_owner, _node_dir) = bench_node(servers, &cancel);
    let per_host = opts.entries / 4;
    let start = Instant::now();
    write_hosts(&hosts, per_host, opts.batch).await;
    let written = start.elapsed().as_secs_f64();
    until("the fleet has every host's entries", || {
        has_all(&node, &hosts)
    })
    .await;
    let secs = start.elapsed().as_secs_f64();
    let total = per_host * 4;
    let fan = json!({"hosts": 4, "entries": total, "batch": opts.batch, "seconds": secs,
        "entries_per_s": total as f64 / secs, "hosts_written_s": written});
    println!("fan-in: {fan}");

    let (fresh, _fresh_owner, _fresh_dir) = bench_node(servers, &cancel);
    let start = Instant::now();
    until("the new fleet node caught up", || has_all(&fresh, &hosts)).await;
    let secs = start.elapsed().as_secs_f64();
    let catch = json!({"entries": total, "seconds": secs, "entries_per_s": total as f64 / secs,
        "extrapolated_1m_s": secs * 1e6 / total as f64, "measured_at_1m": total >= 1_000_000});
    println!("catch-up from empty: {catch}");

    let js = async_nats::jetstream::new(servers.client().await);
    let mut stored = 0;
    let mut messages = 0;
    for h in &hosts {
        let mut s = js.get_stream(format!("VKO_{}", h.name)).await.unwrap();
        let state = s.info().await.unwrap().state.clone();
        stored += state.bytes;
        messages += state.messages;
    }
    let entry_json = vk_observer_sim::scale::scale_entry(500_000).len();
    let wire = json!({"stream_bytes": stored, "messages": messages,
        "bytes_per_entry": stored as f64 / total as f64, "entry_json_bytes": entry_json,
        "bytes_per_message": stored as f64 / messages as f64});
    println!("wire: {wire}");
    cancel.cancel();
    (fan, catch, wire)
}
