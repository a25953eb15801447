//! Task tools: the reads `list_tasks`, `get_task`, `list_task_attempts` (parse → `query::tasks`)
//! and the writes `create_task`, `update_task`, `delete_task` (parse → `proxy::tasks`: VK REST,
//! idempotency, read-your-writes). Without an upstream client (schema tests) the writes answer
//! `not_configured`.

use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use super::answer::{
    detail_output_schema, drop_in_items, level_of, plain, plain_output_schema, shaped, shaped_with,
};
use super::args::{Args, input_schema};
use super::paging::{page_args, page_size};
use super::{Family, Scope, VkTools};
use vk_observer_proxy::tasks::{NewTask, TaskChange, TaskDeleted, TaskEdit};
use vk_observer_query::detail::{Detail, Rules};
use vk_observer_query::paging::{PAGE_MAX, PageArgs};
use vk_observer_query::tasks::{
    ATTEMPT_LIST_RULES, ATTEMPT_SUMMARY_FIELDS, AttemptList, TASK_DETAIL_RULES,
    TASK_DETAIL_TASK_RULES, TASK_PAGE_RULES, TaskDetail, TaskFilter, TaskPage, TaskStatus,
};
use vk_observer_tool_error::ToolError;

pub const LIST_TASKS: &str = "list_tasks";
pub const GET_TASK: &str = "get_task";
pub const LIST_TASK_ATTEMPTS: &str = "list_task_attempts";
pub(crate) const CREATE_TASK: &str = "create_task";
pub(crate) const UPDATE_TASK: &str = "update_task";
pub(crate) const DELETE_TASK: &str = "delete_task";

pub(crate) const FAMILY: Family = Family {
    name: "tasks",
    tools: &[
        (LIST_TASKS, Scope::Read),
        (GET_TASK, Scope::Read),
        (LIST_TASK_ATTEMPTS, Scope::Read),
        (CREATE_TASK, Scope::Write),
        (UPDATE_TASK, Scope::Write),
        (DELETE_TASK, Scope::Write),
    ],
    router: VkTools::tasks_router,
};

/// get_task's attempts per page when `attempts_limit` is absent (seed 003's `attempts_limit`).
const TASK_ATTEMPTS_DEFAULT: usize = 20;

/// What each detail level shows of create_task / update_task: the task as get_task shows it.
const TASK_CHANGE_RULES: Rules = Rules {
    finish: None,
    kept: &[],
    standard: &[],
    verbatim: &[],
    nested: &[("task", &TASK_DETAIL_TASK_RULES)],
};

#[tool_router(router = tasks_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::LIST_TASKS, input_schema = input_schema::<ListTasksArgs>(),
           output_schema = detail_output_schema::<TaskPage>(),
           annotations(title = "List tasks", read_only_hint = true, open_world_hint = false))]
    async fn list_tasks(&self, Args(a): Args<ListTasksArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let summary = a
            .as_ref()
            .map_or(true, |a| a.include_attempt_summary != Some(false));
        let answer = a.and_then(|a| {
            let filter = TaskFilter {
                // Inside a workspace without a token: its own task only (`access`).
                only: crate::access::only_task(&self.query)?,
                updated_since: updated_since(a.updated_since.as_deref())?,
                status: a.status,
                q: a.q.filter(|q| !q.trim().is_empty()),
            };
            let page = page_args(a.cursor, a.limit, "limit")?;
            self.query.list_tasks(a.project_id, &filter, &page)
        });
        shaped_with(answer, &TASK_PAGE_RULES, level, |m| {
            if !summary {
                drop_in_items(m, "tasks", &ATTEMPT_SUMMARY_FIELDS);
            }
        })
    }

    #[tool(description = describe::GET_TASK, input_schema = input_schema::<GetTaskArgs>(),
           output_schema = detail_output_schema::<TaskDetail>(),
           annotations(title = "Get task", read_only_hint = true, open_world_hint = false))]
    async fn get_task(&self, Args(a): Args<GetTaskArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let answer = a.and_then(|a| {
            let paged = a.attempts_cursor.is_some() || a.attempts_limit.is_some();
            if paged && a.include_attempts != Some(true) {
                return Err(ToolError::invalid_field(
                    "include_attempts",
                    "attempts_cursor and attempts_limit page the task's attempts: pass include_attempts: true with them (or use list_task_attempts).",
                ));
            }
            let page = PageArgs {
                cursor: a.attempts_cursor,
                limit: page_size(
                    a.attempts_limit,
                    TASK_ATTEMPTS_DEFAULT,
                    PAGE_MAX,
                    "attempts_limit",
                )?,
            };
            let attempts = a.include_attempts.unwrap_or(false).then_some(&page);
            self.query.get_task(a.task_id, attempts)
        });
        shaped(answer, &TASK_DETAIL_RULES, level)
    }

    #[tool(description = describe::LIST_TASK_ATTEMPTS, input_schema = input_schema::<ListAttemptsArgs>(),
           output_schema = detail_output_schema::<AttemptList>(),
           annotations(title = "List task attempts", read_only_hint = true, open_world_hint = false))]
    async fn list_task_attempts(&self, Args(a): Args<ListAttemptsArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        shaped(
            a.and_then(|a| {
                let page = page_args(a.cursor, a.limit, "limit")?;
                self.query.list_task_attempts(a.task_id, &page)
            }),
            &ATTEMPT_LIST_RULES,
            level,
        )
    }

    #[tool(description = describe::CREATE_TASK, input_schema = input_schema::<CreateTaskArgs>(),
           output_schema = detail_output_schema::<TaskChange>(),
           annotations(title = "Create task", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    pub async fn create_task(&self, Args(a): Args<CreateTaskArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let r = async {
            let a = a?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            let t = NewTask {
                project_id: a.project_id,
                title: a.title,
                description: a.description,
                status: a.status,
            };
            self.proxy()?.create_task(t, a.request_id.as_deref()).await
        };
        shaped(r.await, &TASK_CHANGE_RULES, level)
    }

    #[tool(description = describe::UPDATE_TASK, input_schema = input_schema::<UpdateTaskArgs>(),
           output_schema = detail_output_schema::<TaskChange>(),
           annotations(title = "Update task", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false))]
    pub async fn update_task(&self, Args(a): Args<UpdateTaskArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let r = async {
            let a = a?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            let e = TaskEdit {
                task_id: a.task_id,
                title: a.title,
                description: a.description,
                status: a.status,
            };
            self.proxy()?.update_task(e, a.request_id.as_deref()).await
        };
        shaped(r.await, &TASK_CHANGE_RULES, level)
    }

    #[tool(description = describe::DELETE_TASK, input_schema = input_schema::<DeleteTaskArgs>(),
           output_schema = plain_output_schema::<TaskDeleted>(),
           annotations(title = "Delete task", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false))]
    pub async fn delete_task(&self, Args(a): Args<DeleteTaskArgs>) -> CallToolResult {
        let r = async {
            let a = a?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            self.proxy()?
                .delete_task(a.task_id, a.request_id.as_deref())
                .await
        };
        plain(r.await)
    }
}

/// list_tasks' `updated_since`, an RFC 3339 instant.
fn updated_since(s: Option<&str>) -> Result<Option<chrono::DateTime<chrono::Utc>>, ToolError> {
    s.map(|s| {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|_| {
                ToolError::invalid_field(
                    "updated_since",
                    "updated_since must be RFC 3339, e.g. 2026-11-22T10:00:00Z.",
                )
            })
    })
    .transpose()
}

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListTasksArgs {
    /// Project id (UUID string) from list_projects.
    pub project_id: Uuid,
    /// Only tasks in this status: `todo`, `inprogress`, `inreview`, `done` or `cancelled`.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// Case-insensitive text that must appear in the title or description.
    #[serde(default)]
    pub q: Option<String>,
    /// Only tasks updated at or after this instant (RFC 3339, e.g. `2026-11-22T10:00:00Z`).
    #[serde(default)]
    pub updated_since: Option<String>,
    /// Opaque `next_cursor` from the previous list_tasks page with the same filters; omit for
    /// the first page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Page size, 1–200 (default 50); larger values are capped at 200.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
    /// Include each task's attempt summary (`latest_attempt_id`, `latest_session_id`,
    /// `has_in_progress_attempt`, `last_attempt_failed`; branch and executor from detail 1).
    /// Default true; false lists the tasks alone.
    #[serde(default)]
    pub include_attempt_summary: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetTaskArgs {
    /// Task id (UUID string) from list_tasks.
    pub task_id: Uuid,
    /// Also return a page of the task's attempts, newest first (default false).
    #[serde(default)]
    pub include_attempts: Option<bool>,
    /// With `include_attempts`: opaque `attempts_next_cursor` from the previous get_task
    /// answer for this task; omit for the first page.
    #[serde(default)]
    pub attempts_cursor: Option<String>,
    /// With `include_attempts`: attempts per page, 1–200 (default 20, seed 003's); larger
    /// values are capped at 200.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub attempts_limit: Option<u32>,
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListAttemptsArgs {
    /// Task id (UUID string) from list_tasks.
    pub task_id: Uuid,
    /// Opaque `next_cursor` from the previous list_task_attempts page of the same task; omit
    /// for the first page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Page size, 1–200 (default 50); larger values are capped at 200.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTaskArgs {
    /// Project id (UUID string) from list_projects.
    pub project_id: Uuid,
    /// Task title, 1–255 characters, not blank.
    #[schemars(length(min = 1, max = 255))]
    pub title: String,
    /// What the agent should do; the prompt of the first attempt. At most 300,000 characters.
    #[serde(default)]
    #[schemars(length(max = 300000))]
    pub description: Option<String>,
    /// Initial status: `todo` (default), `inprogress`, `inreview`, `done` or `cancelled`.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// the same arguments returns the same task instead of creating another.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Fleet node: the host to create it on, needed when the project lives on several hosts
    /// (the refusal's `details.hosts` names them). A host daemon accepts only its own name.
    #[serde(default)]
    pub host: Option<String>,
    /// Detail level of the answer's task or status: 0 (default) the fields needed to decide
    /// the next call; 1 adds timestamps and metadata; 2 every field.
    #[serde(default)]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateTaskArgs {
    /// Task id (UUID string).
    pub task_id: Uuid,
    /// New title, 1–255 characters, not blank.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub title: Option<String>,
    /// New description (an empty string clears it), at most 300,000 characters.
    #[serde(default)]
    #[schemars(length(max = 300000))]
    pub description: Option<String>,
    /// New status: `todo`, `inprogress`, `inreview`, `done` or `cancelled`.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// the same arguments returns the first answer (`replayed: true`) without writing again;
    /// the same key with other arguments fails with `idempotency_conflict`.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level of the answer's task or status: 0 (default) the fields needed to decide
    /// the next call; 1 adds timestamps and metadata; 2 every field.
    #[serde(default)]
    pub detail: Option<Detail>,
    /// Fleet node: the host to run it on, needed when several hosts report this task (a copied
    /// VK database; the refusal's `details.hosts` names them). A host daemon accepts only its
    /// own name.
    #[serde(default)]
    pub host: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteTaskArgs {
    /// Task id (UUID string). Its attempts and worktrees are deleted too.
    pub task_id: Uuid,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// task answers the same `deleted_task_id` (`replayed: true`) even though the task is gone;
    /// the same key with another task_id fails with `idempotency_conflict`.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
    /// Fleet node: the host to run it on, needed when several hosts report this task (a copied
    /// VK database; the refusal's `details.hosts` names them). A host daemon accepts only its
    /// own name.
    #[serde(default)]
    pub host: Option<String>,
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const LIST_TASKS: &str = "List a project's tasks, newest first, each with its latest attempt summary (latest attempt and session ids, running/failed flags).
Use when: finding a task, or checking which tasks have running or failed attempts.
Required: project_id.
Optional: status, q (text search), updated_since (RFC 3339), cursor (previous next_cursor), limit (1-200, default 50), include_attempt_summary, detail (0|1|2).
Next: get_task or list_task_attempts with a task_id; get_attempt_status with latest_attempt_id.
Avoid: paging by re-sending the same call; pass next_cursor as cursor (same filters) while has_more.";

    pub(crate) const GET_TASK: &str =
    "Get one task with its attempt summary, optionally with a page of its attempts.
Use when: you have a task_id and need its status, description or attempts.
Required: task_id.
Optional: include_attempts (default false); with it attempts_cursor (attempts_next_cursor of the previous answer) and attempts_limit (1-200, default 20), detail (0|1|2, default 0).
Next: get_attempt_status or tail_attempt_logs with an attempt_id.
Avoid: using an attempt_id here; attempts have their own tools.";

    pub(crate) const LIST_TASK_ATTEMPTS: &str = "List a task's attempts (VK workspaces), newest first, with each attempt's latest session and state, plus top-level latest_attempt_id and latest_session_id.
Use when: you need an attempt_id or session_id for a task.
Required: task_id.
Optional: cursor (next_cursor of the previous page of this task), limit (1-200, default 50), detail (0|1|2, default 0).
Next: get_attempt_status, tail_attempt_logs or follow_up with the attempt_id; while has_more, call again with cursor = next_cursor.
Avoid: calling this in a polling loop; use wait_for_attempt_change or get_attempt_status with since_token.";

    pub(crate) const CREATE_TASK: &str = "Create a task in a project (it does not start an agent; use start_task_attempt for that).
Use when: you need a new unit of work on the board.
Required: project_id, title.
Optional: description (the agent's prompt), status, request_id (idempotency key: retries return the same task), host (fleet node: required when the project lives on several hosts), detail (0|1|2, default 0).
Next: start_task_attempt with the returned task_id.
Avoid: retrying a timed-out call without request_id (it may create a duplicate).";

    pub(crate) const UPDATE_TASK: &str = "Change a task's title, description or status.
Use when: editing a task or moving it on the board (e.g. to done).
Required: task_id and at least one of title, description, status.
Optional: title, description (empty string clears it), status, request_id (idempotency key: same key and arguments replay the first answer, no second write), host (fleet node: a task several hosts report), detail (0|1|2, default 0).
Next: get_task to confirm, or list_tasks.
Avoid: using it to stop work (use stop_attempt) or to send instructions to the agent (use follow_up).";

    pub(crate) const DELETE_TASK: &str = "Delete a task with its attempts and worktrees. Irreversible.
Use when: a task was created by mistake or is obsolete.
Required: task_id.
Optional: request_id (idempotency key: a retry answers the same deleted_task_id though the task is gone), host (fleet node: a task several hosts report).
Next: list_tasks.
Avoid: deleting a task whose attempt is running (VK refuses: stop_attempt first); deleting to cancel (set status cancelled instead).";
}
