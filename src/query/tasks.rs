//! Task and attempt listings: `list_tasks` (with the per-task attempt summary of seed 002,
//! filters and a stable cursor), `get_task` and `list_task_attempts`.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::status::{AttemptState, attempt_state, latest_session_of};
use super::{Freshness, Query, View};
use crate::store::StoreReader;
use crate::store::reader::Stored;
use crate::tool_error::ToolError;
use crate::vk::{self, ProcessStatus, newest_first, str_of, string_of, ts_of, ts_string};

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
}

/// Answer of `list_tasks`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct TaskPage {
    /// Tasks, newest created first (task_id ascending on ties).
    pub tasks: Vec<TaskSummary>,
    /// Pass as `cursor` to get the next page; null when this is the last page.
    pub next_cursor: Option<String>,
    /// Number of tasks matching the filters (all pages).
    pub total: usize,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is.
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
}

/// Answer of `list_task_attempts`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct AttemptList {
    /// The task (UUID).
    pub task_id: Uuid,
    /// Attempts, newest created first (attempt_id ascending on ties).
    pub attempts: Vec<AttemptSummary>,
    /// The most recently created attempt (UUID); null if the task has none.
    pub latest_attempt_id: Option<Uuid>,
    /// Newest session of that attempt (UUID); null if none.
    pub latest_session_id: Option<Uuid>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is.
    pub freshness: Freshness,
}

/// Answer of `get_task`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct TaskDetail {
    /// The task with its attempt summary.
    pub task: TaskSummary,
    /// Its attempts (newest first) when `include_attempts` was true; otherwise null.
    pub attempts: Option<Vec<AttemptSummary>>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is.
    pub freshness: Freshness,
}

/// Filters of `list_tasks`.
#[derive(Debug, Default, Clone)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub q: Option<String>,
    pub updated_since: Option<DateTime<Utc>>,
}

pub const TASK_PAGE_DEFAULT: usize = 50;
pub const TASK_PAGE_MAX: usize = 200;

impl Query {
    pub fn list_tasks(
        &self,
        project: Uuid,
        filter: &TaskFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, ToolError> {
        let View {
            token,
            reader,
            freshness,
        } = self.view();
        super::target::project(&reader, project)?;
        let after = cursor.map(parse_cursor).transpose()?;
        let needle = filter.q.as_deref().map(str::to_lowercase);
        let mut tasks: Vec<Stored> = reader
            .tasks_of_project(project)?
            .into_iter()
            .filter(|t| {
                filter
                    .status
                    .is_none_or(|s| str_of(&t.value, "status") == Some(s.as_str()))
                    && filter.updated_since.is_none_or(|since| {
                        ts_of(&t.value, "updated_at").is_some_and(|u| u >= since)
                    })
                    && needle.as_deref().is_none_or(|n| matches_text(&t.value, n))
            })
            .collect();
        tasks.sort_by(newest_first);
        let total = tasks.len();
        let start = match &after {
            Some((ts, id)) => tasks
                .iter()
                .position(|t| is_after(t, ts, id))
                .unwrap_or(tasks.len()),
            None => 0,
        };
        let page: Vec<&Stored> = tasks.iter().skip(start).take(limit).collect();
        let next_cursor = (start + page.len() < tasks.len())
            .then(|| page.last().map(|t| make_cursor(t)))
            .flatten();
        let tasks = page
            .into_iter()
            .map(|t| task_summary(&reader, t))
            .collect::<Result<_, _>>()?;
        Ok(TaskPage {
            tasks,
            next_cursor,
            total,
            token,
            freshness,
        })
    }

    pub fn get_task(&self, id: Uuid, include_attempts: bool) -> Result<TaskDetail, ToolError> {
        let View {
            token,
            reader,
            freshness,
        } = self.view();
        let task = super::target::task(&reader, id)?;
        let attempts = if include_attempts {
            Some(attempt_summaries(&reader, id)?)
        } else {
            None
        };
        Ok(TaskDetail {
            task: task_summary(&reader, &task)?,
            attempts,
            token,
            freshness,
        })
    }

    pub fn list_task_attempts(&self, task: Uuid) -> Result<AttemptList, ToolError> {
        let View {
            token,
            reader,
            freshness,
        } = self.view();
        super::target::task(&reader, task)?;
        let attempts = attempt_summaries(&reader, task)?;
        let latest_attempt_id = attempts.first().map(|a| a.attempt_id);
        let latest_session_id = attempts.first().and_then(|a| a.latest_session_id);
        Ok(AttemptList {
            task_id: task,
            attempts,
            latest_attempt_id,
            latest_session_id,
            token,
            freshness,
        })
    }
}

fn matches_text(task: &serde_json::Value, needle: &str) -> bool {
    ["title", "description"]
        .iter()
        .any(|f| str_of(task, f).is_some_and(|s| s.to_lowercase().contains(needle)))
}

/// True if `t` sorts strictly after the cursor position in newest-first order.
fn is_after(t: &Stored, ts: &Option<DateTime<Utc>>, id: &Uuid) -> bool {
    let tts = ts_of(&t.value, "created_at");
    tts < *ts || (tts == *ts && t.id > *id)
}

fn make_cursor(t: &Stored) -> String {
    let ts = ts_of(&t.value, "created_at")
        .map(|t| t.timestamp_micros())
        .unwrap_or(i64::MIN);
    format!("{ts}_{}", t.id.simple())
}

fn parse_cursor(c: &str) -> Result<(Option<DateTime<Utc>>, Uuid), ToolError> {
    let bad = || {
        ToolError::invalid_field(
            "cursor",
            "Malformed cursor. Pass `next_cursor` from the previous list_tasks answer unchanged, or omit it for the first page.",
        )
    };
    let (ts, id) = c.split_once('_').ok_or_else(bad)?;
    let micros: i64 = ts.parse().map_err(|_| bad())?;
    let id: Uuid = id.parse().map_err(|_| bad())?;
    let ts = if micros == i64::MIN {
        None
    } else {
        Some(DateTime::from_timestamp_micros(micros).ok_or_else(bad)?)
    };
    Ok((ts, id))
}

/// A task with the seed-002 attempt summary computed from the cache.
pub fn task_summary(reader: &StoreReader, t: &Stored) -> Result<TaskSummary, ToolError> {
    let mut attempts = reader.attempts_of_task(t.id)?;
    attempts.sort_by(newest_first);
    let latest = attempts.first();
    let (latest_session_id, latest_session_executor) = match latest {
        Some(a) => latest_session_of(reader, a.id)?,
        None => (None, None),
    };
    let mut has_in_progress_attempt = false;
    let mut newest_process: Option<(Option<DateTime<Utc>>, ProcessStatus)> = None;
    for a in &attempts {
        for p in reader.processes_of_attempt(a.id)? {
            if !vk::is_relevant(&p.value) {
                continue;
            }
            let status = ProcessStatus::parse(vk::status(&p.value));
            has_in_progress_attempt |= status.is_running();
            let created = ts_of(&p.value, "created_at");
            if newest_process.as_ref().is_none_or(|(c, _)| created > *c) {
                newest_process = Some((created, status));
            }
        }
    }
    let last_attempt_failed = newest_process.is_some_and(|(_, s)| s.is_failure());
    Ok(TaskSummary {
        task_id: t.id,
        project_id: vk::uuid_of(&t.value, "project_id"),
        title: string_of(&t.value, "title").unwrap_or_default(),
        description: string_of(&t.value, "description"),
        status: string_of(&t.value, "status").unwrap_or_default(),
        created_at: ts_string(&t.value, "created_at"),
        updated_at: ts_string(&t.value, "updated_at"),
        latest_attempt_id: latest.map(|a| a.id),
        latest_workspace_branch: latest.and_then(|a| string_of(&a.value, "branch")),
        latest_session_id,
        latest_session_executor,
        has_in_progress_attempt,
        last_attempt_failed,
    })
}

pub fn attempt_summaries(
    reader: &StoreReader,
    task: Uuid,
) -> Result<Vec<AttemptSummary>, ToolError> {
    let mut attempts = reader.attempts_of_task(task)?;
    attempts.sort_by(newest_first);
    attempts
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
            })
        })
        .collect()
}
