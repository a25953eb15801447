//! Phases c2/c3: many concurrent waiters held by the daemon (stateless and session mode).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde_json::json;

use crate::client::{Mcp, call_body};
use crate::daemon::DaemonProc;
use crate::data::{note, out_dir};
use crate::opts::Opts;
use crate::report::{Report, ms, stats};
use crate::scenario::ScenarioA;
use crate::session_waits::{collect, park_waits, running_token};

pub(crate) async fn phase_waiters(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
    d: &DaemonProc,
) -> anyhow::Result<()> {
    let n = o.waiters;
    println!(
        "\n== c2. {n} concurrent waiters held by the daemon, then woken by one append per running attempt"
    );
    let rss_before = d.rss_kb();
    let url = format!("http://{}/mcp", d.addr);
    let v = d
        .mcp()
        .call("get_attempt_status", &json!({"attempt_id": a.running[0].0}))
        .await?;
    let token = v["token"].as_str().unwrap().to_string();
    // One connection per parked request (HTTP/1.1: a request in flight holds its connection).
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(120))
        .build()?;
    let answered = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let attempt = a.running[i % a.running.len()].0;
        let body = call_body(
            "wait_for_attempt_change",
            &json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": 50_000}),
        );
        let m = Mcp::with_client(&url, http.clone());
        let answered = answered.clone();
        handles.push(tokio::spawn(async move {
            let res = m.raw(body).await;
            let t = Instant::now();
            answered.fetch_add(1, Ordering::Relaxed);
            (t, res)
        }));
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Let every request arrive and park.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let early = answered.load(Ordering::Relaxed);
    let rss_held = d.rss_kb();
    // Held means parked in the daemon at the same time, not merely sent (a client may queue).
    let parked = d.waiters_gauge().await.unwrap_or(0);
    println!("  parked in the daemon at once (vk_observer_waiters): {parked} of {n}");
    let ramp = started.elapsed();
    println!(
        "  held after {:.1} s: daemon VmRSS {:.1} MB (before {:.1} MB), answered early: {early}",
        ramp.as_secs_f64(),
        rss_held as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
    let t0 = Instant::now();
    for (k, (_, pid)) in a.running.iter().enumerate() {
        a.sim.append_log(
            *pid,
            vk_observer_sim::Channel::Normalized,
            note(1_000_000 + k as u64),
        );
    }
    let mut lat = Vec::with_capacity(n);
    let mut errors = 0usize;
    let mut unchanged = 0usize;
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
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = d.rss_kb();
    ensure!(!lat.is_empty(), "no waiter woke ({errors} errors)");
    let s = stats(&lat);
    println!(
        "  woken {}: p50 {} p99 {} max {}; errors {errors}, unchanged {unchanged}; VmRSS after release {:.1} MB",
        s.n,
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.max_us),
        rss_after as f64 / 1024.0
    );
    let held_ok = early == 0 && errors == 0 && unchanged == 0 && s.n == n && parked as usize == n;
    r.row(
        &format!("{n} concurrent waiters: daemon VmRSS while held"),
        format!(
            "{:.1} MB (idle before: {:.1} MB; all {} held: {})",
            rss_held as f64 / 1024.0,
            rss_before as f64 / 1024.0,
            n,
            if held_ok { "yes" } else { "NO" }
        ),
        "≤ 256 MB",
        Some(rss_held <= 256 * 1024 && held_ok),
    );
    r.row(
        &format!("{n} waiters woken by 30 appends: time to the last answer, p50 (p99)"),
        format!("{} ({}), max {}", ms(s.p50_us), ms(s.p99_us), ms(s.max_us)),
        "—",
        None,
    );
    r.detail(
        "waiters",
        json!({"n": n, "rss_before_kb": rss_before, "rss_held_kb": rss_held,
               "rss_after_kb": rss_after, "early": early, "errors": errors, "parked_at_once": parked,
               "unchanged": unchanged, "wake_stats": s}),
    );
    Ok(())
}

/// The same waiters against a daemon in its default session mode (Streamable HTTP with
/// `Mcp-Session-Id`, answers as SSE), through rmcp's own client: `sessions` clients, each with
/// n / sessions waits in flight (one HTTP request, hence one connection, per wait).
pub(crate) async fn phase_waiters_session(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let n = o.waiters;
    let sessions = 100.min(n);
    println!(
        "\n== c3. {n} concurrent waiters in session mode (rmcp client, {sessions} sessions), then woken"
    );
    let dir = tempfile::tempdir()?;
    let mut d = DaemonProc::spawn(
        &a.sim.base_url(),
        dir.path(),
        false,
        None,
        &out_dir().join("daemon-c3.log"),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let url = format!("http://{}/mcp", d.addr);
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        // rmcp's client keeps at most 16 POSTs in flight per session by default: raise it so
        // every wait is in flight (and parked in the daemon) at once.
        let cfg = StreamableHttpClientTransportConfig::with_uri(url.clone())
            .max_concurrent_requests(n.div_ceil(sessions));
        clients.push(
            ().serve(StreamableHttpClientTransport::from_config(cfg))
                .await
                .context("rmcp client connects")?,
        );
    }
    // The cache holds the running attempts before we wait on them.
    let token = running_token(&clients[0], a).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = d.rss_kb();
    let answered = Arc::new(AtomicUsize::new(0));
    let handles = park_waits(&clients, a, &token, n, 50_000, &answered).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let early = answered.load(Ordering::Relaxed);
    let rss_held = d.rss_kb();
    // Held means parked in the daemon at the same time, not merely sent (a client may queue).
    let parked = d.waiters_gauge().await.unwrap_or(0);
    println!("  parked in the daemon at once (vk_observer_waiters): {parked} of {n}");
    println!(
        "  held: daemon VmRSS {:.1} MB (with {sessions} sessions open, before the waits: {:.1} MB), answered early: {early}",
        rss_held as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
    let t0 = Instant::now();
    for (k, (_, pid)) in a.running.iter().enumerate() {
        a.sim.append_log(
            *pid,
            vk_observer_sim::Channel::Normalized,
            note(2_000_000 + k as u64),
        );
    }
    let (lat, errors, unchanged) = collect(handles, t0).await?;
    let s = stats(&lat);
    println!(
        "  woken {}: p50 {} p99 {} max {}; errors {errors}, unchanged {unchanged}",
        s.n,
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.max_us)
    );
    let held_ok = early == 0 && errors == 0 && unchanged == 0 && s.n == n && parked as usize == n;
    r.row(
        &format!(
            "{n} concurrent waiters, session mode ({sessions} sessions): daemon VmRSS while held"
        ),
        format!(
            "{:.1} MB (sessions open, no waits: {:.1} MB; all {n} held: {})",
            rss_held as f64 / 1024.0,
            rss_before as f64 / 1024.0,
            if held_ok { "yes" } else { "NO" }
        ),
        "≤ 256 MB",
        Some(rss_held <= 256 * 1024 && held_ok),
    );
    r.row(
        &format!("{n} waiters (session mode) woken by 30 appends: time to the answer, p50 (p99)"),
        format!("{} ({}), max {}", ms(s.p50_us), ms(s.p99_us), ms(s.max_us)),
        "—",
        None,
    );
    r.detail(
        "waiters_session",
        json!({"n": n, "sessions": sessions, "rss_before_kb": rss_before, "rss_held_kb": rss_held,
               "early": early, "errors": errors, "parked_at_once": parked, "unchanged": unchanged, "wake_stats": s}),
    );
    for c in clients {
        let _ = c.cancel().await;
    }
    d.stop().await?;
    Ok(())
}
