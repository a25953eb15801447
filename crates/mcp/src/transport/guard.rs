//! HTTP guards in front of `/mcp`: the bearer token (required once `[mcp] token` is set or the
//! tokens file holds one, and always for a non-loopback listen address), which becomes the
//! request's `access::Caller` (in its extensions, for the handlers), and the cap on concurrent
//! sessions; requests that pass go on
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

use crate::access::TokenBook;
use vk_observer_config::McpSettings;
use vk_observer_telemetry::{self as telemetry, label};

#[derive(Clone)]
pub struct GuardState {
    /// The `[mcp]` section: `token`, `max_sessions`, `stateless`.
    pub settings: Arc<McpSettings>,
    /// `[mcp] token` and the tokens file: who a bearer token is.
    pub tokens: Arc<TokenBook>,
    pub sessions: Arc<LocalSessionManager>,
    /// The long-poll parking step that follows the checks (`park`).
    pub parking: super::park::Parking,
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": message}});
    (status, axum::Json(body)).into_response()
}

pub async fn guard(State(g): State<GuardState>, mut req: Request, next: Next) -> Response {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // One answer for every failure (unknown, revoked, malformed): nothing about which part was
    // wrong, and never the presented value.
    let Ok(caller) = g.tokens.authenticate(authorization) else {
        metrics::counter!(telemetry::HTTP_REFUSED, label::REASON => telemetry::HttpRefusal::Unauthorized.as_str())
            .increment(1);
        let mut r = refuse(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token: send `Authorization: Bearer <token>` (VK_OBSERVER_MCP_TOKEN, or a token from `vk-observer token create`)",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    };
    // A caller that may not read is refused by the tool, never parked first; nor is a limited
    // one (`unlimited_reader`), so a refused wait never says when a foreign attempt changed.
    let may_park = unlimited_reader(&g, &caller, &req);
    req.extensions_mut().insert(caller);
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
    if stale_session || !may_park {
        return next.run(req).await;
    }
    super::park::park_waits(&g.parking, req, next).await
}

/// Whether `caller` reads everything: scope `read`, no project limit, and not a tokenless
/// client inside an attempt workspace (its `x-vk-workspace` placed by the remembered lookup,
/// `query::workspaces`). Only such a caller's waits are parked before the tool's grant check.
fn unlimited_reader(g: &GuardState, caller: &crate::access::Caller, req: &Request) -> bool {
    let in_workspace = || {
        req.headers()
            .get(crate::WORKSPACE_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|d| !d.is_empty())
            .is_some_and(|d| {
                let dir = std::path::Path::new(d);
                !matches!(g.parking.query.own_attempt_at(dir), Ok(None))
            })
    };
    caller
        .scopes
        .contains(vk_observer_config::access::Scope::Read)
        && caller.projects.is_none()
        && (caller.presented_token || !in_workspace())
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
