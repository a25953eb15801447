//! Discovery tools: `list_projects`, `list_repos`, `list_executors`. Parse → `query::catalog`
//! → answer; the rules live in `query/`.

use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use super::answer::{detail_output_schema, drop_in_items, level_of, shaped, shaped_with};
use super::args::{Args, input_schema};
use super::paging::page_args;
use super::{Family, Scope, VkTools};
use vk_observer_proxy::repos::branches_not_configured;
use vk_observer_query::catalog::{
    EXECUTOR_LIST_RULES, ExecutorFilter, ExecutorList, PROJECT_LIST_RULES, ProjectList,
    REPO_LIST_RULES, RepoList,
};
use vk_observer_query::detail::Detail;

pub const LIST_PROJECTS: &str = "list_projects";
pub(crate) const LIST_REPOS: &str = "list_repos";
pub(crate) const LIST_EXECUTORS: &str = "list_executors";

pub(crate) const FAMILY: Family = Family {
    name: "discovery",
    tools: &[
        (LIST_PROJECTS, Scope::Read),
        (LIST_REPOS, Scope::Read),
        (LIST_EXECUTORS, Scope::Read),
    ],
    router: VkTools::discovery_router,
};

#[tool_router(router = discovery_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::LIST_PROJECTS, input_schema = input_schema::<ListProjectsArgs>(),
           output_schema = detail_output_schema::<ProjectList>(),
           annotations(title = "List projects", read_only_hint = true, open_world_hint = false))]
    async fn list_projects(&self, Args(a): Args<ListProjectsArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        shaped(
            a.and_then(|a| {
                let page = page_args(a.cursor, a.limit, "limit")?;
                // A limited caller sees only its projects (`access`).
                let within = crate::access::visible_projects(&self.query)?;
                self.query.list_projects_within(&page, within.as_deref())
            }),
            &PROJECT_LIST_RULES,
            level,
        )
    }

    #[tool(description = describe::LIST_REPOS, input_schema = input_schema::<ListReposArgs>(),
           output_schema = detail_output_schema::<RepoList>(),
           annotations(title = "List repositories", read_only_hint = true, open_world_hint = false))]
    async fn list_repos(&self, Args(a): Args<ListReposArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let list = a.and_then(|a| {
            let page = page_args(a.cursor, a.limit, "limit")?;
            self.query.list_repos(a.project_id, &page)
        });
        // Current branches are not in the cache (VK's streams lack them): read from VK.
        let list = match (list, self.proxy()) {
            (Ok(l), Ok(proxy)) => Ok(proxy.with_current_branches(l).await),
            (Ok(l), Err(_)) => Ok(branches_not_configured(l)),
            (Err(e), _) => Err(e),
        };
        shaped(list, &REPO_LIST_RULES, level)
    }

    #[tool(description = describe::LIST_EXECUTORS, input_schema = input_schema::<ExecutorsArgs>(),
           output_schema = detail_output_schema::<ExecutorList>(),
           annotations(title = "List executors", read_only_hint = true, open_world_hint = false))]
    async fn list_executors(&self, Args(a): Args<ExecutorsArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let include_variants = a
            .as_ref()
            .map_or(true, |a| a.include_variants != Some(false));
        let answer = a.and_then(|a| {
            let filter = ExecutorFilter::parse(a.capabilities_filter.unwrap_or_default())?;
            self.query.list_executors(&filter)
        });
        shaped_with(answer, &EXECUTOR_LIST_RULES, level, |m| {
            if !include_variants {
                drop_in_items(m, "executors", &["variants", "default_variant"]);
            }
        })
    }
}

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListProjectsArgs {
    /// Opaque `next_cursor` from the previous list_projects page; omit for the first page.
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
pub(crate) struct ListReposArgs {
    /// Project id (UUID string) from list_projects.
    pub project_id: Uuid,
    /// Opaque `next_cursor` from the previous list_repos page of the same project; omit for
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
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecutorsArgs {
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
    /// Include each executor's `variants` (default true); false lists the names alone.
    #[serde(default)]
    pub include_variants: Option<bool>,
    /// Only executors having every one of these: `supports_mcp`, or a VK capability flag
    /// such as `SESSION_FORK` or `SETUP_HELPER`. Omit for all executors.
    #[serde(default)]
    pub capabilities_filter: Option<Vec<String>>,
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const LIST_PROJECTS: &str = "List Vibe Kanban projects (from the daemon's cache), by name, in pages.
Use when: you need a project_id to list or create tasks.
Required: nothing.
Optional: cursor (next_cursor of the previous page), limit (1-200, default 50), detail (0|1|2, default 0).
Next: list_tasks with a project_id, or list_repos to see its repositories; while has_more, call again with cursor = next_cursor.
Avoid: guessing project ids or names; always take project_id from this list.";

    pub(crate) const LIST_REPOS: &str = "List a project's repositories with each one's current branch (read live from VK; VK has no default branch).
Use when: you need repo ids, names or the branch to target (start_task_attempt repos).
Required: project_id.
Optional: cursor (next_cursor of the previous page), limit (1-200, default 50), detail (0|1|2, default 0).
Next: start_task_attempt with repos[].repo_id (target_branch defaults to current_branch); while has_more, call again with cursor = next_cursor.
Avoid: passing a task_id or attempt_id as project_id; reusing a cursor of another list or project.";

    pub(crate) const LIST_EXECUTORS: &str =
    "List the coding-agent executors VK can run, with variants and capability flags.
Use when: choosing `executor` (and `variant`) for start_task_attempt.
Required: nothing.
Optional: include_variants (default true), capabilities_filter (e.g. [supports_mcp] or [SESSION_FORK]), detail (0|1|2, default 0).
Next: start_task_attempt with executor (and variant) taken verbatim from this list.
Avoid: hard-coding executor names or lower-casing them; use the `executor` strings as returned.";
}
