//! Waits parked through rmcp's own client in session mode, shared by the phases that measure
//! them (c3 waiters_session, waiters_progress, resource_wake): wait until the cache shows the
//! running attempts, park `n` waits over a set of sessions, and collect their wake latencies.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::ensure;
use rmcp::RoleClient;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RunningService, Service};
use serde_json::{Value, json};

use crate::scenario::ScenarioA;

/// Tool arguments from a JSON object.
pub(crate) fn args(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("arguments are an object"),
    }
}

/// Until the daemon's cache shows every running attempt running; returns the answer's token.
pub(crate) async fn running_token<S: Service<RoleClient>>(
    c: &RunningService<RoleClient, S>,
    a: &ScenarioA,
) -> anyhow::Result<String> {
    let ids: Vec<uuid::Uuid> = a.running.iter().map(|x| x.0).collect();
    let t = Instant::now();
    loop {
        let res = c
            .peer()
            .call_tool(
                CallToolRequestParams::new("get_attempt_status")
                    .with_arguments(args(json!({ "attempt_ids": ids }))),
            )
            .await?;
        let v = res.structured_content.unwrap_or_default();
        let running = v["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["state"] == json!("running"))
            .count();
        if running == ids.len() {
            return Ok(v["token"].as_str().unwrap_or_default().to_string());
        }
        ensure!(
            t.elapsed() < Duration::from_secs(60),
            "running attempts not cached: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Parked waits: each answers with the time it was answered.
pub(crate) type Waits = Vec<
    tokio::task::JoinHandle<(
        Instant,
        Result<rmcp::model::CallToolResult, rmcp::service::ServiceError>,
    )>,
>;

/// `n` waits of `timeout_ms` spread over the clients and the running attempts, 500 at a time;
/// `answered` counts those answered.
pub(crate) async fn park_waits<S: Service<RoleClient>>(
    clients: &[RunningService<RoleClient, S>],
    a: &ScenarioA,
    token: &str,
    n: usize,
    timeout_ms: u64,
    answered: &Arc<AtomicUsize>,
) -> Waits {
    park_waits_on(clients, &a.running, token, n, timeout_ms, answered).await
}

/// `park_waits` on the given (attempt, process) pairs only.
pub(crate) async fn park_waits_on<S: Service<RoleClient>>(
    clients: &[RunningService<RoleClient, S>],
    running: &[(uuid::Uuid, uuid::Uuid)],
    token: &str,
    n: usize,
    timeout_ms: u64,
    answered: &Arc<AtomicUsize>,
) -> Waits {
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let peer = clients[i % clients.len()].peer().clone();
        let attempt = running[i % running.len()].0;
        let params = CallToolRequestParams::new("wait_for_attempt_change").with_arguments(args(
            json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": timeout_ms}),
        ));
        let answered = answered.clone();
        handles.push(tokio::spawn(async move {
            let res = peer.call_tool(params).await;
            answered.fetch_add(1, Ordering::Relaxed);
            (Instant::now(), res)
        }));
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    handles
}

/// Wake latencies from `t0`, errors, and answers that reported no change.
pub(crate) async fn collect(
    handles: Waits,
    t0: Instant,
) -> anyhow::Result<(Vec<Duration>, usize, usize)> {
    let (mut lat, mut errors, mut unchanged) = (Vec::with_capacity(handles.len()), 0, 0);
    for h in handles {
        let (t, res) = h.await?;
        match res {
            Ok(v) if v.structured_content.as_ref().map(|s| &s["changed"]) == Some(&json!(true)) => {
                lat.push(t.saturating_duration_since(t0))
            }
            Ok(_) => unchanged += 1,
            Err(e) => {
                if errors < 3 {
                    eprintln!("  waiter error: {e}");
                }
                errors += 1;
            }
        }
    }
    ensure!(!lat.is_empty(), "no waiter woke ({errors} errors)");
    Ok((lat, errors, unchanged))
}
