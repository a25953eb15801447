//! `GET /api/events`: VK's invalidation stream. Hints as `invalidate`, other patches as
//! `json_patch` (data before id, as VK writes it), resume by `after_seq` / `Last-Event-ID`,
//! `invalidate_all` when resume is impossible, `:` keep-alives, and the response headers held
//! back until the first event or keep-alive, like VK.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use super::bus::{SeqMsg, hints};
use super::core::Inner;
use super::http::AppState;

#[derive(Deserialize)]
pub(crate) struct EventsQuery {
    after_seq: Option<u64>,
}

type Chunk = Result<Bytes, std::io::Error>;

fn event_frame(m: &SeqMsg) -> String {
    match hints(&m.patch) {
        Some(h) => format!("event: invalidate\nid: {}\ndata: {}\n\n", m.seq, h),
        None => format!("event: json_patch\ndata: {}\nid: {}\n\n", m.patch, m.seq),
    }
}

fn invalidate_all(id: u64, data: serde_json::Value) -> String {
    format!("event: invalidate_all\nid: {id}\ndata: {data}\n\n")
}

pub(crate) async fn events(
    State(inner): State<AppState>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Response {
    let resume = q.after_seq.or_else(|| {
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    super::core::lock(&inner.counters).sse_resumes.push(resume);
    let (tx, mut rx) = mpsc::channel::<Chunk>(64);
    tokio::spawn(produce(inner, resume, tx));
    // VK's headers only go out with the first event or keep-alive.
    let first = rx.recv().await;
    let head = futures::stream::iter(first);
    let body = Body::from_stream(futures::StreamExt::chain(head, ReceiverStream::new(rx)));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn produce(inner: Arc<Inner>, resume: Option<u64>, tx: mpsc::Sender<Chunk>) {
    let kill = inner.conn_token();
    let shutdown = inner.shutdown.clone();
    let abort = || Err(std::io::Error::other("connection dropped"));
    if inner.faults().stall_sse {
        tokio::select! {
            _ = kill.cancelled() => {}
            _ = shutdown.cancelled() => {}
            _ = tx.closed() => {}
        }
        let _ = tx.send(abort()).await;
        return;
    }
    let (history, mut live, meta) = inner.bus.subscribe_from(resume);
    let watermark = meta.max_seq.unwrap_or(0);
    let mut initial: Vec<String> = Vec::new();
    let mut last = match resume {
        None => watermark,
        Some(r) if r > watermark || !meta.can_resume_from(r) => {
            initial.push(invalidate_all(
                watermark,
                json!({"reason": "resume_unavailable", "requested_after_seq": r,
                       "min_seq": meta.min_seq, "watermark": watermark, "evicted": false}),
            ));
            watermark
        }
        Some(r) => {
            initial.extend(history.iter().map(|m| event_frame(m)));
            history.last().map_or(r, |m| m.seq)
        }
    };
    for f in initial {
        if !send(&inner, &tx, f).await {
            return;
        }
    }
    let mut ka = tokio::time::interval(inner.cfg.keepalive);
    ka.tick().await;
    loop {
        tokio::select! {
            _ = kill.cancelled() => { let _ = tx.send(abort()).await; return; }
            _ = shutdown.cancelled() => { let _ = tx.send(abort()).await; return; }
            _ = ka.tick() => {
                if inner.faults().stall_sse { continue; }
                if tx.send(Ok(Bytes::from_static(b":\n\n"))).await.is_err() { return; }
            }
            msg = live.recv() => {
                let frame = match msg {
                    Ok(m) if m.seq <= last => continue,
                    Ok(m) => { last = m.seq; event_frame(&m) }
                    Err(RecvError::Lagged(skipped)) => {
                        last = inner.bus.meta().max_seq.unwrap_or(last);
                        invalidate_all(last, json!({"reason": "lagged", "skipped": skipped,
                                                    "watermark": last}))
                    }
                    Err(RecvError::Closed) => return,
                };
                if !send(&inner, &tx, frame).await { return; }
            }
        }
    }
}

/// Sends one event, preceded by an unparseable one when the `garbage_sse` fault is on.
async fn send(inner: &Inner, tx: &mpsc::Sender<Chunk>, frame: String) -> bool {
    if inner.faults().hostile {
        // 10 MB with no line end: a parser that buffers lines without a bound would grow.
        for _ in 0..10 {
            if tx.send(Ok(Bytes::from(vec![b'x'; 1 << 20]))).await.is_err() {
                return false;
            }
        }
    }
    if inner.faults().garbage_sse {
        let junk = "event: invalidate\ndata: {\"taskIds\": [oops\n\n";
        if tx.send(Ok(Bytes::from(junk))).await.is_err() {
            return false;
        }
    }
    tx.send(Ok(Bytes::from(frame))).await.is_ok()
}
