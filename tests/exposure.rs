//! Exposure of `/mcp`: bearer token when configured (and mandatory off loopback), Host and
//! Origin validation against DNS rebinding (403), a body-size cap (413), and caps on concurrent
//! sessions (503) and parked waits (`too_many_waiters`), each a clear error. A session's
//! `DELETE` answers 200 (what MCP clients take as success), then 404 for the closed session.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use support::mcp::Mcp;
use vk_observer_config::{McpSettings, Settings};

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"0"}}}"#;

async fn post(addr: std::net::SocketAddr, headers: &[(&str, &str)], body: String) -> (u16, String) {
    let mut rb = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.body(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_origin_host_and_body_are_checked() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = McpSettings {
        token: Some("s3cret-token".into()),
        max_body_bytes: 8 * 1024,
        ..McpSettings::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let addr = daemon.addr;

    let (status, body) = post(addr, &[], INIT.into()).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("VK_OBSERVER_MCP_TOKEN"));
    assert_eq!(
        post(addr, &[("authorization", "Bearer wrong")], INIT.into())
            .await
            .0,
        401
    );
    let auth = ("authorization", "Bearer s3cret-token");
    assert_eq!(post(addr, &[auth], INIT.into()).await.0, 200);

    // DNS rebinding: a page on another origin, or a request for another host name, is refused.
    let (status, _) = post(
        addr,
        &[auth, ("origin", "http://evil.example.com")],
        INIT.into(),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = post(addr, &[auth, ("host", "evil.example.com")], INIT.into()).await;
    assert_eq!(status, 403);
    let (status, _) = post(
        addr,
        &[auth, ("origin", "http://localhost:5173")],
        INIT.into(),
    )
    .await;
    assert_eq!(status, 200, "a local page is fine");

    // Body cap.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{"pad":"{}"}}}}"#,
        "x".repeat(64 * 1024)
    );
    let (status, _) = post(addr, &[auth], big).await;
    assert_eq!(status, 413);

    // A real client with the token works end to end.
    let mut headers = HashMap::new();
    headers.insert(
        "authorization".to_string(),
        "Bearer s3cret-token".to_string(),
    );
    let mcp = Mcp::connect_with(addr, headers).await;
    assert!(mcp.tool_names().await.len() >= 19);
    mcp.call("list_projects", json!({})).await.ok();
    // Health stays open for probes.
    let health = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_address_without_a_token_is_refused() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    // The daemon only starts from validated settings: the refusal is the validation's.
    let r = Settings {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..support::settings(&sim.base_url(), dir.path(), McpSettings::default())
    }
    .validate();
    let err = r.expect_err("must refuse").to_string();
    assert!(err.contains("VK_OBSERVER_MCP_TOKEN"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_waiters_are_capped() {
    let sim = support::sim().await;
    let project = sim.add_project("Caps", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let settings = McpSettings {
        max_sessions: 2,
        max_waiters: 2,
        ..McpSettings::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let first = Mcp::connect(daemon.addr).await;
    let second = Mcp::connect(daemon.addr).await;
    let (status, body) = post(daemon.addr, &[], INIT.into()).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("max_sessions"));

    // Two parked waits fill the cap; a third is refused with a retryable envelope.
    for _ in 0..100 {
        if let support::mcp::Reply::Ok(_) = first
            .call("list_repos", json!({"project_id": project}))
            .await
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = std::sync::Arc::new(first);
    let mut parked = Vec::new();
    for _ in 0..2 {
        let c = first.clone();
        parked.push(tokio::spawn(async move {
            c.call(
                "wait_for_attempt_change",
                json!({"project_id": project, "timeout_ms": 3000}),
            )
            .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = second
        .call(
            "wait_for_attempt_change",
            json!({"project_id": project, "timeout_ms": 3000}),
        )
        .await
        .err();
    assert_eq!(refused["code"], "too_many_waiters");
    assert_eq!(refused["retryable"], true);
    for p in parked {
        assert_eq!(p.await.unwrap().ok()["changed"], false);
    }
    // Slots are given back.
    let again = second
        .call(
            "wait_for_attempt_change",
            json!({"project_id": project, "timeout_ms": 100}),
        )
        .await
        .ok();
    assert_eq!(again["changed"], false);
    daemon.shutdown().await;
}

async fn delete(addr: std::net::SocketAddr, session: Option<&str>) -> u16 {
    let mut rb = reqwest::Client::new()
        .delete(format!("http://{addr}/mcp"))
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(id) = session {
        rb = rb.header("mcp-session-id", id);
    }
    rb.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_answers_200_then_404() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let r = reqwest::Client::new()
        .post(format!("http://{}/mcp", daemon.addr))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INIT)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    // The Python SDK logs "Session termination failed" for anything but 200/204 (405 aside).
    assert_eq!(delete(daemon.addr, Some(&id)).await, 200);
    assert_eq!(delete(daemon.addr, Some(&id)).await, 404, "already closed");
    let (status, _) = post(
        daemon.addr,
        &[
            ("mcp-session-id", &id),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.into(),
    )
    .await;
    assert_eq!(status, 404, "the session is gone");
    assert_eq!(delete(daemon.addr, None).await, 400, "no session id");
    daemon.shutdown().await;
}
