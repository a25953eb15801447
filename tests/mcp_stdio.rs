//! `vk-observer mcp`: the stdio bridge spawned as a child process by a real MCP client (rmcp's),
//! forwarding to a daemon (progress notifications, cancellation and resource subscriptions
//! included); and its clear failure when no daemon answers.

mod support;

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use vk_observer_sim::AttemptScript;

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_serves_the_daemons_tools_and_workspace_context() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Bridge", &["demo"]);
    let task = sim.add_task(project, "Over stdio", None);
    let ids = sim.run_attempt_script(task, AttemptScript::default()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "bridge world").await;
    let root = sim.truth().attempts[&ids.attempt_id]["container_ref"]
        .as_str()
        .unwrap()
        .to_string();

    let url = format!("http://{}/mcp", daemon.addr);
    let child = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.args(["mcp", "--daemon", &url, "--workspace", &root]);
    }))
    .unwrap();
    let client = ().serve(child).await.expect("bridge handshake");
    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(
        names.contains(&"get_context"),
        "inside a workspace: {names:?}"
    );
    assert!(names.contains(&"tail_attempt_logs"));
    assert!(tools.iter().all(|t| t.output_schema.is_some()));

    let r = client
        .peer()
        .call_tool(CallToolRequestParams::new("get_context"))
        .await
        .unwrap();
    let ctx = r
        .structured_content
        .expect("structured content through the bridge");
    assert_eq!(ctx["attempt_id"], ids.attempt_id.to_string());
    assert_eq!(ctx["task_title"], "Over stdio");

    // Errors pass through unchanged: the envelope in text content, isError set.
    let mut args = serde_json::Map::new();
    args.insert("attempt_id".into(), ids.attempt_id.to_string().into());
    args.insert("cursor".into(), 1.into());
    args.insert("after_entry_index".into(), 1.into());
    let r = client
        .peer()
        .call_tool(CallToolRequestParams::new("tail_attempt_logs").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let text = &r.content[0].as_text().unwrap().text;
    let env: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(env["code"], "invalid_argument");
    assert_eq!(env["details"]["reason"], "mixed_pagination");
    client.cancel().await.ok();
    daemon.shutdown().await;
}

#[test]
fn stdio_bridge_without_a_daemon_fails_naming_the_address() {
    let out = std::process::Command::new(BIN)
        .args(["mcp", "--daemon", "http://127.0.0.1:9/mcp"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("http://127.0.0.1:9/mcp"), "stderr: {err}");
    assert!(
        err.contains("vk-observer serve"),
        "stderr names the fix: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_sends_the_daemons_bearer_token() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = vk_observer_config::McpSettings {
        token: Some("bridge-secret".into()),
        ..Default::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let url = format!("http://{}/mcp", daemon.addr);
    let child = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.args(["mcp", "--daemon", &url])
            .env("VK_OBSERVER_MCP_TOKEN", "bridge-secret");
    }))
    .unwrap();
    let client = ().serve(child).await.expect("bridge handshake with the token");
    assert!(client.peer().list_all_tools().await.unwrap().len() >= 19);
    client.cancel().await.ok();
    // Without it the bridge cannot reach the daemon and says so.
    let out = std::process::Command::new(BIN)
        .args(["mcp", "--daemon", &url])
        .env_remove("VK_OBSERVER_MCP_TOKEN")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    daemon.shutdown().await;
}

/// A client that counts the progress notifications it receives.
struct ProgressSink(tokio::sync::mpsc::UnboundedSender<f64>);

impl rmcp::ClientHandler for ProgressSink {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(params.progress);
    }
}

fn wait_call(project: uuid::Uuid, timeout_ms: u64) -> rmcp::model::ClientRequest {
    let serde_json::Value::Object(args) =
        serde_json::json!({"project_id": project, "timeout_ms": timeout_ms})
    else {
        unreachable!()
    };
    rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        CallToolRequestParams::new("wait_for_attempt_change").with_arguments(args),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_relays_progress_and_cancels() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = vk_observer_config::McpSettings {
        progress_every: Duration::from_millis(200),
        ..Default::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let project = sim.add_project("Relay", &["demo"]);
    let url = format!("http://{}/mcp", daemon.addr);
    let child = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.args(["mcp", "--daemon", &url]);
    }))
    .unwrap();
    let (tx, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let client = ProgressSink(tx)
        .serve(child)
        .await
        .expect("bridge handshake");
    let options = rmcp::service::PeerRequestOptions::no_options;

    // Progress reaches the stdio client under its own token, before the answer.
    let handle = client
        .peer()
        .send_cancellable_request(wait_call(project, 1500), options())
        .await
        .unwrap();
    let answer = handle.await_response().await.unwrap();
    assert!(
        matches!(answer, rmcp::model::ServerResult::CallToolResult(_)),
        "{answer:?}"
    );
    let mut seen = Vec::new();
    while let Ok(p) = progress.try_recv() {
        seen.push(p);
    }
    assert!(seen.len() >= 2, "relayed progress: {seen:?}");

    // A cancel at the stdio side ends the daemon's wait (its channel is released) well before
    // its 30 s timeout.
    let hub = daemon.store.hub();
    let handle = client
        .peer()
        .send_cancellable_request(wait_call(project, 30000), options())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), progress.recv())
        .await
        .expect("progress while parked");
    assert_eq!(hub.channel_count(), 1);
    handle.cancel(None).await.unwrap();
    let cancelled = std::time::Instant::now();
    while hub.channel_count() != 0 && cancelled.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        hub.channel_count(),
        0,
        "the daemon's wait ended with the cancel"
    );
    client.cancel().await.ok();
    daemon.shutdown().await;
}

/// A client that passes on the URIs of the resource updates it receives.
struct UpdateSink(tokio::sync::mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for UpdateSink {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}

/// URIs updated within `d` (after draining what came before).
async fn updates_within(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    d: Duration,
) -> Vec<String> {
    let end = tokio::time::Instant::now() + d;
    let mut got = Vec::new();
    while let Ok(Some(uri)) = tokio::time::timeout_at(end, rx.recv()).await {
        got.push(uri);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)] // resources/subscribe is the 2025-11-25 way the bridge offers
async fn stdio_bridge_relays_resource_subscriptions() {
    use rmcp::model::{SubscribeRequestParams, UnsubscribeRequestParams};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Subscribed", &["demo"]);
    sim.add_task(project, "First", None);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "subscribed").await;
    let url = format!("http://{}/mcp", daemon.addr);
    let child = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.args(["mcp", "--daemon", &url]);
    }))
    .unwrap();
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let client = UpdateSink(tx).serve(child).await.expect("bridge handshake");
    let caps = client.peer().peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.resources.and_then(|r| r.subscribe), Some(true));

    let uri = format!("vk-observer://projects/{project}/activity");
    client
        .peer()
        .subscribe(SubscribeRequestParams::new(&uri))
        .await
        .unwrap();
    let _ = updates_within(&mut updates, Duration::from_millis(300)).await;
    sim.add_task(project, "Second", None);
    let got = updates_within(&mut updates, Duration::from_secs(5)).await;
    assert!(got.contains(&uri), "relayed updates: {got:?}");

    client
        .peer()
        .unsubscribe(UnsubscribeRequestParams::new(&uri))
        .await
        .unwrap();
    let _ = updates_within(&mut updates, Duration::from_millis(300)).await;
    sim.add_task(project, "Third", None);
    let after = updates_within(&mut updates, Duration::from_secs(1)).await;
    assert!(after.is_empty(), "updates after unsubscribe: {after:?}");
    client.cancel().await.ok();
    daemon.shutdown().await;
}

/// `subscriptions/listen` (2026-07-28) through the bridge: the daemon leg is subscribed while the
/// listen runs, its updates reach the listen, and its end unsubscribes the daemon leg; a read
/// carries the caching hints of live data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_serves_subscriptions_listen() {
    use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Listened", &["demo"]);
    sim.add_task(project, "First", None);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "listened").await;
    let url = format!("http://{}/mcp", daemon.addr);
    let child = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.args(["mcp", "--daemon", &url]);
    }))
    .unwrap();
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = ().serve_with_lifecycle(child, lifecycle).await.unwrap();
    let held = || {
        daemon
            .health
            .resource_subscriptions
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let uri = format!("vk-observer://projects/{project}/activity");
    let filter = SubscriptionFilter::builder()
        .resource_subscriptions([uri.clone(), "vk-observer://nope".into()])
        .build();
    let mut sub = client
        .peer()
        .listen(filter)
        .await
        .expect("listen acknowledged");
    assert_eq!(
        sub.acknowledged().resource_subscriptions.as_deref(),
        Some(std::slice::from_ref(&uri)),
        "a URI that names no resource family is not accepted"
    );
    // The bridge states the daemon's caching hints to its 2026-07-28 client (`cache_hints`).
    let read = client
        .peer()
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri.clone()))
        .await
        .unwrap();
    assert_eq!(
        (read.ttl_ms, read.cache_scope),
        (Some(0), Some(rmcp::model::CacheScope::Private)),
        "live data is not cacheable"
    );
    let start = std::time::Instant::now();
    while held() != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the daemon leg never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sim.add_task(project, "Second", None);
    let n = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("an update within 10 s")
        .unwrap()
        .expect("the stream is open");
    let ServerNotification::ResourceUpdatedNotification(n) = n else {
        panic!("expected notifications/resources/updated, got {n:?}");
    };
    assert_eq!(n.params.uri, uri);
    sub.cancel().await.unwrap();
    let start = std::time::Instant::now();
    while held() != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the daemon leg stayed subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = client.cancel().await;
    daemon.shutdown().await;
}
