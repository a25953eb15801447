//! Task and attempt listings: `list_tasks` (with the per-task attempt summary of seed 002 and
//! filters), `get_task` and `list_task_attempts`, all paged by `query::paging` (newest created
//! first). Summaries are computed for the page only: their cost grows with the page, not the list.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::detail::Rules;
use super::paging::{self, ListId, PageArgs, newest_first_key};
use super::status::{AttemptState, attempt_state, latest_session_of};
use super::task_summary::SummaryFn;
pub use super::task_summary::{summary_of_digest, task_summary};
use super::{Freshness, Query, View};
use vk_observer_store::StoreReader;
use vk_observer_store::events::{HOST_FIELD, several_hosts};
use vk_observer_store::list_index::{After, IndexPage};
use vk_observer_store::reader::Stored;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{self as vk, str_of, string_of, ts_of, ts_string};

/// VK task status.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum TaskStatus {
    // Not started.
    Todo,
    // An attempt is being worked on.
    Inprogress,
    // Work finished; waiting for review.
    Inreview,
    // Accepted.
    Done,
    // Abandoned.
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Todo => "todo",
            TaskStatus::Inprogress => "inprogress",
            TaskStatus::Inreview => "inreview",
            TaskStatus::Done => "done",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// One task with its attempt summary.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct TaskSummary {
    /// Task id (UUID).
    pub task_id: Uuid,
    /// Project the task belongs to (UUID).
    pub project_id: Option<Uuid>,
    /// Title.
    pub title: String,
    /// Description (may be long); null if none.
    pub description: Option<String>,
    /// `todo`, `inprogress`, `inreview`, `done` or `cancelled`.
    pub status: String,
    /// When the task was created (RFC 3339).
    pub created_at: Option<String>,
    /// When the task last changed (RFC 3339).
    pub updated_at: Option<String>,
    /// Most recently created attempt (UUID; created_at desc, attempt_id asc); null if none.
    pub latest_attempt_id: Option<Uuid>,
    /// Branch of that attempt; null if none.
    pub latest_workspace_branch: Option<String>,
    /// Newest session of that attempt (UUID); null if none.
    pub latest_session_id: Option<Uuid>,
    /// Executor of that session (e.g. `CLAUDE_CODE`); null if none.
    pub latest_session_executor: Option<String>,
    /// True if any attempt of the task has a running coding agent or setup/cleanup script.
    pub has_in_progress_attempt: bool,
    /// True if the task's newest relevant execution process failed or was killed.
    pub last_attempt_failed: bool,
    /// Fleet node only: the host that owns it (`[fleet] host`); absent on a single host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Fleet node only, when several hosts report this task id (a copied VK database): every
    /// such host, sorted; a mutation on the task then needs `host`. Absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Token usage and cost of the task's coding-agent runs (detail 1 and 2; `get_usage` for
    /// breakdowns); absent when no run reported any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::usage::Usage>,
}

/// Answer of `list_tasks`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct TaskPage {
    /// Tasks, newest created first (task_id ascending on ties).
    pub tasks: Vec<TaskSummary>,
    /// Pass as `cursor` to get the next page; null when this is the last page.
    pub next_cursor: Option<String>,
    /// True when more tasks follow this page (then `next_cursor` is set).
    pub has_more: bool,
    /// Number of tasks on this page.
    #[schemars(schema_with = "paging::count_schema")]
    pub count: usize,
    /// Number of tasks matching the filters (all pages).
    #[schemars(schema_with = "paging::count_schema")]
    pub total: usize,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// One attempt in a listing.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct AttemptSummary {
    /// Attempt id (UUID); usable directly with follow_up, get_attempt_status and the log tools.
    pub attempt_id: Uuid,
    /// Git branch of the attempt.
    pub workspace_branch: Option<String>,
    /// When the attempt was created (RFC 3339).
    pub created_at: Option<String>,
    /// When the attempt record last changed (RFC 3339).
    pub updated_at: Option<String>,
    /// Newest session of the attempt (UUID); null if none yet.
    pub latest_session_id: Option<Uuid>,
    /// Executor of that session; null if none.
    pub latest_session_executor: Option<String>,
    /// `idle`, `running`, `completed` or `failed` (see get_attempt_status).
    pub state: AttemptState,
    /// Fleet node only: the host that owns it (`[fleet] host`); absent on a single host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Fleet node only, when several hosts report this attempt id (a copied VK database): every
    /// such host, sorted; a mutation on the attempt then needs `host`. Absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

/// Answer of `list_task_attempts`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct AttemptList {
    /// The task (UUID).
    pub task_id: Uuid,
    /// This page of attempts, newest created first (attempt_id ascending on ties).
    pub attempts: Vec<AttemptSummary>,
    /// Pass as `cursor` to get the next page; null when this is the last page.
    pub next_cursor: Option<String>,
    /// True when more (older) attempts follow this page (then `next_cursor` is set).
    pub has_more: bool,
    /// Number of attempts on this page.
    #[schemars(schema_with = "paging::count_schema")]
    pub count: usize,
    /// Number of attempts of the task (all pages).
    #[schemars(schema_with = "paging::count_schema")]
    pub total: usize,
    /// The most recently created attempt of the task, whatever the page (UUID); null if none.
    pub latest_attempt_id: Option<Uuid>,
    /// Newest session of that attempt (UUID); null if none.
    pub latest_session_id: Option<Uuid>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// Answer of `get_task`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct TaskDetail {
    /// The task with its attempt summary.
    pub task: TaskSummary,
    /// A page of its attempts (newest first) when `include_attempts` was true; otherwise null.
    pub attempts: Option<Vec<AttemptSummary>>,
    /// Pass as `attempts_cursor` to get the next page of attempts; null on the last page or
    /// without `include_attempts`.
    pub attempts_next_cursor: Option<String>,
    /// True when more (older) attempts follow this page; false without `include_attempts`.
    pub attempts_has_more: bool,
    /// Number of attempts on this page; null without `include_attempts`.
    #[schemars(schema_with = "paging::opt_count_schema")]
    pub attempts_count: Option<usize>,
    /// Number of attempts of the task (all pages); null without `include_attempts`.
    #[schemars(schema_with = "paging::opt_count_schema")]
    pub attempts_total: Option<usize>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// Filters of `list_tasks`.
#[derive(Debug, Default, Clone)]
pub struct TaskFilter {
    /// This task alone (a caller limited to its own attempt sees only its task).
    pub only: Option<Uuid>,
    pub status: Option<TaskStatus>,
    pub q: Option<String>,
    pub updated_since: Option<DateTime<Utc>>,
}

impl Query {
    /// The page from the writer's task digests (`store::task_digest`): one row per task, with
    /// each task's usage summed (`query::usage`).
    pub fn list_tasks(
        &self,
        project: Uuid,
        filter: &TaskFilter,
        args: &PageArgs,
    ) -> Result<TaskPage, ToolError> {
        let mut page = self.list_tasks_without_usage(project, filter, args)?;
        super::usage::fill_tasks(&self.read(), &mut page.tasks)?;
        Ok(page)
    }

    /// [`Query::list_tasks`] without the usage sums (every task's `usage` absent), which walk
    /// each task's processes: for a reader that does not show them (the board's cards carry
    /// each attempt's cost from its status).
    pub fn list_tasks_without_usage(
        &self,
        project: Uuid,
        filter: &TaskFilter,
        args: &PageArgs,
    ) -> Result<TaskPage, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        super::target::project(&reader, project)?;
        let list = ListId {
            tool: "list_tasks",
            field: "cursor",
            scope: Some(project),
        };
        let page = super::task_digests::page(&reader, project, filter, list, args)?;
        let tasks: Vec<TaskSummary> = page.items.into_iter().map(summary_of_digest).collect();
        Ok(TaskPage {
            count: tasks.len(),
            tasks,
            next_cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
            token,
            freshness,
        })
    }

    /// `list_tasks` from the task rows, each summarized by `summary` at read time (the code
    /// before the digests): what the bench times beside [`Query::list_tasks`].
    pub fn list_tasks_summarized_by(
        &self,
        project: Uuid,
        filter: &TaskFilter,
        args: &PageArgs,
        summary: SummaryFn,
    ) -> Result<TaskPage, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        super::target::project(&reader, project)?;
        let list = ListId {
            tool: "list_tasks",
            field: "cursor",
            scope: Some(project),
        };
        let page = task_page(&reader, project, filter, list, args)?;
        let mut tasks: Vec<TaskSummary> = page
            .items
            .iter()
            .map(|t| summary(&reader, t))
            .collect::<Result<_, _>>()?;
        super::usage::fill_tasks(&reader, &mut tasks)?;
        Ok(TaskPage {
            count: tasks.len(),
            tasks,
            next_cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
            token,
            freshness,
        })
    }

    /// `attempts`: None for the task alone, else the page of its attempts to include.
    pub fn get_task(&self, id: Uuid, attempts: Option<&PageArgs>) -> Result<TaskDetail, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        let task = super::target::task(&reader, id)?;
        let list = ListId {
            tool: "get_task",
            field: "attempts_cursor",
            scope: Some(id),
        };
        let page = attempts
            .map(|args| attempt_page(&reader, list, args))
            .transpose()?;
        let mut summary = match reader.task_digest(id)? {
            Some(d) => summary_of_digest((id, d)),
            None => task_summary(&reader, &task)?,
        };
        super::usage::fill_tasks(&reader, std::slice::from_mut(&mut summary))?;
        Ok(TaskDetail {
            task: summary,
            attempts_next_cursor: page.as_ref().and_then(|p| p.next_cursor.clone()),
            attempts_has_more: page.as_ref().is_some_and(|p| p.has_more),
            attempts_count: page.as_ref().map(|p| p.items.len()),
            attempts_total: page.as_ref().map(|p| p.total),
            attempts: page.map(|p| p.items),
            token,
            freshness,
        })
    }

    pub fn list_task_attempts(
        &self,
        task: Uuid,
        args: &PageArgs,
    ) -> Result<AttemptList, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        super::target::task(&reader, task)?;
        let latest = vk::latest(&reader.attempts_of_task(task)?).cloned();
        let latest_session_id = match &latest {
            Some(a) => latest_session_of(&reader, a.id)?.0,
            None => None,
        };
        let list = ListId {
            tool: "list_task_attempts",
            field: "cursor",
            scope: Some(task),
        };
        let page = attempt_page(&reader, list, args)?;
        Ok(AttemptList {
            task_id: task,
            count: page.items.len(),
            attempts: page.items,
            next_cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
            latest_attempt_id: latest.map(|a| a.id),
            latest_session_id,
            token,
            freshness,
        })
    }
}

/// The page of a project's tasks the filters select. Without `q` or `updated_since` it is read
/// from the newest-first index (by status when one is given): O(page), plus counting the index
/// keys for `total`. `updated_since` reads the tasks updated since then from their index and
/// pages them in memory (O(matches)); `q` alone has no index and reads the project (or, with
/// `status`, that status) to match the text.
fn task_page(
    reader: &StoreReader,
    project: Uuid,
    filter: &TaskFilter,
    list: ListId,
    args: &PageArgs,
) -> Result<paging::Paged<Stored>, ToolError> {
    let status = filter.status.map(TaskStatus::as_str);
    let needle = filter.q.as_deref().map(str::to_lowercase);
    let candidates = match (filter.only, filter.updated_since, &needle) {
        // A caller limited to its own attempt: its task alone, if it is in this project.
        (Some(only), ..) => reader
            .task(only)?
            .into_iter()
            .filter(|t| vk::uuid_of(&t.value, "project_id") == Some(project))
            .collect(),
        (None, Some(since), _) => reader.tasks_updated_since(project, since.timestamp_micros())?,
        (None, None, Some(_)) => {
            reader
                .tasks_newest_first(project, status, None, usize::MAX)?
                .items
        }
        (None, None, None) => {
            return indexed_page(list, args, |after| {
                reader.tasks_newest_first(project, status, after, args.limit)
            });
        }
    };
    let tasks: Vec<Stored> = candidates
        .into_iter()
        .filter(|t| {
            status.is_none_or(|s| str_of(&t.value, "status") == Some(s))
                && filter
                    .updated_since
                    .is_none_or(|since| ts_of(&t.value, "updated_at").is_some_and(|u| u >= since))
                && needle.as_deref().is_none_or(|n| matches_text(&t.value, n))
        })
        .collect();
    paging::page(list, tasks, args, created_key)
}

/// A newest-first page read from a store index, its cursors those of `paging` (the same key).
fn indexed_page(
    list: ListId,
    args: &PageArgs,
    read: impl FnOnce(After) -> Result<IndexPage, vk_observer_store::StoreError>,
) -> Result<paging::Paged<Stored>, ToolError> {
    let after = paging::newest_first_after(list, args.cursor.as_deref())?;
    let page = read(after)?;
    let next_cursor = page
        .has_more
        .then(|| {
            page.items
                .last()
                .map(|last| paging::encode(list, created_key(last)))
        })
        .flatten();
    Ok(paging::Paged {
        has_more: next_cursor.is_some(),
        next_cursor,
        total: page.total,
        items: page.items,
    })
}

pub(super) fn matches_text(task: &serde_json::Value, needle: &str) -> bool {
    ["title", "description"]
        .iter()
        .any(|f| str_of(task, f).is_some_and(|s| s.to_lowercase().contains(needle)))
}

/// Position of a task or attempt in newest-first order (`vk::newest_first`).
pub(super) fn created_key(s: &Stored) -> paging::SortKey {
    newest_first_key(
        ts_of(&s.value, "created_at").map(|t| t.timestamp_micros()),
        s.id,
    )
}

/// One page of a task's attempts (`list.scope` is the task), summarized.
fn attempt_page(
    reader: &StoreReader,
    list: ListId,
    args: &PageArgs,
) -> Result<paging::Paged<AttemptSummary>, ToolError> {
    let task = list.scope.unwrap_or_default();
    let page = indexed_page(list, args, |after| {
        reader.attempts_newest_first(task, after, args.limit)
    })?;
    let items = page
        .items
        .iter()
        .map(|a| {
            let (latest_session_id, latest_session_executor) = latest_session_of(reader, a.id)?;
            let state = attempt_state(reader, a.id)?;
            Ok(AttemptSummary {
                attempt_id: a.id,
                workspace_branch: string_of(&a.value, "branch"),
                created_at: ts_string(&a.value, "created_at"),
                updated_at: ts_string(&a.value, "updated_at"),
                latest_session_id,
                latest_session_executor,
                state,
                host: string_of(&a.value, HOST_FIELD),
                hosts: several_hosts(&a.value),
            })
        })
        .collect::<Result<_, ToolError>>()?;
    Ok(paging::Paged {
        items,
        next_cursor: page.next_cursor,
        has_more: page.has_more,
        total: page.total,
    })
}

/// A task below detail 2 in a listing: the description only at 2 (get_task has it at every
/// level), its project from 1; at 0 the task's own fields and seed 002's attempt summary, with
/// their null and false values (`include_attempt_summary: false` leaves the summary out).
pub(crate) const TASK_RULES: Rules = Rules {
    finish: None,
    kept: TASK_KEPT,
    standard: &["project_id", "usage"],
    verbatim: &["description"],
    nested: &[],
};

/// A task's own fields of seed 003, at every level.
const TASK_OWN_FIELDS: [&str; 5] = ["task_id", "title", "status", "created_at", "updated_at"];

/// A task's fields at every level: seed 003's task and seed 002's attempt summary.
const TASK_KEPT: &[&str] = &joined::<5, 6, 11>(TASK_OWN_FIELDS, ATTEMPT_SUMMARY_FIELDS);

/// `a` then `b`, as one array (at compile time; `N` must be their lengths' sum).
const fn joined<const A: usize, const B: usize, const N: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; N] {
    assert!(A + B == N, "N is the sum of the lengths");
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
}

/// The task of `get_task` (and of create_task / update_task answers): its description at
/// every level.
pub const TASK_DETAIL_TASK_RULES: Rules = Rules {
    finish: None,
    kept: TASK_KEPT,
    standard: TASK_RULES.standard,
    verbatim: &[],
    nested: &[],
};

/// An attempt in a listing: seed 002's list (id, branch, times, session and its executor,
/// null when none) and the state at every level.
pub(crate) const ATTEMPT_RULES: Rules = Rules {
    finish: None,
    kept: &[
        "attempt_id",
        "workspace_branch",
        "created_at",
        "updated_at",
        "latest_session_id",
        "latest_session_executor",
        "state",
    ],
    standard: &[],
    verbatim: &[],
    nested: &[],
};

/// `list_tasks`: the list even when empty.
pub const TASK_PAGE_RULES: Rules = Rules {
    finish: None,
    kept: &["tasks"],
    standard: &[],
    verbatim: &[],
    nested: &[("tasks", &TASK_RULES)],
};

/// `list_task_attempts`: seed 002's top-level summary at every level.
pub const ATTEMPT_LIST_RULES: Rules = Rules {
    finish: None,
    kept: &[
        "latest_attempt_id",
        "latest_session_id",
        "attempts",
        "has_more",
    ],
    standard: &[],
    verbatim: &[],
    nested: &[("attempts", &ATTEMPT_RULES)],
};

/// `get_task`.
pub const TASK_DETAIL_RULES: Rules = Rules {
    finish: None,
    kept: &[],
    standard: &[],
    verbatim: &[],
    nested: &[
        ("task", &TASK_DETAIL_TASK_RULES),
        ("attempts", &ATTEMPT_RULES),
    ],
};

/// The per-task attempt summary of seed 002 (`include_attempt_summary: false` leaves it out).
pub const ATTEMPT_SUMMARY_FIELDS: [&str; 6] = [
    "latest_attempt_id",
    "latest_workspace_branch",
    "latest_session_id",
    "latest_session_executor",
    "has_in_progress_attempt",
    "last_attempt_failed",
];
