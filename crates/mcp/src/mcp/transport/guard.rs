//! HTTP guards in front of `/mcp`: the bearer token (required when configured, and always for a
//! non-loopback listen address) and the cap on concurrent sessions; requests that pass go on
//! through long-poll parking (`park`) to rmcp. Host/Origin validation and
//! the body-size cap are rmcp's (configured in `mcp::transport::http`). A session's `DELETE` is answered
//! `200 OK` (see `terminate_session`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::json;

use crate::config::McpSettings;
use crate::telemetry::{self, label};

#[derive(Clone)]
pub struct GuardState {
    /// The `[mcp]` section: `token`, `max_sessions`, `stateless`.
    pub settings: Arc<McpSettings>,
    pub sessions: Arc<LocalSessionManager>,
    /// The long-poll parking step that follows the checks (`park`).
    pub parking: super::park::Parking,
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// Constant-time comparison, so the token cannot be guessed byte by byte from timings.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn guard(State(g): State<GuardState>, req: Request, next: Next) -> Response {
    if let Some(token) = &g.settings.token {
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !presented.is_some_and(|p| same(p.as_bytes(), token.as_bytes())) {
            metrics::counter!(telemetry::HTTP_REFUSED, label::REASON => telemetry::HttpRefusal::Unauthorized.as_str())
                .increment(1);
            let mut r = refuse(
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token: send `Authorization: Bearer <VK_OBSERVER_MCP_TOKEN>`",
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    let opens_session = !g.settings.stateless
        && req.method() == axum::http::Method::POST
        && !req.headers().contains_key("mcp-session-id");
    if opens_session && g.sessions.sessions.read().await.len() >= g.settings.max_sessions {
        metrics::counter!(telemetry::HTTP_REFUSED, label::REASON => telemetry::HttpRefusal::TooManySessions.as_str())
            .increment(1);
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many open MCP sessions: close idle clients (sessions expire after 5 minutes idle) or raise [mcp] max_sessions",
        );
    }
    // A request on a session rmcp no longer knows is answered 404 by rmcp: never park it first.
    let stale_session = match req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        Some(id) => !g.sessions.sessions.read().await.contains_key(id),
        None => false,
    };
    // In stateless mode rmcp answers every DELETE 405 (no sessions to end), as the spec says.
    if req.method() == axum::http::Method::DELETE && !g.settings.stateless {
        if stale_session {
            // rmcp would "close" an unknown session and say 202; the spec's answer is 404.
            return refuse(StatusCode::NOT_FOUND, "session not found");
        }
        return terminate_session(req, next).await;
    }
    if stale_session {
        return next.run(req).await;
    }
    super::park::park_waits(&g.parking, req, next).await
}

/// rmcp 3.9 closes the session and answers `202 Accepted`. The spec (Streamable HTTP, Session
/// Management) leaves the success status open but names 405 for "termination not supported";
/// clients read success as 200/204: the Python SDK logs `Session termination failed: 202`
/// at every close otherwise, and the TypeScript SDK's own server answers 200. The session is
/// gone once rmcp returns, so 200 is the truth; rmcp's other answers (400 without a session
/// id, 405 in stateless mode) pass unchanged. An unknown session is answered 404 by `guard`.
async fn terminate_session(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    if resp.status() == StatusCode::ACCEPTED {
        *resp.status_mut() = StatusCode::OK;
    }
    resp
}
