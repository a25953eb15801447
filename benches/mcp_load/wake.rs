//! Phases c1/c1b: wake latency of wait_for_attempt_change (log append, process status change).

use std::time::{Duration, Instant};

use anyhow::ensure;
use serde_json::json;

use crate::client::{Mcp, call_body};
use crate::data::note;
use crate::opts::Opts;
use crate::report::{Report, ms, stats};
use crate::scenario::ScenarioA;

/// `<epoch>.<n>` → n.
pub(crate) fn token_seq(t: &str) -> u64 {
    t.rsplit('.')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One timed wake: a wait on `attempt` since `token` is sent and left 25 ms to park, then
/// `event` fires; returns when the event fired, when the last byte of the answer arrived, and
/// the answer (checked to report a change).
pub(crate) async fn timed_wake(
    mcp: &Mcp,
    attempt: uuid::Uuid,
    token: &str,
    event: impl FnOnce(),
) -> anyhow::Result<(Instant, Instant, serde_json::Value)> {
    let body = call_body(
        "wait_for_attempt_change",
        &json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": 10_000}),
    );
    let m = mcp.clone();
    let h = tokio::spawn(async move {
        let res = m.raw(body).await;
        (Instant::now(), res)
    });
    // Let the request reach the daemon and park.
    tokio::time::sleep(Duration::from_millis(25)).await;
    let t0 = Instant::now();
    event();
    let (t1, res) = h.await?;
    let v = Mcp::parse(&res?)?;
    ensure!(
        v["changed"] == json!(true),
        "wait did not see the change: {v}"
    );
    Ok((t0, t1, v))
}

pub(crate) async fn phase_wake(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
    mcp: &Mcp,
) -> anyhow::Result<()> {
    println!("\n== c1. wake latency: simulator append_log → the waiting client's answer");
    let (attempt, pid) = a.running[0];
    let v = mcp
        .call("get_attempt_status", &json!({ "attempt_id": attempt }))
        .await?;
    let mut token = v["token"].as_str().unwrap().to_string();
    let mut lat = Vec::new();
    let (mut early, mut stale_token) = (0, 0);
    let iters = o.iters(300);
    for i in 0..iters + 10 {
        let (t0, t1, v) = timed_wake(mcp, attempt, &token, || {
            a.sim.append_log(
                pid,
                vk_observer_sim::Channel::Normalized,
                note(100 + i as u64),
            );
        })
        .await?;
        // The next `since_token`: the answer's token, but never below the attempt tokens it
        // reports (the daemon can answer with a token older than the change it reports; see
        // docs/performance.md; a client passing such a token back is answered at once with the
        // same change again).
        let answer_token = v["token"].as_str().unwrap().to_string();
        let newest = v["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["attempt_token"].as_str())
            .max_by_key(|t| token_seq(t))
            .map(str::to_string);
        token = match newest {
            Some(t) if token_seq(&t) > token_seq(&answer_token) => {
                stale_token += 1;
                t
            }
            _ => answer_token,
        };
        if t1 < t0 {
            early += 1; // answered before the event: something else changed the attempt
            continue;
        }
        if i >= 10 {
            lat.push(t1 - t0);
        }
    }
    let s = stats(&lat);
    println!(
        "  {} waits: p50 {} p90 {} p99 {} min {} max {} (answered before the event: {early}; answers whose token was older than the change they reported: {stale_token})",
        s.n,
        ms(s.p50_us),
        ms(s.p90_us),
        ms(s.p99_us),
        ms(s.min_us),
        ms(s.max_us)
    );
    r.row(
        "wake latency, append_log → answer, p99 (p50, min)",
        format!("{} ({}, {})", ms(s.p99_us), ms(s.p50_us), ms(s.min_us)),
        "p99 ≤ 10 ms",
        Some(s.p99_us <= 10_000.0),
    );
    r.row(
        "wake answers whose `token` is older than the attempt_token they report",
        format!("{stale_token} of {}", iters + 10),
        "0",
        Some(stale_token == 0),
    );
    r.detail(
        "wake",
        json!({"stats": s, "early": early, "stale_token_answers": stale_token, "waits": iters + 10}),
    );
    Ok(())
}

/// Wake latency for a process status change (the object stream, not a log): each running
/// attempt's agent finishes once while a client waits on it.
pub(crate) async fn phase_wake_status(
    r: &mut Report,
    a: &ScenarioA,
    mcp: &Mcp,
) -> anyhow::Result<()> {
    println!("\n== c1b. wake latency: simulator finish_process → the waiting client's answer");
    let mut lat = Vec::new();
    for (attempt, pid) in &a.running {
        let v = mcp
            .call("get_attempt_status", &json!({ "attempt_id": attempt }))
            .await?;
        let token = v["token"].as_str().unwrap().to_string();
        let (t0, t1, _) = timed_wake(mcp, *attempt, &token, || {
            a.sim
                .finish_process(*pid, vk_observer_sim::ProcessStatus::Completed, Some(0));
        })
        .await?;
        if t1 >= t0 {
            lat.push(t1 - t0);
        }
        // Let the follow-up writes of this attempt (logs complete, changes) settle.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = stats(&lat);
    println!(
        "  {} waits: p50 {} p99 {} min {} max {}",
        s.n,
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.min_us),
        ms(s.max_us)
    );
    r.row(
        "wake latency, finish_process → answer, p99 (p50, min)",
        format!(
            "{} ({}, {}) over {} waits",
            ms(s.p99_us),
            ms(s.p50_us),
            ms(s.min_us),
            s.n
        ),
        "p99 ≤ 10 ms",
        Some(s.p99_us <= 10_000.0),
    );
    r.detail("wake_status", json!({ "stats": s }));
    Ok(())
}
