//! Progress keep-alives for parked waits (MCP `notifications/progress`). A client whose own
//! request timeout is shorter than the wait it wants (most default to 60 s) passes a
//! `progressToken` in the call's `_meta` and resets its timeout on each progress notification.
//!
//! Waits are parked by `park` in front of rmcp, so rmcp has not seen the call yet and cannot send
//! anything for it. This module answers such a call itself with the SSE stream rmcp would have
//! opened: a progress event every `progress_every` (default 10 s, `[mcp] progress_every`, at
//! most 15 s) while parked, then, once the wait is handed on, rmcp's own answer forwarded
//! unchanged on the same stream. Only when rmcp answers with SSE anyway: every POST in the
//! default mode (sessions, and per-request 2026-07-28 calls); never in stateless JSON mode
//! (`--mcp-stateless`), whose plain JSON response cannot carry a notification before the answer.
//!
//! The ticker lives inside the response body (no task per wait), and only for calls with a
//! token. A `notifications/cancelled` for a parked call (same session, same request id) ends its
//! stream at once with no answer, as MCP asks, and releases the wait; so does the client
//! closing the connection (the body is dropped).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::tools::observe::Parked;

/// Bound on a non-SSE answer from rmcp that is re-sent as one SSE event (an error JSON body).
const MAX_PLAIN_ANSWER: usize = 64 * 1024;

/// What identifies a parked call that streams progress.
pub(crate) struct ProgressCall {
    /// The client's token, echoed verbatim (a string or a number).
    pub token: Box<RawValue>,
    /// The JSON-RPC request id, for a cancel notification to name it.
    pub id: Option<Box<RawValue>>,
}

/// Parked calls a `notifications/cancelled` may end, by (session id, request id as JSON text).
#[derive(Clone, Default)]
pub struct Cancels(Arc<Mutex<HashMap<(String, String), CancellationToken>>>);

/// Removes its entry when the parked call ends, however it ends.
struct Registration {
    cancels: Cancels,
    key: (String, String),
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.cancels.lock().remove(&self.key);
    }
}

#[derive(Deserialize)]
struct CancelEnvelope<'a> {
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: Option<CancelParams<'a>>,
}

#[derive(Deserialize)]
struct CancelParams<'a> {
    #[serde(borrow, rename = "requestId")]
    request_id: Option<&'a RawValue>,
}

impl Cancels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), CancellationToken>> {
        // A panic while holding this lock leaves the map consistent (single inserts/removes).
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&self, session: &str, id: &RawValue) -> (CancellationToken, Registration) {
        let key = (session.to_string(), id.get().to_string());
        let token = CancellationToken::new();
        self.lock().insert(key.clone(), token.clone());
        let reg = Registration {
            cancels: self.clone(),
            key,
        };
        (token, reg)
    }

    /// If `body` is a `notifications/cancelled` naming a parked call of `session`, end that
    /// call. Cheap when nothing is registered (every small POST passes here).
    pub(crate) fn cancel_from(&self, session: Option<&HeaderValue>, body: &[u8]) {
        if self.lock().is_empty() {
            return;
        }
        let Some(session) = session.and_then(|v| v.to_str().ok()) else {
            return;
        };
        if memchr::memmem::find(body, b"notifications/cancelled").is_none() {
            return;
        }
        let Ok(n) = serde_json::from_slice::<CancelEnvelope>(body) else {
            return;
        };
        let Some(id) = n.params.and_then(|p| p.request_id) else {
            return;
        };
        if n.method == "notifications/cancelled" {
            let key = (session.to_string(), id.get().to_string());
            if let Some(token) = self.lock().get(&key) {
                token.cancel();
            }
        }
    }
}

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The parked call: its request, the wait, and the ticker.
struct Holding {
    hold: Boxed<Option<Parked>>,
    parts: Parts,
    body: Bytes,
    next: Next,
    call: ProgressCall,
    started: Instant,
    tick: tokio::time::Interval,
    cancelled: Option<CancellationToken>,
    _registration: Option<Registration>,
}

enum Phase {
    Holding(Box<Holding>),
    Answering(Boxed<Response>, Option<Box<RawValue>>),
    Forwarding(axum::body::BodyDataStream),
    Done,
}

/// Answer a parked wait with an SSE stream: progress events while `hold` runs, then rmcp's
/// answer to the request handed on with what `hold` returned.
pub(crate) fn stream(
    hold: Boxed<Option<Parked>>,
    (parts, body): (Parts, Bytes),
    next: Next,
    call: ProgressCall,
    every: Duration,
    cancels: &Cancels,
) -> Response {
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok());
    let (cancelled, registration) = match (session, &call.id) {
        (Some(s), Some(id)) => {
            let (token, reg) = cancels.register(s, id);
            (Some(token), Some(reg))
        }
        _ => (None, None),
    };
    let holding = Holding {
        hold,
        parts,
        body,
        next,
        call,
        started: Instant::now(),
        tick: tokio::time::interval_at(tokio::time::Instant::now() + every, every),
        cancelled,
        _registration: registration,
    };
    let events = futures::stream::unfold(Phase::Holding(Box::new(holding)), step);
    let mut resp = Response::new(Body::from_stream(events));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// The next bytes of the stream, and what follows them.
async fn step(mut phase: Phase) -> Option<(Result<Bytes, axum::Error>, Phase)> {
    loop {
        phase = match phase {
            Phase::Holding(mut h) => match held(&mut h).await {
                Held::Cancelled => return None,
                Held::Over(parked) => hand_on(*h, parked),
                Held::Tick => {
                    let event = progress_event(&h.call.token, h.started.elapsed());
                    return Some((Ok(event), Phase::Holding(h)));
                }
            },
            Phase::Answering(answer, id) => {
                let resp = answer.await;
                if is_sse(&resp) {
                    Phase::Forwarding(resp.into_body().into_data_stream())
                } else {
                    let event = plain_answer(resp, id.as_deref()).await;
                    return Some((Ok(event), Phase::Done));
                }
            }
            Phase::Forwarding(mut body) => {
                return body
                    .next()
                    .await
                    .map(|chunk| (chunk, Phase::Forwarding(body)));
            }
            Phase::Done => return None,
        }
    }
}

enum Held {
    /// The client cancelled: no answer, and dropping the holding releases the wait.
    Cancelled,
    Over(Option<Parked>),
    Tick,
}

async fn held(h: &mut Holding) -> Held {
    let Holding {
        hold,
        tick,
        cancelled,
        ..
    } = h;
    let cancelled = async {
        match cancelled {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = cancelled => Held::Cancelled,
        parked = hold => Held::Over(parked),
        _ = tick.tick() => Held::Tick,
    }
}

/// The wait is over (or not held): the request goes to rmcp like any parked one.
fn hand_on(h: Holding, parked: Option<Parked>) -> Phase {
    let Holding {
        mut parts,
        body,
        next,
        call,
        ..
    } = h;
    if let Some(parked) = parked {
        parts.extensions.insert(parked);
    }
    let req = Request::from_parts(parts, Body::from(body));
    Phase::Answering(Box::pin(next.run(req)), call.id)
}

fn is_sse(resp: &Response) -> bool {
    resp.status() == StatusCode::OK
        && resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"))
}

fn progress_event(token: &RawValue, waited: Duration) -> Bytes {
    // `progress` must grow with every notification: the seconds waited so far do. Written
    // straight into the event (no JSON tree per tick: 10 k parked waits tick within a second).
    let secs = waited.as_secs_f64();
    let progress = (secs * 1000.0).round() / 1000.0;
    let mut event = String::with_capacity(160 + token.get().len());
    let _ = write!(
        event,
        "data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":{},\"progress\":{progress:?},\"message\":\"no change yet after {secs:.0} s\"}}}}\n\n",
        token.get()
    );
    Bytes::from(event)
}

/// rmcp answered the handed-on request with something other than SSE (the session expired
/// while parked, say), after the stream's 200 went out: re-send it as an event, as JSON-RPC.
async fn plain_answer(resp: Response, id: Option<&RawValue>) -> Bytes {
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), MAX_PLAIN_ANSWER)
        .await
        .unwrap_or_default();
    let json = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) if v.get("jsonrpc").is_some() => v,
        _ => serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": -32603,
                "message": format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)),
            },
        }),
    };
    Bytes::from(format!("data: {json}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_event_is_one_json_rpc_notification_naming_the_token() {
        for raw in [r#""tok-1""#, "7"] {
            let token = RawValue::from_string(raw.to_string()).unwrap();
            let event = progress_event(&token, Duration::from_millis(10_250));
            let text = std::str::from_utf8(&event).unwrap();
            let json = text
                .strip_prefix("data: ")
                .and_then(|t| t.strip_suffix("\n\n"))
                .unwrap();
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(v["method"], "notifications/progress");
            assert_eq!(v["params"]["progressToken"].to_string(), raw);
            assert_eq!(v["params"]["progress"], 10.25);
            assert_eq!(v["params"]["message"], "no change yet after 10 s");
        }
    }
}
