//! The per-task digest row (issue 27, schema 4): everything `list_tasks` shows of a task — its own
//! fields and the seed-002 summary of its attempts (latest attempt, its branch and newest
//! session, any relevant process running, the newest relevant process failed) — kept in one row,
//! so a page reads one row per task instead of the task row and a dozen attempt, session and
//! process reads.
//!
//! Kept by the one writer in the same batch as the rows it summarizes: [`restate`] runs once per
//! batch (after `list_index::restate`) and recomputes the digest of each task whose row changed
//! or whose attempts, sessions or processes changed a field the summary reads (run reason,
//! status, `dropped`, `created_at`, branch, executor) or joined or left it. A process whose
//! status did not move (the common write: a log chunk, an `updated_at`) costs two typed decodes
//! and no read of the task. A digest equal to the stored one is not rewritten.
//!
//! [`attempt_facts`] is the one computation of the attempts' part, over any [`Rows`] (the
//! writer's overlay, the committed tree, a reader): the writer keeps it, the query layer's
//! reference summary reads the same rules. A store written before the digests (schema 1–3) gets
//! them on open ([`build_all`], in `list_index::migrate_to_current`'s batch).
//!
//! Table byte 0x45 belongs to this module (`list_index` holds 0x40–0x44).

use std::collections::BTreeSet;
use std::ops::Bound;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::StoreError;
use super::codec::decode;
use super::events::HOST_FIELD;
use super::keys::{self, table};
use super::list_index::{After, TASKS_BY_CREATED, TASKS_BY_STATUS, ordered, status_code};
use super::overlay::Overlay;
use super::reader::StoreReader;
use super::rows::{AttemptRow, ProcessRow, SessionRow};
use vk_observer_vk::{
    self as vk, ProcessStatus, is_relevant_reason, newest_first, string_of, ts_of,
};

/// `TASK_DIGESTS ‖ task` → the task's [`TaskDigest`] as JSON.
pub(crate) const TASK_DIGESTS: u8 = 0x45;

type R<T = ()> = Result<T, StoreError>;

/// What a task's attempts add to its listing (seed 002).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptFacts {
    pub latest_attempt_id: Option<Uuid>,
    pub latest_workspace_branch: Option<String>,
    pub latest_session_id: Option<Uuid>,
    pub latest_session_executor: Option<String>,
    pub has_in_progress_attempt: bool,
    pub last_attempt_failed: bool,
}

/// One task as a listing shows it: its own fields and its [`AttemptFacts`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskDigest {
    pub project_id: Option<Uuid>,
    pub title: String,
    pub description: Option<String>,
    pub status: String,
    /// RFC 3339, as `vk::ts_string` writes it.
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    /// The same times in microseconds (cursors, `updated_since`).
    pub created_micros: Option<i64>,
    pub updated_micros: Option<i64>,
    /// Fleet node only: the host that owns the task.
    pub host: Option<String>,
    /// Fleet node only: every host that reports the task, when there are several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    pub facts: AttemptFacts,
}

impl TaskDigest {
    /// The digest of a task row (its JSON) with the facts of its attempts.
    pub fn of(task: &Value, facts: AttemptFacts) -> TaskDigest {
        let micros = |f: &str| ts_of(task, f).map(|t| t.timestamp_micros());
        TaskDigest {
            project_id: vk::uuid_of(task, "project_id"),
            title: string_of(task, "title").unwrap_or_default(),
            description: string_of(task, "description"),
            status: string_of(task, "status").unwrap_or_default(),
            created_at: vk::ts_string(task, "created_at"),
            updated_at: vk::ts_string(task, "updated_at"),
            created_micros: micros("created_at"),
            updated_micros: micros("updated_at"),
            host: string_of(task, HOST_FIELD),
            hosts: super::events::several_hosts(task),
            facts,
        }
    }
}

/// Where rows are read from: the writer's overlay (its batch over the committed tree), the
/// committed tree, a reader's snapshot.
pub trait Rows {
    fn row(&self, key: &[u8]) -> R<Option<Vec<u8>>>;
    /// The second ids of the `idx ‖ parent ‖ child` index under `parent`.
    fn child_ids(&self, idx: u8, parent: Uuid) -> R<Vec<Uuid>>;
}

impl Rows for Overlay<'_> {
    fn row(&self, key: &[u8]) -> R<Option<Vec<u8>>> {
        Ok(self.get(key)?)
    }
    fn child_ids(&self, idx: u8, parent: Uuid) -> R<Vec<Uuid>> {
        let keys = self.keys_with_prefix(&keys::id_key(idx, parent))?;
        Ok(keys.iter().filter_map(|k| keys::uuid_at(k, 17)).collect())
    }
}

impl Rows for sled::Tree {
    fn row(&self, key: &[u8]) -> R<Option<Vec<u8>>> {
        Ok(self.get(key)?.map(|v| v.to_vec()))
    }
    fn child_ids(&self, idx: u8, parent: Uuid) -> R<Vec<Uuid>> {
        let mut out = Vec::new();
        for k in self.scan_prefix(keys::id_key(idx, parent)).keys() {
            out.extend(keys::uuid_at(&k?, 17));
        }
        Ok(out)
    }
}

impl Rows for StoreReader {
    fn row(&self, key: &[u8]) -> R<Option<Vec<u8>>> {
        self.tree().row(key)
    }
    fn child_ids(&self, idx: u8, parent: Uuid) -> R<Vec<Uuid>> {
        self.tree().child_ids(idx, parent)
    }
}

/// A stored row (token ‖ JSON) decoded into `T`; `None` when absent or not an object of `T`.
fn typed<T: DeserializeOwned>(stored: Option<&[u8]>) -> Option<T> {
    stored
        .and_then(decode)
        .and_then(|(_, json)| serde_json::from_slice(&json).ok())
}

fn children_as<T: DeserializeOwned>(
    rows: &impl Rows,
    idx: u8,
    parent: Uuid,
    table: u8,
) -> R<Vec<(Uuid, T)>> {
    let mut out = Vec::new();
    for id in rows.child_ids(idx, parent)? {
        if let Some(t) = typed(rows.row(&keys::id_key(table, id))?.as_deref()) {
            out.push((id, t));
        }
    }
    Ok(out)
}

/// The newest relevant process seen so far: its `created_at` and status.
#[derive(Default)]
struct NewestProcess {
    newest: Option<(Option<DateTime<Utc>>, ProcessStatus)>,
    any_running: bool,
}

impl NewestProcess {
    fn see(&mut self, created: Option<DateTime<Utc>>, status: ProcessStatus) {
        self.any_running |= status.is_running();
        if self.newest.as_ref().is_none_or(|(c, _)| created > *c) {
            self.newest = Some((created, status));
        }
    }
}

/// The newest session of an attempt: its id and executor.
pub(crate) fn latest_session(rows: &impl Rows, attempt: Uuid) -> R<(Option<Uuid>, Option<String>)> {
    let sessions =
        children_as::<SessionRow>(rows, table::IDX_ATTEMPT_SESSIONS, attempt, table::SESSIONS)?;
    Ok(match vk::latest(&sessions) {
        Some((id, s)) => (Some(*id), s.executor.clone()),
        None => (None, None),
    })
}

/// What a task's attempts say (seed 002), read as typed rows from `rows`.
pub fn attempt_facts(rows: &impl Rows, task: Uuid) -> R<AttemptFacts> {
    let mut attempts =
        children_as::<AttemptRow>(rows, table::IDX_TASK_ATTEMPTS, task, table::ATTEMPTS)?;
    attempts.sort_by(newest_first);
    let mut facts = AttemptFacts::default();
    if let Some((id, latest)) = attempts.first() {
        (facts.latest_session_id, facts.latest_session_executor) = latest_session(rows, *id)?;
        facts.latest_attempt_id = Some(*id);
        facts.latest_workspace_branch = latest.branch.clone();
    }
    let mut processes = NewestProcess::default();
    for (attempt, _) in &attempts {
        let ps = children_as::<ProcessRow>(
            rows,
            table::IDX_ATTEMPT_PROCESSES,
            *attempt,
            table::PROCESSES,
        )?;
        for (_, p) in ps {
            if is_relevant_reason(p.reason()) && !p.is_dropped() {
                processes.see(p.created_at, ProcessStatus::parse(p.status()));
            }
        }
    }
    facts.has_in_progress_attempt = processes.any_running;
    facts.last_attempt_failed = processes
        .newest
        .as_ref()
        .is_some_and(|(_, s)| s.is_failure());
    Ok(facts)
}

/// The digest of a task from `rows`: `None` when the task row is absent or not JSON.
pub(crate) fn digest_of(rows: &impl Rows, task: Uuid) -> R<Option<TaskDigest>> {
    let Some(value) = typed::<Value>(rows.row(&keys::id_key(table::TASKS, task))?.as_deref())
    else {
        return Ok(None);
    };
    Ok(Some(TaskDigest::of(&value, attempt_facts(rows, task)?)))
}

pub(crate) fn digest_key(task: Uuid) -> [u8; 17] {
    keys::id_key(TASK_DIGESTS, task)
}

fn encode_digest(d: &TaskDigest) -> R<Vec<u8>> {
    serde_json::to_vec(d).map_err(StoreError::Encode)
}

fn decode_digest(bytes: &[u8]) -> Option<TaskDigest> {
    serde_json::from_slice(bytes).ok()
}

/// What the summary reads of an attempt, a session and a process: a change elsewhere in the row
/// (an `updated_at`, a prompt, an exit code) leaves the digest as it is.
fn attempt_fields(a: AttemptRow) -> impl PartialEq {
    (a.branch, a.created_at)
}
fn session_fields(s: SessionRow) -> impl PartialEq {
    (s.executor, s.created_at)
}
fn process_fields(p: ProcessRow) -> impl PartialEq {
    (p.run_reason, p.status, p.dropped, p.created_at)
}

/// The parents (`idx ‖ parent ‖ child`) whose child joined, left, or changed a summarized field
/// (the child row of `table`, committed against the batch's) in this batch.
fn touched_parents<T: DeserializeOwned, F: PartialEq>(
    ov: &Overlay<'_>,
    idx: u8,
    table: u8,
    fields: fn(T) -> F,
) -> R<BTreeSet<Uuid>> {
    let mut out = BTreeSet::new();
    for (pair, now) in ov.pending_with_prefix(&[idx]) {
        let (Some(parent), Some(child)) = (keys::uuid_at(&pair, 1), keys::uuid_at(&pair, 17))
        else {
            continue;
        };
        if out.contains(&parent) {
            continue;
        }
        let joined_or_left = ov.committed(&pair)?.is_some() != now.is_some();
        let row = keys::id_key(table, child);
        let before = typed::<T>(ov.committed(&row)?.as_deref()).map(fields);
        let after = typed::<T>(ov.get(&row)?.as_deref()).map(fields);
        if joined_or_left || before != after {
            out.insert(parent);
        }
    }
    Ok(out)
}

/// The task an attempt belongs to: the batch's attempt row, else the committed one (a removal).
fn task_of_attempt(ov: &Overlay<'_>, attempt: Uuid) -> R<Option<Uuid>> {
    let key = keys::id_key(table::ATTEMPTS, attempt);
    let row = match ov.get(&key)? {
        Some(v) => Some(v),
        None => ov.committed(&key)?,
    };
    Ok(typed::<AttemptRow>(row.as_deref()).and_then(|a| a.task_id))
}

/// Brings the digests in line with the batch's writes (see the module doc).
pub(crate) fn restate(ov: &mut Overlay<'_>) -> R {
    let mut facts_moved = touched_parents(
        ov,
        table::IDX_TASK_ATTEMPTS,
        table::ATTEMPTS,
        attempt_fields,
    )?;
    let mut attempts = touched_parents(
        ov,
        table::IDX_ATTEMPT_SESSIONS,
        table::SESSIONS,
        session_fields,
    )?;
    attempts.extend(touched_parents(
        ov,
        table::IDX_ATTEMPT_PROCESSES,
        table::PROCESSES,
        process_fields,
    )?);
    for attempt in attempts {
        facts_moved.extend(task_of_attempt(ov, attempt)?);
    }
    let rows_moved: BTreeSet<Uuid> = ov
        .pending_with_prefix(&[table::TASKS])
        .into_iter()
        .filter(|(k, _)| k.len() == 17)
        .filter_map(|(k, _)| keys::uuid_at(&k, 1))
        .collect();
    for task in facts_moved.union(&rows_moved) {
        let key = digest_key(*task);
        let old = ov.get(&key)?;
        let new = match old.as_deref().and_then(decode_digest) {
            // Only the task's own row moved: its attempts' facts stand.
            Some(kept) if !facts_moved.contains(task) => {
                let row = typed::<Value>(ov.get(&keys::id_key(table::TASKS, *task))?.as_deref());
                row.map(|v| TaskDigest::of(&v, kept.facts))
            }
            _ => digest_of(ov, *task)?,
        };
        match new {
            Some(d) => {
                let bytes = encode_digest(&d)?;
                if old.as_deref() != Some(bytes.as_slice()) {
                    ov.insert(&key, bytes);
                }
            }
            None if old.is_some() => ov.remove(&key),
            None => {}
        }
    }
    Ok(())
}

/// Every digest rebuilt from the stored rows, into `batch` (the migration of a store written
/// before the digests existed): drops what the table holds and writes one row per task.
pub(crate) fn build_all(tree: &sled::Tree, batch: &mut sled::Batch) -> R {
    for k in tree.scan_prefix([TASK_DIGESTS]).keys() {
        batch.remove(k?);
    }
    for k in tree.scan_prefix([table::TASKS]).keys() {
        let k = k?;
        let Some(task) = keys::uuid_at(&k, 1).filter(|_| k.len() == 17) else {
            continue;
        };
        if let Some(d) = digest_of(tree, task)? {
            batch.insert(digest_key(task).to_vec(), encode_digest(&d)?);
        }
    }
    Ok(())
}

/// One page of task digests read from a newest-first index.
#[derive(Debug, Clone, PartialEq)]
pub struct DigestPage {
    /// The page's tasks, in index order.
    pub items: Vec<(Uuid, TaskDigest)>,
    /// Entries under the index prefix (all pages).
    pub total: usize,
    /// True when entries follow the page.
    pub has_more: bool,
}

impl StoreReader {
    /// A task's digest.
    pub fn task_digest(&self, task: Uuid) -> R<Option<TaskDigest>> {
        Ok(self
            .tree()
            .get(digest_key(task))?
            .and_then(|v| decode_digest(&v)))
    }

    /// A project's task digests newest first, `status` (VK's string) narrowing them, from
    /// `after` on: the index keys of the page, then one row per task.
    pub fn task_digests_newest_first(
        &self,
        project: Uuid,
        status: Option<&str>,
        after: After,
        limit: usize,
    ) -> R<DigestPage> {
        let mut prefix = Vec::with_capacity(18);
        match status {
            Some(s) => {
                prefix.push(TASKS_BY_STATUS);
                prefix.extend_from_slice(project.as_bytes());
                prefix.push(status_code(Some(s)));
            }
            None => {
                prefix.push(TASKS_BY_CREATED);
                prefix.extend_from_slice(project.as_bytes());
            }
        }
        let tree = self.tree();
        let total = self.index_count(&prefix)?;
        let start = match after {
            Some((rank, id)) => {
                let mut k = prefix.clone();
                k.extend_from_slice(&ordered(rank));
                k.extend_from_slice(id.as_bytes());
                Bound::Excluded(k)
            }
            None => Bound::Included(prefix.clone()),
        };
        let mut items = Vec::with_capacity(limit.saturating_add(1).min(256));
        let mut has_more = false;
        for k in tree.range::<Vec<u8>, _>((start, Bound::Unbounded)).keys() {
            let k = k?;
            if !k.starts_with(&prefix) {
                break;
            }
            if items.len() == limit {
                has_more = true;
                break;
            }
            let Some(id) = keys::uuid_at(&k, k.len().saturating_sub(16)) else {
                continue;
            };
            if let Some(d) = self.task_digest(id)? {
                items.push((id, d));
            }
        }
        Ok(DigestPage {
            items,
            total,
            has_more,
        })
    }
}
