//! Holding long-polls in front of the MCP stack. A `wait_for_attempt_change` call spends almost
//! all its life parked, and rmcp builds a whole service per request in stateless mode (a peer,
//! its channels and tasks: ~60 KB resident per parked call, measured with 10 k waiters). This
//! middleware recognises a well-formed wait call, parks it on the store's notify channels with
//! nothing but the request held, and hands it to rmcp only once a watched attempt changed or
//! the wait's time is up; the tool then answers at once from the same store, with the clock
//! and baseline this layer used (`wait_tool::Parked`).
//!
//! Anything else — other methods, malformed or invalid arguments, a browser `Origin` (left to
//! rmcp's Origin/Host validation before any waiting), large or chunked bodies, stale tokens —
//! passes straight through, so errors and validation stay the tool's and rmcp's. A client that
//! disconnects while parked drops this future, which releases the channels and waiter slot.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use serde::Deserialize;

use super::requests::WaitArgs;
use super::wait_tool::{Parked, plan};
use crate::query::wait::WaitClock;
use crate::query::{Query, Since};

/// Bodies larger than this are never parked (a wait call is a few hundred bytes; 100 ids
/// about 4 KB).
const MAX_PARKED_BODY: u64 = 16 * 1024;

#[derive(Deserialize)]
struct CallEnvelope {
    method: String,
    params: Option<CallParams>,
}

#[derive(Deserialize)]
struct CallParams {
    name: String,
    arguments: Option<serde_json::Value>,
}

/// The wait call in `body`, if it is one this layer may hold.
fn wait_call(body: &[u8]) -> Option<WaitArgs> {
    let call: CallEnvelope = serde_json::from_slice(body).ok()?;
    let params = call.params?;
    if call.method != "tools/call" || params.name != "wait_for_attempt_change" {
        return None;
    }
    serde_json::from_value(params.arguments?).ok()
}

fn parkable(req: &Request) -> bool {
    let h = req.headers();
    req.method() == Method::POST
        && !h.contains_key(header::ORIGIN)
        && h.get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n <= MAX_PARKED_BODY)
        && h.get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"))
}

pub async fn park_waits(State(query): State<Query>, req: Request, next: Next) -> Response {
    if !parkable(&req) {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, MAX_PARKED_BODY as usize).await {
        Ok(b) => b,
        // The body did not arrive as announced: let rmcp answer the broken request.
        Err(_) => return next.run(Request::from_parts(parts, Body::empty())).await,
    };
    if let Some(parked) = hold(&query, &bytes).await {
        parts.extensions.insert(parked);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Park the wait in `body` until a change or its deadline; `None` when it is not a wait this
/// layer holds (the tool then does everything itself).
async fn hold(query: &Query, body: &[u8]) -> Option<Parked> {
    let args = wait_call(body)?;
    let (scope, since, timeout) = plan(query, args).ok()?;
    let since = match since {
        Since::After(n) => n,
        Since::None => query.store.current_token(),
        Since::Reset => return None,
    };
    let clock = WaitClock::start(timeout);
    query
        .health
        .waits_parked
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    metrics::counter!("vk_observer_waits_parked_total").increment(1);
    // Errors (unknown project, too many waiters) are the tool's to report.
    query
        .park_until_changed(&scope, since, clock.deadline)
        .await
        .ok()?;
    Some(Parked { clock, since })
}
