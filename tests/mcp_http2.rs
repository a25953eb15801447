//! HTTP/2 beside HTTP/1.1 on the daemon's one listener (h2c with prior knowledge): rmcp's MCP
//! client over an HTTP/2-only reqwest client initializes, parks a wait with progress
//! notifications and is woken by a simulator change; one HTTP/2 connection holds more parked
//! waits than hyper's default stream limit (200); Host (`:authority`) and Origin are checked for
//! HTTP/2 requests as for HTTP/1.1 ones.

mod support;

use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientRequest, ServerResult};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use vk_observer_sim::{Channel, RunReason};

/// A client that speaks HTTP/2 only (no HTTP/1.1 fallback: a daemon without h2c fails it).
fn h2_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder().http2_prior_knowledge()
}

fn note(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}})
}

fn arguments(v: Value) -> serde_json::Map<String, Value> {
    let Value::Object(m) = v else { unreachable!() };
    m
}

/// Records each progress notification's value.
struct ProgressSink(mpsc::UnboundedSender<f64>);

impl rmcp::ClientHandler for ProgressSink {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(params.progress);
    }
}

type H2Mcp = rmcp::service::RunningService<rmcp::RoleClient, ProgressSink>;

async fn status(client: &H2Mcp, args: Value) -> Value {
    let params = CallToolRequestParams::new("get_attempt_status").with_arguments(arguments(args));
    let r = client.peer().call_tool(params).await.expect("status call");
    r.structured_content.expect("structured answer")
}

/// A token after which the attempt stayed unchanged for a while (ingest settles background
/// refreshes right after the process starts).
async fn quiet_token(client: &H2Mcp, attempt: uuid::Uuid) -> Value {
    for _ in 0..100 {
        let now = status(client, json!({"attempt_ids": [attempt]})).await;
        let running = now["attempts"][0]["state"] == "running";
        tokio::time::sleep(Duration::from_millis(400)).await;
        let after = status(
            client,
            json!({"attempt_ids": [attempt], "since_token": now["token"]}),
        )
        .await;
        if running && after["attempts"].as_array().is_some_and(|a| a.is_empty()) {
            return now["token"].clone();
        }
    }
    panic!("the attempt never went quiet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_over_http2_parks_a_wait_with_progress_and_is_woken() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = vk_observer_config::McpSettings {
        progress_every: Duration::from_millis(200),
        ..Default::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let project = sim.add_project("Over HTTP/2", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "A", None), "CLAUDE_CODE");
    let process = sim.start_process(a.session_id, RunReason::CodingAgent);

    let (tx, mut progress) = mpsc::unbounded_channel();
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("http://{}/mcp", daemon.addr),
        );
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        h2_client().build().unwrap(),
        config,
    );
    // `initialize` and every later request go over HTTP/2: the client has no other protocol.
    let client = rmcp::ServiceExt::serve(ProgressSink(tx), transport)
        .await
        .expect("MCP client initializes over HTTP/2");
    let token = quiet_token(&client, a.attempt_id).await;

    let params = CallToolRequestParams::new("wait_for_attempt_change").with_arguments(arguments(
        json!({"attempt_ids": [a.attempt_id], "since_token": token, "timeout_ms": 30000}),
    ));
    let call = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
    let handle = client
        .peer()
        .send_cancellable_request(call, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    for _ in 0..2 {
        // Generous on a loaded machine; the interval itself is 200 ms.
        tokio::time::timeout(Duration::from_secs(10), progress.recv())
            .await
            .expect("progress while parked over HTTP/2")
            .unwrap();
    }
    sim.append_log(process, Channel::Normalized, note("wake up"));
    let answer = tokio::time::timeout(Duration::from_secs(20), handle.await_response())
        .await
        .expect("the change wakes the wait")
        .unwrap();
    let ServerResult::CallToolResult(r) = answer else {
        panic!("not a tool result: {answer:?}")
    };
    let out = r.structured_content.expect("structured answer");
    assert_eq!(out["changed"], true, "{out}");
    assert_eq!(out["attempts"][0]["attempt_id"], a.attempt_id.to_string());
    assert_eq!(out["outcome"], "changed", "{out}");
    let _ = client.cancel().await;
    daemon.shutdown().await;
}

/// A stateless JSON-RPC tool call posted by `http` (an HTTP/2 client): its answer.
async fn plain_call(http: reqwest::Client, url: String, name: &str, args: Value) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": args}});
    let r = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(call.to_string())
        .send()
        .await
        .expect("answered");
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    let v: Value = r.json().await.expect("a JSON-RPC answer");
    v["result"]["structuredContent"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_http2_connection_holds_more_waits_than_hyper_s_default_stream_limit() {
    const WAITS: u64 = 250;
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = vk_observer_config::McpSettings {
        stateless: true,
        ..Default::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let project = sim.add_project("Many streams", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "A", None), "CLAUDE_CODE");
    let process = sim.start_process(a.session_id, RunReason::CodingAgent);
    // One client: reqwest multiplexes every request on one HTTP/2 connection.
    let http = h2_client().build().unwrap();
    let url = format!("http://{}/mcp", daemon.addr);
    let ids = json!({"attempt_ids": [a.attempt_id]});
    let mut token = Value::Null;
    for _ in 0..100 {
        let now = plain_call(http.clone(), url.clone(), "get_attempt_status", ids.clone()).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let since = json!({"attempt_ids": [a.attempt_id], "since_token": now["token"]});
        let after = plain_call(http.clone(), url.clone(), "get_attempt_status", since).await;
        if now["attempts"][0]["state"] == "running"
            && after["attempts"].as_array().is_some_and(|a| a.is_empty())
        {
            token = now["token"].clone();
            break;
        }
    }
    assert!(!token.is_null(), "the attempt never went quiet");
    let wait = json!({"project_id": project, "since_token": token, "timeout_ms": 60000});
    let waits: Vec<_> = (0..WAITS)
        .map(|_| {
            let call = plain_call(
                http.clone(),
                url.clone(),
                "wait_for_attempt_change",
                wait.clone(),
            );
            tokio::spawn(call)
        })
        .collect();
    let parked = || {
        daemon
            .health
            .waits_parked
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let started = Instant::now();
    while parked() < WAITS && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        parked(),
        WAITS,
        "all {WAITS} waits parked at once (hyper's default would hold 200)"
    );
    assert!(waits.iter().all(|w| !w.is_finished()), "none answered yet");
    sim.append_log(process, Channel::Normalized, note("wake them all"));
    for w in waits {
        let answer = tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(answer["changed"], true, "{answer}");
    }
    daemon.shutdown().await;
}

async fn initialize(http: &reqwest::Client, url: &str, origin: Option<&str>) -> reqwest::Response {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let mut rb = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(o) = origin {
        rb = rb.header("origin", o);
    }
    rb.body(init.to_string()).send().await.expect("answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_requests_meet_the_host_and_origin_checks_and_http1_still_works() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let port = daemon.addr.port();
    // A name that resolves here but is not an allowed host: what a DNS-rebinding page sends.
    let h2 = h2_client()
        .resolve("rebound.example", daemon.addr)
        .resolve("localhost", daemon.addr)
        .build()
        .unwrap();
    let ok = initialize(&h2, &format!("http://127.0.0.1:{port}/mcp"), None).await;
    assert_eq!(ok.version(), reqwest::Version::HTTP_2);
    assert_eq!(ok.status(), 200);
    let foreign_host = initialize(&h2, &format!("http://rebound.example:{port}/mcp"), None).await;
    assert_eq!(foreign_host.version(), reqwest::Version::HTTP_2);
    assert_eq!(
        foreign_host.status(),
        403,
        "a foreign :authority is refused"
    );
    let foreign_origin = initialize(
        &h2,
        &format!("http://127.0.0.1:{port}/mcp"),
        Some("http://rebound.example"),
    )
    .await;
    assert_eq!(foreign_origin.status(), 403, "a foreign Origin is refused");
    let local_origin = initialize(
        &h2,
        &format!("http://localhost:{port}/mcp"),
        Some(&format!("http://localhost:{port}")),
    )
    .await;
    assert_eq!(local_origin.status(), 200);

    let http1 = reqwest::Client::builder().http1_only().build().unwrap();
    let old = initialize(&http1, &format!("http://127.0.0.1:{port}/mcp"), None).await;
    assert_eq!(old.version(), reqwest::Version::HTTP_11);
    assert_eq!(old.status(), 200);
    let health = http1
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    daemon.shutdown().await;
}
