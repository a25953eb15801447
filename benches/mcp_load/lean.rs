//! Phase c7 `lean_waiters` (issue 27): N parked waits, with progress (session mode through
//! rmcp's client, every wait streaming keep-alives) and without (stateless JSON, plain POSTs),
//! measured for each daemon binary in the same run: `VK_BENCH_BASELINE_BIN` (e.g. main's
//! build) first, then this crate's (or `VK_BENCH_DAEMON_BIN`). For each: daemon RSS with all N
//! parked and its growth per wait, the wake latency of one more wait (append → its answer, as
//! c1) while the N stay parked, and the time until all N are answered once woken.

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
use crate::resources::{Client, Ears, connect};
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

pub(crate) async fn phase_lean(r: &mut Report, o: &Opts, a: &ScenarioA) -> anyhow::Result<()> {
    let n = o.waiters;
    println!(
        "\n== c7. lean waiters: {n} parked (with progress, session mode; without, stateless), wake of one more wait while they stay parked, per binary"
    );
    let mut runs = Vec::new();
    for progress in [true, false] {
        for (label, bin) in binaries() {
            println!("  -- {label} ({bin}), progress {progress}");
            let run = if progress {
                session_run(o, a, &label, &bin).await?
            } else {
                stateless_run(o, a, &label, &bin).await?
            };
            run.print();
            runs.push(run);
        }
    }
    record(r, &runs);
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
            vk_observer::sim::Channel::Normalized,
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

async fn session_run(o: &Opts, a: &ScenarioA, label: &str, bin: &str) -> anyhow::Result<LeanRun> {
    let n = o.waiters;
    let sessions = 100.min(n);
    let dir = tempfile::tempdir()?;
    let log = out_dir().join(format!("daemon-c7-{label}-progress.log"));
    let mut d = DaemonProc::spawn_bin(bin, &a.sim.base_url(), dir.path(), false, None, &log)?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let progress = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let ears = Ears {
            updates: None,
            progress: progress.clone(),
        };
        clients.push(connect(&d, ears, n.div_ceil(sessions)).await?);
    }
    let probe_ears = Ears {
        updates: None,
        progress: Arc::default(),
    };
    let probe = connect(&d, probe_ears, 4).await?;
    let token = running_token(&clients[0], a).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut run = LeanRun::new(label, bin, true, n, d.rss_kb());
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
    Ok(run)
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
            vk_observer::sim::Channel::Normalized,
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

async fn stateless_run(o: &Opts, a: &ScenarioA, label: &str, bin: &str) -> anyhow::Result<LeanRun> {
    let n = o.waiters;
    let dir = tempfile::tempdir()?;
    let log = out_dir().join(format!("daemon-c7-{label}-plain.log"));
    let mut d = DaemonProc::spawn_bin(bin, &a.sim.base_url(), dir.path(), true, None, &log)?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let mcp = d.mcp();
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
    let mut run = LeanRun::new(label, bin, false, n, d.rss_kb());
    let answered = Arc::new(AtomicUsize::new(0));
    let handles = park_plain(&d, others, &token, n, &answered)?;
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
                vk_observer::sim::Channel::Normalized,
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
    Ok(run)
}

type PlainWaits = Vec<tokio::task::JoinHandle<(Instant, anyhow::Result<bytes::Bytes>)>>;

/// `n` stateless waits as plain POSTs (one connection each, as c2), 500 at a time.
fn park_plain(
    d: &DaemonProc,
    others: &[(Uuid, Uuid)],
    token: &str,
    n: usize,
    answered: &Arc<AtomicUsize>,
) -> anyhow::Result<PlainWaits> {
    let url = format!("http://{}/mcp", d.addr);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let body = call_body(
            "wait_for_attempt_change",
            &json!({"attempt_ids": [others[i % others.len()].0], "since_token": token, "timeout_ms": 50_000}),
        );
        let m = Mcp::with_client(&url, http.clone());
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
