//! MCP resources through rmcp's client against the simulator: the templates are listed, each
//! resource reads what its tool answers (unknown ids and foreign URIs are JSON-RPC errors),
//! `resources/subscribe` sends `notifications/resources/updated` after a change in the simulator
//! and `unsubscribe` stops them, a session that ends releases its subscriptions (the count behind
//! `vk_observer_resource_subscriptions`), a session's subscriptions are capped, stateless mode
//! refuses them, and `subscriptions/listen` (2026-07-28) accepts the URIs naming cached attempts
//! and streams their updates until cancelled.

mod support;

use std::time::{Duration, Instant};

use rmcp::model::{
    ErrorCode, ReadResourceRequestParams, ResourceContents, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use support::mcp::Mcp;
use tokio::sync::mpsc;
use uuid::Uuid;
use vk_observer_daemon::Daemon;
use vk_observer_sim::{Channel, RunReason, Sim};

/// A client that records the URIs of the resource updates it is sent.
struct UpdateSink(mpsc::UnboundedSender<(Instant, String)>);

impl rmcp::ClientHandler for UpdateSink {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send((Instant::now(), params.uri));
    }
}

type Client = RunningService<RoleClient, UpdateSink>;

async fn client(daemon: &Daemon) -> (Client, mpsc::UnboundedReceiver<(Instant, String)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(format!(
        "http://{}/mcp",
        daemon.addr
    ));
    let c = UpdateSink(tx)
        .serve(transport)
        .await
        .expect("MCP client connects");
    (c, rx)
}

fn note(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}})
}

/// A running attempt with one log entry, once the daemon has cached it; returns the attempt and
/// its agent process.
async fn running_attempt(sim: &Sim, daemon: &Daemon) -> (Uuid, Uuid) {
    let project = sim.add_project("Resources", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "R", None), "CLAUDE_CODE");
    let pid = sim.start_process(a.session_id, RunReason::CodingAgent);
    sim.append_log(pid, Channel::Normalized, note("first"));
    let mcp = Mcp::connect(daemon.addr).await;
    for _ in 0..200 {
        let r = mcp
            .call("tail_attempt_logs", json!({"attempt_id": a.attempt_id}))
            .await;
        if let support::mcp::Reply::Ok(page) = r
            && !page["entries"].as_array().unwrap().is_empty()
        {
            return (a.attempt_id, pid);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the attempt's log never reached the cache");
}

async fn read(c: &Client, uri: &str) -> Result<Value, ServiceError> {
    let r = c
        .peer()
        .read_resource(ReadResourceRequestParams::new(uri))
        .await?;
    let [
        ResourceContents::TextResourceContents {
            uri: got,
            mime_type,
            text,
            ..
        },
    ] = r.contents.as_slice()
    else {
        panic!("{uri}: expected one text content, got {:?}", r.contents);
    };
    assert_eq!(got, uri);
    assert_eq!(mime_type.as_deref(), Some("application/json"));
    Ok(serde_json::from_str(text).expect("resource text is JSON"))
}

fn mcp_error(e: ServiceError) -> rmcp::ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => panic!("expected a JSON-RPC error, got {other}"),
    }
}

#[allow(deprecated)]
async fn subscribe(c: &Client, uri: &str) -> Result<(), ServiceError> {
    c.peer().subscribe(SubscribeRequestParams::new(uri)).await
}

#[allow(deprecated)]
async fn unsubscribe(c: &Client, uri: &str) -> Result<(), ServiceError> {
    c.peer()
        .unsubscribe(UnsubscribeRequestParams::new(uri))
        .await
}

/// Updates received within `window` (drains what came before too).
async fn updates_within(
    rx: &mut mpsc::UnboundedReceiver<(Instant, String)>,
    window: Duration,
) -> Vec<String> {
    let mut got = Vec::new();
    let end = tokio::time::Instant::now() + window;
    while let Ok(Some((_, uri))) = tokio::time::timeout_at(end, rx.recv()).await {
        got.push(uri);
    }
    got
}

fn subscriptions_held(daemon: &Daemon) -> u64 {
    daemon
        .health
        .resource_subscriptions
        .load(std::sync::atomic::Ordering::Relaxed)
}

async fn until_held(daemon: &Daemon, n: u64, what: &str) {
    let start = Instant::now();
    while subscriptions_held(daemon) != n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: {} subscriptions held, expected {n}",
            subscriptions_held(daemon)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_are_listed_and_each_resource_reads_its_tool_answer() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let (attempt, _) = running_attempt(&sim, &daemon).await;
    let (c, mut updates) = client(&daemon).await;

    let caps = c.peer_info().expect("server info").capabilities.clone();
    let res_caps = caps.resources.expect("resources capability");
    assert_eq!(res_caps.subscribe, Some(true));
    let mut templates: Vec<String> = c
        .peer()
        .list_all_resource_templates()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.uri_template.clone())
        .collect();
    templates.sort();
    assert_eq!(
        templates,
        [
            "vk-observer://attempts/{id}",
            "vk-observer://attempts/{id}/logs",
            "vk-observer://projects/{id}/activity",
            "vk-observer://tasks/{id}"
        ]
    );

    let status = read(&c, &format!("vk-observer://attempts/{attempt}"))
        .await
        .unwrap();
    assert_eq!(status["attempt_id"], attempt.to_string(), "{status}");
    assert_eq!(status["state"], "running", "{status}");
    assert!(status["token"].is_string(), "{status}");
    assert!(
        status.get("freshness").is_none(),
        "detail 0 leaves freshness out while the cache is current: {status}"
    );
    let logs = read(&c, &format!("vk-observer://attempts/{attempt}/logs"))
        .await
        .unwrap();
    let entries = logs["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{logs}");
    assert_eq!(entries[0]["text"], "first", "compact entries (detail 0)");
    // The project's activity: its newest items, and an update once the project changes.
    let project = *sim.truth().projects.keys().next().unwrap();
    let activity_uri = format!("vk-observer://projects/{project}/activity");
    let activity = read(&c, &activity_uri).await.unwrap();
    assert_eq!(activity["order"], "newest_first", "{activity}");
    let kinds: Vec<&str> = activity["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"task_created") && kinds.contains(&"attempt_started"),
        "{kinds:?}"
    );
    subscribe(&c, &activity_uri).await.unwrap();
    while !updates_within(&mut updates, Duration::from_millis(300))
        .await
        .is_empty()
    {}
    sim.add_task(project, "Another", None);
    let got = updates_within(&mut updates, Duration::from_secs(5)).await;
    assert!(got.contains(&activity_uri), "{got:?}");
    let after = read(&c, &activity_uri).await.unwrap();
    assert_eq!(after["items"][0]["kind"], "task_created", "{after}");

    let unknown = Uuid::new_v4();
    for uri in [
        format!("vk-observer://attempts/{unknown}"),
        format!("vk-observer://attempts/{unknown}/logs"),
    ] {
        let e = mcp_error(read(&c, &uri).await.unwrap_err());
        assert_eq!(e.code, ErrorCode::RESOURCE_NOT_FOUND, "{uri}: {e:?}");
        let data = e.data.expect("the envelope in data");
        assert_eq!(data["code"], "not_found");
        assert_eq!(data["details"]["id"], unknown.to_string());
        assert_eq!(
            data["uri"],
            uri.as_str(),
            "the requested URI in data (SEP-2164)"
        );
    }
    for uri in ["vk-observer://tasks/x", "vk-observer://attempts/not-a-uuid"] {
        let e = mcp_error(read(&c, uri).await.unwrap_err());
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{uri}: {e:?}");
        let data = e.data.unwrap();
        assert_eq!(data["code"], "invalid_argument");
        assert_eq!(data["uri"], uri, "the requested URI in data (SEP-2164)");
    }
    let e = mcp_error(
        subscribe(&c, &format!("vk-observer://attempts/{unknown}"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, ErrorCode::RESOURCE_NOT_FOUND);
    c.cancel().await.unwrap();
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_notifies_on_change_until_unsubscribed_and_sessions_release_theirs() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let (attempt, pid) = running_attempt(&sim, &daemon).await;
    let (c, mut updates) = client(&daemon).await;
    let status_uri = format!("vk-observer://attempts/{attempt}");
    let logs_uri = format!("vk-observer://attempts/{attempt}/logs");
    subscribe(&c, &status_uri).await.unwrap();
    subscribe(&c, &logs_uri).await.unwrap();
    subscribe(&c, &logs_uri).await.unwrap();
    until_held(&daemon, 2, "one per distinct URI").await;
    // Ingest may still be settling refreshes of the attempt: start from silence.
    while !updates_within(&mut updates, Duration::from_millis(500))
        .await
        .is_empty()
    {}

    let changed = Instant::now();
    sim.append_log(pid, Channel::Normalized, note("second"));
    let (at, uri) = tokio::time::timeout(Duration::from_secs(10), updates.recv())
        .await
        .expect("an update after the change")
        .unwrap();
    assert!(uri == status_uri || uri == logs_uri, "{uri}");
    assert!(at.duration_since(changed) < Duration::from_secs(3));
    let mut seen = vec![uri];
    seen.extend(updates_within(&mut updates, Duration::from_millis(500)).await);
    assert!(
        seen.contains(&status_uri) && seen.contains(&logs_uri),
        "{seen:?}"
    );
    let logs = read(&c, &logs_uri).await.unwrap();
    assert_eq!(logs["entries"].as_array().unwrap().len(), 2, "{logs}");

    unsubscribe(&c, &status_uri).await.unwrap();
    unsubscribe(&c, &logs_uri).await.unwrap();
    until_held(&daemon, 0, "after unsubscribing").await;
    sim.append_log(pid, Channel::Normalized, note("third"));
    let after = updates_within(&mut updates, Duration::from_millis(1500)).await;
    assert!(after.is_empty(), "updates after unsubscribe: {after:?}");

    // A session that ends (its DELETE) releases what it held.
    subscribe(&c, &status_uri).await.unwrap();
    let (other, _) = client(&daemon).await;
    subscribe(&other, &logs_uri).await.unwrap();
    until_held(&daemon, 2, "two sessions").await;
    c.cancel().await.unwrap();
    until_held(&daemon, 1, "after the first session closed").await;
    other.cancel().await.unwrap();
    until_held(&daemon, 0, "after both sessions closed").await;
    assert_eq!(
        daemon.store.hub().channel_count(),
        0,
        "hub channels released"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_at_most_its_cap_of_subscriptions() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = vk_observer_config::McpSettings {
        max_subscriptions_per_session: 1,
        ..Default::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let (attempt, _) = running_attempt(&sim, &daemon).await;
    let (c, _) = client(&daemon).await;
    let status_uri = format!("vk-observer://attempts/{attempt}");
    subscribe(&c, &status_uri).await.unwrap();
    subscribe(&c, &status_uri)
        .await
        .expect("the same URI again is the same subscription");
    let e = mcp_error(
        subscribe(&c, &format!("{status_uri}/logs"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, ErrorCode::INVALID_REQUEST, "{e:?}");
    let data = e.data.expect("the envelope in data");
    assert_eq!(data["code"], "too_many_subscriptions", "{data}");
    assert_eq!(data["details"]["max_subscriptions_per_session"], 1);
    assert!(e.message.contains("max_subscriptions_per_session"));
    // Another session has its own cap.
    let (other, _) = client(&daemon).await;
    subscribe(&other, &format!("{status_uri}/logs"))
        .await
        .unwrap();
    // Unsubscribing makes room.
    unsubscribe(&c, &status_uri).await.unwrap();
    subscribe(&c, &format!("{status_uri}/logs")).await.unwrap();
    c.cancel().await.unwrap();
    other.cancel().await.unwrap();
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_mode_reads_resources_but_refuses_subscriptions() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = vk_observer_config::McpSettings {
        stateless: true,
        ..Default::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let (attempt, _) = running_attempt(&sim, &daemon).await;
    let (c, _) = client(&daemon).await;
    let caps = c.peer_info().expect("server info").capabilities.clone();
    assert_eq!(caps.resources.expect("resources").subscribe, None);
    let uri = format!("vk-observer://attempts/{attempt}");
    assert_eq!(
        read(&c, &uri).await.unwrap()["attempt_id"],
        attempt.to_string()
    );
    let e = mcp_error(subscribe(&c, &uri).await.unwrap_err());
    assert_eq!(
        e.data.as_ref().unwrap()["code"],
        "subscriptions_unavailable"
    );
    assert!(e.message.contains("stateless"), "{e:?}");
    c.cancel().await.unwrap();
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_listen_streams_updates_of_the_accepted_uris_until_cancelled() {
    use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let (attempt, pid) = running_attempt(&sim, &daemon).await;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(format!(
        "http://{}/mcp",
        daemon.addr
    ));
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let c = ().serve_with_lifecycle(transport, lifecycle).await.unwrap();
    let uri = format!("vk-observer://attempts/{attempt}");
    let unknown = format!("vk-observer://attempts/{}", Uuid::new_v4());
    let filter = SubscriptionFilter::builder()
        .resource_subscriptions([uri.clone(), unknown, "vk-observer://nope".into()])
        .build();
    let mut sub = c.peer().listen(filter).await.expect("listen acknowledged");
    assert_eq!(
        sub.acknowledged().resource_subscriptions.as_deref(),
        Some(std::slice::from_ref(&uri)),
        "only the URI naming a cached attempt is accepted"
    );
    until_held(&daemon, 1, "while listening").await;
    sim.append_log(pid, Channel::Normalized, note("for the listener"));
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
    until_held(&daemon, 0, "after the listen was cancelled").await;
    let _ = c.cancel().await;
    daemon.shutdown().await;
}
