//! One cursor pager for every list that can grow: `list_projects`, `list_repos`, `list_tasks`,
//! `list_task_attempts` and the attempts of `get_task`.
//!
//! **Why a walk visits every item exactly once.** Each list is sorted by a total order on a
//! [`SortKey`] (the list's own order, ending in the item's id, so no two items tie). A cursor
//! carries the key of the last item it returned, not an offset, and the next page starts at the
//! first item whose key is strictly greater. Items are never returned twice (keys only grow
//! along a walk) and none present for the whole walk is skipped (every key between two pages'
//! last keys is on the later page). Items created or deleted during a walk appear or not
//! depending on where they sort, but never shift the others, unlike an offset.
//!
//! Cursors are opaque to callers: hex of a small JSON record naming the list and its scope
//! (project or task), so a cursor from another list or another project is refused with a hint
//! instead of silently paging the wrong list.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use vk_observer_tool_error::ToolError;

/// Page size when `limit` is omitted: every list that fit in one answer before paging existed
/// still does for projects and repos of ordinary size.
pub const PAGE_DEFAULT: usize = 50;
/// Largest page; larger `limit`s are capped (answers stay small for an LLM's context).
pub const PAGE_MAX: usize = 200;

/// One component of a sort key. Keys of one list always use the same shape, so the derived
/// order (variant first) never compares an `Int` with a `Text`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Part {
    Int(i64),
    Text(String),
}

/// Position of an item in its list's order (ascending).
pub(crate) type SortKey = Vec<Part>;

/// Key of a newest-first list (`created_at` desc, unknown times last, id ascending on ties):
/// the same order as `vk::newest_first`.
pub(crate) fn newest_first_key(created_micros: Option<i64>, id: Uuid) -> SortKey {
    let t = created_micros.map_or(i64::MAX, |m| m.saturating_neg());
    vec![Part::Int(t), Part::Text(id.to_string())]
}

/// Where a newest-first key stands in a store index (`store::list_index`): its (rank, id). A key
/// of another shape is a cursor of no newest-first list: refused like a malformed one.
pub(crate) fn newest_first_position(list: ListId, key: &SortKey) -> Result<(i64, Uuid), ToolError> {
    match key.as_slice() {
        [Part::Int(rank), Part::Text(id)] => match id.parse() {
            Ok(id) => Ok((*rank, id)),
            Err(_) => Err(malformed(list)),
        },
        _ => Err(malformed(list)),
    }
}

/// Where a newest-first page given `cursor` starts in its store index: after the cursor's
/// (rank, id), or from the top without one.
pub(crate) fn newest_first_after(
    list: ListId,
    cursor: Option<&str>,
) -> Result<Option<(i64, Uuid)>, ToolError> {
    cursor
        .map(|c| newest_first_position(list, &decode(list, c)?))
        .transpose()
}

fn malformed(list: ListId) -> ToolError {
    ToolError::invalid_field(
        list.field,
        format!(
            "Malformed cursor. Pass `{}` from the previous {} answer unchanged, or omit `{}` for the first page.",
            next_field(list.field),
            list.tool,
            list.field
        ),
    )
}

/// Key of a by-name list (name ascending, id ascending on ties).
pub(crate) fn by_name_key(name: &str, id: Uuid) -> SortKey {
    vec![Part::Text(name.to_string()), Part::Text(id.to_string())]
}

/// What the caller asked for: `limit` already validated to `1..=PAGE_MAX` by the tool layer.
#[derive(Debug, Clone)]
pub struct PageArgs {
    pub cursor: Option<String>,
    pub limit: usize,
}

impl Default for PageArgs {
    fn default() -> Self {
        PageArgs {
            cursor: None,
            limit: PAGE_DEFAULT,
        }
    }
}

/// Which list a cursor belongs to: the tool (and, for get_task, its argument) and the scope.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListId {
    /// Tool name the cursor is for, e.g. `list_repos`.
    pub tool: &'static str,
    /// Name of the cursor argument, e.g. `cursor` or `attempts_cursor`.
    pub field: &'static str,
    /// Project or task the list is of; None for global lists.
    pub scope: Option<Uuid>,
}

/// One page of a list.
pub(crate) struct Paged<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
    pub has_more: bool,
    /// Items in the whole list (all pages).
    pub total: usize,
}

#[derive(Serialize, Deserialize)]
struct CursorRecord {
    /// Tool the cursor is for.
    l: String,
    /// Scope of the list (project or task), if any.
    s: Option<Uuid>,
    /// Key of the last item returned.
    k: SortKey,
}

/// Sort `items` by `key` and cut the page after `args.cursor`.
pub(crate) fn page<T>(
    list: ListId,
    items: Vec<T>,
    args: &PageArgs,
    key: impl Fn(&T) -> SortKey,
) -> Result<Paged<T>, ToolError> {
    let after = args
        .cursor
        .as_deref()
        .map(|c| decode(list, c))
        .transpose()?;
    let mut keyed: Vec<(SortKey, T)> = items.into_iter().map(|t| (key(&t), t)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let total = keyed.len();
    let start = after.map_or(0, |k| keyed.partition_point(|(x, _)| *x <= k));
    let has_more = total - start > args.limit;
    let mut items = Vec::with_capacity(args.limit.min(total - start));
    let mut last = None;
    for (k, t) in keyed.into_iter().skip(start).take(args.limit) {
        items.push(t);
        last = Some(k);
    }
    let next_cursor = if has_more {
        last.map(|k| encode(list, k))
    } else {
        None
    };
    Ok(Paged {
        items,
        next_cursor,
        has_more,
        total,
    })
}

pub(crate) fn encode(list: ListId, k: SortKey) -> String {
    let rec = CursorRecord {
        l: list.tool.to_string(),
        s: list.scope,
        k,
    };
    let json = serde_json::to_vec(&rec).unwrap_or_default();
    json.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn decode(list: ListId, cursor: &str) -> Result<SortKey, ToolError> {
    let bad = |why: &str| {
        ToolError::invalid_field(
            list.field,
            format!(
                "{why} Pass `{}` from the previous {} answer unchanged, or omit `{}` for the first page.",
                next_field(list.field),
                list.tool,
                list.field
            ),
        )
    };
    let bytes = unhex(cursor.trim()).ok_or_else(|| bad("Malformed cursor."))?;
    let rec: CursorRecord = serde_json::from_slice(&bytes).map_err(|_| bad("Malformed cursor."))?;
    if rec.l != list.tool {
        return Err(bad(&format!(
            "This cursor belongs to {}, not {}.",
            rec.l, list.tool
        )));
    }
    if rec.s != list.scope {
        return Err(bad(
            "This cursor belongs to the same list of another project or task.",
        ));
    }
    Ok(rec.k)
}

/// The answer field that carries the cursor for `field` (`cursor` → `next_cursor`).
fn next_field(field: &str) -> String {
    match field.strip_suffix("cursor") {
        Some(prefix) => format!("{prefix}next_cursor"),
        None => "next_cursor".to_string(),
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) || s.len() > 8192 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Schema of a count in an answer: a plain non-negative integer (no `uint` format, which
/// strict clients reject).
pub(crate) fn count_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "integer", "minimum": 0})
}

/// Schema of an optional count (null when the list was not asked for).
pub(crate) fn opt_count_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["integer", "null"], "minimum": 0})
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: ListId = ListId {
        tool: "list_projects",
        field: "cursor",
        scope: None,
    };

    fn walk(items: &[u32], limit: usize) -> Vec<u32> {
        let mut seen = Vec::new();
        let mut args = PageArgs {
            cursor: None,
            limit,
        };
        loop {
            let p = page(LIST, items.to_vec(), &args, |n| vec![Part::Int(*n as i64)]).unwrap();
            assert_eq!(p.total, items.len());
            seen.extend(p.items);
            match p.next_cursor {
                Some(c) => args.cursor = Some(c),
                None => {
                    assert!(!p.has_more);
                    return seen;
                }
            }
        }
    }

    #[test]
    fn a_walk_visits_every_item_once_in_order() {
        let items: Vec<u32> = (0..7).rev().collect();
        for limit in 1..=8 {
            assert_eq!(
                walk(&items, limit),
                (0..7).collect::<Vec<_>>(),
                "limit {limit}"
            );
        }
        assert!(walk(&[], 3).is_empty());
    }

    #[test]
    fn a_deleted_cursor_item_does_not_shift_the_walk() {
        let first = page(
            LIST,
            vec![1, 2, 3, 4],
            &PageArgs {
                cursor: None,
                limit: 2,
            },
            |n| vec![Part::Int(*n)],
        )
        .unwrap();
        let args = PageArgs {
            cursor: first.next_cursor,
            limit: 2,
        };
        // Item 2 (the cursor's) is gone before the next page: 3 and 4 still come next.
        let next = page(LIST, vec![1, 3, 4], &args, |n| vec![Part::Int(*n)]).unwrap();
        assert_eq!(next.items, vec![3, 4]);
    }

    #[test]
    fn foreign_and_garbage_cursors_are_refused() {
        let p = page(
            LIST,
            vec![1, 2, 3],
            &PageArgs {
                cursor: None,
                limit: 1,
            },
            |n| vec![Part::Int(*n)],
        )
        .unwrap();
        let other = ListId {
            tool: "list_repos",
            field: "cursor",
            scope: Some(Uuid::nil()),
        };
        let args = PageArgs {
            cursor: p.next_cursor,
            limit: 1,
        };
        let e = page(other, vec![1], &args, |n| vec![Part::Int(*n)])
            .err()
            .unwrap();
        assert_eq!(e.code, "invalid_argument");
        assert!(e.hint.contains("belongs to list_projects"), "{}", e.hint);
        for junk in ["zz", "abc", "7b7d", ""] {
            let args = PageArgs {
                cursor: Some(junk.into()),
                limit: 1,
            };
            let e = page(LIST, vec![1], &args, |n| vec![Part::Int(*n)])
                .err()
                .unwrap();
            assert_eq!(e.details["field"], "cursor", "{junk}");
        }
    }

    #[test]
    fn counts_are_plain_described_integers_in_the_answer_schemas() {
        let schema = serde_json::to_value(schemars::schema_for!(crate::tasks::TaskDetail)).unwrap();
        let count = &schema["properties"]["attempts_count"];
        assert_eq!(count["minimum"], 0, "{count}");
        assert!(count.get("format").is_none(), "{count}");
        assert!(count["description"].as_str().is_some_and(|d| !d.is_empty()));
        let schema =
            serde_json::to_value(schemars::schema_for!(crate::catalog::ProjectList)).unwrap();
        let count = &schema["properties"]["count"];
        assert_eq!(
            (count["type"].as_str(), count.get("format")),
            (Some("integer"), None)
        );
    }

    #[test]
    fn newest_first_key_matches_vk_order() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut keys = [
            newest_first_key(None, a),
            newest_first_key(Some(10), b),
            newest_first_key(Some(20), b),
            newest_first_key(Some(20), a),
        ];
        keys.sort();
        assert_eq!(keys[0], newest_first_key(Some(20), a));
        assert_eq!(keys[1], newest_first_key(Some(20), b));
        assert_eq!(keys[3], newest_first_key(None, a));
    }
}
