//! The page of `list_tasks`, read from the writer's task digests (`store::task_digest`): one row
//! per task, each already holding the task's fields and its seed-002 attempt summary.
//!
//! - No `q`, no `updated_since`: the page's index keys, then one digest per task (O(page)).
//! - `updated_since`: the tasks updated since then from their index (O(matches)), filtered on the
//!   task rows exactly as before, paged, then the page's digests.
//! - `q`: the project's digests (or the status's), matched on their title and description, then
//!   paged: still O(project) (no text index), but one small typed row per task instead of the task
//!   row's JSON tree and, for the page, its attempts. An empty `q` filters nothing (the tool
//!   drops a blank `q` before it gets here).

use uuid::Uuid;

use super::paging::{self, ListId, PageArgs, newest_first_key};
use super::tasks::{TaskFilter, TaskStatus, created_key, matches_text};
use vk_observer_store::StoreReader;
use vk_observer_store::reader::Stored;
use vk_observer_store::task_digest::TaskDigest;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{self as vk, str_of, ts_of};

type Digest = (Uuid, TaskDigest);

/// The page of a project's tasks the filters select, as digests.
pub(crate) fn page(
    reader: &StoreReader,
    project: Uuid,
    filter: &TaskFilter,
    list: ListId,
    args: &PageArgs,
) -> Result<paging::Paged<Digest>, ToolError> {
    let status = filter.status.map(TaskStatus::as_str);
    let needle = filter
        .q
        .as_deref()
        .map(str::to_lowercase)
        .filter(|n| !n.is_empty());
    match (filter.only, filter.updated_since, needle) {
        (None, None, None) => indexed(reader, project, status, list, args),
        (None, None, Some(needle)) => {
            let all = reader
                .task_digests_newest_first(project, status, None, usize::MAX)?
                .items;
            let matching = all
                .into_iter()
                .filter(|(_, d)| digest_matches(d, &needle))
                .collect();
            paging::page(list, matching, args, digest_key)
        }
        (only, _, needle) => {
            let rows = match only {
                Some(only) => reader
                    .task(only)?
                    .into_iter()
                    .filter(|t| vk::uuid_of(&t.value, "project_id") == Some(project))
                    .collect(),
                None => {
                    let since = filter
                        .updated_since
                        .map_or(i64::MIN, |s| s.timestamp_micros());
                    reader.tasks_updated_since(project, since)?
                }
            };
            let rows: Vec<Stored> = rows
                .into_iter()
                .filter(|t| {
                    status.is_none_or(|s| str_of(&t.value, "status") == Some(s))
                        && filter.updated_since.is_none_or(|since| {
                            ts_of(&t.value, "updated_at").is_some_and(|u| u >= since)
                        })
                        && needle.as_deref().is_none_or(|n| matches_text(&t.value, n))
                })
                .collect();
            let paged = paging::page(list, rows, args, created_key)?;
            let mut items = Vec::with_capacity(paged.items.len());
            for t in paged.items {
                items.push((t.id, digest_or_computed(reader, &t)?));
            }
            Ok(paging::Paged {
                items,
                next_cursor: paged.next_cursor,
                has_more: paged.has_more,
                total: paged.total,
            })
        }
    }
}

/// A newest-first page straight from the index, its cursors those of `paging` (the same key).
fn indexed(
    reader: &StoreReader,
    project: Uuid,
    status: Option<&str>,
    list: ListId,
    args: &PageArgs,
) -> Result<paging::Paged<Digest>, ToolError> {
    let after = paging::newest_first_after(list, args.cursor.as_deref())?;
    let page = reader.task_digests_newest_first(project, status, after, args.limit)?;
    let next_cursor = page
        .has_more
        .then(|| {
            page.items
                .last()
                .map(|d| paging::encode(list, digest_key(d)))
        })
        .flatten();
    Ok(paging::Paged {
        has_more: next_cursor.is_some(),
        next_cursor,
        total: page.total,
        items: page.items,
    })
}

/// The same text match as the task rows' (`title`, `description`), on the digest.
fn digest_matches(d: &TaskDigest, needle: &str) -> bool {
    d.title.to_lowercase().contains(needle)
        || d.description
            .as_deref()
            .is_some_and(|s| s.to_lowercase().contains(needle))
}

/// A digest's newest-first position: the task row's (`tasks::created_key`).
fn digest_key((id, d): &Digest) -> paging::SortKey {
    newest_first_key(d.created_micros, *id)
}

fn digest_or_computed(reader: &StoreReader, t: &Stored) -> Result<TaskDigest, ToolError> {
    Ok(match reader.task_digest(t.id)? {
        Some(d) => d,
        None => {
            let facts = vk_observer_store::task_digest::attempt_facts(reader, t.id)?;
            TaskDigest::of(&t.value, facts)
        }
    })
}
