//! Phase a: get_attempt_status, cache batch vs single calls vs the REST-proxy baseline.

use std::time::{Duration, Instant};

use anyhow::ensure;
use serde_json::{Value, json};

use crate::client::{Mcp, call_body};
use crate::opts::Opts;
use crate::report::{Report, ms, stats};
use crate::scenario::ScenarioA;

pub(crate) async fn phase_status(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
    mcp: &Mcp,
    proxy: &Mcp,
) -> anyhow::Result<()> {
    println!("\n== a. get_attempt_status: batch of 100 vs 100 single calls vs REST-proxy baseline");
    let ids = &a.attempts;
    let batch_args = json!({ "attempt_ids": ids });
    // The answers agree (state and latest ids) between the cache and VK's REST.
    let (_, ours) = mcp.timed("get_attempt_status", &batch_args).await?;
    let (_, theirs) = proxy.timed("get_attempt_status", &batch_args).await?;
    let fields = [
        "state",
        "latest_execution_process_id",
        "latest_session_id",
        "failure_summary",
    ];
    for (x, y) in ours["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(theirs["attempts"].as_array().unwrap())
    {
        for f in fields {
            ensure!(x[f] == y[f], "cache and VK disagree on {f}: {x} vs {y}");
        }
    }
    ensure!(ours["attempts"].as_array().unwrap().len() == 100);
    let answer_bytes = mcp
        .raw(call_body("get_attempt_status", &batch_args))
        .await?
        .len();
    let proxy_answer_bytes = proxy
        .raw(call_body("get_attempt_status", &batch_args))
        .await?
        .len();
    println!(
        "  answers agree on state, latest session/process and failure summary; HTTP body of a batch of 100: {answer_bytes} B (REST proxy: {proxy_answer_bytes} B)"
    );
    r.detail(
        "status_answer_bytes",
        json!({"cache_batch100": answer_bytes, "proxy_batch100": proxy_answer_bytes}),
    );
    for _ in 0..o.iters(20) {
        mcp.call("get_attempt_status", &batch_args).await?;
        proxy.call("get_attempt_status", &batch_args).await?;
    }
    let (mut cb, mut cs, mut cs1, mut pb, mut ps, mut ps1) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    // Each round times every variant the same way: a call right after another call of the
    // same kind (warm: what a p50 of repeated calls measures), plus the cache batch's first call
    // of the round, made right after the REST-proxy round (cold: the daemon's threads parked and
    // its caches evicted by the other server), reported separately.
    let mut cb_cold = Vec::new();
    let iters = o.iters(200);
    for _ in 0..iters {
        cb_cold.push(mcp.timed("get_attempt_status", &batch_args).await?.0);
        cb.push(mcp.timed("get_attempt_status", &batch_args).await?.0);
        let t = Instant::now();
        for id in ids {
            cs1.push(
                mcp.timed("get_attempt_status", &json!({ "attempt_id": id }))
                    .await?
                    .0,
            );
        }
        cs.push(t.elapsed());
        proxy.timed("get_attempt_status", &batch_args).await?;
        pb.push(proxy.timed("get_attempt_status", &batch_args).await?.0);
        let t = Instant::now();
        for id in ids {
            ps1.push(
                proxy
                    .timed("get_attempt_status", &json!({ "attempt_id": id }))
                    .await?
                    .0,
            );
        }
        ps.push(t.elapsed());
    }
    let cb_cold = stats(&cb_cold);
    let (cb, cs, cs1, pb, ps, ps1) = (
        stats(&cb),
        stats(&cs),
        stats(&cs1),
        stats(&pb),
        stats(&ps),
        stats(&ps1),
    );
    println!(
        "  {iters} rounds, interleaved. p50/p99:\n    cache batch(100)      {} / {}\n    cache 100 singles     {} / {}  (one single call {} / {})\n    REST proxy batch(100) {} / {}\n    REST proxy 100 singles {} / {}  (one single call {} / {})",
        ms(cb.p50_us),
        ms(cb.p99_us),
        ms(cs.p50_us),
        ms(cs.p99_us),
        ms(cs1.p50_us),
        ms(cs1.p99_us),
        ms(pb.p50_us),
        ms(pb.p99_us),
        ms(ps.p50_us),
        ms(ps.p99_us),
        ms(ps1.p50_us),
        ms(ps1.p99_us)
    );
    println!(
        "    cache batch(100), cold (first call after the proxy round) {} / {}",
        ms(cb_cold.p50_us),
        ms(cb_cold.p99_us)
    );
    r.row(
        "status batch of 100, p50 (p99)",
        format!("{} ({})", ms(cb.p50_us), ms(cb.p99_us)),
        "p50 ≤ 1 ms",
        Some(cb.p50_us <= 1000.0),
    );
    r.row(
        "status batch of 100, cold: first call after the REST-proxy round, p50 (p99)",
        format!("{} ({})", ms(cb_cold.p50_us), ms(cb_cold.p99_us)),
        "—",
        None,
    );
    let ratio_pb = pb.p50_us / cb.p50_us;
    let ratio_ps = ps.p50_us / cb.p50_us;
    r.row(
        "REST-proxy baseline (1 MCP call, 100 REST GETs) / cache batch, p50",
        format!("{ratio_pb:.1}× ({} vs {})", ms(pb.p50_us), ms(cb.p50_us)),
        "≥ 20×",
        Some(ratio_pb >= 20.0),
    );
    r.row(
        "REST-proxy 100 single MCP calls / cache batch, p50",
        format!("{ratio_ps:.1}× ({} vs {})", ms(ps.p50_us), ms(cb.p50_us)),
        "≥ 20×",
        Some(ratio_ps >= 20.0),
    );
    r.row(
        "cache 100 single calls / cache batch, p50",
        format!(
            "{:.1}× ({} vs {})",
            cs.p50_us / cb.p50_us,
            ms(cs.p50_us),
            ms(cb.p50_us)
        ),
        "—",
        None,
    );
    r.row(
        "status single call (cache), p50 (p99)",
        format!("{} ({})", ms(cs1.p50_us), ms(cs1.p99_us)),
        "—",
        None,
    );
    r.detail(
        "status",
        json!({"cache_batch100": cb, "cache_batch100_cold": cb_cold, "cache_100_singles": cs, "cache_single_call": cs1,
               "proxy_batch100": pb, "proxy_100_singles": ps, "proxy_single_call": ps1,
               "ratio_proxy_batch_over_cache_batch_p50": ratio_pb,
               "ratio_proxy_singles_over_cache_batch_p50": ratio_ps}),
    );

    // Latency vs batch size (for the plot).
    let sizes = [1usize, 2, 5, 10, 20, 50, 100];
    let mut by_size: Vec<Vec<Duration>> = vec![Vec::new(); sizes.len()];
    for _ in 0..o.iters(300) {
        for (k, &n) in sizes.iter().enumerate() {
            let args = json!({ "attempt_ids": &ids[..n] });
            by_size[k].push(mcp.timed("get_attempt_status", &args).await?.0);
        }
    }
    let curve: Vec<Value> = sizes
        .iter()
        .zip(&by_size)
        .map(|(n, v)| {
            let s = stats(v);
            println!(
                "    batch {n:>3}: p50 {} p99 {}",
                ms(s.p50_us),
                ms(s.p99_us)
            );
            json!({"batch": n, "stats": s})
        })
        .collect();
    r.detail("status_by_batch", curve);
    Ok(())
}
