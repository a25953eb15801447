//! The approvals index: every tool approval VK asked for, derived from the normalized log
//! entries the writer already stores (no upstream traffic of its own).
//!
//! VK marks an approval only in the log: the `tool_use` entry's status is replaced in place by
//! `{"status":"pending_approval",approval_id,requested_at,timeout_at}`, then, once answered, by
//! `created`/`success`/`failed` (approved), `{"status":"denied",reason}` or `timed_out`. The later
//! entries no longer carry the approval id, so a record is keyed by where its entry lives
//! (`APPROVALS ‖ attempt ‖ process ‖ entry_index`) and found by id through `APPROVAL_IDS`.
//!
//! Why it stays right: the record is written in the same overlay, hence the same atomic batch,
//! as the entry it is derived from, and only when that entry was really written (a re-sent
//! identical entry writes nothing, so it changes nothing here either). An entry written where a
//! record exists restates the record from the entry's new status; removing a process (a snapshot
//! without it, its attempt or task gone) removes its records. Entries dropped by the per-log cap
//! keep their record: the approval happened, and its last known status stays true. The tables
//! are additive (no schema bump): a store made before them is indexed once when opened
//! ([`backfill`]: the entries still `pending_approval`; earlier answers are not recoverable
//! from the log, whose answered entries no longer name their approval).

use memchr::memmem;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::StoreError;
use super::apply::Pending;
use super::chunk::Head;
use super::codec::{decode, encode, same_json};
use super::keys::table;
use super::reader::StoreReader;

/// What a normalized entry's status says about its approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
    TimedOut,
}

impl ApprovalState {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::TimedOut => "timed_out",
        }
    }
}

/// One approval as the cache knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub approval_id: String,
    pub attempt_id: Uuid,
    pub execution_process_id: Uuid,
    pub entry_index: u64,
    pub tool_name: String,
    /// The command, path or query of the tool input, clipped.
    pub summary: String,
    pub state: ApprovalState,
    /// The reason given with a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub requested_at: Option<String>,
    pub timeout_at: Option<String>,
    /// Token of the batch that last changed the record (not stored inside the JSON).
    #[serde(skip)]
    pub token: u64,
}

/// Longest summary of a tool input, in characters.
pub(crate) const SUMMARY_CHARS: usize = 160;

/// `APPROVALS ‖ attempt ‖ process ‖ entry_index`.
pub(crate) fn record_key(attempt: Uuid, process: Uuid, index: u64) -> [u8; 41] {
    let mut k = [0u8; 41];
    k[0] = table::APPROVALS;
    k[1..17].copy_from_slice(attempt.as_bytes());
    k[17..33].copy_from_slice(process.as_bytes());
    k[33..].copy_from_slice(&index.to_be_bytes());
    k
}

/// `APPROVAL_IDS ‖ approval id` → the record key.
pub(crate) fn id_key(approval: Uuid) -> [u8; 17] {
    super::keys::id_key(table::APPROVAL_IDS, approval)
}

fn clip(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= SUMMARY_CHARS {
        return one_line;
    }
    let mut out: String = one_line.chars().take(SUMMARY_CHARS - 1).collect();
    out.push('…');
    out
}

/// What the tool would do, in a line: the command, path, query or url of its action, else the
/// entry's own text.
pub(crate) fn summarize(content: &Value) -> String {
    let action = content.pointer("/entry_type/action_type");
    let field = ["command", "path", "query", "url", "description"]
        .iter()
        .find_map(|f| action.and_then(|a| a.get(*f)).and_then(Value::as_str));
    let text = field
        .or_else(|| content.get("content").and_then(Value::as_str))
        .unwrap_or("");
    clip(text)
}

/// The approval facts of a normalized entry: `None` unless it is a tool_use entry.
fn status_of(content: &Value) -> Option<(&str, &Value)> {
    let ty = content.pointer("/entry_type/type")?.as_str()?;
    if ty != "tool_use" {
        return None;
    }
    let status = content.pointer("/entry_type/status")?;
    Some((status.get("status")?.as_str()?, status))
}

/// The record `old` (if any) after its entry was written as `content`.
fn restate(
    old: Option<ApprovalRecord>,
    at: (Uuid, Uuid, u64),
    content: &Value,
) -> Option<ApprovalRecord> {
    let (word, status) = status_of(content)?;
    let text = |f: &str| status.get(f).and_then(Value::as_str).map(str::to_string);
    if word == "pending_approval" {
        return Some(ApprovalRecord {
            approval_id: text("approval_id")?,
            attempt_id: at.0,
            execution_process_id: at.1,
            entry_index: at.2,
            tool_name: content
                .pointer("/entry_type/tool_name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            summary: summarize(content),
            state: ApprovalState::Pending,
            reason: None,
            requested_at: text("requested_at"),
            timeout_at: text("timeout_at"),
            token: 0,
        });
    }
    let mut rec = old?;
    (rec.state, rec.reason) = match word {
        "denied" => (ApprovalState::Denied, text("reason")),
        "timed_out" => (ApprovalState::TimedOut, None),
        "created" | "success" | "failed" => (ApprovalState::Approved, None),
        _ => return Some(rec),
    };
    Some(rec)
}

type R<T = ()> = Result<T, StoreError>;

/// `META` entry set once the store's normalized logs have been indexed.
const INDEXED: &[u8] = b"approvals_indexed";

/// Index the pending approvals of a store written before this index existed, once, in one
/// batch, before the writer starts. Records keep the token of their entry, so nothing moves.
pub(super) fn backfill(tree: &sled::Tree) -> R<usize> {
    let mark = super::keys::meta_key(INDEXED);
    if tree.contains_key(&mark)? {
        return Ok(0);
    }
    let mut batch = sled::Batch::default();
    let mut n = 0;
    for item in tree.scan_prefix([table::LOG_CHUNKS_NORMALIZED]) {
        let (k, v) = item?;
        let (Some(pid), Some(start)) = (super::keys::uuid_at(&k, 1), super::keys::trailing_u64(&k))
        else {
            continue;
        };
        // The chunk's body is searched once; its entries only when it mentions an ask.
        let Some(head) = Head::parse(&v) else {
            continue;
        };
        let Some(body) = head.body(&v) else {
            continue;
        };
        if memmem::find(&body, b"pending_approval").is_none() {
            continue;
        }
        let attempt = tree
            .get(super::keys::id_key(table::PROCESS_ATTEMPT, pid))?
            .and_then(|b| Uuid::from_slice(&b).ok());
        let Some(attempt) = attempt else {
            continue;
        };
        for slot in &head.slots {
            let index = start + u64::from(slot.offset);
            let json = &body[slot.range()];
            if let Some((key, id, bytes)) = backfilled(attempt, pid, index, json)? {
                batch.insert(key.to_vec(), encode(slot.token, &bytes));
                if let Some(id) = id {
                    batch.insert(id_key(id).to_vec(), key.to_vec());
                }
                n += 1;
            }
        }
    }
    batch.insert(mark, Vec::new());
    tree.apply_batch(batch)?;
    Ok(n)
}

/// The record a stored entry still asking for approval makes: its key, the approval id to link
/// and the record's JSON; `None` for an entry that asks nothing.
type Backfilled = Option<([u8; 41], Option<Uuid>, Vec<u8>)>;

fn backfilled(attempt: Uuid, pid: Uuid, index: u64, json: &[u8]) -> R<Backfilled> {
    if memmem::find(json, b"pending_approval").is_none() {
        return Ok(None);
    }
    let Ok(entry) = serde_json::from_slice::<Value>(json) else {
        return Ok(None);
    };
    let content = entry.get("content").unwrap_or(&Value::Null);
    let Some(rec) = restate(None, (attempt, pid, index), content) else {
        return Ok(None);
    };
    let bytes = serde_json::to_vec(&rec).map_err(StoreError::Encode)?;
    let id = Uuid::parse_str(&rec.approval_id).ok();
    Ok(Some((record_key(attempt, pid, index), id, bytes)))
}

impl Pending<'_, '_> {
    /// Keep the approvals index in step with a normalized entry just written at `index`
    /// (`fresh`: above every stored index, so no record can be there yet).
    pub(super) fn track_approval(
        &mut self,
        attempt: Uuid,
        process: Uuid,
        index: u64,
        json: &[u8],
        fresh: bool,
    ) -> R {
        let mentions = memmem::find(json, b"pending_approval").is_some();
        if fresh && !mentions {
            return Ok(());
        }
        let key = record_key(attempt, process, index);
        let old_bytes = self.ov.get(&key)?;
        if old_bytes.is_none() && !mentions {
            return Ok(());
        }
        let Ok(entry) = serde_json::from_slice::<Value>(json) else {
            return Ok(());
        };
        let content = entry.get("content").unwrap_or(&Value::Null);
        let old = old_bytes
            .as_deref()
            .and_then(decode)
            .and_then(|(_, j)| serde_json::from_slice::<ApprovalRecord>(&j).ok());
        let Some(new) = restate(old.clone(), (attempt, process, index), content) else {
            return Ok(());
        };
        if let Some(prev) = &old
            && prev.approval_id != new.approval_id
        {
            self.unlink_id(&prev.approval_id, &key)?;
        }
        // Only an ask links the id: an answer restates the record wherever the id now points.
        if new.state == ApprovalState::Pending
            && let Ok(id) = Uuid::parse_str(&new.approval_id)
            && self.ov.get(&id_key(id))?.as_deref() != Some(&key[..])
        {
            self.ov.insert(&id_key(id), key.to_vec());
            self.changed = true;
        }
        let bytes = serde_json::to_vec(&new).map_err(StoreError::Encode)?;
        if old_bytes
            .as_deref()
            .and_then(decode)
            .is_some_and(|(_, j)| same_json(&j, &bytes))
        {
            return Ok(());
        }
        self.ov.insert(&key, encode(self.next, &bytes));
        self.changed = true;
        self.attempts.insert(attempt);
        self.feed_approval(old.as_ref(), &new)
    }

    /// Remove the id index entry of `approval_id` if it still points at `key`.
    fn unlink_id(&mut self, approval_id: &str, key: &[u8]) -> R {
        if let Ok(id) = Uuid::parse_str(approval_id)
            && self.ov.get(&id_key(id))?.as_deref() == Some(key)
        {
            self.ov.remove(&id_key(id));
        }
        Ok(())
    }

    /// Drop the records of a removed process (and their id index entries).
    pub(super) fn forget_approvals(&mut self, attempt: Uuid, process: Uuid) -> R {
        let prefix = &record_key(attempt, process, 0)[..33];
        for k in self.ov.keys_with_prefix(prefix)? {
            if let Some(rec) = self.ov.get(&k)?.as_deref().and_then(decode_record) {
                self.unlink_id(&rec.approval_id, &k)?;
            }
            self.ov.remove(&k);
            self.changed = true;
        }
        Ok(())
    }
}

fn decode_record(bytes: &[u8]) -> Option<ApprovalRecord> {
    let (token, json) = decode(bytes)?;
    let mut rec: ApprovalRecord = serde_json::from_slice(&json).ok()?;
    rec.token = token;
    Some(rec)
}

impl StoreReader {
    /// Every approval of the attempt, by (process, entry index).
    pub fn approvals_of_attempt(&self, attempt: Uuid) -> R<Vec<ApprovalRecord>> {
        let prefix = super::keys::id_key(table::APPROVALS, attempt);
        let mut out = Vec::new();
        for item in self.tree().scan_prefix(prefix) {
            let (_, v) = item?;
            out.extend(decode_record(&v));
        }
        Ok(out)
    }

    /// The approval with this id, if the cache saw it.
    pub fn approval(&self, approval_id: Uuid) -> R<Option<ApprovalRecord>> {
        let Some(key) = self.tree().get(id_key(approval_id))? else {
            return Ok(None);
        };
        Ok(self.tree().get(key)?.as_deref().and_then(decode_record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(status: Value, action: Value) -> Value {
        json!({"timestamp": null, "entry_type": {"type": "tool_use", "tool_name": "Bash",
               "action_type": action, "status": status}, "content": "fallback text"})
    }

    #[test]
    fn summaries_prefer_the_command_and_clip_long_ones() {
        let cmd = entry(
            json!({}),
            json!({"action": "command_run", "command": "ls  -la\n/tmp"}),
        );
        assert_eq!(summarize(&cmd), "ls -la /tmp");
        let long = "x".repeat(500);
        let path = entry(json!({}), json!({"action": "file_edit", "path": long}));
        let s = summarize(&path);
        assert_eq!(s.chars().count(), SUMMARY_CHARS);
        assert!(s.ends_with('…'));
        let other = entry(json!({}), json!({"action": "other"}));
        assert_eq!(summarize(&other), "fallback text");
    }

    #[test]
    fn restating_follows_vk_tool_statuses() {
        let at = (Uuid::from_u128(1), Uuid::from_u128(2), 3);
        let action = json!({"action": "command_run", "command": "make"});
        let id = Uuid::from_u128(9).to_string();
        let pending = entry(
            json!({"status": "pending_approval", "approval_id": id, "requested_at": "t0",
                   "timeout_at": "t1"}),
            action.clone(),
        );
        let rec = restate(None, at, &pending).expect("a pending record");
        assert_eq!(rec.state, ApprovalState::Pending);
        assert_eq!(
            (rec.summary.as_str(), rec.tool_name.as_str()),
            ("make", "Bash")
        );
        let cases = [
            (json!({"status": "created"}), ApprovalState::Approved, None),
            (json!({"status": "success"}), ApprovalState::Approved, None),
            (
                json!({"status": "denied", "reason": "no"}),
                ApprovalState::Denied,
                Some("no"),
            ),
            (
                json!({"status": "timed_out"}),
                ApprovalState::TimedOut,
                None,
            ),
        ];
        for (status, state, reason) in cases {
            let next = restate(Some(rec.clone()), at, &entry(status, action.clone())).unwrap();
            assert_eq!((next.state, next.reason.as_deref()), (state, reason));
            assert_eq!(next.approval_id, id);
        }
        // A plain created tool_use with no record before is not an approval.
        assert_eq!(
            restate(None, at, &entry(json!({"status": "created"}), action)),
            None
        );
    }
}
