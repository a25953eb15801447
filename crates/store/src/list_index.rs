//! Ordered secondary indexes for the listings that must not scan a project (issue 27): tasks by
//! project in newest-first order, by project + status in that order, by project + `updated_at`,
//! and attempts by task in newest-first order. Keys only (values are empty): a page reads its
//! ids from the index and decodes just those rows. Beside them, the number of entries under each
//! newest-first prefix (a project, a project and status, a task), so a page's `total` is one read,
//! not a count of the prefix's keys (schema 3).
//!
//! Maintained by the one writer in the same batch as the rows they index: [`restate`] runs once
//! per batch over the batch's own task and attempt writes (old row from the committed tree, new
//! row from the batch), so every path that writes a row (upsert, snapshot, cascade, prune) keeps
//! its index entries without knowing about them. A store from before these indexes (schema 1) or
//! before the counts (schema 2) is indexed on open ([`build_all`], `StoreOwner::open`'s migration
//! to the current schema, `migrate_to_current`).
//!
//! Table bytes 0x40–0x44 belong to this module (`keys::table` lists the rest).

use std::ops::Bound;

use serde_json::Value;
use uuid::Uuid;

use super::StoreError;
use super::codec::decode;
use super::keys::table;
use super::overlay::Overlay;
use super::reader::{StoreReader, Stored};
use vk_observer_vk::{str_of, ts_of, uuid_of};

/// `project ‖ newest_first(created) ‖ task`.
pub(crate) const TASKS_BY_CREATED: u8 = 0x40;
/// `project ‖ status code ‖ newest_first(created) ‖ task`.
pub(crate) const TASKS_BY_STATUS: u8 = 0x41;
/// `project ‖ ascending(updated_at) ‖ task`; tasks without `updated_at` are not in it.
pub(crate) const TASKS_BY_UPDATED: u8 = 0x42;
/// `task ‖ newest_first(created) ‖ attempt`.
pub(crate) const ATTEMPTS_BY_CREATED: u8 = 0x43;

/// `INDEX_COUNTS ‖ index prefix` (a [`TASKS_BY_CREATED`] project, a [`TASKS_BY_STATUS`] project
/// and status, an [`ATTEMPTS_BY_CREATED`] task) → its number of entries (u64 BE); absent at 0.
pub(crate) const INDEX_COUNTS: u8 = 0x44;

/// Every table of this module.
pub(crate) const TABLES: [u8; 5] = [
    TASKS_BY_CREATED,
    TASKS_BY_STATUS,
    TASKS_BY_UPDATED,
    ATTEMPTS_BY_CREATED,
    INDEX_COUNTS,
];

/// VK's task statuses, in the order of their index codes; anything else is [`OTHER_STATUS`].
pub(crate) const STATUSES: [&str; 5] = ["todo", "inprogress", "inreview", "done", "cancelled"];
pub(crate) const OTHER_STATUS: u8 = 0xFF;

type R<T = ()> = Result<T, StoreError>;

/// The index code of a task status.
pub(crate) fn status_code(status: Option<&str>) -> u8 {
    status
        .and_then(|s| STATUSES.iter().position(|k| *k == s))
        .map_or(OTHER_STATUS, |i| i as u8)
}

/// The newest-first position of a creation time (microseconds; unknown last), the same order as
/// `vk::newest_first` and the query layer's cursors (`query::paging::newest_first_key`).
pub(crate) fn newest_first_rank(created_micros: Option<i64>) -> i64 {
    created_micros.map_or(i64::MAX, i64::saturating_neg)
}

/// An `i64` as 8 bytes whose byte order is the numbers' order.
pub(crate) fn ordered(n: i64) -> [u8; 8] {
    ((n as u64) ^ (1 << 63)).to_be_bytes()
}

fn key(table: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push(table);
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

fn micros(v: &Value, field: &str) -> Option<i64> {
    ts_of(v, field).map(|t| t.timestamp_micros())
}

/// The index keys of a stored task row (none without a `project_id`).
pub(crate) fn task_keys(id: Uuid, task: &Value) -> Vec<Vec<u8>> {
    let Some(project) = uuid_of(task, "project_id") else {
        return Vec::new();
    };
    let (p, t) = (project.as_bytes(), id.as_bytes());
    let created = ordered(newest_first_rank(micros(task, "created_at")));
    let status = [status_code(str_of(task, "status"))];
    let mut keys = vec![
        key(TASKS_BY_CREATED, &[p, &created, t]),
        key(TASKS_BY_STATUS, &[p, &status, &created, t]),
    ];
    if let Some(updated) = micros(task, "updated_at") {
        keys.push(key(TASKS_BY_UPDATED, &[p, &ordered(updated), t]));
    }
    keys
}

/// The index key of a stored attempt row (none without a `task_id`).
pub(crate) fn attempt_keys(id: Uuid, attempt: &Value) -> Vec<Vec<u8>> {
    let Some(task) = uuid_of(attempt, "task_id") else {
        return Vec::new();
    };
    let created = ordered(newest_first_rank(micros(attempt, "created_at")));
    vec![key(
        ATTEMPTS_BY_CREATED,
        &[task.as_bytes(), &created, id.as_bytes()],
    )]
}

/// The index keys of one row of `table` (`TASKS` or `ATTEMPTS`) as stored (token ‖ JSON).
fn row_keys(table_byte: u8, row_key: &[u8], stored: Option<&[u8]>) -> Vec<Vec<u8>> {
    let Some(id) = row_key.get(1..17).and_then(|b| Uuid::from_slice(b).ok()) else {
        return Vec::new();
    };
    let Some(value) = stored
        .and_then(decode)
        .and_then(|(_, json)| serde_json::from_slice::<Value>(&json).ok())
    else {
        return Vec::new();
    };
    if table_byte == table::TASKS {
        task_keys(id, &value)
    } else {
        attempt_keys(id, &value)
    }
}

/// The prefix an index key is counted under (the prefix a page's `total` reads), if any.
fn counted_prefix(index_key: &[u8]) -> Option<&[u8]> {
    let len = match index_key.first()? {
        &TASKS_BY_CREATED | &ATTEMPTS_BY_CREATED => 17,
        &TASKS_BY_STATUS => 18,
        _ => return None,
    };
    index_key.get(..len)
}

fn count_key(prefix: &[u8]) -> Vec<u8> {
    key(INDEX_COUNTS, &[prefix])
}

fn count_of(bytes: Option<&[u8]>) -> i64 {
    bytes
        .and_then(|b| b.try_into().ok())
        .map_or(0, |b: [u8; 8]| u64::from_be_bytes(b) as i64)
}

/// Entries added (+1) and removed (−1) per counted prefix.
#[derive(Default)]
struct CountDeltas(std::collections::BTreeMap<Vec<u8>, i64>);

impl CountDeltas {
    fn add(&mut self, index_key: &[u8], by: i64) {
        if let Some(prefix) = counted_prefix(index_key) {
            *self.0.entry(prefix.to_vec()).or_default() += by;
        }
    }

    /// The counts after the deltas, each from its value in `ov`; a count of 0 is removed.
    fn write(self, ov: &mut Overlay<'_>) -> R {
        for (prefix, delta) in self.0.into_iter().filter(|(_, d)| *d != 0) {
            let k = count_key(&prefix);
            let n = count_of(ov.get(&k)?.as_deref()) + delta;
            if n > 0 {
                ov.insert(&k, (n as u64).to_be_bytes().to_vec());
            } else {
                ov.remove(&k);
            }
        }
        Ok(())
    }
}

/// Brings the indexes in line with the batch's task and attempt writes (see the module doc).
pub(crate) fn restate(ov: &mut Overlay<'_>) -> R {
    let mut counts = CountDeltas::default();
    for table_byte in [table::TASKS, table::ATTEMPTS] {
        for (row_key, new) in ov.pending_with_prefix(&[table_byte]) {
            if row_key.len() != 17 {
                continue;
            }
            let old = ov.committed(&row_key)?;
            let old_keys = row_keys(table_byte, &row_key, old.as_deref());
            let new_keys = row_keys(table_byte, &row_key, new.as_deref());
            for k in old_keys.iter().filter(|k| !new_keys.contains(k)) {
                ov.remove(k);
                counts.add(k, -1);
            }
            for k in new_keys.iter().filter(|k| !old_keys.contains(k)) {
                ov.insert(k, Vec::new());
                counts.add(k, 1);
            }
        }
    }
    counts.write(ov)
}

/// Every index entry and count, rebuilt from the stored rows: drops what this module's tables
/// hold and writes one entry per row (the migration of a store written before the indexes or the
/// counts existed).
pub(crate) fn build_all(tree: &sled::Tree) -> R<sled::Batch> {
    let mut batch = sled::Batch::default();
    for t in TABLES {
        for item in tree.scan_prefix([t]) {
            batch.remove(item?.0);
        }
    }
    let mut counts = std::collections::BTreeMap::<Vec<u8>, u64>::new();
    for table_byte in [table::TASKS, table::ATTEMPTS] {
        for item in tree.scan_prefix([table_byte]) {
            let (k, v) = item?;
            if k.len() != 17 {
                continue;
            }
            for ik in row_keys(table_byte, &k, Some(&v)) {
                if let Some(prefix) = counted_prefix(&ik) {
                    *counts.entry(prefix.to_vec()).or_default() += 1;
                }
                batch.insert(ik, Vec::<u8>::new());
            }
        }
    }
    for (prefix, n) in counts {
        batch.insert(count_key(&prefix), n.to_be_bytes().to_vec());
    }
    Ok(batch)
}

/// One page read from a newest-first index.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexPage {
    /// The rows of the page, in index order.
    pub items: Vec<Stored>,
    /// Entries under the index prefix (all pages).
    pub total: usize,
    /// True when entries follow the page.
    pub has_more: bool,
}

/// Where a newest-first page starts: right after the entry of this (rank, id), else the top.
pub type After = Option<(i64, Uuid)>;

impl StoreReader {
    /// A project's tasks newest first, `status` (VK's string) narrowing them, from `after` on.
    pub fn tasks_newest_first(
        &self,
        project: Uuid,
        status: Option<&str>,
        after: After,
        limit: usize,
    ) -> R<IndexPage> {
        let prefix = match status {
            Some(s) => key(
                TASKS_BY_STATUS,
                &[project.as_bytes(), &[status_code(Some(s))]],
            ),
            None => key(TASKS_BY_CREATED, &[project.as_bytes()]),
        };
        self.ordered_page(&prefix, after, limit, |id| self.task(id))
    }

    /// A task's attempts newest first, from `after` on.
    pub fn attempts_newest_first(&self, task: Uuid, after: After, limit: usize) -> R<IndexPage> {
        let prefix = key(ATTEMPTS_BY_CREATED, &[task.as_bytes()]);
        self.ordered_page(&prefix, after, limit, |id| self.attempt(id))
    }

    /// A project's tasks whose `updated_at` is at or after `since` (microseconds), oldest
    /// update first.
    pub fn tasks_updated_since(&self, project: Uuid, since_micros: i64) -> R<Vec<Stored>> {
        let prefix = key(TASKS_BY_UPDATED, &[project.as_bytes()]);
        let start = key(
            TASKS_BY_UPDATED,
            &[project.as_bytes(), &ordered(since_micros)],
        );
        let mut out = Vec::new();
        for item in self.tree().range(start..) {
            let (k, _) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            if let Some(t) = id_at_end(&k).map(|id| self.task(id)).transpose()?.flatten() {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// The kept number of entries under a counted index prefix (see [`INDEX_COUNTS`]).
    pub(super) fn index_count(&self, prefix: &[u8]) -> R<usize> {
        Ok(count_of(self.tree().get(count_key(prefix))?.as_deref()) as usize)
    }

    fn ordered_page(
        &self,
        prefix: &[u8],
        after: After,
        limit: usize,
        load: impl Fn(Uuid) -> R<Option<Stored>>,
    ) -> R<IndexPage> {
        let total = self.index_count(prefix)?;
        let (ids, has_more) = self.ordered_ids(prefix, after, limit)?;
        let mut items = Vec::with_capacity(ids.len());
        for id in ids {
            items.extend(load(id)?);
        }
        Ok(IndexPage {
            items,
            total,
            has_more,
        })
    }

    /// A project's newest `limit` task ids from the index alone (no row read), and whether it
    /// has more.
    pub fn task_ids_newest_first(&self, project: Uuid, limit: usize) -> R<(Vec<Uuid>, bool)> {
        self.ordered_ids(&key(TASKS_BY_CREATED, &[project.as_bytes()]), None, limit)
    }

    /// A task's newest `limit` attempt ids from the index alone (no row read), and whether it
    /// has more: for readers that keep what they made of each attempt by its token (the board).
    pub fn attempt_ids_newest_first(&self, task: Uuid, limit: usize) -> R<(Vec<Uuid>, bool)> {
        self.ordered_ids(&key(ATTEMPTS_BY_CREATED, &[task.as_bytes()]), None, limit)
    }

    /// The ids of an index page (see [`Self::ordered_page`]) and whether more follow.
    fn ordered_ids(&self, prefix: &[u8], after: After, limit: usize) -> R<(Vec<Uuid>, bool)> {
        let tree = self.tree();
        let start = match after {
            Some((rank, id)) => {
                let mut k = prefix.to_vec();
                k.extend_from_slice(&ordered(rank));
                k.extend_from_slice(id.as_bytes());
                Bound::Excluded(k)
            }
            None => Bound::Included(prefix.to_vec()),
        };
        let mut ids = Vec::with_capacity(limit.saturating_add(1).min(256));
        for item in tree.range::<Vec<u8>, _>((start, Bound::Unbounded)).keys() {
            let k = item?;
            if !k.starts_with(prefix) || ids.len() > limit {
                break;
            }
            ids.extend(id_at_end(&k));
        }
        let has_more = ids.len() > limit;
        ids.truncate(limit);
        Ok((ids, has_more))
    }
}

/// The row id every index key ends with.
fn id_at_end(k: &[u8]) -> Option<Uuid> {
    k.len()
        .checked_sub(16)
        .and_then(|at| Uuid::from_slice(&k[at..]).ok())
}

/// The schema [`migrate_to_current`] leaves (the list indexes, their counts, the task digests);
/// the log chunks of schema 5 follow (`chunk_migrate`).
pub(crate) const INDEXED_SCHEMA: u32 = 4;

/// Migrates a schema-1 store (no list indexes), a schema-2 store (indexes without their
/// counts) or a schema-3 store (no task digests) to schema 4 in one atomic batch: the
/// indexes, counts and task digests (`task_digest`) built from its rows, and schema 4 with
/// them (the store's open goes on to 5: `chunk_migrate`).

pub(crate) fn migrate_to_current(tree: &sled::Tree) -> R {
    let mut batch = build_all(tree)?;
    super::task_digest::build_all(tree, &mut batch)?;
    batch.insert(
        super::keys::meta_key(super::keys::meta::SCHEMA),
        INDEXED_SCHEMA.to_be_bytes().to_vec(),
    );
    tree.apply_batch(batch)?;
    tree.flush()?;
    Ok(())
}
