//! Activity tools: `tail_project_activity` and `tail_task_activity`, parse →
//! `query::activity` → answer. The rules (directions, commit-whole pages, resets, what each
//! detail level shows) live in `query::activity`. `since_token` and `cursor` are two pagination
//! modes, refused together at run time (`invalid_argument`, reason `mixed_pagination`) and in the schema (a root
//! `if/then`, never a root `oneOf`).

use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use super::answer::{plain, plain_output_schema};
use super::args::{Args, input_schema};
use super::{Family, Scope, VkTools};
use vk_observer_query::activity::{ActivityPage, ActivityRequest, ActivityScope};
use vk_observer_query::detail::Detail;

pub(crate) const TAIL_PROJECT_ACTIVITY: &str = "tail_project_activity";
pub(crate) const TAIL_TASK_ACTIVITY: &str = "tail_task_activity";

pub(crate) const FAMILY: Family = Family {
    name: "activity",
    tools: &[
        (TAIL_PROJECT_ACTIVITY, Scope::Read),
        (TAIL_TASK_ACTIVITY, Scope::Read),
    ],
    router: VkTools::activity_router,
};

#[tool_router(router = activity_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::TAIL_PROJECT_ACTIVITY, input_schema = input_schema::<ProjectActivityArgs>(),
           output_schema = plain_output_schema::<ActivityPage>(),
           annotations(title = "Tail project activity", read_only_hint = true, open_world_hint = false))]
    async fn tail_project_activity(&self, Args(a): Args<ProjectActivityArgs>) -> CallToolResult {
        plain(a.and_then(|a| {
            let scope = ActivityScope::Project(a.project_id);
            let req = ActivityRequest::new(scope, a.since_token, a.cursor, a.limit, a.detail)?;
            self.query.activity(&req)
        }))
    }

    #[tool(description = describe::TAIL_TASK_ACTIVITY, input_schema = input_schema::<TaskActivityArgs>(),
           output_schema = plain_output_schema::<ActivityPage>(),
           annotations(title = "Tail task activity", read_only_hint = true, open_world_hint = false))]
    async fn tail_task_activity(&self, Args(a): Args<TaskActivityArgs>) -> CallToolResult {
        plain(a.and_then(|a| {
            let scope = ActivityScope::Task(a.task_id);
            let req = ActivityRequest::new(scope, a.since_token, a.cursor, a.limit, a.detail)?;
            self.query.activity(&req)
        }))
    }
}

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["cursor"]},
    "then" = {"not": {"required": ["since_token"]}}
))]
pub(crate) struct ProjectActivityArgs {
    /// Project id (UUID string) from list_projects.
    pub project_id: Uuid,
    /// Opaque token (`next_since_token` of the previous page, or any answer's `token`): return
    /// what happened AFTER it, oldest first. Cannot be combined with `cursor`.
    #[serde(default)]
    pub since_token: Option<String>,
    /// Opaque `next_cursor` of the previous newest-first page: return OLDER items, newest first.
    /// Cannot be combined with `since_token`. Omit both for the newest items.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Items per page, 1–200 (default 50); larger values are capped at 200. An oldest-first
    /// page never splits one commit, so it may exceed the limit by the rest of its last commit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// 0 = compact items (kind, token, ids, status facts), the default; 1 = full (also
    /// title, changed fields, change counts, commit time); 2 = the same as 1 (activity items
    /// hold no VK objects).
    #[serde(default)]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["cursor"]},
    "then" = {"not": {"required": ["since_token"]}}
))]
pub(crate) struct TaskActivityArgs {
    /// Task id (UUID string) from list_tasks; a deleted task's activity stays readable.
    pub task_id: Uuid,
    /// Opaque token (`next_since_token` of the previous page, or any answer's `token`): return
    /// what happened AFTER it, oldest first. Cannot be combined with `cursor`.
    #[serde(default)]
    pub since_token: Option<String>,
    /// Opaque `next_cursor` of the previous newest-first page: return OLDER items, newest first.
    /// Cannot be combined with `since_token`. Omit both for the newest items.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Items per page, 1–200 (default 50); larger values are capped at 200. An oldest-first
    /// page never splits one commit, so it may exceed the limit by the rest of its last commit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// 0 = compact items (kind, token, ids, status facts), the default; 1 = full (also
    /// title, changed fields, change counts, commit time); 2 = the same as 1 (activity items
    /// hold no VK objects).
    #[serde(default)]
    pub detail: Option<Detail>,
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const TAIL_PROJECT_ACTIVITY: &str = "What happened in a project, in commit order: tasks created/updated/deleted, attempts, processes started/ended, follow-ups, change summaries; each with its commit token.
Use when: catching up on or following a project.
Required: project_id.
Optional: since_token (after it, oldest first) OR cursor (older, newest first; neither = newest), limit (1-200), detail (0|1|2, default 0).
Next: again with since_token = next_since_token (exact, across restarts); wait_for_attempt_change(project_id, include_activity).
Avoid: since_token with cursor; de-duplicating by hand; ignoring token_reset.";

    pub(crate) const TAIL_TASK_ACTIVITY: &str = "What happened to one task (attempts, processes, follow-ups, change summaries), in commit order, each item with its commit token.
Use when: following one task closely, or reviewing its history.
Required: task_id.
Optional: since_token (after it, oldest first) OR cursor (older, newest first; neither = newest), limit (1-200), detail (0|1|2, default 0).
Next: again with since_token = next_since_token; get_attempt_status or tail_attempt_logs with an item's attempt_id.
Avoid: since_token with cursor; polling in a tight loop (use wait_for_attempt_change).";
}
