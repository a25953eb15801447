//! The object WebSockets of 0.1.x, `/api/workspaces/streams/ws` and
//! `/api/execution-processes/stream/session/ws`: a snapshot (`replace` of the whole map),
//! `{"Ready":true}`, then the feed's patches that concern the stream, each as
//! `{"JsonPatch":[op]}` (no sequence numbers, no pings; a restart drops the socket without a
//! close frame).

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::render;
use crate::core::Inner;
use crate::http::AppState;
use crate::world::Workspace;

/// The frame around one patch.
pub(crate) fn patch_frame(patch: &Value) -> String {
    json!({ "JsonPatch": patch }).to_string()
}

/// The frame that ends a snapshot.
pub(crate) const READY: &str = r#"{"Ready":true}"#;

#[derive(Deserialize)]
pub(crate) struct WorkspacesQuery {
    archived: Option<bool>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
pub(crate) struct SessionQuery {
    session_id: Uuid,
}

/// Which object stream a socket serves.
#[derive(Clone, Copy)]
enum Kind {
    /// Every workspace, or only the (un)archived ones; newest first up to a limit.
    Workspaces {
        archived: Option<bool>,
        limit: Option<usize>,
    },
    /// The processes of one session.
    Session(Uuid),
}

pub(crate) async fn workspaces_ws(
    State(inner): State<AppState>,
    Query(q): Query<WorkspacesQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    let kind = Kind::Workspaces {
        archived: q.archived,
        limit: q.limit,
    };
    ws.on_upgrade(move |s| serve(inner, s, kind))
}

/// An unknown session is no error here: an empty snapshot and `Ready` (rec: ws-session-unknown).
pub(crate) async fn session_ws(
    State(inner): State<AppState>,
    Query(q): Query<SessionQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    ws.on_upgrade(move |s| serve(inner, s, Kind::Session(q.session_id)))
}

fn snapshot(inner: &Inner, kind: Kind) -> Value {
    let w = inner.world();
    match kind {
        Kind::Workspaces { archived, limit } => {
            let flags = render::all_flags(&w);
            let mut list: Vec<&Workspace> = w
                .workspaces
                .values()
                .filter(|ws| archived.is_none_or(|a| ws.archived == a))
                .collect();
            list.sort_by_key(|ws| std::cmp::Reverse(ws.ord));
            list.truncate(limit.unwrap_or(usize::MAX));
            let map: Map<String, Value> = list
                .into_iter()
                .map(|ws| {
                    let f = flags.get(&ws.id).copied().unwrap_or_default();
                    (ws.id.to_string(), render::workspace_stream_json(&w, ws, f))
                })
                .collect();
            json!([{"op": "replace", "path": "/workspaces", "value": map}])
        }
        Kind::Session(session) => {
            let mut procs: Vec<_> = w
                .processes
                .values()
                .filter(|p| p.session_id == session)
                .collect();
            procs.sort_by_key(|p| p.ord);
            let map: Map<String, Value> = procs
                .into_iter()
                .map(|p| (p.id.to_string(), render::process_json(&w, p)))
                .collect();
            json!([{"op": "replace", "path": "/execution_processes", "value": map}])
        }
    }
}

/// A session stream's process delta as VK may send it (wire fact 1): nothing at all when
/// `lost_process_deltas` is on; with `stale_process_deltas`, the value with its earlier status
/// `running`.
fn as_vk_sends(inner: &Inner, kind: Kind, mut patch: Value) -> Option<Value> {
    let faults = inner.faults();
    if !matches!(kind, Kind::Session(_)) {
        return Some(patch);
    }
    if faults.lost_process_deltas {
        return None;
    }
    if !faults.stale_process_deltas {
        return Some(patch);
    }
    let value = patch.pointer_mut("/0/value").and_then(Value::as_object_mut);
    if let Some(v) = value
        && v.get("status").and_then(Value::as_str) != Some("running")
    {
        v.insert("status".into(), json!("running"));
        v.insert("exit_code".into(), Value::Null);
        v.insert("completed_at".into(), Value::Null);
    }
    Some(patch)
}

/// What a stream sends of a feed patch. With `?archived=`, a matching workspace's patch goes
/// out as `add` and any other as `remove` (repeated on every update, as 0.1.x does); the
/// session stream forwards every process `remove`, whatever its session.
fn filter(kind: Kind, patch: &Value) -> Option<Value> {
    let op = patch.as_array()?.first()?;
    let path = op.get("path")?.as_str()?;
    let is_remove = op.get("op")?.as_str()? == "remove";
    match kind {
        Kind::Workspaces { archived, .. } => {
            if !path.starts_with("/workspaces/") {
                return None;
            }
            let Some(want) = archived.filter(|_| !is_remove) else {
                return Some(patch.clone());
            };
            if op.pointer("/value/archived").and_then(Value::as_bool) == Some(want) {
                let value = op.get("value").cloned().unwrap_or(Value::Null);
                Some(json!([{"op": "add", "path": path, "value": value}]))
            } else {
                Some(json!([{"op": "remove", "path": path}]))
            }
        }
        Kind::Session(session) => {
            if !path.starts_with("/execution_processes/") {
                return None;
            }
            let sid = op.pointer("/value/session_id").and_then(Value::as_str);
            (is_remove || sid == Some(session.to_string().as_str())).then(|| patch.clone())
        }
    }
}

async fn serve(inner: Arc<Inner>, mut socket: WebSocket, kind: Kind) {
    let kill = inner.conn_token();
    // Subscribed before the snapshot is read: a change in between comes again as a patch.
    let (_, mut live, _) = inner.bus.subscribe_from(Some(u64::MAX));
    for text in [patch_frame(&snapshot(&inner, kind)), READY.to_string()] {
        if socket.send(Message::Text(text.into())).await.is_err() {
            return;
        }
    }
    loop {
        let text = tokio::select! {
            _ = kill.cancelled() => return,
            _ = inner.shutdown.cancelled() => return,
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => continue,
            },
            msg = live.recv() => match msg {
                Ok(m) => match filter(kind, &m.patch).and_then(|p| as_vk_sends(&inner, kind, p)) {
                    Some(p) => patch_frame(&p),
                    None => continue,
                },
                Err(RecvError::Lagged(_)) => patch_frame(&snapshot(&inner, kind)),
                Err(RecvError::Closed) => return,
            },
        };
        if kill.is_cancelled() || !send_with_faults(&inner, &mut socket, text).await {
            return;
        }
    }
}

/// A change frame, after garbage when `garbage_ws` is on (the snapshot goes out clean).
async fn send_with_faults(inner: &Inner, socket: &mut WebSocket, text: String) -> bool {
    if inner.faults().garbage_ws {
        for junk in ["{not json", r#"{"JsonPatch":{"op":5}}"#] {
            if socket.send(Message::Text(junk.into())).await.is_err() {
                return false;
            }
        }
    }
    socket.send(Message::Text(text.into())).await.is_ok()
}
