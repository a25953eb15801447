//! Tool approvals on 0.1.x's wire (the world's approvals, `crate::approvals`):
//! `/api/approvals/stream/ws` (snapshot `replace /pending {…}`, `Ready`, then `replace` — not
//! `add` — of `/pending/{id}` with an `ApprovalInfo` for a new approval and `remove` when it is
//! answered or cancelled), `POST /api/approvals/{id}/respond` (the nested `ApprovalStatus`,
//! answered in the envelope; an answered, cancelled or unknown id is a 500 with an empty body),
//! and the cancel a stop makes of a process's pending approval.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::streams::{READY, patch_frame};
use crate::approvals::{Answer, RespondBody, SimApproval, SimApprovalStatus, answer};
use crate::core::Inner;
use crate::http::{AppState, ok};
use crate::types::{Channel, ProcessStatus};
use crate::world::World;

/// What VK writes when a stop cancels the approval an agent waits for (rec:
/// ws-normalized-approval-pending.jsonl).
const CANCELLED: &str = "Approval service error: executor approval request cancelled";

fn tool_name(a: &SimApproval) -> String {
    a.entry
        .pointer("/content/entry_type/tool_name")
        .and_then(Value::as_str)
        .unwrap_or("Bash")
        .to_string()
}

/// Still waiting for an answer: pending, and its process still runs.
fn is_pending(w: &World, a: &SimApproval) -> bool {
    a.status == SimApprovalStatus::Pending
        && w.processes
            .get(&a.execution_process_id)
            .is_some_and(|p| p.status == ProcessStatus::Running)
}

/// The pending approvals as `ApprovalInfo`s, by id.
fn pending(inner: &Inner) -> BTreeMap<Uuid, Value> {
    let w = inner.world();
    w.approvals
        .iter()
        .filter(|(_, a)| is_pending(&w, a))
        .map(|(id, a)| {
            let info = json!({
                "approval_id": id, "tool_name": tool_name(a),
                "execution_process_id": a.execution_process_id, "is_question": false,
                "created_at": a.created_at, "timeout_at": a.timeout_at,
            });
            (*id, info)
        })
        .collect()
}

pub(crate) async fn stream_ws(State(inner): State<AppState>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |s| serve(inner, s))
}

/// The frames that take a client from `before` to `now`.
fn changes(before: &BTreeMap<Uuid, Value>, now: &BTreeMap<Uuid, Value>) -> Vec<String> {
    let added = now
        .iter()
        .filter(|(id, _)| !before.contains_key(id))
        .map(|(id, v)| json!([{"op": "replace", "path": format!("/pending/{id}"), "value": v}]));
    let removed = before
        .keys()
        .filter(|id| !now.contains_key(id))
        .map(|id| json!([{"op": "remove", "path": format!("/pending/{id}")}]));
    added.chain(removed).map(|p| patch_frame(&p)).collect()
}

async fn serve(inner: Arc<Inner>, mut socket: WebSocket) {
    let kill = inner.conn_token();
    let mut rings = inner.approvals_tx.subscribe();
    // Process changes too: a process that ends while its approval waits takes it away.
    let (_, mut feed, _) = inner.bus.subscribe_from(Some(u64::MAX));
    let mut sent = pending(&inner);
    let map: serde_json::Map<String, Value> = sent
        .iter()
        .map(|(id, v)| (id.to_string(), v.clone()))
        .collect();
    let snapshot = json!([{"op": "replace", "path": "/pending", "value": map}]);
    for text in [patch_frame(&snapshot), READY.to_string()] {
        if socket.send(Message::Text(text.into())).await.is_err() {
            return;
        }
    }
    loop {
        tokio::select! {
            _ = kill.cancelled() => return,
            _ = inner.shutdown.cancelled() => return,
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => continue,
            },
            r = rings.recv() => if matches!(r, Err(RecvError::Closed)) { return },
            m = feed.recv() => if matches!(m, Err(RecvError::Closed)) { return },
        }
        let now = pending(&inner);
        for text in changes(&sent, &now) {
            if kill.is_cancelled() || socket.send(Message::Text(text.into())).await.is_err() {
                return;
            }
        }
        sent = now;
    }
}

/// `POST /api/approvals/{id}/respond`: `{"success":true,"data":{"status":…}}`, or 500 empty.
pub(crate) async fn respond(
    State(inner): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<RespondBody>,
) -> Response {
    let failed = || StatusCode::INTERNAL_SERVER_ERROR.into_response();
    let Ok(id) = Uuid::parse_str(&id) else {
        return failed();
    };
    let waiting = {
        let w = inner.world();
        w.approvals.get(&id).is_some_and(|a| is_pending(&w, a))
    };
    if !waiting {
        return failed();
    }
    match answer(&inner, id, body.execution_process_id, body.status) {
        Answer::Answered(status) => ok(serde_json::to_value(status).unwrap_or(Value::Null)),
        Answer::Unknown | Answer::Recorded(_) => failed(),
    }
}

/// A stop of `pid` cancels what it waits for: the tool call is `denied` with VK's reason and a
/// `user_feedback` entry follows, before the process ends. The waiting script sees its process
/// stopped and goes no further.
pub(crate) fn cancel_for_process(inner: &Inner, pid: Uuid) {
    let cancelled: Vec<(u64, Value, String)> = {
        let mut w = inner.world();
        w.approvals
            .values_mut()
            .filter(|a| a.execution_process_id == pid && a.status == SimApprovalStatus::Pending)
            .map(|a| {
                a.status = SimApprovalStatus::Denied {
                    reason: Some(CANCELLED.to_string()),
                };
                (a.entry_index, a.entry.clone(), tool_name(a))
            })
            .collect()
    };
    if cancelled.is_empty() {
        return;
    }
    for (idx, mut entry, tool) in cancelled {
        if let Some(s) = entry.pointer_mut("/content/entry_type/status") {
            *s = json!({"status": "denied", "reason": CANCELLED});
        }
        inner.replace_log(pid, Channel::Normalized, idx, entry);
        let feedback = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
            "entry_type": {"type": "user_feedback", "denied_tool": tool},
            "content": CANCELLED, "metadata": null}});
        inner.append_log(pid, Channel::Normalized, feedback);
    }
    inner.approvals_changed();
}
