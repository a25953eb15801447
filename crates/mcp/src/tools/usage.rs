//! Usage tool: `get_usage`, parse → `query::usage` → answer. Token usage and cost of
//! coding-agent runs (read from Claude Code's stdout by ingest) summed over a project, a task
//! or a set of attempts, optionally only the runs that started in a time window, with
//! breakdowns by executor, model and (on a fleet node) host.

use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use super::answer::{detail_output_schema, level_of, shaped};
use super::args::{Args, input_schema};
use super::paging::MAX_BATCH;
use super::{Family, Scope, VkTools};
use vk_observer_query::detail::Detail;
use vk_observer_query::usage::{USAGE_RULES, UsageAnswer, UsageScope, Window};
use vk_observer_tool_error::ToolError;

pub(crate) const GET_USAGE: &str = "get_usage";

pub(crate) const FAMILY: Family = Family {
    name: "usage",
    tools: &[(GET_USAGE, Scope::Read)],
    router: VkTools::usage_router,
};

#[tool_router(router = usage_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::GET_USAGE, input_schema = input_schema::<UsageArgs>(),
           output_schema = detail_output_schema::<UsageAnswer>(),
           annotations(title = "Get token usage and cost", read_only_hint = true, open_world_hint = false))]
    async fn get_usage(&self, Args(a): Args<UsageArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let answer = a.and_then(|a| {
            let window = Window {
                since: instant("since", a.since.as_deref())?,
                until: instant("until", a.until.as_deref())?,
            };
            if let (Some(s), Some(u)) = (window.since, window.until)
                && s >= u
            {
                return Err(ToolError::invalid_field(
                    "until",
                    "until must be later than since.",
                ));
            }
            self.query
                .usage(&scope(a.project_id, a.task_id, a.attempt_ids)?, window)
        });
        shaped(answer, &USAGE_RULES, level)
    }
}

/// The one target the arguments name.
fn scope(
    project: Option<Uuid>,
    task: Option<Uuid>,
    attempts: Option<Vec<Uuid>>,
) -> Result<UsageScope, ToolError> {
    match (project, task, attempts) {
        (Some(p), None, None) => Ok(UsageScope::Project(p)),
        (None, Some(t), None) => Ok(UsageScope::Task(t)),
        (None, None, Some(ids)) if (1..=MAX_BATCH).contains(&ids.len()) => {
            Ok(UsageScope::Attempts(ids))
        }
        (None, None, Some(ids)) => Err(ToolError::invalid_field(
            "attempt_ids",
            format!(
                "attempt_ids must hold 1 to {MAX_BATCH} ids (got {}); split larger sets into several calls.",
                ids.len()
            ),
        )),
        _ => Err(ToolError::ambiguous_target(&[
            "project_id",
            "task_id",
            "attempt_ids",
        ])),
    }
}

/// An RFC 3339 bound of the window.
fn instant(
    field: &str,
    s: Option<&str>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ToolError> {
    s.map(|s| {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|_| {
                ToolError::invalid_field(
                    field,
                    format!("{field} must be RFC 3339, e.g. 2026-11-22T10:00:00Z."),
                )
            })
    })
    .transpose()
}

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageArgs {
    /// Project id (UUID string): every attempt of its tasks. Give exactly one of
    /// `project_id`, `task_id` or `attempt_ids`.
    #[serde(default)]
    pub project_id: Option<Uuid>,
    /// Task id (UUID string): every attempt of the task. Give exactly one of `project_id`,
    /// `task_id` or `attempt_ids`.
    #[serde(default)]
    pub task_id: Option<Uuid>,
    /// Up to 100 attempt ids (UUID strings); unknown ones are listed in `not_found`. Give
    /// exactly one of `project_id`, `task_id` or `attempt_ids`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 100))]
    pub attempt_ids: Option<Vec<Uuid>>,
    /// Count only runs that started at or after this instant (RFC 3339).
    #[serde(default)]
    pub since: Option<String>,
    /// Count only runs that started before this instant (RFC 3339).
    #[serde(default)]
    pub until: Option<String>,
    /// Detail level: 0 (default) the totals and the breakdowns by executor, model and host;
    /// 1 adds each attempt's sum with its sessions'; 2 the same as 1.
    #[serde(default)]
    pub detail: Option<Detail>,
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const GET_USAGE: &str = "Token usage and cost of coding-agent runs (tokens by kind; cost_usd, duration_ms, num_turns as Claude Code reported them) summed over a project, a task or attempts, with by_executor, by_model, by_host (fleet). No `usage` = no run reported any.
Use when: reporting what work cost, or comparing executors and models.
Required: exactly one of project_id, task_id or attempt_ids (1-100).
Optional: since, until (RFC 3339, run start), detail (0|1|2; 1 adds attempts).
Next: get_attempt_status (`usage`) for one attempt.
Avoid: adding up tokens from raw logs; complete: false as final.";
}
