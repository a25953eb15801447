//! The two dialects side by side, in one run (issue 38): the same simulated board served once in
//! the fork's dialect and once in VK 0.1.x's, an in-process daemon following each, and the same
//! figures taken on both:
//!
//! - **ingest**: a daemon started on a board of finished attempts, until every log entry of
//!   every attempt is in its cache (the fork: REST, object streams and log history pages; VK
//!   0.1.x: the workspaces stream, REST details, one session stream per session and one v1 log
//!   socket per log, each a replay renumbered into the daemon's numbering);
//! - **status** and **tail**: `get_attempt_status` and `tail_attempt_logs` over MCP (rmcp,
//!   Streamable HTTP), answered from the cache;
//! - **wake**: a `wait_for_attempt_change` parked on a running attempt, woken by one log entry
//!   the simulator appends (VK's socket → the daemon's store → the waiter).
//!
//! Run: `cargo bench --bench dialects`. Knobs: `VK_BENCH_ATTEMPTS` (default 60),
//! `VK_BENCH_ENTRIES` (normalized entries per attempt, default 200), `VK_BENCH_ITERS` (reads
//! per figure, default 300), `VK_BENCH_WAKES` (default 40). Prints a table with the ratio
//! 0.1.x / fork per figure.

use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use uuid::Uuid;
use vk_observer_config::Settings;
use vk_observer_daemon::Daemon;
use vk_observer_sim::{AttemptScript, Channel, RunReason, Sim, SimConfig, SimDialect};

type Client = RunningService<rmcp::RoleClient, ()>;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// p50 and p99 of `samples`, in microseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |p: f64| {
        let i = ((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i].as_secs_f64() * 1e6
    };
    (at(0.50), at(0.99))
}

async fn call(c: &Client, name: &str, args: Value) -> Value {
    let Value::Object(args) = args else {
        unreachable!()
    };
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(args);
    let r = c.peer().call_tool(params).await.expect("tool answers");
    r.structured_content.unwrap_or(Value::Null)
}

/// What one dialect measured.
struct Figures {
    ingest: Duration,
    entries: usize,
    status: (f64, f64),
    tail: (f64, f64),
    wake: (f64, f64),
}

/// A board of `attempts` finished attempts with `entries` normalized entries each, and one
/// running attempt (for the wakes).
async fn board(
    dialect: SimDialect,
    attempts: usize,
    entries: usize,
) -> (Sim, Vec<Uuid>, Uuid, Uuid) {
    let sim = Sim::start(SimConfig {
        dialect,
        step_delay: Duration::ZERO,
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts");
    let project = sim.add_project("Bench", &["alpha"]);
    let mut ids = Vec::new();
    for i in 0..attempts {
        let task = sim.add_task(project, &format!("bench {i}"), None);
        let script = AttemptScript {
            normalized_entries: entries,
            raw_entries: entries / 4,
            ..AttemptScript::default()
        };
        ids.push(sim.run_attempt_script(task, script).await.attempt_id);
    }
    let task = sim.add_task(project, "running", None);
    let running = sim.create_attempt(task, "CLAUDE_CODE");
    let pid = sim.start_process(running.session_id, RunReason::CodingAgent);
    (sim, ids, running.attempt_id, pid)
}

/// Entries the daemon must hold: every log of every non-dev-server process.
fn expected_entries(sim: &Sim) -> usize {
    let t = sim.truth();
    let is_dev =
        |p: &Uuid| t.processes.get(p).and_then(|v| v["run_reason"].as_str()) == Some("devserver");
    let count = |logs: &std::collections::BTreeMap<Uuid, Vec<Value>>| {
        logs.iter()
            .filter(|(p, _)| !is_dev(p))
            .map(|(_, l)| l.len())
            .sum::<usize>()
    };
    count(&t.normalized_logs) + count(&t.raw_logs)
}

fn cached_entries(daemon: &Daemon) -> usize {
    let r = daemon.store.read();
    let processes = r.processes().unwrap_or_default();
    processes
        .iter()
        .map(|p| {
            r.log_count(p.id, vk_observer_store::keys::Channel::Normalized)
                + r.log_count(p.id, vk_observer_store::keys::Channel::Raw)
        })
        .sum()
}

async fn measure(dialect: SimDialect) -> Figures {
    let (attempts, entries) = (env("VK_BENCH_ATTEMPTS", 60), env("VK_BENCH_ENTRIES", 200));
    let (iters, wakes) = (env("VK_BENCH_ITERS", 300), env("VK_BENCH_WAKES", 40));
    let (sim, ids, running, pid) = board(dialect, attempts, entries).await;
    let want = expected_entries(&sim);
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        upstream: sim.base_url(),
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        ..Settings::default()
    };
    let started = Instant::now();
    let daemon = Daemon::start(settings.validate().unwrap(), None)
        .await
        .unwrap();
    while cached_entries(&daemon) < want {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{dialect:?}: no catch-up"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ingest = started.elapsed();
    let cfg = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", daemon.addr));
    let client = ().serve(StreamableHttpClientTransport::from_config(cfg)).await.unwrap();
    let mut status = Vec::new();
    let mut tail = Vec::new();
    for i in 0..iters {
        let a = ids[i % ids.len()];
        let t = Instant::now();
        call(&client, "get_attempt_status", json!({"attempt_id": a})).await;
        status.push(t.elapsed());
        let t = Instant::now();
        let page = call(
            &client,
            "tail_attempt_logs",
            json!({"attempt_id": a, "limit": 50}),
        )
        .await;
        tail.push(t.elapsed());
        assert!(
            page["entries"].as_array().is_some_and(|e| !e.is_empty()),
            "{page}"
        );
    }
    let woken = wake_times(&client, &sim, running, pid, wakes).await;
    let _ = client.cancel().await;
    daemon.shutdown().await;
    sim.shutdown().await;
    Figures {
        ingest,
        entries: want,
        status: percentiles(status),
        tail: percentiles(tail),
        wake: percentiles(woken),
    }
}

/// `n` waits parked on `running`, each woken by one entry the simulator appends to `pid`'s
/// log: the time from the append to the answer.
async fn wake_times(
    client: &Client,
    sim: &Sim,
    running: Uuid,
    pid: Uuid,
    n: usize,
) -> Vec<Duration> {
    let mut woken = Vec::new();
    for k in 0..n {
        let s = call(
            &client,
            "get_attempt_status",
            json!({"attempt_id": running}),
        )
        .await;
        let token = s["token"].clone();
        let waiter = {
            let c = client;
            async move {
                call(
                    c,
                    "wait_for_attempt_change",
                    json!({"attempt_ids": [running], "since_token": token, "timeout_ms": 10_000}),
                )
                .await
            }
        };
        let (answer, sent) = tokio::join!(waiter, async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let entry = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
                "entry_type": {"type": "assistant_message"}, "content": format!("wake {k}"), "metadata": null}});
            sim.append_log(pid, Channel::Normalized, entry);
            Instant::now()
        });
        assert_eq!(answer["changed"], true, "{answer}");
        woken.push(sent.elapsed());
    }
    woken
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (fork, v01) = rt.block_on(async {
        (
            measure(SimDialect::Fork).await,
            measure(SimDialect::Workspaces).await,
        )
    });
    let per_s = |f: &Figures| f.entries as f64 / f.ingest.as_secs_f64();
    println!("| figure | fork | VK 0.1.x | 0.1.x / fork |");
    println!("|---|---|---|---|");
    println!(
        "| ingest: {} entries to the cache | {:.2} s ({:.0} entries/s) | {:.2} s ({:.0} entries/s) | {:.2} |",
        fork.entries,
        fork.ingest.as_secs_f64(),
        per_s(&fork),
        v01.ingest.as_secs_f64(),
        per_s(&v01),
        v01.ingest.as_secs_f64() / fork.ingest.as_secs_f64()
    );
    for (name, a, b) in [
        ("get_attempt_status", fork.status, v01.status),
        ("tail_attempt_logs (50)", fork.tail, v01.tail),
        ("wake: entry appended → wait answered", fork.wake, v01.wake),
    ] {
        println!(
            "| {name} p50 / p99 | {:.0} / {:.0} µs | {:.0} / {:.0} µs | {:.2} / {:.2} |",
            a.0,
            a.1,
            b.0,
            b.1,
            b.0 / a.0,
            b.1 / a.1
        );
    }
}
