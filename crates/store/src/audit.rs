//! The audit trail (issue 26): one entry per mutation a caller asked of VK — the tool, the
//! caller (token name, `mcp-token` or `loopback`), its target ids, the `request_id`, the
//! outcome and how long VK took. A tree of its own beside the `request_id` records, written by
//! the proxy in the same sled transaction as the record it goes with
//! (`IdempotencyRecords::commit`), so after a crash there is never a record without its entry
//! or an entry without its record.
//!
//! Why no mutation goes unaudited and none is audited twice: the entry is written `pending`
//! (and flushed) before VK is asked, then rewritten in place with the outcome. Its key is the
//! call's start time and the record's key (`request_id` calls: the record's `created_ms`, which
//! a re-run after a crash keeps), or the start time and a random id (calls without one). A
//! SIGKILL between VK's answer and the rewrite leaves the entry `pending`: the mutation is
//! audited, its outcome unknown, and a retry with the same `request_id` rewrites that same
//! entry. Keys are time-ordered (big-endian ms first), so the retention pass drops a prefix
//! (`[retention] audit_horizon`) and readers walk newest first.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::{Store, StoreError};

/// Where an audited call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditOutcome {
    /// VK was asked; no answer was recorded (still running, or the daemon died meanwhile).
    Pending,
    Ok,
    Failed,
}

/// One audited mutation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditEntry {
    /// When the call started (Unix ms).
    pub at_ms: i64,
    /// When the call started (RFC 3339, from `at_ms`): filled in when the entry is read, never
    /// stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The mutating tool called.
    pub tool: String,
    /// The token's name, `mcp-token` (`[mcp] token`), or `loopback` (no token).
    pub caller: String,
    /// The target ids of the call (`attempt_id`, `task_id`, `project_id`, …), the project and
    /// attempt resolved from the cache where it knew them.
    pub targets: Map<String, Value>,
    /// The call's `request_id`, if it had one.
    pub request_id: Option<String>,
    /// `pending` (VK asked, no answer recorded: still running, or the daemon died meanwhile),
    /// `ok` or `failed`.
    #[schemars(with = "String")]
    pub outcome: AuditOutcome,
    /// The error code of a failed call.
    pub code: Option<String>,
    /// Milliseconds VK took to answer (null while pending).
    pub vk_ms: Option<u64>,
}

impl AuditEntry {
    pub(crate) fn encode(&self) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(self).map_err(StoreError::Encode)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<AuditEntry> {
        let mut e: AuditEntry = serde_json::from_slice(bytes).ok()?;
        e.at = chrono::DateTime::from_timestamp_millis(e.at_ms).map(vk_observer_vk::rfc3339);
        Some(e)
    }

    fn target(&self, field: &str) -> Option<&str> {
        self.targets.get(field).and_then(Value::as_str)
    }
}

/// An entry's key: the start time, big-endian, then what makes it unique.
pub fn audit_key(at_ms: i64, unique: &[u8]) -> Vec<u8> {
    let mut k = (at_ms.max(0) as u64).to_be_bytes().to_vec();
    k.extend_from_slice(unique);
    k
}

/// Which entries a reader wants; every set field must match.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub attempt: Option<Uuid>,
    pub task: Option<Uuid>,
    pub project: Option<Uuid>,
    pub caller: Option<String>,
    pub tool: Option<String>,
    /// Only entries that started at or after this (Unix ms).
    pub since_ms: Option<i64>,
    /// Only entries whose project is one of these (a project-limited reader); None for all.
    pub within: Option<Vec<Uuid>>,
}

impl AuditFilter {
    pub(crate) fn matches(&self, e: &AuditEntry) -> bool {
        let id = |field: &str, want: Option<Uuid>| {
            want.is_none_or(|w| e.target(field) == Some(w.to_string().as_str()))
        };
        id("attempt_id", self.attempt)
            && id("task_id", self.task)
            && id("project_id", self.project)
            && self.caller.as_ref().is_none_or(|c| *c == e.caller)
            && self.tool.as_ref().is_none_or(|t| *t == e.tool)
            && self.since_ms.is_none_or(|s| e.at_ms >= s)
            && self.within.as_ref().is_none_or(|projects| {
                projects
                    .iter()
                    .any(|p| e.target("project_id") == Some(p.to_string().as_str()))
            })
    }
}

impl Store {
    /// The newest `limit` entries that match, newest first.
    pub fn audit(&self, filter: &AuditFilter, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let mut out = Vec::new();
        for item in self.inner.audit.iter().rev() {
            let (_, v) = item?;
            let Some(e) = AuditEntry::decode(&v) else {
                continue;
            };
            if filter.since_ms.is_some_and(|s| e.at_ms < s) {
                break;
            }
            if filter.matches(&e) {
                out.push(e);
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Drops the entries that started before `cutoff_ms`; how many.
    pub(crate) fn prune_audit(&self, cutoff_ms: i64) -> Result<usize, StoreError> {
        let end = audit_key(cutoff_ms, &[]);
        let mut removed = 0;
        for item in self.inner.audit.range(..end) {
            let (k, _) = item?;
            self.inner.audit.remove(k)?;
            removed += 1;
        }
        Ok(removed)
    }
}
