//! The board's two actions: answer an approval (`POST /board/api/approvals/{id}`, body
//! `{"decision": "approve" | "deny", "reason"?}`) and stop an attempt
//! (`POST /board/api/attempts/{id}/stop`).
//!
//! Each runs the tool itself — `respond_approval`, `stop_attempt` — through
//! `VkTools::call_as` for the request's caller: the grant checked (scope `approve`, `write`;
//! a project limit), then the tool's handler with its audit entry (the token's name as the
//! caller), the proxy's request to VK and its read-your-writes wait; on a fleet node the owning
//! host runs it. The board adds only what a browser needs in front: the Origin check (before
//! anything is read) and a JSON body. Each action carries a fresh `request_id`, so a resent
//! request replays the first answer instead of acting twice.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::{CallToolResult, JsonObject};
use serde::Deserialize;
use serde_json::Value;

use super::{BoardError, BoardState, auth};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Respond {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    /// Idempotency key of this press of the button (the page makes one per press).
    #[serde(default)]
    request_id: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Stop {
    #[serde(default)]
    request_id: Option<String>,
}

/// The body as JSON, or a message saying what is wrong with it.
fn body<T: serde::de::DeserializeOwned>(headers: &HeaderMap, raw: &[u8]) -> Result<T, BoardError> {
    let json = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !json {
        return Err(BoardError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_argument",
            "Send the action as JSON (Content-Type: application/json).",
        ));
    }
    serde_json::from_slice(raw).map_err(|e| {
        BoardError::new(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            format!("The action's body is not what the board sends: {e}"),
        )
    })
}

/// `POST /board/api/approvals/{id}`.
pub(crate) async fn respond(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(approval_id): Path<String>,
    raw: axum::body::Bytes,
) -> Response {
    let run = async {
        auth::same_origin(&state, &headers)?;
        let caller = auth::caller(&state, &headers)?;
        let r: Respond = body(&headers, &raw)?;
        let mut args = JsonObject::new();
        args.insert("approval_id".into(), approval_id.into());
        args.insert("decision".into(), r.decision.into());
        if let Some(reason) = r.reason {
            args.insert("reason".into(), reason.into());
        }
        if let Some(id) = r.request_id {
            args.insert("request_id".into(), id.into());
        }
        Ok::<_, BoardError>(state.tools.call_as(&caller, "respond_approval", args).await)
    };
    answer(run.await)
}

/// `POST /board/api/attempts/{id}/stop`.
pub(crate) async fn stop(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(attempt_id): Path<String>,
    raw: axum::body::Bytes,
) -> Response {
    let run = async {
        auth::same_origin(&state, &headers)?;
        let caller = auth::caller(&state, &headers)?;
        let s: Stop = if raw.is_empty() {
            Stop::default()
        } else {
            body(&headers, &raw)?
        };
        let mut args = JsonObject::new();
        args.insert("attempt_id".into(), attempt_id.into());
        if let Some(id) = s.request_id {
            args.insert("request_id".into(), id.into());
        }
        Ok::<_, BoardError>(state.tools.call_as(&caller, "stop_attempt", args).await)
    };
    answer(run.await)
}

/// A tool's answer as the page reads it: 200 with the tool's JSON, or the tool's error
/// envelope's code and hint with a status that fits it.
fn answer(result: Result<CallToolResult, BoardError>) -> Response {
    let result = match result {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let text = result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default();
    let value = result
        .structured_content
        .clone()
        .or_else(|| serde_json::from_str::<Value>(&text).ok())
        .unwrap_or(Value::Null);
    if result.is_error != Some(true) {
        return (StatusCode::OK, axum::Json(value)).into_response();
    }
    let field = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_string);
    match (field("code"), field("hint")) {
        (Some(code), Some(hint)) => BoardError::coded(&code, hint).into_response(),
        _ => BoardError::new(StatusCode::BAD_GATEWAY, "internal", text).into_response(),
    }
}
