//! Mutating and artifact tools: parse → proxy (VK REST, idempotency, read-your-writes) →
//! respond. Without an upstream client (schema tests) they answer `not_configured`.

use rmcp::Json;
use rmcp::handler::server::tool::ToolRouter;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

use super::VkTools;
use super::args::{Args, input_schema};
use super::control_requests::*;
use super::descriptions as d;
use super::read_tools::level_of;
use super::respond::respond;
use super::shaped::{detail_output_schema, shaped};
use crate::proxy::Proxy;
use crate::proxy::artifacts::{FILE_DEFAULT_BYTES, FileSlice, PATCH_DEFAULT_BYTES, PatchText};
use crate::proxy::attempts::{
    AttemptStarted, FollowUp, FollowUpAction, FollowUpDone, StartAttempt,
};
use crate::proxy::stop::{AttemptStopped, StopTarget};
use crate::proxy::tasks::{NewTask, TaskChange, TaskDeleted, TaskEdit};
use crate::query::detail::Rules;
use crate::query::status::STATUS_RULES;
use crate::query::tasks::TASK_DETAIL_TASK_RULES;
use crate::tool_error::ToolError;

impl VkTools {
    pub(crate) fn proxy(&self) -> Result<&Proxy, ToolError> {
        self.proxy.as_ref().ok_or_else(|| {
            ToolError::new(
                crate::tool_error::ErrorCode::NotConfigured,
                false,
                "This server has no VK connection for mutations.",
            )
        })
    }
}

/// What each detail level shows of create_task / update_task: the task as get_task shows it.
const TASK_CHANGE_RULES: Rules = Rules {
    finish: None,
    standard: &[],
    verbatim: &[],
    nested: &[("task", &TASK_DETAIL_TASK_RULES)],
};

/// start_task_attempt: the new attempt's status as get_attempt_status shows it.
const ATTEMPT_STARTED_RULES: Rules = Rules {
    finish: None,
    standard: &[],
    verbatim: &[],
    nested: &[("status", &STATUS_RULES)],
};

/// stop_attempt: the status after the stop as get_attempt_status shows it; VK's answer time
/// from 1.
const ATTEMPT_STOPPED_RULES: Rules = Rules {
    finish: None,
    standard: &["vk_ms"],
    verbatim: &[],
    nested: &[("status", &STATUS_RULES)],
};

#[tool_router(router = control_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = d::CREATE_TASK, input_schema = input_schema::<CreateTaskArgs>(),
           output_schema = detail_output_schema::<TaskChange>(),
           annotations(title = "Create task", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    async fn create_task(&self, Args(a): Args<CreateTaskArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let r = async {
            let a = a?;
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

    #[tool(description = d::UPDATE_TASK, input_schema = input_schema::<UpdateTaskArgs>(),
           output_schema = detail_output_schema::<TaskChange>(),
           annotations(title = "Update task", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false))]
    async fn update_task(&self, Args(a): Args<UpdateTaskArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let r = async {
            let a = a?;
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

    #[tool(description = d::DELETE_TASK, input_schema = input_schema::<DeleteTaskArgs>(),
           annotations(title = "Delete task", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false))]
    async fn delete_task(
        &self,
        Args(a): Args<DeleteTaskArgs>,
    ) -> Result<Json<TaskDeleted>, CallToolResult> {
        let r = async {
            let a = a?;
            self.proxy()?
                .delete_task(a.task_id, a.request_id.as_deref())
                .await
        };
        respond(r.await)
    }

    #[tool(description = d::START_TASK_ATTEMPT, input_schema = input_schema::<StartAttemptArgs>(),
           output_schema = detail_output_schema::<AttemptStarted>(),
           annotations(title = "Start task attempt", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    async fn start_task_attempt(&self, Args(a): Args<StartAttemptArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let r = async {
            let a = a?;
            let s = StartAttempt {
                task_id: a.task_id,
                executor: a.executor,
                variant: a.variant.filter(|v| !v.trim().is_empty()),
                repos: a
                    .repos
                    .into_iter()
                    .map(|r| (r.repo_id, r.target_branch))
                    .collect(),
                reuse_running_attempt: a.reuse_running_attempt.unwrap_or(false),
            };
            self.proxy()?
                .start_attempt(s, a.request_id.as_deref())
                .await
        };
        shaped(r.await, &ATTEMPT_STARTED_RULES, level)
    }

    #[tool(description = d::FOLLOW_UP, input_schema = input_schema::<FollowUpArgs>(),
           annotations(title = "Follow up", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    async fn follow_up(
        &self,
        Args(a): Args<FollowUpArgs>,
    ) -> Result<Json<FollowUpDone>, CallToolResult> {
        let r = async {
            let a = a.map_err(stop_verb_hint)?;
            let f = FollowUp {
                action: match a.action {
                    FollowUpActionArg::Send => FollowUpAction::Send,
                    FollowUpActionArg::Queue => FollowUpAction::Queue,
                    FollowUpActionArg::Cancel => FollowUpAction::Cancel,
                },
                prompt: a.prompt,
                variant: a.variant.filter(|v| !v.trim().is_empty()),
                attempt_id: a.attempt_id,
                session_id: a.session_id,
            };
            self.proxy()?.follow_up(f, a.request_id.as_deref()).await
        };
        respond(r.await)
    }

    #[tool(description = d::STOP_ATTEMPT, input_schema = input_schema::<StopArgs>(),
           output_schema = detail_output_schema::<AttemptStopped>(),
           annotations(title = "Stop attempt", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false))]
    async fn stop_attempt(&self, Args(a): Args<StopArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let r = async {
            let a = a?;
            let target = match (a.attempt_id, a.execution_process_id) {
                (Some(id), None) => StopTarget::Attempt(id),
                (None, Some(id)) => StopTarget::Process(id),
                _ => {
                    return Err(ToolError::ambiguous_target(&[
                        "attempt_id",
                        "execution_process_id",
                    ]));
                }
            };
            self.proxy()?
                .stop(target, a.force.unwrap_or(false), a.request_id.as_deref())
                .await
        };
        shaped(r.await, &ATTEMPT_STOPPED_RULES, level)
    }

    #[tool(description = d::GET_ATTEMPT_FILE, input_schema = input_schema::<FileArgs>(),
           annotations(title = "Get attempt file", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_file(
        &self,
        Args(a): Args<FileArgs>,
    ) -> Result<Json<FileSlice>, CallToolResult> {
        let r = async {
            let a = a?;
            let max = a.max_bytes.unwrap_or(FILE_DEFAULT_BYTES);
            match crate::mcp::file_lines_args::line_range(&a)? {
                Some(range) => {
                    self.proxy()?
                        .attempt_file_lines(a.attempt_id, a.path, range, max)
                        .await
                }
                None => {
                    self.proxy()?
                        .attempt_file(a.attempt_id, a.path, a.start.unwrap_or(0), max)
                        .await
                }
            }
        };
        respond(r.await)
    }

    #[tool(description = d::GET_ATTEMPT_PATCH, input_schema = input_schema::<PatchArgs>(),
           annotations(title = "Get attempt patch", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_patch(
        &self,
        Args(a): Args<PatchArgs>,
    ) -> Result<Json<PatchText>, CallToolResult> {
        let r = async {
            let a = a?;
            let max = a.max_bytes.unwrap_or(PATCH_DEFAULT_BYTES);
            self.proxy()?
                .attempt_patch(a.attempt_id, a.paths, a.force.unwrap_or(false), max)
                .await
        };
        respond(r.await)
    }
}

/// `follow_up` with `action: stop|kill|interrupt` is a common confusion: point at stop_attempt.
fn stop_verb_hint(mut e: ToolError) -> ToolError {
    let text = e.details.to_string();
    if ["`stop`", "`kill`", "`interrupt`", "`abort`"]
        .iter()
        .any(|v| text.contains(v))
    {
        e.hint = "follow_up only sends, queues or cancels a queued message. To stop a running agent call stop_attempt with attempt_id (or execution_process_id for one process).".into();
    }
    e
}

pub(crate) fn router() -> ToolRouter<VkTools> {
    VkTools::control_router()
}
