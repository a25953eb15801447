//! `wait_for_attempt_change` through a real MCP client: wakes on a change to a watched attempt
//! within milliseconds, ignores unrelated attempts, times out with `changed: false`, answers a
//! stale token at once, serves many waiters on one attempt with one channel, and leaves nothing
//! behind when a client goes away mid-wait or the daemon stops while waits are parked; a wait
//! with a progress token gets progress notifications while parked, until it answers or the
//! client cancels it.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::Mcp;
use vk_observer_sim::{Channel, RunReason};

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
        .classed(),
        "invalid_argument/ambiguous_target"
    );
    assert_eq!(
        mcp.call("wait_for_attempt_change", json!({}))
            .await
            .classed(),
        "invalid_argument/ambiguous_target"
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
            && r["state"] == "running"
        {
            running = true;
            break;
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
        "the waits were held in front of rmcp (mcp::transport::park), not inside it"
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

/// Shutting the daemon down while waits are parked (in front of rmcp, `mcp::transport::park`) does not
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

/// A client that records the progress notifications it receives.
struct ProgressSink(tokio::sync::mpsc::UnboundedSender<(Instant, f64)>);

impl rmcp::ClientHandler for ProgressSink {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send((Instant::now(), params.progress));
    }
}

type ProgressClient = rmcp::service::RunningService<rmcp::RoleClient, ProgressSink>;

/// A daemon sending progress every 200 ms, a project to watch, and a client recording progress
/// (rmcp's client puts a progressToken in every request's `_meta`).
async fn progress_setup(
    sim: &vk_observer_sim::Sim,
    dir: &std::path::Path,
) -> (
    vk_observer_daemon::Daemon,
    uuid::Uuid,
    ProgressClient,
    tokio::sync::mpsc::UnboundedReceiver<(Instant, f64)>,
) {
    let settings = vk_observer_config::McpSettings {
        progress_every: Duration::from_millis(200),
        ..Default::default()
    };
    let daemon = support::daemon_with(sim, dir, settings).await;
    let project = sim.add_project("Progress", &["demo"]);
    // The wait names the project: let the cache have it first (a wait on a project not yet
    // cached answers `not_found` at once, with no progress to see).
    support::converge(
        &daemon.store,
        sim,
        Duration::from_secs(10),
        "project cached",
    )
    .await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(format!(
        "http://{}/mcp",
        daemon.addr
    ));
    let client = rmcp::ServiceExt::serve(ProgressSink(tx), transport)
        .await
        .expect("MCP client connects");
    (daemon, project, client, rx)
}

fn wait_request(args: Value) -> rmcp::model::ClientRequest {
    let Value::Object(args) = args else {
        unreachable!()
    };
    rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        rmcp::model::CallToolRequestParams::new("wait_for_attempt_change").with_arguments(args),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_wait_with_a_progress_token_sends_progress_until_it_answers() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, project, client, mut progress) = progress_setup(&sim, dir.path()).await;
    let started = Instant::now();
    let handle = client
        .peer()
        .send_cancellable_request(
            wait_request(json!({"project_id": project, "timeout_ms": 1500, "detail": 2})),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let answer = handle.await_response().await.unwrap();
    let answered = Instant::now();
    let rmcp::model::ServerResult::CallToolResult(r) = answer else {
        panic!("not a tool result: {answer:?}")
    };
    let out = r.structured_content.expect("structured answer");
    assert_eq!(out["changed"], false, "{out}");
    let mut seen = Vec::new();
    while let Ok((at, p)) = progress.try_recv() {
        seen.push((at, p));
    }
    assert!(seen.len() >= 2, "progress notifications: {seen:?}");
    assert!(
        seen.iter().all(|(at, _)| *at <= answered),
        "all before the answer"
    );
    assert!(
        seen.windows(2).all(|w| w[1].1 > w[0].1),
        "progress grows: {seen:?}"
    );
    let first = seen[0].0.duration_since(started);
    assert!(
        first >= Duration::from_millis(150) && first < Duration::from_millis(1000),
        "the first progress came {first:?} after the call (interval 200 ms)"
    );
    assert!(
        daemon
            .health
            .waits_parked
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "the wait was held in front of rmcp"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_parked_wait_stops_its_progress_and_releases_it() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, project, client, mut progress) = progress_setup(&sim, dir.path()).await;
    let hub = daemon.store.hub();
    let handle = client
        .peer()
        .send_cancellable_request(
            wait_request(json!({"project_id": project, "timeout_ms": 30000, "detail": 2})),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    for _ in 0..2 {
        // Generous under a loaded CI machine; the interval itself is 200 ms.
        tokio::time::timeout(Duration::from_secs(10), progress.recv())
            .await
            .expect("progress while parked")
            .unwrap();
    }
    assert_eq!(hub.channel_count(), 1, "parked on the project's channel");
    handle.cancel(Some("test".into())).await.unwrap();
    let cancelled = Instant::now();
    while hub.channel_count() != 0 && cancelled.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        hub.channel_count(),
        0,
        "the cancelled wait released its channel at once, not at its 30 s timeout"
    );
    while progress.try_recv().is_ok() {}
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        progress.try_recv().is_err(),
        "no progress after the cancel (interval 200 ms)"
    );

    // rmcp's client also drops the stream; a client that keeps reading it sees it end at the
    // cancel, with no answer.
    let (session, mut stream) = raw_progress_wait(daemon.addr, project).await;
    let mut text = String::new();
    while text.matches("notifications/progress").count() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(3), stream.chunk())
            .await
            .expect("progress while parked")
            .unwrap()
            .expect("the stream stays open while parked");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains(r#""progressToken":"raw-1""#), "{text}");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 5, "reason": "test"}});
    assert_eq!(
        raw_post(daemon.addr, Some(&session), cancel).await.status(),
        202
    );
    let ended = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream ends at the cancel: {text}");
    assert!(
        !text.contains(r#""id":5"#),
        "no answer to a cancelled call: {text}"
    );
    assert_eq!(hub.channel_count(), 0);
    daemon.shutdown().await;
}

async fn raw_post(
    addr: std::net::SocketAddr,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut rb = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(s) = session {
        rb = rb.header("mcp-session-id", s);
    }
    rb.body(body.to_string()).send().await.unwrap()
}

/// A session opened by hand and a wait (request id 5, progress token "raw-1") whose SSE
/// response is read by the caller.
async fn raw_progress_wait(
    addr: std::net::SocketAddr,
    project: uuid::Uuid,
) -> (String, reqwest::Response) {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let r = raw_post(addr, None, init).await;
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let _ = r.text().await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let _ = raw_post(addr, Some(&session), initialized).await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "_meta": {"progressToken": "raw-1"},
        "name": "wait_for_attempt_change",
        "arguments": {"project_id": project, "timeout_ms": 30000}}});
    let stream = raw_post(addr, Some(&session), call).await;
    assert_eq!(stream.status(), 200);
    (session, stream)
}
