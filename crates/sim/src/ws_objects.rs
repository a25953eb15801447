//! Object WebSockets: `/api/tasks/stream/ws`, `/api/execution-processes/stream/ws` and
//! `/api/projects/stream/ws`. Snapshot at the watermark seq (rows read now, so it may already
//! hold patches sent after it, as in VK), filtered replay after `after_seq` without snapshot,
//! live frames with the SSE seq, re-snapshot on lag.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::bus::{SeqMsg, ws_frame};
use super::core::{Inner, lock};
use super::http::AppState;
use super::render;

#[derive(Deserialize)]
pub(crate) struct TasksQuery {
    project_id: Option<Uuid>,
    after_seq: Option<u64>,
}

#[derive(Deserialize)]
pub(crate) struct ProcessesQuery {
    workspace_id: Uuid,
    after_seq: Option<u64>,
}

/// Which object stream a socket serves.
#[derive(Clone, Copy)]
enum Kind {
    Tasks(Option<Uuid>),
    Processes(Uuid),
}

pub(crate) async fn tasks_ws(
    State(inner): State<AppState>,
    Query(q): Query<TasksQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    ws.on_upgrade(move |s| serve(inner, s, Kind::Tasks(q.project_id), q.after_seq))
}

pub(crate) async fn processes_ws(
    State(inner): State<AppState>,
    Query(q): Query<ProcessesQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    ws.on_upgrade(move |s| serve(inner, s, Kind::Processes(q.workspace_id), q.after_seq))
}

fn snapshot(inner: &Inner, kind: Kind) -> Value {
    let w = inner.world();
    match kind {
        Kind::Tasks(project) => {
            let facts = render::all_task_facts(&w);
            let none = render::TaskFacts::default();
            let map: serde_json::Map<String, Value> = w
                .tasks
                .values()
                .filter(|t| project.is_none_or(|p| t.project_id == p))
                .map(|t| {
                    let f = facts.get(&t.id).unwrap_or(&none);
                    (t.id.to_string(), render::task_json_with(t, f))
                })
                .collect();
            json!([{"op": "replace", "path": "/tasks", "value": map}])
        }
        Kind::Processes(ws) => {
            let map: serde_json::Map<String, Value> = w
                .processes_of_workspace(ws)
                .into_iter()
                .map(|p| (p.id.to_string(), render::process_json(p)))
                .collect();
            json!([{"op": "replace", "path": "/execution_processes", "value": map}])
        }
    }
}

/// VK's per-stream filter: Some(patch to send) or None to skip.
fn filter(inner: &Inner, kind: Kind, m: &SeqMsg) -> Option<Value> {
    let op = m.patch.as_array()?.first()?;
    let path = op.get("path")?.as_str()?;
    let name = op.get("op")?.as_str()?;
    match kind {
        Kind::Tasks(project) => {
            if !path.starts_with("/tasks/") {
                return None;
            }
            if name == "remove" {
                return Some(m.patch.clone());
            }
            let pid = op.pointer("/value/project_id")?.as_str()?;
            if project.is_none_or(|p| p.to_string() == pid) {
                Some(m.patch.clone())
            } else {
                Some(json!([{"op": "remove", "path": path}]))
            }
        }
        Kind::Processes(ws) => {
            if !path.starts_with("/execution_processes/") {
                return None;
            }
            if name == "remove" {
                return Some(m.patch.clone());
            }
            let sid = op.pointer("/value/session_id")?.as_str()?;
            let sid = Uuid::parse_str(sid).ok()?;
            let w = inner.world();
            (w.sessions.get(&sid)?.workspace_id == ws).then(|| m.patch.clone())
        }
    }
}

async fn send(inner: &Inner, socket: &mut WebSocket, text: String) -> bool {
    if inner.faults().hostile {
        let unknown_op =
            r#"{"seq":1,"JsonPatch":[{"op":"frobnicate","path":"/x","value":1}]}"#.to_string();
        let huge = format!("{{\"seq\":1,\"JsonPatch\":\"{}", "x".repeat(20 << 20));
        for junk in [unknown_op, huge] {
            if socket.send(Message::Text(junk.into())).await.is_err() {
                return false;
            }
        }
    }
    if inner.faults().garbage_ws {
        for junk in ["{not json", r#"{"seq":"NaN","JsonPatch":{"op":5}}"#] {
            if socket.send(Message::Text(junk.into())).await.is_err() {
                return false;
            }
        }
    }
    socket.send(Message::Text(text.into())).await.is_ok()
}

async fn serve(inner: Arc<Inner>, mut socket: WebSocket, kind: Kind, after: Option<u64>) {
    let _open = matches!(kind, Kind::Processes(_)).then(|| OpenProcessesSocket::count(&inner));
    let kill = inner.conn_token();
    let (history, mut live, meta) = inner.bus.subscribe_from(after);
    let snap_seq = meta.max_seq.unwrap_or(0);
    let mut initial = Vec::new();
    let mut last = match after {
        Some(a) if meta.can_resume_from(a) => {
            for m in &history {
                if let Some(p) = filter(&inner, kind, m) {
                    initial.push((m.seq, p));
                }
            }
            initial.last().map_or(a, |(s, _)| *s)
        }
        _ => {
            initial.push((snap_seq, snapshot(&inner, kind)));
            if inner.faults().replay_after_snapshot {
                let held = history.iter().filter(|m| m.seq <= snap_seq);
                initial.extend(held.filter_map(|m| Some((m.seq, filter(&inner, kind, m)?))));
            }
            snap_seq
        }
    };
    for (seq, p) in initial {
        if !send(&inner, &mut socket, ws_frame(seq, &p)).await {
            return;
        }
    }
    let mut ping = tokio::time::interval(inner.cfg.ws_ping);
    ping.tick().await;
    loop {
        tokio::select! {
            _ = kill.cancelled() => return,
            _ = inner.shutdown.cancelled() => return,
            _ = ping.tick() => {
                if socket.send(Message::Ping(Vec::new().into())).await.is_err() { return; }
            }
            incoming = socket.recv() => {
                if !matches!(incoming, Some(Ok(_))) { return; }
            }
            msg = live.recv() => {
                let frame = match msg {
                    Ok(m) if m.seq <= last => continue,
                    Ok(m) => match filter(&inner, kind, &m) {
                        Some(p) => { last = m.seq; ws_frame(m.seq, &p) }
                        None => continue,
                    },
                    Err(RecvError::Lagged(_)) => {
                        last = inner.bus.meta().max_seq.unwrap_or(last);
                        ws_frame(last, &snapshot(&inner, kind))
                    }
                    Err(RecvError::Closed) => return,
                };
                if !send(&inner, &mut socket, frame).await { return; }
            }
        }
    }
}

/// A processes-stream socket counted open (`SimCounters::processes_ws_open`) while it lives.
struct OpenProcessesSocket(Arc<Inner>);

impl OpenProcessesSocket {
    fn count(inner: &Arc<Inner>) -> Self {
        lock(&inner.counters).processes_ws_open += 1;
        OpenProcessesSocket(inner.clone())
    }
}

impl Drop for OpenProcessesSocket {
    fn drop(&mut self) {
        lock(&self.0.counters).processes_ws_open -= 1;
    }
}

/// `/api/projects/stream/ws`: whole `replace /projects` snapshots, seq = max(last + 1, now ms).
pub(crate) async fn projects_ws(State(inner): State<AppState>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |s| serve_projects(inner, s))
}

async fn serve_projects(inner: Arc<Inner>, mut socket: WebSocket) {
    let kill = inner.conn_token();
    let mut changes = inner.projects_tx.subscribe();
    let mut ping = tokio::time::interval(inner.cfg.ws_ping);
    ping.tick().await;
    loop {
        let frame = ws_frame(inner.next_projects_seq(), &inner.projects_snapshot());
        if !send(&inner, &mut socket, frame).await {
            return;
        }
        loop {
            tokio::select! {
                _ = kill.cancelled() => return,
                _ = inner.shutdown.cancelled() => return,
                _ = ping.tick() => {
                    if socket.send(Message::Ping(Vec::new().into())).await.is_err() { return; }
                    continue;
                }
                incoming = socket.recv() => {
                    if !matches!(incoming, Some(Ok(_))) { return; }
                    continue;
                }
                c = changes.recv() => {
                    if matches!(c, Err(RecvError::Closed)) { return; }
                    break;
                }
            }
        }
    }
}
