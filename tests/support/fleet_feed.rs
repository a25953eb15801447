//! A project's activity feed followed over MCP (rmcp's client) by `since_token`, through a
//! server that is killed and restarted on the same address (tests/fleet_kill.rs: the fleet-node
//! binary under SIGKILL). A failed call or connection is retried on a new session; the feed may
//! never be reset and its token never go back. What it collected is checked with
//! `support::feed::check_store_feed`, like an in-process follower's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::feed::{FeedSeen, item_ident};

/// How long one call may take before the session is given up and a new one opened.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a follower is: the progress of its last `next_since_token` (`fleet_tokens::progress`).
pub type Progress = Arc<AtomicU64>;

async fn connect(addr: std::net::SocketAddr) -> Option<RunningService<RoleClient, ()>> {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"));
    let transport = StreamableHttpClientTransport::from_config(config);
    let connecting = ().serve(transport);
    tokio::time::timeout(CALL_TIMEOUT, connecting)
        .await
        .ok()?
        .ok()
}

/// Why a call got no answer.
enum NoAnswer {
    /// The server could not be reached: open a new session.
    Unreachable,
    /// A retryable refusal, or the project not replicated yet: ask again.
    NotYet,
}

/// A tool's answer (any other error envelope than [`NoAnswer::NotYet`]'s fails the test).
async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
) -> Result<Value, NoAnswer> {
    let Value::Object(map) = args else {
        unreachable!("arguments are an object")
    };
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(map);
    let r = tokio::time::timeout(CALL_TIMEOUT, client.peer().call_tool(params))
        .await
        .map_err(|_| NoAnswer::Unreachable)?
        .map_err(|_| NoAnswer::Unreachable)?;
    let text = r
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone());
    if r.is_error == Some(true) {
        let envelope: Value = serde_json::from_str(&text.unwrap_or_default()).unwrap();
        assert!(
            envelope["retryable"] == true || envelope["code"] == "not_found",
            "{tool} refused while following the fleet's feed: {envelope}"
        );
        return Err(NoAnswer::NotYet);
    }
    r.structured_content
        .or_else(|| text.and_then(|t| serde_json::from_str(&t).ok()))
        .ok_or(NoAnswer::Unreachable)
}

/// The token of any answer from the server at `addr` (retried until it answers).
pub async fn first_token(addr: std::net::SocketAddr) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Some(client) = connect(addr).await
            && let Ok(v) = call(&client, "list_projects", json!({})).await
        {
            return v["token"].as_str().expect("an answer's token").to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the server at {addr} does not answer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Follow `project`'s feed at `addr` from `since` until `stop`, across restarts of the server.
pub fn follow(
    addr: std::net::SocketAddr,
    project: uuid::Uuid,
    since: String,
    stop: Arc<AtomicBool>,
    progress: Progress,
) -> tokio::task::JoinHandle<FeedSeen> {
    tokio::spawn(async move {
        let mut since = since;
        let mut seen = FeedSeen::new();
        let mut client = None;
        while !stop.load(Ordering::Relaxed) {
            let Some(c) = &client else {
                client = connect(addr).await;
                if client.is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                continue;
            };
            let args = json!({"project_id": project, "since_token": since, "limit": 7});
            let page = match call(c, "tail_project_activity", args).await {
                Ok(page) => page,
                Err(NoAnswer::Unreachable) => {
                    client = None;
                    continue;
                }
                Err(NoAnswer::NotYet) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            assert_eq!(page["token_reset"], false, "the feed was reset: {page}");
            for item in page["items"].as_array().expect("items") {
                seen.push(item_ident(item));
            }
            let next = page["next_since_token"].as_str().expect("next_since_token");
            assert!(
                !super::fleet_tokens::went_back(&since, next),
                "the fleet's feed token went back from {since} to {next}"
            );
            since = next.to_owned();
            progress.store(super::fleet_tokens::progress(&since), Ordering::Relaxed);
            if page["has_more"] != true {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }
        seen
    })
}
