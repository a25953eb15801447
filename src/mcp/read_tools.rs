//! Read tools: discovery, tasks and attempts. Each is parse → query → respond; the rules live
//! in `query/`.

use rmcp::handler::server::tool::ToolRouter;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};

use super::VkTools;
use super::args::{Args, input_schema};
use super::descriptions as d;
use super::requests::*;
use super::respond::rendered;
use super::shaped::{detail_output_schema, shaped, shaped_with};
use crate::query::catalog::{
    EXECUTOR_LIST_RULES, ExecutorFilter, ExecutorList, PROJECT_LIST_RULES, ProjectList,
    REPO_LIST_RULES, RepoList,
};
use crate::query::changes::{CHANGES_RULES, ChangesPage};
use crate::query::context::{CONTEXT_RULES, WorkspaceContext};
use crate::query::detail::Detail;
use crate::query::logs::{LOG_PAGE_DEFAULT, LOG_PAGE_RULES, LogMode, LogPage, LogRequest};
use crate::query::paging::{PAGE_DEFAULT, PAGE_MAX, PageArgs};
use crate::query::status::{Shape, StatusAnswer, StatusView};
use crate::query::target::SessionTarget;
use crate::query::tasks::{
    ATTEMPT_LIST_RULES, ATTEMPT_SUMMARY_FIELDS, AttemptList, TASK_DETAIL_RULES, TASK_PAGE_RULES,
    TaskDetail, TaskFilter, TaskPage,
};
use crate::query::transcript::{TRANSCRIPT_RULES, TURN_PAGE_DEFAULT, TranscriptPage};
use crate::store::keys::Channel;
use crate::tool_error::ToolError;
use rmcp::model::CallToolResult;

pub const MAX_BATCH: usize = 100;

#[tool_router(router = read_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = d::LIST_PROJECTS, input_schema = input_schema::<ListProjectsArgs>(),
           output_schema = detail_output_schema::<ProjectList>(),
           annotations(title = "List projects", read_only_hint = true, open_world_hint = false))]
    async fn list_projects(&self, Args(a): Args<ListProjectsArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        shaped(
            a.and_then(|a| {
                let page = page_args(a.cursor, a.limit, "limit")?;
                self.query.list_projects(&page)
            }),
            &PROJECT_LIST_RULES,
            level,
        )
    }

    #[tool(description = d::LIST_REPOS, input_schema = input_schema::<ListReposArgs>(),
           output_schema = detail_output_schema::<RepoList>(),
           annotations(title = "List repositories", read_only_hint = true, open_world_hint = false))]
    async fn list_repos(&self, Args(a): Args<ListReposArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        shaped(
            a.and_then(|a| {
                let page = page_args(a.cursor, a.limit, "limit")?;
                self.query.list_repos(a.project_id, &page)
            }),
            &REPO_LIST_RULES,
            level,
        )
    }

    #[tool(description = d::LIST_EXECUTORS, input_schema = input_schema::<ExecutorsArgs>(),
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

    #[tool(description = d::LIST_TASKS, input_schema = input_schema::<ListTasksArgs>(),
           output_schema = detail_output_schema::<TaskPage>(),
           annotations(title = "List tasks", read_only_hint = true, open_world_hint = false))]
    async fn list_tasks(&self, Args(a): Args<ListTasksArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let summary = a
            .as_ref()
            .map_or(true, |a| a.include_attempt_summary != Some(false));
        let answer = a.and_then(|a| {
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
        });
        shaped_with(answer, &TASK_PAGE_RULES, level, |m| {
            if !summary {
                drop_in_items(m, "tasks", &ATTEMPT_SUMMARY_FIELDS);
            }
        })
    }

    #[tool(description = d::GET_TASK, input_schema = input_schema::<GetTaskArgs>(),
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
            let page = page_args(a.attempts_cursor, a.attempts_limit, "attempts_limit")?;
            let attempts = a.include_attempts.unwrap_or(false).then_some(&page);
            self.query.get_task(a.task_id, attempts)
        });
        shaped(answer, &TASK_DETAIL_RULES, level)
    }

    #[tool(description = d::LIST_TASK_ATTEMPTS, input_schema = input_schema::<ListAttemptsArgs>(),
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

    #[tool(description = d::GET_ATTEMPT_STATUS, input_schema = input_schema::<StatusArgs>(),
           output_schema = detail_output_schema::<StatusAnswer>(),
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
            page.render(
                shape,
                StatusView {
                    detail: a.detail.unwrap_or_default(),
                    include_result: a.include_result != Some(false),
                },
            )
        }))
    }

    #[tool(description = d::TAIL_ATTEMPT_LOGS, input_schema = input_schema::<TailLogsArgs>(),
           output_schema = detail_output_schema::<LogPage>(),
           annotations(title = "Tail attempt logs", read_only_hint = true, open_world_hint = false))]
    async fn tail_attempt_logs(&self, Args(a): Args<TailLogsArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let answer = a.and_then(|a| {
            let mode = match (a.cursor, a.after_entry_index) {
                (Some(_), Some(_)) => {
                    return Err(ToolError::new(
                        crate::tool_error::ErrorCode::MixedPagination,
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
                detail: level,
            })
        });
        shaped(answer, &LOG_PAGE_RULES, level)
    }

    #[tool(description = d::GET_ATTEMPT_CHANGES, input_schema = input_schema::<ChangesArgs>(),
           output_schema = detail_output_schema::<ChangesPage>(),
           annotations(title = "Get attempt changes", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_changes(&self, Args(a): Args<ChangesArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let files = a.as_ref().map_or(true, |a| a.include_files != Some(false));
        let answer = a.and_then(|a| {
            self.query
                .attempt_changes(a.attempt_id, a.force.unwrap_or(false))
        });
        shaped_with(answer, &CHANGES_RULES, level, |m| {
            if !files {
                m.remove("files");
            }
        })
    }

    #[tool(description = d::TAIL_SESSION_MESSAGES, input_schema = input_schema::<MessagesArgs>(),
           output_schema = detail_output_schema::<TranscriptPage>(),
           annotations(title = "Tail session messages", read_only_hint = true, open_world_hint = false))]
    async fn tail_session_messages(&self, Args(a): Args<MessagesArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let answer = a.and_then(|a| {
            let Some(target) = SessionTarget::from_ids(a.session_id, a.attempt_id) else {
                return Err(ToolError::ambiguous_target(&["session_id", "attempt_id"]));
            };
            if a.by == Some(MessagesBy::Message) {
                let limit = page_size(
                    a.limit,
                    crate::query::conversation::MESSAGE_PAGE_DEFAULT,
                    crate::query::conversation::MESSAGE_PAGE_MAX,
                    "limit",
                )?;
                let detail = a.detail.unwrap_or_default();
                return self
                    .query
                    .session_messages(target, a.cursor, limit, Some(detail));
            }
            let limit = page_size(
                a.limit,
                TURN_PAGE_DEFAULT,
                crate::query::transcript::TURN_PAGE_MAX,
                "limit",
            )?;
            self.query.session_messages(target, a.cursor, limit, None)
        });
        shaped(answer, &TRANSCRIPT_RULES, level)
    }

    #[tool(description = d::GET_CONTEXT, input_schema = input_schema::<ContextArgs>(),
           output_schema = detail_output_schema::<WorkspaceContext>(),
           annotations(title = "Get workspace context", read_only_hint = true, open_world_hint = false))]
    async fn get_context(
        &self,
        ctx: RequestContext<RoleServer>,
        Args(a): Args<ContextArgs>,
    ) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let answer = a.and_then(|_| {
            let dir = self.workspace_of(&ctx).ok_or_else(|| {
                ToolError::new(
                    crate::tool_error::ErrorCode::NoWorkspaceContext,
                    false,
                    "This client is not running inside a VK attempt workspace. Use list_projects → list_tasks → list_task_attempts instead.",
                )
            })?;
            self.query.context_for(&dir)
        });
        shaped(answer, &CONTEXT_RULES, level)
    }
}

/// The detail level a call asked for (0 when absent or when the arguments did not parse).
pub(crate) fn level_of<T>(
    args: &Result<T, ToolError>,
    field: impl Fn(&T) -> Option<Detail>,
) -> Detail {
    args.as_ref().ok().and_then(field).unwrap_or_default()
}

/// Remove `fields` from every object of the list `list` (a tool's `include_*: false`).
pub(crate) fn drop_in_items(
    m: &mut serde_json::Map<String, serde_json::Value>,
    list: &str,
    fields: &[&str],
) {
    if let Some(serde_json::Value::Array(items)) = m.get_mut(list) {
        for item in items
            .iter_mut()
            .filter_map(serde_json::Value::as_object_mut)
        {
            for f in fields {
                item.remove(*f);
            }
        }
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
