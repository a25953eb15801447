//! `request_id` idempotency for creating tools, kept in sled (its own tree) so it survives
//! restarts. One record per (tool, request_id), a `store::records::IdempotencyRecord`: the
//! effective payload (canonical JSON), the state (`in_progress` while the call runs, `completed`
//! with its result; `RecordState`) and timestamps.
//!
//! - Same key, same payload, completed → the stored result, no second call to VK.
//! - Same key while the first call runs in this process → the second waits for the first.
//! - Same key after a crash left `in_progress` → re-executed with the same key passed to VK as
//!   `Idempotency-Key`, so VK returns what it created the first time instead of creating again.
//! - Same key, other payload → `idempotency_conflict`.
//! - Failures delete the record (a retry re-executes), completed records expire after
//!   `completed_ttl`, `in_progress` ones are stale after `in_progress_ttl` (0 disables each).
//!
//! Every call that reaches VK, with or without a key, is audited (`store::audit`): its entry is
//! committed `pending` with the `in_progress` record and flushed before VK is asked, then
//! rewritten with the outcome in the same transaction as the completed record (or its
//! removal). A replayed or conflicting call asks VK nothing and is not audited.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde_json::{Value, json};

use vk_observer_config::IdempotencySettings;
use vk_observer_store::audit::{AuditEntry, AuditOutcome, audit_key};
use vk_observer_store::records::{
    IdempotencyRecord as Record, IdempotencyRecords, RecordChange, RecordState,
};
use vk_observer_tool_error::{ErrorCode, ToolError};

/// How long records live; built from the `[idempotency]` section (`config::IdempotencySettings`,
/// also set by VK's `VK_IDEMPOTENCY_*_TTL_SECS`), whose defaults are the only ones.
#[derive(Debug, Clone, Copy)]
pub struct IdempotencyTtl {
    pub completed: Duration,
    pub in_progress: Duration,
}

impl From<IdempotencySettings> for IdempotencyTtl {
    fn from(s: IdempotencySettings) -> Self {
        IdempotencyTtl {
            completed: s.completed_ttl,
            in_progress: s.in_progress_ttl,
        }
    }
}

impl Default for IdempotencyTtl {
    fn default() -> Self {
        IdempotencySettings::default().into()
    }
}

#[derive(Clone)]
pub struct Idempotency {
    records: IdempotencyRecords,
    ttl: IdempotencyTtl,
    inflight: Arc<DashMap<Vec<u8>, Arc<tokio::sync::Mutex<()>>>>,
}

/// What a call with a key came to.
pub(crate) struct Outcome {
    pub result: Value,
    /// True when the result was stored by an earlier call with the same key.
    pub replayed: bool,
}

pub(crate) const MAX_REQUEST_ID_LEN: usize = 200;

/// What a call with the key of `rec` gets without running: a conflict (other arguments) or
/// the stored result; `None` when it must run (`in_progress`).
fn answered_before(
    rec: &Record,
    rid: &str,
    payload_text: &str,
) -> Option<Result<Outcome, ToolError>> {
    if rec.payload != payload_text {
        return Some(Err(ToolError::new(
            ErrorCode::IdempotencyConflict,
            false,
            "This request_id was already used with different arguments. Generate a new request_id (e.g. a fresh UUID) for a different request.",
        )
        .with_details(json!({ "request_id": rid }))));
    }
    let result = rec
        .result
        .clone()
        .filter(|_| rec.state == RecordState::Completed)?;
    metrics::counter!(vk_observer_telemetry::IDEMPOTENT_REPLAYS).increment(1);
    Some(Ok(Outcome {
        result,
        replayed: true,
    }))
}

/// A failure after which VK may still have done the call: unreachable mid-call, a 5xx, an
/// unreadable reply (the upstream errors the proxy maps as retryable).
fn may_have_happened(e: &ToolError) -> bool {
    e.retryable
        && matches!(
            e.code,
            ErrorCode::UpstreamUnavailable | ErrorCode::UpstreamError
        )
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Idempotency {
    pub fn new(records: IdempotencyRecords, ttl: IdempotencyTtl) -> Self {
        Idempotency {
            records,
            ttl,
            inflight: Arc::new(DashMap::new()),
        }
    }

    fn key(tool: &str, request_id: &str) -> Vec<u8> {
        let mut k = tool.as_bytes().to_vec();
        k.push(0);
        k.extend_from_slice(request_id.as_bytes());
        k
    }

    /// The record under `key`; one that does not parse is treated as absent (and overwritten).
    fn load(&self, key: &[u8]) -> Result<Option<Record>, ToolError> {
        self.records.get(key).map_err(ToolError::internal)
    }

    fn commit(&self, change: RecordChange<'_>, audit: &Audit) -> Result<(), ToolError> {
        self.records
            .commit(change, &audit.key, &audit.entry)
            .map_err(ToolError::internal)
    }

    async fn flush(&self) -> Result<(), ToolError> {
        self.records.flush().await.map_err(ToolError::internal)
    }

    fn stale(&self, rec: &Record, now: i64) -> bool {
        let age = Duration::from_millis((now - rec.updated_ms).max(0) as u64);
        match rec.state {
            RecordState::Completed => !self.ttl.completed.is_zero() && age > self.ttl.completed,
            RecordState::InProgress => {
                !self.ttl.in_progress.is_zero() && age > self.ttl.in_progress
            }
        }
    }

    /// Run `call` at most once per (tool, request_id, payload). Without a request id it just runs.
    pub(crate) async fn run<F, Fut>(
        &self,
        tool: &str,
        request_id: Option<&str>,
        payload: &Value,
        call: F,
    ) -> Result<Outcome, ToolError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, ToolError>>,
    {
        let no_finder: Option<fn(i64) -> std::future::Ready<Option<Value>>> = None;
        self.run_inner(tool, request_id, payload, no_finder, call)
            .await
    }

    /// [`run`](Self::run) for a VK that takes no idempotency key (VK 0.1.x): a call that may
    /// have reached VK without an answer (VK unreachable or failing, an unreadable reply)
    /// keeps its record `in_progress`, and the next call with the same key first asks `find`
    /// (given the first call's start, unix ms) for what that call made; only if it finds
    /// nothing is VK asked again.
    pub(crate) async fn run_recovering<F, Fut, G, Gut>(
        &self,
        tool: &str,
        request_id: Option<&str>,
        payload: &Value,
        find: G,
        call: F,
    ) -> Result<Outcome, ToolError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, ToolError>>,
        G: FnOnce(i64) -> Gut,
        Gut: Future<Output = Option<Value>>,
    {
        self.run_inner(tool, request_id, payload, Some(find), call)
            .await
    }

    async fn run_inner<F, Fut, G, Gut>(
        &self,
        tool: &str,
        request_id: Option<&str>,
        payload: &Value,
        find: Option<G>,
        call: F,
    ) -> Result<Outcome, ToolError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, ToolError>>,
        G: FnOnce(i64) -> Gut,
        Gut: Future<Output = Option<Value>>,
    {
        let Some(rid) = request_id else {
            let now = now_ms();
            let mut audit = Audit::start(tool, None, now, uuid::Uuid::new_v4().as_bytes());
            self.commit(RecordChange::None, &audit)?;
            self.flush().await?;
            let result = call().await;
            audit.finish(&result);
            self.commit(RecordChange::None, &audit)?;
            self.flush().await?;
            return result.map(|result| Outcome {
                result,
                replayed: false,
            });
        };
        let rid = rid.trim();
        if rid.is_empty() || rid.len() > MAX_REQUEST_ID_LEN {
            return Err(ToolError::invalid_field(
                "request_id",
                format!(
                    "request_id must be 1 to {MAX_REQUEST_ID_LEN} characters; use a fresh UUID per logical request."
                ),
            ));
        }
        let key = Self::key(tool, rid);
        let payload_text = payload.to_string();
        let lock = self.inflight.entry(key.clone()).or_default().clone();
        let outcome = {
            let _serialized = lock.lock().await;
            self.run_locked(tool, &key, rid, &payload_text, find, call)
                .await
        };
        drop(lock);
        self.inflight
            .remove_if(&key, |_, l| Arc::strong_count(l) == 1);
        outcome
    }

    async fn run_locked<F, Fut, G, Gut>(
        &self,
        tool: &str,
        key: &[u8],
        rid: &str,
        payload_text: &str,
        find: Option<G>,
        call: F,
    ) -> Result<Outcome, ToolError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Value, ToolError>>,
        G: FnOnce(i64) -> Gut,
        Gut: Future<Output = Option<Value>>,
    {
        let now = now_ms();
        let existing = self.load(key)?.filter(|r| !self.stale(r, now));
        if let Some(rec) = &existing
            && let Some(answered) = answered_before(rec, rid, payload_text)
        {
            return answered;
        }
        // No record, or `in_progress` left by a crash: run again; VK dedupes by the same key
        // (or, on a VK without keys, `find` looks for what the first run made).
        let created_ms = existing.as_ref().map(|r| r.created_ms).unwrap_or(now);
        let mut rec = Record {
            payload: payload_text.to_string(),
            state: RecordState::InProgress,
            result: None,
            created_ms,
            updated_ms: now,
        };
        // The entry's key is the record's creation: a re-run after a crash rewrites it.
        let mut audit = Audit::start(tool, Some(rid), created_ms, key);
        self.commit(RecordChange::Put(key, &rec), &audit)?;
        // Durable before VK is asked: a crash after VK accepted still finds the key.
        self.flush().await?;
        let recovering = find.is_some();
        let found = match (find, &existing) {
            (Some(find), Some(_)) => find(created_ms).await,
            _ => None,
        };
        let result = match found {
            Some(found) => Ok(found),
            None => call().await,
        };
        audit.finish(&result);
        match result {
            Ok(result) => {
                rec.state = RecordState::Completed;
                rec.result = Some(result.clone());
                rec.updated_ms = now_ms();
                self.commit(RecordChange::Put(key, &rec), &audit)?;
                self.flush().await?;
                Ok(Outcome {
                    result,
                    replayed: false,
                })
            }
            Err(e) if recovering && may_have_happened(&e) => {
                // Kept `in_progress`: the retry looks for what this call may have made.
                let _ = self.commit(RecordChange::Put(key, &rec), &audit);
                Err(e)
            }
            Err(e) => {
                let _ = self.commit(RecordChange::Remove(key), &audit);
                Err(e)
            }
        }
    }

    /// The audit trail (tests).
    pub fn audit_entries(&self) -> Vec<AuditEntry> {
        self.records.audit_entries()
    }

    /// Delete expired records; returns how many. Run periodically by the daemon.
    pub fn prune(&self) -> usize {
        let now = now_ms();
        let mut removed = 0;
        for (k, rec) in self.records.entries() {
            let expired = rec.is_none_or(|rec| self.stale(&rec, now));
            if expired && self.records.remove(&k).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// A call's audit entry under its key, from `pending` to its outcome.
struct Audit {
    key: Vec<u8>,
    entry: AuditEntry,
    started: std::time::Instant,
}

impl Audit {
    fn start(tool: &str, request_id: Option<&str>, at_ms: i64, unique: &[u8]) -> Audit {
        let context = super::audit::current();
        Audit {
            key: audit_key(at_ms, unique),
            entry: AuditEntry {
                at_ms,
                at: None,
                tool: tool.to_string(),
                caller: context.caller,
                targets: context.targets,
                request_id: request_id.map(str::to_string),
                outcome: AuditOutcome::Pending,
                code: None,
                vk_ms: None,
            },
            started: std::time::Instant::now(),
        }
    }

    fn finish(&mut self, result: &Result<Value, ToolError>) {
        self.entry.vk_ms = Some(self.started.elapsed().as_millis() as u64);
        match result {
            Ok(_) => self.entry.outcome = AuditOutcome::Ok,
            Err(e) => {
                self.entry.outcome = AuditOutcome::Failed;
                self.entry.code = Some(e.code.as_str().to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn idem(ttl: IdempotencyTtl) -> Idempotency {
        Idempotency::new(IdempotencyRecords::temporary().unwrap(), ttl)
    }

    #[tokio::test]
    async fn same_key_same_payload_runs_once_and_racing_calls_wait() {
        let i = idem(IdempotencyTtl::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let run = |i: Idempotency, calls: Arc<AtomicUsize>| async move {
            i.run("create_task", Some("k1"), &json!({"t": 1}), || async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(json!({"task_id": calls.fetch_add(1, Ordering::SeqCst)}))
            })
            .await
            .unwrap()
            .result
        };
        let (a, b) = tokio::join!(run(i.clone(), calls.clone()), run(i.clone(), calls.clone()));
        assert_eq!(a, b);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let err = i
            .run("create_task", Some("k1"), &json!({"t": 2}), || async {
                Ok(json!({}))
            })
            .await
            .err()
            .unwrap();
        assert_eq!(err.code, "idempotency_conflict");
        // Another tool may use the same request_id.
        let other = i
            .run("follow_up", Some("k1"), &json!({"t": 2}), || async {
                Ok(json!(7))
            })
            .await
            .unwrap();
        assert!(!other.replayed);
    }

    #[tokio::test]
    async fn failures_are_forgotten_and_expired_records_pruned() {
        let i = idem(IdempotencyTtl {
            completed: Duration::from_millis(1),
            in_progress: Duration::ZERO,
        });
        let e = i
            .run("x", Some("k"), &json!(1), || async {
                Err(ToolError::invalid_argument("no"))
            })
            .await;
        assert!(e.is_err());
        assert!(i.is_empty(), "a failed call leaves no record");
        i.run("x", Some("k"), &json!(1), || async { Ok(json!(1)) })
            .await
            .unwrap();
        assert_eq!(i.len(), 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(i.prune(), 1);
        assert!(i.is_empty());
    }
}
