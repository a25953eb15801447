//! `wait_for_attempt_change` through a real MCP client: wakes on a change to a watched attempt
//! within milliseconds, ignores unrelated attempts, times out with `changed: false`, answers a
//! stale token at once, serves many waiters on one attempt with one channel, and leaves nothing
//! behind when a client goes away mid-wait or the daemon stops while waits are parked.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::Mcp;
use vk_observer::sim::{Channel, RunReason};

fn note(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}})
}

/// A token after which the attempts stayed unchanged for a while (ingest may still be settling
/// background refreshes right after a change).
async fn quiet_token(mcp: &Mcp, ids: &[uuid::Uuid]) -> Value {
    for _ in 0..50 {
        let t = mcp
            .call("get_attempt_status", json!({"attempt_ids": ids}))
            .await
            .ok()["token"]
            .clone();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let r = mcp
            .call(
                "get_attempt_status",
                json!({"attempt_ids": ids, "since_token": t}),
            )
            .await
            .ok();
        if r["attempts"].as_array().unwrap().is_empty() {
            return t;
        }
    }
    panic!("the attempts never went quiet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_wake_on_watched_changes_only() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Waits", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "A", None), "CLAUDE_CODE");
    let b = sim.create_attempt(sim.add_task(project, "B", None), "CLAUDE_CODE");
    let pa = sim.start_process(a.session_id, RunReason::CodingAgent);
    let pb = sim.start_process(b.session_id, RunReason::CodingAgent);
    let mcp = Mcp::connect(daemon.addr).await;
    // Until ingest has both attempts running.
    let mut token = Value::Null;
    for _ in 0..200 {
        if let support::mcp::Reply::Ok(r) = mcp
            .call(
                "get_attempt_status",
                json!({"attempt_ids": [a.attempt_id, b.attempt_id]}),
            )
            .await
        {
            let all = r["attempts"].as_array().unwrap();
            if all.len() == 2 && all.iter().all(|s| s["state"] == "running") {
                token = r["token"].clone();
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!token.is_null(), "attempts never reached running");
    let quiet = quiet_token(&mcp, &[a.attempt_id]).await;

    // 1. Wakes on a change to the watched attempt.
    let waiter = {
        let mcp = Mcp::connect(daemon.addr).await;
        let args =
            json!({"attempt_ids": [a.attempt_id], "since_token": quiet, "timeout_ms": 10000});
        tokio::spawn(async move {
            (
                Instant::now(),
                mcp.call("wait_for_attempt_change", args).await.ok(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let poked = Instant::now();
    sim.append_log(pa, Channel::Normalized, note("wake up"));
    let (_, woke) = waiter.await.unwrap();
    let latency = poked.elapsed();
    assert_eq!(woke["changed"], true, "{woke}");
    assert_eq!(woke["attempts"][0]["attempt_id"], a.attempt_id.to_string());
    assert!(
        woke["waited_ms"].as_u64().unwrap() >= 250,
        "it parked first: {woke}"
    );
    assert!(
        latency < Duration::from_secs(2),
        "woke {latency:?} after the change"
    );

    // 2. Unrelated changes do not wake it; the timeout answers changed=false.
    let t = quiet_token(&mcp, &[a.attempt_id]).await;
    let waiter = {
        let mcp = Mcp::connect(daemon.addr).await;
        let args = json!({"attempt_ids": [a.attempt_id], "since_token": t, "timeout_ms": 1500});
        tokio::spawn(async move { mcp.call("wait_for_attempt_change", args).await.ok() })
    };
    for i in 0..5 {
        sim.append_log(pb, Channel::Normalized, note(&format!("b{i}")));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let timed_out = waiter.await.unwrap();
    assert_eq!(timed_out["changed"], false, "{timed_out}");
    let waited = timed_out["waited_ms"].as_u64().unwrap();
    assert!(
        (1300..3000).contains(&waited),
        "waited {waited} ms for a 1500 ms timeout"
    );

    // 3. A token from the past returns at once; a foreign one resets.
    let r = mcp
        .call(
            "wait_for_attempt_change",
            json!({"attempt_ids": [b.attempt_id], "since_token": t, "timeout_ms": 10000}),
        )
        .await
        .ok();
    assert_eq!(r["changed"], true);
    assert!(r["waited_ms"].as_u64().unwrap() < 1000);
    let r = mcp
        .call("wait_for_attempt_change", json!({"attempt_ids": [a.attempt_id, b.attempt_id], "since_token": "0123456789abcdef.5"}))
        .await
        .ok();
    assert_eq!(r["token_reset"], true);
    assert_eq!(r["attempts"].as_array().unwrap().len(), 2);

    // 4. A project-wide wait wakes for any of its attempts.
    let now = r["token"].clone();
    let waiter = {
        let mcp = Mcp::connect(daemon.addr).await;
        let args = json!({"project_id": project, "since_token": now, "timeout_ms": 10000});
        tokio::spawn(async move { mcp.call("wait_for_attempt_change", args).await.ok() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    sim.append_log(pb, Channel::Normalized, note("project-wide"));
    let r = waiter.await.unwrap();
    assert_eq!(r["changed"], true);
    assert!(
        r["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["attempt_id"] == b.attempt_id.to_string())
    );

    // 5. Bad requests are envelopes.
    assert_eq!(
        mcp.call(
            "wait_for_attempt_change",
            json!({"attempt_ids": [a.attempt_id], "project_id": project})
        )
        .await
        .code(),
        "ambiguous_target"
    );
    assert_eq!(
        mcp.call("wait_for_attempt_change", json!({})).await.code(),
        "ambiguous_target"
    );
    assert_eq!(
        mcp.call(
            "wait_for_attempt_change",
            json!({"project_id": uuid::Uuid::new_v4(), "timeout_ms": 10})
        )
        .await
        .code(),
        "not_found"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_share_one_channel_and_a_gone_client_leaks_nothing() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Crowd", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "Watched", None), "CLAUDE_CODE");
    let pa = sim.start_process(a.session_id, RunReason::CodingAgent);
    let mcp = Mcp::connect(daemon.addr).await;
    let mut running = false;
    for _ in 0..200 {
        if let support::mcp::Reply::Ok(r) = mcp
            .call("get_attempt_status", json!({"attempt_id": a.attempt_id}))
            .await
        {
            if r["state"] == "running" {
                running = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running, "the attempt never reached running");
    let token = quiet_token(&mcp, &[a.attempt_id]).await;
    let hub = daemon.store.hub();
    assert_eq!(hub.channel_count(), 0, "no waiter, no channel");

    // 60 waiters over 4 client sessions on one attempt.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(std::sync::Arc::new(Mcp::connect(daemon.addr).await));
    }
    let mut waits = Vec::new();
    for i in 0..60 {
        let c = clients[i % 4].clone();
        let args =
            json!({"attempt_ids": [a.attempt_id], "since_token": token, "timeout_ms": 20000});
        waits.push(tokio::spawn(async move {
            c.call("wait_for_attempt_change", args).await.ok()
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        hub.channel_count(),
        1,
        "one channel for every waiter on the attempt"
    );
    sim.append_log(pa, Channel::Normalized, note("everyone up"));
    for w in waits {
        let r = tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("every waiter wakes")
            .unwrap();
        assert_eq!(r["changed"], true);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(hub.channel_count(), 0, "released after the wake");
    assert!(
        daemon
            .health
            .waits_parked
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 60,
        "the waits were held in front of rmcp (mcp::park), not inside it"
    );

    // A client that goes away mid-wait: its waiter ends and the channel is released.
    let gone = Mcp::connect(daemon.addr).await;
    let t2 = quiet_token(&mcp, &[a.attempt_id]).await;
    let args = json!({"attempt_ids": [a.attempt_id], "since_token": t2, "timeout_ms": 30000});
    let pending = tokio::spawn(async move {
        let _ = gone.call("wait_for_attempt_change", args).await;
        gone
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(hub.channel_count(), 1);
    pending.abort();
    let _ = pending.await;
    let start = Instant::now();
    while hub.channel_count() != 0 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        hub.channel_count(),
        0,
        "an abandoned wait must not hold its channel until its timeout"
    );
    daemon.shutdown().await;
}

/// Shutting the daemon down while waits are parked (in front of rmcp, `mcp::park`) does not
/// wait for their timeouts: the parked waits are handed on and answered, and `shutdown` returns
/// within the drain bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_parked_waits() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Stop", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "A", None), "CLAUDE_CODE");
    let mcp = std::sync::Arc::new(Mcp::connect(daemon.addr).await);
    let token = quiet_token(&mcp, &[a.attempt_id]).await;
    let mut waits = Vec::new();
    for _ in 0..5 {
        let c = mcp.clone();
        let args =
            json!({"attempt_ids": [a.attempt_id], "since_token": token, "timeout_ms": 50000});
        waits.push(tokio::spawn(async move {
            let Value::Object(args) = args else {
                unreachable!()
            };
            // Answered or cut off by the stopping daemon: either way it ends.
            let _ = c
                .client
                .peer()
                .call_tool(
                    rmcp::model::CallToolRequestParams::new("wait_for_attempt_change")
                        .with_arguments(args),
                )
                .await;
        }));
    }
    let parked = Instant::now();
    while daemon
        .health
        .waits_parked
        .load(std::sync::atomic::Ordering::Relaxed)
        < 5
    {
        assert!(
            parked.elapsed() < Duration::from_secs(5),
            "waits never parked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(8), daemon.shutdown())
        .await
        .expect("shutdown returns while waits are parked");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        started.elapsed()
    );
    for w in waits {
        tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("every parked wait ends with the daemon")
            .unwrap();
    }
}

/// A wait sent on a session the daemon does not know is refused at once (rmcp's 404), not
/// after being parked for its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_an_unknown_session_is_not_parked() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Gone", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "A", None), "CLAUDE_CODE");
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "wait_for_attempt_change",
        "arguments": {"attempt_ids": [a.attempt_id], "timeout_ms": 20000}}});
    let started = Instant::now();
    let r = reqwest::Client::new()
        .post(format!("http://{}/mcp", daemon.addr))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", "no-such-session")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered after {:?}",
        started.elapsed()
    );
    assert_eq!(
        daemon
            .health
            .waits_parked
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    daemon.shutdown().await;
}
