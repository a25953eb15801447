//! The `request_id` records of the mutating tools: a tree of their own beside the projections,
//! written by the proxy (not by the projection writer: a record is not an event of VK's), built
//! only by the store that owns the files. Keys are opaque bytes (the proxy's tool and
//! request_id); a value is an [`IdempotencyRecord`] as JSON, whose bytes are part of the data
//! dir's format: field names, their order and the state words never change (a test decodes a
//! record as older builds wrote it).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sled::Transactional as _;

use super::StoreError;
use super::audit::AuditEntry;

/// What a commit does to a `request_id` record, beside its audit entry.
pub enum RecordChange<'a> {
    /// No record (a call without a `request_id`).
    None,
    Put(&'a [u8], &'a IdempotencyRecord),
    Remove(&'a [u8]),
}

/// Where a recorded call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// The call succeeded; the record's `result` is what it answered.
    Completed,
    /// The call is running, or a crash left it so: written (and flushed) before VK is asked.
    /// A word no build wrote reads as this too, as it did when the state was a string.
    #[serde(other)]
    InProgress,
}

/// One `request_id` record: the effective payload (canonical JSON), the state, the result once
/// completed, and timestamps (Unix ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    pub payload: String,
    pub state: RecordState,
    pub result: Option<Value>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

impl IdempotencyRecord {
    /// The stored bytes.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(self).map_err(StoreError::Encode)
    }

    /// A stored record, or `None` for bytes that do not parse (treated as absent).
    pub(crate) fn decode(bytes: &[u8]) -> Option<IdempotencyRecord> {
        serde_json::from_slice(bytes).ok()
    }
}

/// Durable key → value records for idempotency. Cheap to clone (a sled tree handle).
#[derive(Clone)]
pub struct IdempotencyRecords {
    tree: sled::Tree,
    /// The audit trail (`store::audit`), committed together with the records.
    audit: sled::Tree,
}

impl IdempotencyRecords {
    pub(super) fn new(tree: sled::Tree, audit: sled::Tree) -> Self {
        IdempotencyRecords { tree, audit }
    }

    /// Records in a throwaway database (unit tests of the proxy).
    pub fn temporary() -> Result<Self, StoreError> {
        let db = sled::Config::new().temporary(true).open()?;
        Ok(IdempotencyRecords::new(
            db.open_tree("idempotency")?,
            db.open_tree("audit")?,
        ))
    }

    /// A record change and its audit entry in one sled transaction over both trees: after a
    /// crash both are there or neither (`store::audit`). Not flushed: see `flush`.
    pub fn commit(
        &self,
        change: RecordChange<'_>,
        audit_key: &[u8],
        entry: &AuditEntry,
    ) -> Result<(), StoreError> {
        let record = match &change {
            RecordChange::Put(_, r) => Some(r.encode()?),
            _ => None,
        };
        let entry = entry.encode()?;
        (&self.tree, &self.audit)
            .transaction(|(records, audit)| {
                match &change {
                    RecordChange::None => {}
                    RecordChange::Put(k, _) => {
                        records.insert(*k, record.clone().unwrap_or_default())?;
                    }
                    RecordChange::Remove(k) => {
                        records.remove(*k)?;
                    }
                }
                audit.insert(audit_key, entry.clone())?;
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                sled::transaction::TransactionError::Storage(e) => StoreError::from(e),
                sled::transaction::TransactionError::Abort(()) => {
                    StoreError::from(sled::Error::Unsupported("audit commit aborted".into()))
                }
            })
    }

    /// The audit entries, oldest first (tests and the proxy's own checks).
    pub fn audit_entries(&self) -> Vec<AuditEntry> {
        self.audit
            .iter()
            .filter_map(Result::ok)
            .filter_map(|(_, v)| AuditEntry::decode(&v))
            .collect()
    }

    /// The record under `key`; one that does not parse reads as absent (and is overwritten).
    pub fn get(&self, key: &[u8]) -> Result<Option<IdempotencyRecord>, StoreError> {
        Ok(self
            .tree
            .get(key)?
            .and_then(|raw| IdempotencyRecord::decode(&raw)))
    }

    pub fn remove(&self, key: &[u8]) -> Result<(), StoreError> {
        self.tree.remove(key)?;
        Ok(())
    }

    /// Make every record and audit entry written so far durable (one sled log for both trees).
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.tree.flush_async().await?;
        Ok(())
    }

    /// Every record, in key order, `None` where the bytes do not parse; entries sled cannot
    /// read are skipped.
    pub fn entries(&self) -> impl Iterator<Item = (sled::IVec, Option<IdempotencyRecord>)> + '_ {
        self.tree
            .iter()
            .filter_map(Result::ok)
            .map(|(k, v)| (k, IdempotencyRecord::decode(&v)))
    }

    pub fn len(&self) -> usize {
        self.tree.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes as builds with a string state wrote them (`proxy::idempotency` before the enum).
    const OLD_COMPLETED: &[u8] = br#"{"payload":"{\"title\":\"t\"}","state":"completed","result":{"task_id":"x"},"created_ms":1764000000000,"updated_ms":1764000001000}"#;
    const OLD_IN_PROGRESS: &[u8] =
        br#"{"payload":"{}","state":"in_progress","result":null,"created_ms":5,"updated_ms":6}"#;

    #[test]
    fn records_written_by_older_builds_read_back_and_encode_to_the_same_bytes() {
        let done = IdempotencyRecord::decode(OLD_COMPLETED).expect("old completed record");
        assert_eq!(done.state, RecordState::Completed);
        assert_eq!(done.payload, r#"{"title":"t"}"#);
        assert_eq!(done.result, Some(serde_json::json!({"task_id": "x"})));
        assert_eq!(done.encode().unwrap(), OLD_COMPLETED);
        let running = IdempotencyRecord::decode(OLD_IN_PROGRESS).expect("old in-progress record");
        assert_eq!(running.state, RecordState::InProgress);
        assert_eq!(running.encode().unwrap(), OLD_IN_PROGRESS);
    }

    #[test]
    fn a_state_word_no_build_wrote_reads_as_in_progress_and_garbage_as_absent() {
        let odd = br#"{"payload":"","state":"paused","result":null,"created_ms":0,"updated_ms":0}"#;
        assert_eq!(
            IdempotencyRecord::decode(odd).map(|r| r.state),
            Some(RecordState::InProgress)
        );
        assert_eq!(IdempotencyRecord::decode(b"not json"), None);
    }

    #[test]
    fn records_round_trip_through_the_tree() {
        let records = IdempotencyRecords::temporary().unwrap();
        records.tree.insert(b"k", OLD_COMPLETED).unwrap();
        records.tree.insert(b"z", &b"garbage"[..]).unwrap();
        let rec = records.get(b"k").unwrap().unwrap();
        assert_eq!(rec.state, RecordState::Completed);
        assert_eq!(records.get(b"z").unwrap(), None);
        let states: Vec<Option<RecordState>> =
            records.entries().map(|(_, r)| r.map(|r| r.state)).collect();
        assert_eq!(states, [Some(RecordState::Completed), None]);
    }

    /// A record and its audit entry land together; rewriting the entry under its key keeps
    /// one entry per call, and a removal still leaves the entry with its outcome.
    #[test]
    fn a_commit_writes_the_record_and_its_audit_entry_together() {
        use crate::audit::{AuditEntry, AuditOutcome, audit_key};
        let records = IdempotencyRecords::temporary().unwrap();
        let rec = IdempotencyRecord::decode(OLD_IN_PROGRESS).unwrap();
        let key = audit_key(5, b"create_task\0r1");
        let mut entry = AuditEntry {
            at_ms: 5,
            at: None,
            tool: "create_task".into(),
            caller: "agent".into(),
            targets: serde_json::Map::new(),
            request_id: Some("r1".into()),
            outcome: AuditOutcome::Pending,
            code: None,
            vk_ms: None,
        };
        records
            .commit(RecordChange::Put(b"k", &rec), &key, &entry)
            .unwrap();
        assert_eq!(records.get(b"k").unwrap(), Some(rec));
        entry.outcome = AuditOutcome::Failed;
        entry.code = Some("conflict".into());
        records
            .commit(RecordChange::Remove(b"k"), &key, &entry)
            .unwrap();
        assert_eq!(records.get(b"k").unwrap(), None);
        // Read back, the entry carries its time in RFC 3339 too (never stored).
        entry.at = Some("1970-01-01T00:00:00.005Z".into());
        assert_eq!(records.audit_entries(), [entry]);
    }
}
