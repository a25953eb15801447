//! HTTP plumbing shared by the routes: VK's `{success,data,error_data,message}` envelope, the
//! empty-body 404, token auth as VK's `require_api_auth` does it, and the route call counters.

use std::sync::Arc;

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::core::Inner;

pub(crate) type AppState = Arc<Inner>;

/// 200 with `{"success":true,"data":…}`.
pub(crate) fn ok(data: impl Into<Value>) -> Response {
    Json(json!({"success": true, "data": data.into(), "error_data": null, "message": null}))
        .into_response()
}

/// An error envelope with a status.
pub(crate) fn fail(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"success": false, "data": null, "error_data": null, "message": message})),
    )
        .into_response()
}

/// Unknown id: 404 with an empty body, as VK answers.
pub(crate) fn not_found() -> Response {
    StatusCode::NOT_FOUND.into_response()
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (prefix, rest) = v.split_once(' ')?;
    let t = rest.trim();
    (prefix.eq_ignore_ascii_case("bearer") && !t.is_empty()).then(|| t.to_string())
}

fn query_token(req: &Request) -> Option<String> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "token" && !v.trim().is_empty()).then(|| v.trim().to_string())
    })
}

/// Token auth on `/api/**`: Bearer or X-API-Token; `?token=` only on `/api/events` and WS.
pub(crate) async fn auth(State(inner): State<AppState>, req: Request, next: Next) -> Response {
    let Some(expected) = inner.cfg.auth_token.clone() else {
        return next.run(req).await;
    };
    if !req.uri().path().starts_with("/api/") {
        return next.run(req).await;
    }
    let headers = req.headers();
    let is_ws = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let presented = bearer(headers)
        .or_else(|| {
            headers
                .get("x-api-token")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        })
        .or_else(|| {
            (req.uri().path().starts_with("/api/events") || is_ws)
                .then(|| query_token(&req))
                .flatten()
        });
    if presented.as_deref() != Some(expected.as_str()) {
        return fail(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    next.run(req).await
}

/// Counts every call by matched route.
pub(crate) async fn count(State(inner): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let is_ws = req.headers().contains_key(header::UPGRADE);
    let method = req.method().clone();
    if let Some(route) = route {
        inner.count(|c| {
            *c.by_route.entry(format!("{method} {route}")).or_default() += 1;
            if is_ws {
                c.ws_connections += 1;
            } else if route == "/api/events" {
                c.sse_connections += 1;
            } else if method == Method::GET && route.starts_with("/api/") {
                c.rest_gets += 1;
            }
        });
    }
    next.run(req).await
}
