//! `GET /api/events` as 0.1.x serves it: every event is `event: json_patch` with a bare JSON
//! Patch array and no `id:`; each connection first gets the whole in-memory history again
//! (`Last-Event-ID` and `after_seq` mean nothing; empty after a restart), then the live
//! events; a `:` comment after `keepalive` of silence; a restart ends the body abruptly.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::core::Inner;
use crate::http::AppState;

type Chunk = Result<Bytes, std::io::Error>;

fn event(patch: &Value) -> Bytes {
    Bytes::from(format!("event: json_patch\ndata: {patch}\n\n"))
}

pub(crate) async fn events(State(inner): State<AppState>) -> Response {
    inner.count(|c| c.sse_resumes.push(None));
    let (tx, rx) = mpsc::channel::<Chunk>(64);
    tokio::spawn(produce(inner, tx));
    let headers = [
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    (headers, Body::from_stream(ReceiverStream::new(rx))).into_response()
}

async fn produce(inner: Arc<Inner>, tx: mpsc::Sender<Chunk>) {
    let kill = inner.conn_token();
    let abort = || Err(std::io::Error::other("connection dropped"));
    let (history, mut live, _) = inner.bus.subscribe_from(None);
    for m in &history {
        if tx.send(Ok(event(&m.patch))).await.is_err() {
            return;
        }
    }
    loop {
        let chunk = tokio::select! {
            _ = kill.cancelled() => { let _ = tx.send(abort()).await; return; }
            _ = inner.shutdown.cancelled() => { let _ = tx.send(abort()).await; return; }
            _ = tx.closed() => return,
            m = tokio::time::timeout(inner.cfg.keepalive, live.recv()) => match m {
                Err(_) => Bytes::from_static(b":\n\n"),
                Ok(Ok(m)) => event(&m.patch),
                // Too slow a reader: VK's broadcast drops it the same way.
                Ok(Err(RecvError::Lagged(_))) => { let _ = tx.send(abort()).await; return; }
                Ok(Err(RecvError::Closed)) => return,
            },
        };
        if tx.send(Ok(chunk)).await.is_err() {
            return;
        }
    }
}
