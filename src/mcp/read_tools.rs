//! Read tools: discovery, tasks and attempts. Each is parse → query → respond; the rules live
//! in `query/`.

use rmcp::handler::server::tool::ToolRouter;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};

use super::VkTools;
use super::args::{Args, input_schema};
use super::descriptions as d;
use super::requests::*;
use super::respond::{rendered, respond};
use crate::query::catalog::{ExecutorList, ProjectList, RepoList};
use crate::query::changes::ChangesPage;
use crate::query::context::WorkspaceContext;
use crate::query::logs::{LOG_PAGE_DEFAULT, LogMode, LogPage, LogRequest};
use crate::query::paging::{PAGE_DEFAULT, PAGE_MAX, PageArgs};
use crate::query::status::{Shape, StatusAnswer};
use crate::query::target::SessionTarget;
use crate::query::tasks::{AttemptList, TaskDetail, TaskFilter, TaskPage};
use crate::query::transcript::{TURN_PAGE_DEFAULT, TranscriptPage};
use crate::store::keys::Channel;
use crate::tool_error::ToolError;
use rmcp::Json;
use rmcp::model::CallToolResult;

pub const MAX_BATCH: usize = 100;

#[tool_router(router = read_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = d::LIST_PROJECTS, input_schema = input_schema::<ListProjectsArgs>(),
           annotations(title = "List projects", read_only_hint = true, open_world_hint = false))]
    async fn list_projects(
        &self,
        Args(a): Args<ListProjectsArgs>,
    ) -> Result<Json<ProjectList>, CallToolResult> {
        respond(a.and_then(|a| {
            let page = page_args(a.cursor, a.limit, "limit")?;
            self.query.list_projects(&page)
        }))
    }

    #[tool(description = d::LIST_REPOS, input_schema = input_schema::<ListReposArgs>(),
           annotations(title = "List repositories", read_only_hint = true, open_world_hint = false))]
    async fn list_repos(
        &self,
        Args(a): Args<ListReposArgs>,
    ) -> Result<Json<RepoList>, CallToolResult> {
        respond(a.and_then(|a| {
            let page = page_args(a.cursor, a.limit, "limit")?;
            self.query.list_repos(a.project_id, &page)
        }))
    }

    #[tool(description = d::LIST_EXECUTORS, input_schema = input_schema::<NoArgs>(),
           annotations(title = "List executors", read_only_hint = true, open_world_hint = false))]
    async fn list_executors(
        &self,
        Args(a): Args<NoArgs>,
    ) -> Result<Json<ExecutorList>, CallToolResult> {
        respond(a.and_then(|_| self.query.list_executors()))
    }

    #[tool(description = d::LIST_TASKS, input_schema = input_schema::<ListTasksArgs>(),
           annotations(title = "List tasks", read_only_hint = true, open_world_hint = false))]
    async fn list_tasks(
        &self,
        Args(a): Args<ListTasksArgs>,
    ) -> Result<Json<TaskPage>, CallToolResult> {
        respond(a.and_then(|a| {
            let updated_since = a
                .updated_since
                .as_deref()
                .map(|s| {
                    chrono::DateTime::parse_from_rfc3339(s)
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .map_err(|_| {
                            ToolError::invalid_field(
                                "updated_since",
                                "updated_since must be RFC 3339, e.g. 2026-11-22T10:00:00Z.",
                            )
                        })
                })
                .transpose()?;
            let filter = TaskFilter {
                status: a.status,
                q: a.q.filter(|q| !q.trim().is_empty()),
                updated_since,
            };
            let page = page_args(a.cursor, a.limit, "limit")?;
            self.query.list_tasks(a.project_id, &filter, &page)
        }))
    }

    #[tool(description = d::GET_TASK, input_schema = input_schema::<GetTaskArgs>(),
           annotations(title = "Get task", read_only_hint = true, open_world_hint = false))]
    async fn get_task(
        &self,
        Args(a): Args<GetTaskArgs>,
    ) -> Result<Json<TaskDetail>, CallToolResult> {
        respond(a.and_then(|a| {
            let paged = a.attempts_cursor.is_some() || a.attempts_limit.is_some();
            if paged && a.include_attempts != Some(true) {
                return Err(ToolError::invalid_field(
                    "include_attempts",
                    "attempts_cursor and attempts_limit page the task's attempts: pass include_attempts: true with them (or use list_task_attempts).",
                ));
            }
            let page = page_args(a.attempts_cursor, a.attempts_limit, "attempts_limit")?;
            let attempts = a.include_attempts.unwrap_or(false).then_some(&page);
            self.query.get_task(a.task_id, attempts)
        }))
    }

    #[tool(description = d::LIST_TASK_ATTEMPTS, input_schema = input_schema::<ListAttemptsArgs>(),
           annotations(title = "List task attempts", read_only_hint = true, open_world_hint = false))]
    async fn list_task_attempts(
        &self,
        Args(a): Args<ListAttemptsArgs>,
    ) -> Result<Json<AttemptList>, CallToolResult> {
        respond(a.and_then(|a| {
            let page = page_args(a.cursor, a.limit, "limit")?;
            self.query.list_task_attempts(a.task_id, &page)
        }))
    }

    #[tool(description = d::GET_ATTEMPT_STATUS, input_schema = input_schema::<StatusArgs>(),
           output_schema = rmcp::handler::server::tool::schema_for_output::<StatusAnswer>(),
           annotations(title = "Get attempt status", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_status(&self, Args(a): Args<StatusArgs>) -> CallToolResult {
        rendered(a.and_then(|a| {
            let (ids, shape) = match (a.attempt_id, a.attempt_ids) {
                (Some(id), None) => (vec![id], Shape::Single),
                (None, Some(ids)) if !ids.is_empty() && ids.len() <= MAX_BATCH => {
                    (ids, Shape::Batch)
                }
                (None, Some(ids)) => {
                    return Err(ToolError::invalid_field(
                        "attempt_ids",
                        format!("attempt_ids must hold 1 to {MAX_BATCH} ids (got {}); split larger sets into several calls.", ids.len()),
                    ));
                }
                _ => return Err(ToolError::ambiguous_target(&["attempt_id", "attempt_ids"])),
            };
            let since = self.query.since(a.since_token.as_deref(), "since_token")?;
            let page = self.query.attempt_statuses(&ids, since)?;
            if a.attempt_id.is_some() && !page.not_found.is_empty() {
                return Err(ToolError::unknown_attempt(ids[0]));
            }
            page.render(shape)
        }))
    }

    #[tool(description = d::TAIL_ATTEMPT_LOGS, input_schema = input_schema::<TailLogsArgs>(),
           annotations(title = "Tail attempt logs", read_only_hint = true, open_world_hint = false))]
    async fn tail_attempt_logs(
        &self,
        Args(a): Args<TailLogsArgs>,
    ) -> Result<Json<LogPage>, CallToolResult> {
        respond(a.and_then(|a| {
            let mode = match (a.cursor, a.after_entry_index) {
                (Some(_), Some(_)) => {
                    return Err(ToolError::new(
                        "mixed_pagination",
                        false,
                        "Use only one pagination mode: `cursor` pages older history, `after_entry_index` returns only newer entries.",
                    )
                    .with_details(serde_json::json!({ "fields": ["cursor", "after_entry_index"] })));
                }
                (Some(c), None) => LogMode::Before(c),
                (None, Some(k)) => LogMode::After(k),
                (None, None) => LogMode::Tail,
            };
            let channel = match a.channel.unwrap_or_default() {
                LogChannel::Normalized => Channel::Normalized,
                LogChannel::Raw => Channel::Raw,
            };
            let limit = a.limit.map(|l| l as usize).unwrap_or(LOG_PAGE_DEFAULT);
            if limit == 0 {
                return Err(ToolError::invalid_field("limit", "limit must be at least 1."));
            }
            let since = self.query.since(a.since_token.as_deref(), "since_token")?;
            self.query.tail_logs(LogRequest {
                attempt: a.attempt_id,
                channel,
                mode,
                limit,
                since,
                process: a.execution_process_id,
            })
        }))
    }

    #[tool(description = d::GET_ATTEMPT_CHANGES, input_schema = input_schema::<ChangesArgs>(),
           annotations(title = "Get attempt changes", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_changes(
        &self,
        Args(a): Args<ChangesArgs>,
    ) -> Result<Json<ChangesPage>, CallToolResult> {
        respond(a.and_then(|a| {
            self.query
                .attempt_changes(a.attempt_id, a.force.unwrap_or(false))
        }))
    }

    #[tool(description = d::TAIL_SESSION_MESSAGES, input_schema = input_schema::<MessagesArgs>(),
           annotations(title = "Tail session messages", read_only_hint = true, open_world_hint = false))]
    async fn tail_session_messages(
        &self,
        Args(a): Args<MessagesArgs>,
    ) -> Result<Json<TranscriptPage>, CallToolResult> {
        respond(a.and_then(|a| {
            let Some(target) = SessionTarget::from_ids(a.session_id, a.attempt_id) else {
                return Err(ToolError::ambiguous_target(&["session_id", "attempt_id"]));
            };
            let limit = page_size(
                a.limit,
                TURN_PAGE_DEFAULT,
                crate::query::transcript::TURN_PAGE_MAX,
                "limit",
            )?;
            self.query.session_messages(target, a.cursor, limit)
        }))
    }

    #[tool(description = d::GET_CONTEXT, input_schema = input_schema::<NoArgs>(),
           annotations(title = "Get workspace context", read_only_hint = true, open_world_hint = false))]
    async fn get_context(
        &self,
        ctx: RequestContext<RoleServer>,
        Args(a): Args<NoArgs>,
    ) -> Result<Json<WorkspaceContext>, CallToolResult> {
        respond(a.and_then(|_| {
            let dir = self.workspace_of(&ctx).ok_or_else(|| {
                ToolError::new(
                    "no_workspace_context",
                    false,
                    "This client is not running inside a VK attempt workspace. Use list_projects → list_tasks → list_task_attempts instead.",
                )
            })?;
            self.query.context_for(&dir)
        }))
    }
}

/// Cursor and page size of a paged list (`query::paging`): the size within `1..=PAGE_MAX`.
fn page_args(
    cursor: Option<String>,
    limit: Option<u32>,
    field: &str,
) -> Result<PageArgs, ToolError> {
    Ok(PageArgs {
        cursor,
        limit: page_size(limit, PAGE_DEFAULT, PAGE_MAX, field)?,
    })
}

/// A page size within `1..=max` (default when absent); 0 is an error, above `max` is capped.
fn page_size(v: Option<u32>, default: usize, max: usize, field: &str) -> Result<usize, ToolError> {
    match v {
        None => Ok(default),
        Some(0) => Err(ToolError::invalid_field(
            field,
            format!("{field} must be between 1 and {max}."),
        )),
        Some(n) => Ok((n as usize).min(max)),
    }
}

pub(crate) fn router() -> ToolRouter<VkTools> {
    VkTools::read_router()
}
