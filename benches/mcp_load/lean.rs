//! Phase c7 `lean_waiters` (issue 27): N parked waits, with progress (session mode through
//! rmcp's client, every wait streaming keep-alives) and without (stateless JSON, plain POSTs),
//! each over HTTP/1.1 (one connection per parked wait) and over HTTP/2 (h2c, the waits spread
//! over `H2_CONNECTIONS` connections), measured for each daemon binary in the same run:
//! `VK_BENCH_BASELINE_BIN` (e.g. main's build) first, then this crate's (or
//! `VK_BENCH_DAEMON_BIN`); a binary that does not answer HTTP/2 is reported so and skipped for it.
//! For each: daemon RSS with all N parked and its growth per wait, the wake latency of one more
//! wait (append → its answer, as c1, over the same protocol) while the N stay parked, and the
//! time until all N are answered once woken.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::client::{Mcp, call_body};
use crate::daemon::{DaemonProc, daemon_bin};
use crate::data::{note, out_dir};
use crate::lean_report::{LeanRun, record};
use crate::opts::Opts;
use crate::report::{Report, stats};
use crate::resources::{Client, Ears, connect, connect_with};
use crate::scenario::{ScenarioA, wait_cache_holds};
use crate::session_waits::{args, collect, park_waits_on, running_token};
use crate::wake::{timed_wake, token_seq};

/// (label, binary): the baseline first when `VK_BENCH_BASELINE_BIN` names one.
fn binaries() -> Vec<(String, String)> {
    let mut v = Vec::new();
    if let Ok(b) = std::env::var("VK_BENCH_BASELINE_BIN") {
        v.push(("baseline".to_string(), b));
    }
    v.push(("this".to_string(), daemon_bin()));
    v
}

/// The protocol the N waits (and the probe) are sent over.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Wire {
    /// One connection per request in flight (hyper's buffers per parked wait).
    Http1,
    /// h2c with prior knowledge, the waits multiplexed on `H2_CONNECTIONS` connections.
    Http2,
}

impl Wire {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Wire::Http1 => "HTTP/1.1",
            Wire::Http2 => "HTTP/2",
        }
    }
}

/// HTTP/2 connections the N waits are spread over ("a few": one per client).
const H2_CONNECTIONS: usize = 4;

/// `H2_CONNECTIONS` HTTP/2-only clients (reqwest keeps one connection per client and host).
fn h2_clients() -> anyhow::Result<Vec<reqwest::Client>> {
    (0..H2_CONNECTIONS)
        .map(|_| {
            reqwest::Client::builder()
                .http2_prior_knowledge()
                .timeout(Duration::from_secs(120))
                .build()
                .context("HTTP/2 client")
        })
        .collect()
}

/// Whether the daemon answers HTTP/2 with prior knowledge (`main` before issue 27 does not).
async fn speaks_h2(d: &DaemonProc) -> bool {
    let Ok(http) = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(5))
        .build()
    else {
        return false;
    };
    let url = format!("http://{}/healthz", d.addr);
    matches!(http.get(url).send().await, Ok(r) if r.status().is_success())
}

pub(crate) async fn phase_lean(r: &mut Report, o: &Opts, a: &ScenarioA) -> anyhow::Result<()> {
    let n = o.waiters;
    println!(
        "\n== c7. lean waiters: {n} parked (with progress, session mode; without, stateless) over HTTP/1.1 and HTTP/2, wake of one more wait while they stay parked, per binary"
    );
    let (mut runs, mut h1_only) = (Vec::new(), Vec::new());
    for progress in [true, false] {
        for wire in [Wire::Http1, Wire::Http2] {
            for (label, bin) in binaries() {
                println!("  -- {label} ({bin}), progress {progress}, {}", wire.name());
                let run = if progress {
                    session_run(o, a, &label, &bin, wire).await?
                } else {
                    stateless_run(o, a, &label, &bin, wire).await?
                };
                match run {
                    Some(run) => {
                        run.print();
                        runs.push(run);
                    }
                    None => {
                        println!("     {label}: HTTP/1.1 only (no answer over HTTP/2)");
                        if !h1_only.contains(&label) {
                            h1_only.push(label);
                        }
                    }
                }
            }
        }
    }
    record(r, &runs, &h1_only);
    Ok(())
}

/// `VK_BENCH_PARKED_PAUSE=N`: N seconds with every wait parked, to inspect the daemon (its
/// allocator's statistics, say) before the probe rounds.
async fn pause_parked(d: &DaemonProc) {
    if let Some(secs) = std::env::var("VK_BENCH_PARKED_PAUSE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        println!(
            "     pausing {secs} s with all parked: daemon pid {}",
            d.pid()
        );
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
}

/// The attempt the probe waits on, and the others (where the N waits park).
fn split(a: &ScenarioA) -> ((Uuid, Uuid), &[(Uuid, Uuid)]) {
    let (probe, others) = a.running.split_first().expect("running attempts");
    (*probe, others)
}

fn append_each(a: &ScenarioA, attempts: &[(Uuid, Uuid)], base: u64) {
    for (k, (_, pid)) in attempts.iter().enumerate() {
        a.sim.append_log(
            *pid,
            vk_observer_sim::Channel::Normalized,
            note(base + k as u64),
        );
    }
}

/// The next `since_token` after an answer: its token, or the newest attempt token it reports
/// when that is newer (see c1).
fn next_token(v: &Value) -> String {
    let answer = v["token"].as_str().unwrap_or_default().to_string();
    let newest = v["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["attempt_token"].as_str())
        .max_by_key(|t| token_seq(t));
    match newest {
        Some(t) if token_seq(t) > token_seq(&answer) => t.to_string(),
        _ => answer,
    }
}

/// A session client over `wire` (the `i`-th: HTTP/2 ones take turns on the connections).
async fn session_client(
    d: &DaemonProc,
    ears: Ears,
    in_flight: usize,
    h2: Option<&[reqwest::Client]>,
    i: usize,
) -> anyhow::Result<Client> {
    match h2 {
        Some(h2) => connect_with(d, ears, in_flight, h2[i % h2.len()].clone()).await,
        None => connect(d, ears, in_flight).await,
    }
}

/// A daemon of `bin` that is ready, or `None` when `wire` is HTTP/2 and it does not speak it.
async fn ready_daemon(
    a: &ScenarioA,
    bin: &str,
    dir: &std::path::Path,
    stateless: bool,
    log: &str,
    wire: Wire,
) -> anyhow::Result<Option<DaemonProc>> {
    let log = out_dir().join(log);
    let mut d = DaemonProc::spawn_bin(bin, &a.sim.base_url(), dir, stateless, None, &log)?;
    d.wait_ready(Duration::from_secs(60)).await?;
    if wire == Wire::Http2 && !speaks_h2(&d).await {
        d.stop().await?;
        return Ok(None);
    }
    Ok(Some(d))
}

async fn session_run(
    o: &Opts,
    a: &ScenarioA,
    label: &str,
    bin: &str,
    wire: Wire,
) -> anyhow::Result<Option<LeanRun>> {
    let n = o.waiters;
    let sessions = 100.min(n);
    let dir = tempfile::tempdir()?;
    let log = format!("daemon-c7-{label}-progress-{wire:?}.log");
    let Some(d) = ready_daemon(a, bin, dir.path(), false, &log, wire).await? else {
        return Ok(None);
    };
    let h2 = match wire {
        Wire::Http2 => Some(h2_clients()?),
        Wire::Http1 => None,
    };
    let progress = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let ears = Ears {
            updates: None,
            progress: progress.clone(),
        };
        let in_flight = n.div_ceil(sessions);
        clients.push(session_client(&d, ears, in_flight, h2.as_deref(), i).await?);
    }
    let probe_ears = Ears {
        updates: None,
        progress: Arc::default(),
    };
    let probe = session_client(&d, probe_ears, 4, h2.as_deref(), 0).await?;
    let token = running_token(&clients[0], a).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut run = LeanRun::new(label, bin, wire, true, n, d.rss_kb());
    let (probe_attempt, others) = split(a);
    let answered = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let handles = park_waits_on(&clients, others, &token, n, 60_000, &answered).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    run.rss_parked_kb = d.rss_kb();
    run.parked_at_once = d.waiters_gauge().await.unwrap_or(0) as usize;
    // The default `[mcp] progress_every` is 10 s: until every wait sent one.
    while progress.load(Ordering::Relaxed) < n && started.elapsed() < Duration::from_secs(25) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    run.rss_held_kb = d.rss_kb();
    run.progress_notifications = progress.load(Ordering::Relaxed);
    pause_parked(&d).await;
    let (lat, missed) = probe_session(&probe, a, probe_attempt, token, o.iters(200)).await?;
    run.probe = stats(&lat);
    run.probe_missed = missed;
    run.early = answered.load(Ordering::Relaxed);
    let t0 = Instant::now();
    append_each(a, others, 6_000_000);
    let (lat, errors, unchanged) = collect(handles, t0).await?;
    run.finish(stats(&lat), errors, unchanged);
    for c in clients {
        let _ = c.cancel().await;
    }
    let _ = probe.cancel().await;
    d.stop().await?;
    Ok(Some(run))
}

/// c1's rounds through rmcp's client (with its progress token): a wait on the probe attempt,
/// 25 ms to park, an append, the time until the answer. Returns the latencies (the first 10
/// rounds not counted) and the rounds answered without the change.
async fn probe_session(
    c: &Client,
    a: &ScenarioA,
    (attempt, pid): (Uuid, Uuid),
    mut token: String,
    rounds: usize,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let (mut lat, mut missed) = (Vec::with_capacity(rounds), 0);
    for i in 0..rounds + 10 {
        let params = CallToolRequestParams::new("wait_for_attempt_change").with_arguments(args(
            json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": 10_000}),
        ));
        let peer = c.peer().clone();
        let h = tokio::spawn(async move {
            let res = peer.call_tool(params).await;
            (Instant::now(), res)
        });
        tokio::time::sleep(Duration::from_millis(25)).await;
        let t0 = Instant::now();
        a.sim.append_log(
            pid,
            vk_observer_sim::Channel::Normalized,
            note(5_000_000 + i as u64),
        );
        let (t1, res) = h.await?;
        let v = res
            .context("probe wait")?
            .structured_content
            .unwrap_or_default();
        token = next_token(&v);
        if v["changed"] != json!(true) || t1 < t0 {
            missed += 1;
        } else if i >= 10 {
            lat.push(t1 - t0);
        }
    }
    Ok((lat, missed))
}

async fn stateless_run(
    o: &Opts,
    a: &ScenarioA,
    label: &str,
    bin: &str,
    wire: Wire,
) -> anyhow::Result<Option<LeanRun>> {
    let n = o.waiters;
    let dir = tempfile::tempdir()?;
    let log = format!("daemon-c7-{label}-plain-{wire:?}.log");
    let Some(d) = ready_daemon(a, bin, dir.path(), true, &log, wire).await? else {
        return Ok(None);
    };
    let url = format!("http://{}/mcp", d.addr);
    // The probe over the same protocol: c1's bare HTTP/1.1 client, or an HTTP/2 one.
    let (mcp, h2) = match wire {
        Wire::Http1 => (d.mcp(), None),
        Wire::Http2 => {
            let h2 = h2_clients()?;
            (Mcp::with_client(&url, h2[0].clone()), Some(h2))
        }
    };
    wait_cache_holds(&mcp, a, Duration::from_secs(60)).await?;
    let (probe_attempt, others) = split(a);
    let v = mcp
        .call(
            "get_attempt_status",
            &json!({"attempt_id": probe_attempt.0}),
        )
        .await?;
    let token = v["token"].as_str().unwrap_or_default().to_string();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut run = LeanRun::new(label, bin, wire, false, n, d.rss_kb());
    let answered = Arc::new(AtomicUsize::new(0));
    let handles = park_plain(&url, h2.as_deref(), others, &token, n, &answered)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    run.rss_parked_kb = d.rss_kb();
    run.rss_held_kb = run.rss_parked_kb;
    run.parked_at_once = d.waiters_gauge().await.unwrap_or(0) as usize;
    pause_parked(&d).await;
    let (mut lat, mut token) = (Vec::new(), token);
    for i in 0..o.iters(200) + 10 {
        let (t0, t1, v) = timed_wake(&mcp, probe_attempt.0, &token, || {
            a.sim.append_log(
                probe_attempt.1,
                vk_observer_sim::Channel::Normalized,
                note(7_000_000 + i as u64),
            );
        })
        .await?;
        token = next_token(&v);
        if t1 < t0 {
            run.probe_missed += 1;
        } else if i >= 10 {
            lat.push(t1 - t0);
        }
    }
    run.probe = stats(&lat);
    run.early = answered.load(Ordering::Relaxed);
    let t0 = Instant::now();
    append_each(a, others, 8_000_000);
    let (lat, errors, unchanged) = collect_plain(handles, t0).await?;
    run.finish(stats(&lat), errors, unchanged);
    d.stop().await?;
    Ok(Some(run))
}

type PlainWaits = Vec<tokio::task::JoinHandle<(Instant, anyhow::Result<bytes::Bytes>)>>;

/// `n` stateless waits as plain POSTs, 500 at a time: over HTTP/1.1 one connection each (as
/// c2), over HTTP/2 (`h2` given) taking turns on its clients' connections.
fn park_plain(
    url: &str,
    h2: Option<&[reqwest::Client]>,
    others: &[(Uuid, Uuid)],
    token: &str,
    n: usize,
    answered: &Arc<AtomicUsize>,
) -> anyhow::Result<PlainWaits> {
    let http1 = reqwest::Client::builder()
        .http1_only()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let body = call_body(
            "wait_for_attempt_change",
            &json!({"attempt_ids": [others[i % others.len()].0], "since_token": token, "timeout_ms": 50_000}),
        );
        let http = match h2 {
            Some(h2) => h2[i % h2.len()].clone(),
            None => http1.clone(),
        };
        let m = Mcp::with_client(url, http);
        let answered = answered.clone();
        let delay = Duration::from_millis(50 * (i / 500) as u64);
        handles.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let res = m.raw(body).await;
            answered.fetch_add(1, Ordering::Relaxed);
            (Instant::now(), res)
        }));
    }
    Ok(handles)
}

async fn collect_plain(
    handles: PlainWaits,
    t0: Instant,
) -> anyhow::Result<(Vec<Duration>, usize, usize)> {
    let (mut lat, mut errors, mut unchanged) = (Vec::with_capacity(handles.len()), 0, 0);
    for h in handles {
        let (t, res) = h.await?;
        match res.and_then(|b| Mcp::parse(&b)) {
            Ok(v) if v["changed"] == json!(true) => lat.push(t.saturating_duration_since(t0)),
            Ok(_) => unchanged += 1,
            Err(e) => {
                if errors < 3 {
                    eprintln!("  waiter error: {e:#}");
                }
                errors += 1;
            }
        }
    }
    anyhow::ensure!(!lat.is_empty(), "no waiter woke ({errors} errors)");
    Ok((lat, errors, unchanged))
}
