//! 0.1.x's log WebSockets (v1: no resume, no history pages),
//! `/api/execution-processes/{id}/normalized-logs/ws` and `/raw-logs/ws`. While the process
//! runs: every entry so far as `add /entries/<i>`, then live `add`/`replace`, then
//! `{"finished":true}` and a close frame without a status when it ends. A socket opened after
//! the end (or after a restart) is a replay from the stored log: entries in their final state,
//! the normalized log renumbered with its `error_message` entries last (VK re-normalizes stdout
//! before stderr; rec: ws-normalized-a-live vs -replay), then `finished`. A script has no
//! normalized log (`finished` at once); an unknown process is a 404 before the upgrade.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};
use uuid::Uuid;

use super::render;
use super::streams::patch_frame;
use crate::core::Inner;
use crate::http::{AppState, not_found};
use crate::types::{Channel, ProcessStatus, RunReason};
use crate::world::{LogEntry, LogEvent};

const FINISHED: &str = r#"{"finished":true}"#;

pub(crate) async fn normalized_ws(
    State(inner): State<AppState>,
    Path(pid): Path<Uuid>,
    ws: WebSocketUpgrade,
) -> Response {
    upgrade(inner, ws, pid, Channel::Normalized)
}

pub(crate) async fn raw_ws(
    State(inner): State<AppState>,
    Path(pid): Path<Uuid>,
    ws: WebSocketUpgrade,
) -> Response {
    upgrade(inner, ws, pid, Channel::Raw)
}

fn upgrade(inner: AppState, ws: WebSocketUpgrade, pid: Uuid, ch: Channel) -> Response {
    if !inner.world().processes.contains_key(&pid) {
        return not_found();
    }
    ws.on_upgrade(move |s| serve(inner, s, pid, ch))
}

/// What a new log socket starts from.
enum Start {
    /// The process runs: its log so far, then the live events.
    Live(Vec<LogEntry>, broadcast::Receiver<LogEvent>),
    /// The process ended (or has no log on this channel): the entries a replay sends.
    Replay(Vec<Value>),
}

fn start(inner: &Inner, pid: Uuid, ch: Channel) -> Start {
    let w = inner.world();
    let Some(p) = w.processes.get(&pid) else {
        return Start::Replay(Vec::new());
    };
    if ch == Channel::Normalized && p.run_reason != RunReason::CodingAgent {
        return Start::Replay(Vec::new());
    }
    let Some(logs) = w.logs.get(&pid) else {
        return Start::Replay(Vec::new());
    };
    let entries = logs.entries(ch);
    if p.status == ProcessStatus::Running && !logs.finished {
        return Start::Live(entries.clone(), logs.subscribe(ch));
    }
    let rendered = entries.iter().map(|e| render::log_entry(e.as_ref()));
    if ch == Channel::Raw {
        return Start::Replay(rendered.collect());
    }
    let (last, first): (Vec<Value>, Vec<Value>) = rendered.partition(render::replayed_last);
    Start::Replay(first.into_iter().chain(last).collect())
}

fn entry_frame(op: &str, index: u64, entry: &Value) -> String {
    let path = format!("/entries/{index}");
    patch_frame(&json!([{"op": op, "path": path, "value": render::log_entry(entry)}]))
}

/// What goes out on one log socket, with the fault switches: garbage frames before each frame
/// (`garbage_ws`), and the socket dropped without a close after N frames (`drop_log_ws_after`).
struct Out {
    inner: Arc<Inner>,
    sent: usize,
}

impl Out {
    async fn send(&mut self, socket: &mut WebSocket, text: String) -> bool {
        let faults = self.inner.faults();
        self.sent += 1;
        if faults.drop_log_ws_after.is_some_and(|n| self.sent > n) {
            return false;
        }
        if faults.garbage_ws {
            for junk in ["<<not json>>", r#"{"JsonPatch":"seven"}"#] {
                if socket.send(Message::Text(junk.into())).await.is_err() {
                    return false;
                }
            }
        }
        socket.send(Message::Text(text.into())).await.is_ok()
    }

    /// `{"finished":true}`, then a close frame without a status code (1005 at the client).
    async fn finish(&mut self, socket: &mut WebSocket) {
        if self.send(socket, FINISHED.to_string()).await {
            let _ = socket.send(Message::Close(None)).await;
        }
    }
}

async fn serve(inner: Arc<Inner>, mut socket: WebSocket, pid: Uuid, ch: Channel) {
    let kill = inner.conn_token();
    let mut out = Out {
        inner: inner.clone(),
        sent: 0,
    };
    let (history, mut rx) = match start(&inner, pid, ch) {
        Start::Replay(entries) => {
            for (i, e) in entries.iter().enumerate() {
                if !out.send(&mut socket, entry_frame("add", i as u64, e)).await {
                    return;
                }
            }
            out.finish(&mut socket).await;
            return;
        }
        Start::Live(history, rx) => (history, rx),
    };
    for (i, e) in history.iter().enumerate() {
        if !out
            .send(&mut socket, entry_frame("add", i as u64, e.as_ref()))
            .await
        {
            return;
        }
    }
    loop {
        let ev = tokio::select! {
            _ = kill.cancelled() => return,
            _ = inner.shutdown.cancelled() => return,
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => continue,
            },
            ev = rx.recv() => match ev {
                Ok(ev) => ev,
                Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
            },
        };
        // A restart drops the socket first: nothing more goes out on it.
        if kill.is_cancelled() {
            return;
        }
        let text = match ev {
            LogEvent::Append(i, e) => entry_frame("add", i, e.as_ref()),
            LogEvent::Replace(i, e) => entry_frame("replace", i, e.as_ref()),
            LogEvent::Finished => {
                out.finish(&mut socket).await;
                return;
            }
        };
        if !out.send(&mut socket, text).await {
            return;
        }
    }
}
