//! Phase d: get_attempt_status throughput (wrk and an in-process reqwest driver).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure};
use serde_json::{Value, json};

use crate::client::{Mcp, call_body};
use crate::daemon::DaemonProc;
use crate::opts::Opts;
use crate::report::{Report, stats};
use crate::scenario::ScenarioA;

pub(crate) fn wrk_run(
    url: &str,
    body: &str,
    secs: u64,
    conns: u32,
) -> anyhow::Result<Option<Value>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/mcp_load.lua");
    let out = match std::process::Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{conns}"),
            &format!("-d{secs}s"),
            "--latency",
        ])
        .arg("-s")
        .arg(&script)
        .arg(url)
        .env("MCP_BODY", body)
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    ensure!(
        out.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |prefix: &str| -> Option<String> {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .map(|l| l.trim_start()[prefix.len()..].trim().to_string())
    };
    let rps: f64 = field("Requests/sec:")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no Requests/sec in wrk output:\n{text}"))?;
    let non2xx: u64 = field("Non-2xx or 3xx responses:")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let errors = field("Socket errors:").unwrap_or_default();
    let requests: Option<u64> = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok());
    Ok(Some(json!({
        "requests_per_sec": rps, "requests": requests, "p50": field("50%"), "p99": field("99%"),
        "non_2xx": non2xx, "socket_errors": errors, "raw": text,
    })))
}

/// The same load from this process: `conns` tasks, each POSTing back to back for `secs`.
pub(crate) async fn reqwest_run(
    url: &str,
    body: &str,
    secs: u64,
    conns: usize,
) -> anyhow::Result<Value> {
    let http = reqwest::Client::new();
    let done = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let m = Mcp::with_client(url, http.clone());
        let body = body.to_string();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < end {
                let t = Instant::now();
                let b = m.raw(body.clone()).await?;
                lat.push(t.elapsed());
                ensure!(b.len() > 20);
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let t = Instant::now();
    let mut lat = Vec::new();
    for h in tasks {
        lat.extend(h.await??);
    }
    let secs_f = t.elapsed().as_secs_f64();
    let s = stats(&lat);
    Ok(json!({"requests_per_sec": lat.len() as f64 / secs_f, "stats": s}))
}

pub(crate) async fn phase_throughput(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
    d: &DaemonProc,
    quiet: &DaemonProc,
) -> anyhow::Result<()> {
    println!(
        "\n== d. throughput of get_attempt_status over Streamable HTTP (stateless JSON), 2 cores shared with the load generator"
    );
    let single = call_body("get_attempt_status", &json!({"attempt_id": a.running[0].0}));
    let batch = call_body("get_attempt_status", &json!({"attempt_ids": a.attempts}));
    // The bodies answer correctly before we count them.
    Mcp::parse(&d.mcp().raw(single.clone()).await?)?;
    Mcp::parse(&d.mcp().raw(batch.clone()).await?)?;
    let mut detail = serde_json::Map::new();
    let url = format!("http://{}/mcp", d.addr);
    let log_before = d.log_bytes();
    match wrk_run(&url, &single, o.secs, 32)? {
        Some(w) => {
            let rps = w["requests_per_sec"].as_f64().unwrap();
            let total = w["requests"].as_f64().unwrap_or(0.0);
            let log_per_call = (d.log_bytes() - log_before) as f64 / total.max(1.0);
            let bad = w["non_2xx"].as_u64().unwrap_or(0);
            println!(
                "  wrk -t2 -c32 -d{}s, single attempt: {rps:.0} calls/s, p50 {} p99 {}, non-2xx {bad}; daemon log written: {log_per_call:.0} bytes per call",
                o.secs,
                w["p50"].as_str().unwrap_or("?"),
                w["p99"].as_str().unwrap_or("?")
            );
            r.row(
                "throughput get_attempt_status (1 attempt), wrk -t2 -c32, daemon as shipped (default log level)",
                format!(
                    "{rps:.0} calls/s (p50 {}, p99 {}; {log_per_call:.0} B of log per call)",
                    w["p50"].as_str().unwrap_or("?"),
                    w["p99"].as_str().unwrap_or("?")
                ),
                "≥ 15 000 calls/s",
                Some(rps >= 15_000.0 && bad == 0),
            );
            detail.insert("wrk_single".into(), w);
            detail.insert("log_bytes_per_call".into(), json!(log_per_call));
            let qurl = format!("http://{}/mcp", quiet.addr);
            if let Some(w) = wrk_run(&qurl, &single, o.secs, 32)? {
                let rps = w["requests_per_sec"].as_f64().unwrap();
                println!("  same against a daemon with RUST_LOG=warn: {rps:.0} calls/s");
                r.row(
                    "throughput get_attempt_status (1 attempt), wrk -t2 -c32, daemon with RUST_LOG=warn",
                    format!(
                        "{rps:.0} calls/s (p50 {}, p99 {})",
                        w["p50"].as_str().unwrap_or("?"),
                        w["p99"].as_str().unwrap_or("?")
                    ),
                    "≥ 15 000 calls/s",
                    Some(rps >= 15_000.0),
                );
                detail.insert("wrk_single_log_warn".into(), w);
            }
            if let Some(w) = wrk_run(&url, &batch, o.secs, 32)? {
                let rps = w["requests_per_sec"].as_f64().unwrap();
                println!(
                    "  wrk, batch of 100: {rps:.0} calls/s = {:.0} attempt statuses/s",
                    rps * 100.0
                );
                r.row(
                    "throughput get_attempt_status (batch of 100), wrk -t2 -c32",
                    format!("{rps:.0} calls/s = {:.0} statuses/s", rps * 100.0),
                    "—",
                    None,
                );
                detail.insert("wrk_batch100".into(), w);
            }
        }
        None => println!("  wrk not installed (apt-get install wrk): skipped"),
    }
    let rq = reqwest_run(&url, &single, o.secs, 32).await?;
    let rps = rq["requests_per_sec"].as_f64().unwrap();
    println!("  in-process reqwest driver, 32 connections, single attempt: {rps:.0} calls/s");
    r.row(
        "throughput get_attempt_status (1 attempt), reqwest driver in the bench process, 32 conns",
        format!("{rps:.0} calls/s"),
        "≥ 15 000 calls/s",
        Some(rps >= 15_000.0),
    );
    detail.insert("reqwest_single".into(), rq);
    r.detail("throughput", Value::Object(detail));
    Ok(())
}
