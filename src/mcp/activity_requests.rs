//! Typed arguments of the activity tools (`activity_tools`). `since_token` and `cursor` are two
//! pagination modes, refused together at run time (`mixed_pagination`) and in the schema (a
//! root `if/then`, never a root `oneOf`).

use crate::query::detail::Detail;
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["cursor"]},
    "then" = {"not": {"required": ["since_token"]}}
))]
pub struct ProjectActivityArgs {
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
pub struct TaskActivityArgs {
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
