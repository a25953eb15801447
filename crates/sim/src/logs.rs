//! Per-process log endpoints: the v2 log WebSockets (history as `append`, then live
//! `append`/`replace`, `finished` and a dropped connection; 4404 when the process is not live;
//! a ping every `ws_ping`, as VK's 30 s)
//! and the REST history pages (latest `limit` entries before `cursor`, ascending). Fault
//! switches: refused upgrades, cut sockets, garbage frames, truncated or slow history.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::core::Inner;
use super::http::{AppState, fail, not_found};
use super::types::{Channel, ProcessStatus};
use super::world::LogEvent;

const MAX_PAGE: usize = 1000;

/// First index still kept: VK's in-memory cap (for pages too unless logs are in VK's DB), and
/// the `skip_history` fault (older half gone).
fn retained_from(inner: &Inner, len: usize, for_pages: bool) -> usize {
    let mut lower = if for_pages && inner.cfg.log_db {
        0
    } else {
        len.saturating_sub(inner.cfg.history_max_entries)
    };
    if for_pages && inner.faults().skip_history {
        lower = lower.max(len / 2);
    }
    lower
}

#[derive(Deserialize)]
pub(crate) struct HistoryQuery {
    limit: Option<usize>,
    cursor: Option<i64>,
}

/// One entry of a history page. Fields in the order `serde_json`'s map writes them (sorted), so
/// the bytes are those of the `json!` object VK's shape was first written as; the entry is the
/// bytes encoded when it was appended (`LogEntry::json`).
#[derive(serde::Serialize)]
struct PageEntry<'a> {
    entry: &'a RawValue,
    entry_index: usize,
}

#[derive(serde::Serialize)]
struct PageData<'a> {
    entries: Vec<PageEntry<'a>>,
    has_more: bool,
    history_truncated: bool,
    next_cursor: Option<usize>,
}

/// VK's `{success,data,error_data,message}` envelope, keys sorted as `http::ok` writes them.
#[derive(serde::Serialize)]
struct Envelope<T> {
    data: T,
    error_data: (),
    message: (),
    success: bool,
}

/// A history page's response body, written under the world lock straight from the stored
/// entries (no copy of them: at 1,000 entries a page, copying was most of a page's cost).
fn page(inner: &Inner, pid: Uuid, ch: Channel, q: HistoryQuery) -> Option<String> {
    let w = inner.world();
    w.processes.get(&pid)?;
    let entries = w.logs.get(&pid)?.entries(ch);
    let default = match ch {
        Channel::Normalized => 20,
        Channel::Raw => 200,
    };
    let limit = q.limit.unwrap_or(default).clamp(1, MAX_PAGE);
    let lower = retained_from(inner, entries.len(), true);
    let upper = match q.cursor {
        Some(c) => usize::try_from(c.max(0)).unwrap_or(0).min(entries.len()),
        None => entries.len(),
    };
    let start = upper.saturating_sub(limit).max(lower);
    let data = PageData {
        entries: (start..upper.max(start))
            .map(|i| PageEntry {
                entry: entries[i].json(),
                entry_index: i,
            })
            .collect(),
        has_more: start < upper && start > lower,
        history_truncated: lower > 0,
        next_cursor: (start < upper).then_some(start),
    };
    serde_json::to_string(&Envelope {
        data,
        error_data: (),
        message: (),
        success: true,
    })
    .ok()
}

/// A history page as it is now, answered after the `slow_history` delay if set.
async fn history(inner: &Inner, pid: Uuid, ch: Channel, q: HistoryQuery) -> Response {
    let answer = page(inner, pid, ch, q);
    if let Some(d) = inner.faults().slow_history {
        tokio::time::sleep(d).await;
    }
    answer.map_or_else(not_found, |body| {
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    })
}

pub(crate) async fn normalized_history(
    State(inner): State<AppState>,
    Path(pid): Path<Uuid>,
    Query(q): Query<HistoryQuery>,
) -> Response {
    history(&inner, pid, Channel::Normalized, q).await
}

pub(crate) async fn raw_history(
    State(inner): State<AppState>,
    Path(pid): Path<Uuid>,
    Query(q): Query<HistoryQuery>,
) -> Response {
    history(&inner, pid, Channel::Raw, q).await
}

/// The upgrade, or the `refuse_log_ws` fault's 502.
fn upgrade(inner: AppState, ws: WebSocketUpgrade, pid: Uuid, ch: Channel) -> Response {
    if inner.faults().refuse_log_ws {
        return fail(StatusCode::BAD_GATEWAY, "websocket upgrade refused");
    }
    ws.on_upgrade(move |s| serve(inner, s, pid, ch))
}

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

/// One log frame in VK's field order (`type`, `entry_index`, `entry`), written around the
/// stored entry's bytes (encoded once, when it was appended).
#[derive(serde::Serialize)]
struct FrameOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    entry_index: u64,
    entry: &'a RawValue,
}

fn entry_frame(kind: &'static str, entry_index: u64, entry: &RawValue) -> String {
    serde_json::to_string(&FrameOut {
        kind,
        entry_index,
        entry,
    })
    .unwrap_or_default()
}

fn frame(ev: &LogEvent) -> String {
    match ev {
        LogEvent::Append(i, e) => entry_frame("append", *i, e.json()),
        LogEvent::Replace(i, e) => entry_frame("replace", *i, e.json()),
        LogEvent::Finished => json!({"type": "finished"}).to_string(),
    }
}

/// History frames `from..to` of a log, rendered under the world lock a slice at a time.
fn history_frames(inner: &Inner, pid: Uuid, ch: Channel, from: usize, to: usize) -> Vec<String> {
    let w = inner.world();
    let Some(logs) = w.logs.get(&pid) else {
        return Vec::new();
    };
    let entries = logs.entries(ch);
    (from..to.min(entries.len()))
        .map(|i| entry_frame("append", i as u64, entries[i].json()))
        .collect()
}

/// Frames of history rendered per lock hold: a long replay neither copies the whole log at
/// once nor keeps the world locked while it renders.
const HISTORY_SLICE: usize = 1000;

async fn serve(inner: Arc<Inner>, mut socket: WebSocket, pid: Uuid, ch: Channel) {
    let kill = inner.conn_token();
    let subscribed = {
        let w = inner.world();
        let live = w
            .processes
            .get(&pid)
            .is_some_and(|p| p.status == ProcessStatus::Running);
        match w.logs.get(&pid) {
            Some(logs) if live && !logs.finished => {
                let entries = logs.entries(ch);
                let lower = retained_from(&inner, entries.len(), false);
                // Replayed from the log as it is at subscription; later changes arrive on `rx`.
                Some((lower..entries.len(), logs.subscribe(ch)))
            }
            _ => None,
        }
    };
    let Some((history, mut rx)) = subscribed else {
        let close = CloseFrame {
            code: 4404,
            reason: "execution_process_not_found".into(),
        };
        let _ = socket.send(Message::Close(Some(close))).await;
        return;
    };
    let limit = inner.faults().drop_log_ws_after;
    let mut sent = 0usize;
    let mut next = history.start;
    while next < history.end {
        let to = (next + HISTORY_SLICE).min(history.end);
        for text in history_frames(&inner, pid, ch, next, to) {
            sent += 1;
            if limit.is_some_and(|n| sent > n) || !send(&inner, &mut socket, text).await {
                return;
            }
        }
        next = to;
    }
    let mut out = |ev: &LogEvent| {
        sent += 1;
        (frame(ev), limit.is_some_and(|n| sent > n))
    };
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
            ev = rx.recv() => {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                };
                let (text, over) = out(&ev);
                if over || !send(&inner, &mut socket, text).await { return; }
                // After `finished` VK drops the connection without a close frame.
                if matches!(ev, LogEvent::Finished) { return; }
            }
        }
    }
}

async fn send(inner: &Inner, socket: &mut WebSocket, text: String) -> bool {
    if inner.faults().hostile {
        let junk =
            r#"{"type":"append","entry_index":-1,"entry":{"type":"STDOUT","content":"negative"}}"#;
        if socket.send(Message::Text(junk.into())).await.is_err() {
            return false;
        }
    }
    if inner.faults().garbage_ws {
        for junk in [
            "<<not json>>",
            r#"{"type":"append","entry_index":"seven","entry":3}"#,
        ] {
            if socket.send(Message::Text(junk.into())).await.is_err() {
                return false;
            }
        }
    }
    socket.send(Message::Text(text.into())).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ok;
    use crate::types::{RunReason, SimConfig};
    use serde_json::Value;

    #[test]
    fn a_log_frame_is_written_byte_for_byte_as_the_value_was() {
        let entry = json!({"type": "NORMALIZED_ENTRY", "content": {"z": [1, null, 1.5],
            "a": "quote \" and \u{e9}\n", "m": {"y": true, "b": {}}}});
        let stored = super::super::world::LogEntry::new(entry.clone());
        for (ev, kind) in [
            (LogEvent::Append(7, stored.clone()), "append"),
            (LogEvent::Replace(7, stored), "replace"),
        ] {
            let as_value = json!({"type": kind, "entry_index": 7, "entry": entry});
            // VK's field order (`type`, `entry_index`, `entry`), the entry's bytes unchanged.
            let expected = format!(
                r#"{{"type":"{kind}","entry_index":7,"entry":{}}}"#,
                serde_json::to_string(&entry).unwrap()
            );
            assert_eq!(frame(&ev), expected);
            assert_eq!(
                serde_json::from_str::<Value>(&frame(&ev)).unwrap(),
                as_value
            );
        }
    }

    /// The page as it was built before: a `json!` tree holding a copy of every entry.
    fn page_as_values(inner: &Inner, pid: Uuid, ch: Channel, q: HistoryQuery) -> Value {
        let w = inner.world();
        let entries = w.logs[&pid].entries(ch);
        let default = if ch == Channel::Normalized { 20 } else { 200 };
        let limit = q.limit.unwrap_or(default).clamp(1, MAX_PAGE);
        let lower = retained_from(inner, entries.len(), true);
        let upper = q.cursor.map_or(entries.len(), |c| {
            usize::try_from(c.max(0)).unwrap_or(0).min(entries.len())
        });
        let start = upper.saturating_sub(limit).max(lower);
        let items: Vec<Value> = (start..upper.max(start))
            .map(|i| json!({"entry_index": i, "entry": entries[i].as_ref()}))
            .collect();
        json!({
            "entries": items,
            "next_cursor": if start < upper { Some(start) } else { None },
            "has_more": start < upper && start > lower,
            "history_truncated": lower > 0,
        })
    }

    async fn body_text(resp: Response) -> String {
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await;
        String::from_utf8(bytes.unwrap().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_history_page_is_written_byte_for_byte_as_the_json_tree_was() {
        for log_db in [true, false] {
            let inner = Inner::new(SimConfig {
                log_db,
                history_max_entries: 7,
                ..SimConfig::default()
            });
            let pid = {
                let mut w = inner.world();
                let pid = w.insert_process(Uuid::new_v4(), RunReason::CodingAgent, Value::Null);
                for i in 0..12u64 {
                    let entry = json!({"type": "NORMALIZED_ENTRY", "content": {
                        "z": [i, null, 1.5], "a": "quote \" and \u{e9}\n", "m": {"y": true, "b": {}}}});
                    w.append_log(pid, Channel::Normalized, entry);
                    w.append_log(pid, Channel::Raw, json!({"STDOUT": format!("line {i}")}));
                }
                pid
            };
            let queries = [
                (None, None),
                (Some(3), Some(5)),
                (Some(4), Some(0)),
                (Some(5000), Some(99)),
                (Some(2), Some(-3)),
                (Some(0), None),
            ];
            for ch in [Channel::Normalized, Channel::Raw] {
                for (limit, cursor) in queries {
                    let expected = body_text(ok(page_as_values(
                        &inner,
                        pid,
                        ch,
                        HistoryQuery { limit, cursor },
                    )))
                    .await;
                    let got = page(&inner, pid, ch, HistoryQuery { limit, cursor }).unwrap();
                    assert_eq!(
                        got, expected,
                        "log_db {log_db}, {ch:?}, limit {limit:?}, cursor {cursor:?}"
                    );
                }
            }
            assert!(
                page(
                    &inner,
                    Uuid::new_v4(),
                    Channel::Raw,
                    HistoryQuery {
                        limit: None,
                        cursor: None
                    }
                )
                .is_none()
            );
        }
    }
}
