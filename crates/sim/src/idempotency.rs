//! VK's `Idempotency-Key` handling for creations: the same key and payload returns the first
//! response, another payload or a request still in progress answers 409, a failure frees the key.

use std::future::Future;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::core::{Idem, Inner, lock};
use super::http::{fail, ok};

/// The trimmed, non-empty `Idempotency-Key` header.
pub(crate) fn key(headers: &HeaderMap) -> Option<String> {
    headers
        .get("Idempotency-Key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// Runs `exec` once per (scope, key, payload); `exec` yields the envelope data or an error.
pub(crate) async fn run<F, Fut>(
    inner: &Inner,
    scope: &str,
    key: Option<String>,
    payload: &Value,
    exec: F,
) -> Response
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Value, Response>>,
{
    let Some(key) = key else {
        return match exec().await {
            Ok(v) => ok(v),
            Err(r) => r,
        };
    };
    let hash = payload.to_string();
    let slot = (scope.to_string(), key);
    {
        let mut idem = lock(&inner.idem);
        match idem.get(&slot) {
            Some(Idem::InProgress(h)) | Some(Idem::Done(h, _)) if *h != hash => {
                return fail(
                    StatusCode::CONFLICT,
                    "Idempotency key already used with different request parameters",
                );
            }
            Some(Idem::InProgress(_)) => {
                return fail(
                    StatusCode::CONFLICT,
                    "Request with this idempotency key is in progress. Retry shortly.",
                );
            }
            Some(Idem::Done(_, v)) => return ok(v.clone()),
            None => {
                idem.insert(slot.clone(), Idem::InProgress(hash.clone()));
            }
        }
    }
    match exec().await {
        Ok(v) => {
            lock(&inner.idem).insert(slot, Idem::Done(hash, v.clone()));
            ok(v)
        }
        Err(r) => {
            lock(&inner.idem).remove(&slot);
            r.into_response()
        }
    }
}
