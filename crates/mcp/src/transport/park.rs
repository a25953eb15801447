//! Holding long-polls in front of the MCP stack. A `wait_for_attempt_change` call spends almost
//! all its life parked, and rmcp builds a whole service per request in stateless mode (a peer,
//! its channels and tasks: ~60 KB resident per parked call, measured with 10 k waiters). This
//! middleware recognises a well-formed wait call, parks it on the store's notify channels with
//! nothing but the request held, and hands it to rmcp only once a watched attempt changed or
//! the wait's time is up; the tool then answers at once from the same store, with the clock
//! and baseline this layer used (`tools::observe::Parked`).
//!
//! Anything else — other methods, malformed or invalid arguments, a browser `Origin` (left to
//! rmcp's Origin/Host validation before any waiting), large or chunked bodies, stale tokens, a
//! session rmcp does not know (checked by `guard`) — passes straight through, so errors and
//! validation stay the tool's and rmcp's. A client that disconnects while parked drops this
//! future, which releases the channels and waiter slot; one that only sends
//! `notifications/cancelled` for a parked call gets its answer at the change or the timeout
//! (rmcp has not seen the call yet), which MCP allows for a cancel that races the answer —
//! except a call with a `progressToken` on an SSE-answering endpoint: that one is answered by
//! `progress` (keep-alive notifications while parked, up to `WAIT_MAX_PROGRESS_MS`), which ends
//! it at the cancel.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use serde::Deserialize;

use super::progress::{Cancels, ProgressCall};
use crate::tools::observe::{Parked, WaitArgs, WaitPlan, plan};
use vk_observer_query::wait::WaitClock;
use vk_observer_query::{Cut, Query, Since};

/// Bodies larger than this are never parked (a wait call is a few hundred bytes; 100 ids
/// about 4 KB).
const MAX_PARKED_BODY: u64 = 16 * 1024;

const WAIT_TOOL: &str = "wait_for_attempt_change";

type Raw = serde_json::value::RawValue;

#[derive(Deserialize)]
struct CallEnvelope<'a> {
    #[serde(borrow)]
    id: Option<&'a Raw>,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: Option<CallParams<'a>>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: &'a str,
    #[serde(borrow)]
    arguments: Option<&'a Raw>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<CallMeta<'a>>,
}

#[derive(Deserialize)]
struct CallMeta<'a> {
    #[serde(borrow, rename = "progressToken")]
    progress_token: Option<&'a Raw>,
}

/// The wait call in `body`, if it is one this layer may hold, and its progress token. Other
/// calls cost a substring search, not a parse (every small POST to `/mcp` passes here).
fn wait_call(body: &[u8]) -> Option<(WaitArgs, Option<ProgressCall>)> {
    memchr::memmem::find(body, WAIT_TOOL.as_bytes())?;
    let call: CallEnvelope = serde_json::from_slice(body).ok()?;
    let params = call.params?;
    if call.method != "tools/call" || params.name != WAIT_TOOL {
        return None;
    }
    let args = serde_json::from_str(params.arguments?.get()).ok()?;
    let progress = params
        .meta
        .and_then(|m| m.progress_token)
        .map(|token| ProgressCall {
            token: token.to_owned(),
            id: call.id.map(Raw::to_owned),
        });
    Some((args, progress))
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

/// What the layer needs: the store's read side, and the daemon's shutdown (a parked wait is
/// handed on at once when the daemon stops, so shutdown never waits for wait timeouts).
#[derive(Clone)]
pub struct Parking {
    pub query: Query,
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The progress interval when rmcp answers calls with SSE; `None` in stateless JSON mode,
    /// where a response cannot carry notifications (`progress`).
    pub progress_every: Option<std::time::Duration>,
    /// Parked calls with progress that a `notifications/cancelled` ends.
    pub cancels: Cancels,
}

/// Called by `guard::guard` once a request may reach `/mcp` (one middleware layer instead of
/// two: each layer boxes its future, and a parked wait holds every box on its way).
pub(crate) async fn park_waits(p: &Parking, req: Request, next: Next) -> Response {
    if !parkable(&req) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, MAX_PARKED_BODY as usize).await {
        Ok(b) => b,
        // The body did not arrive as announced: let rmcp answer the broken request.
        Err(_) => return next.run(Request::from_parts(parts, Body::empty())).await,
    };
    p.cancels
        .cancel_from(parts.headers.get("mcp-session-id"), &bytes);
    let Some((args, progress)) = wait_call(&bytes) else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    // hyper parsed the request in place: its header values, URI and body all point into the
    // connection's read buffer (8–16 KB), which they keep alive. While parked, hold copies.
    let (mut parts, bytes) = detached(parts, &bytes);
    if let (Some(call), Some(every)) = (progress, p.progress_every) {
        let (query, shutdown) = (p.query.clone(), p.shutdown.clone());
        let held = Box::pin(async move {
            tokio::select! {
                parked = hold(&query, args, true) => parked,
                _ = shutdown.cancelled() => None,
            }
        });
        return super::progress::stream(held, (parts, bytes), next, call, every, &p.cancels);
    }
    let parked = tokio::select! {
        parked = hold(&p.query, args, false) => parked,
        _ = p.shutdown.cancelled() => None,
    };
    if let Some(parked) = parked {
        parts.extensions.insert(parked);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The request head and body copied out of hyper's read buffer.
fn detached(mut parts: Parts, body: &[u8]) -> (Parts, Bytes) {
    let mut headers = HeaderMap::with_capacity(parts.headers.len());
    for (name, value) in &parts.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(n, v);
        }
    }
    parts.headers = headers;
    if let Ok(uri) = parts.uri.to_string().parse() {
        parts.uri = uri;
    }
    (parts, Bytes::copy_from_slice(body))
}

/// Park the wait until a change or its deadline; `None` when this layer does not hold it (the
/// tool then does everything itself). `with_progress`: the client is kept alive by progress
/// notifications, so the longer timeout cap applies.
async fn hold(query: &Query, args: WaitArgs, with_progress: bool) -> Option<Parked> {
    let WaitPlan {
        scope,
        until,
        since,
        timeout,
    } = plan(query, args, with_progress).ok()?;
    let now = query.store.current_token();
    // With `until` and no token, attempts already in a target state count: no baseline.
    // `since` of the park: its baseline, used by the tool only when the call had no token.
    let (since, compared) = match since {
        Since::After(cut) => (now, Some(cut)),
        Since::None if until.is_some() => (now, None),
        Since::None => (now, Some(Cut::local(now))),
        Since::Reset => return None,
    };
    let clock = WaitClock::start(timeout);
    query
        .health
        .waits_parked
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    metrics::counter!(vk_observer_telemetry::WAITS_PARKED).increment(1);
    // Errors (unknown project, too many waiters) are the tool's to report.
    let watched = query
        .park_until_changed(&scope, until.as_ref(), compared.as_ref(), clock.deadline)
        .await
        .ok()?;
    Some(Parked {
        clock,
        since,
        watched,
    })
}
