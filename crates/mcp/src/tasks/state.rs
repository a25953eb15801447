//! A task's state, computed from the cache on every read (nothing but the handle is stored):
//! the attempt's status as `get_attempt_status` answers it (one snapshot), mapped onto the
//! tasks extension's words.
//!
//! - the run's process still running, no approval pending → `working`;
//! - an approval of the run pending → `input_required`, one form elicitation per approval
//!   (key `approval:<approval_id>`; message: tool, command or path summary, expiry; form
//!   `{decision: approve|deny, reason?}`);
//! - the run ended: outcome `success` → `completed`, `failure` → `failed`, stopped (or a
//!   `tasks/cancel` was asked) → `cancelled`; the attempt gone from VK → `failed`
//!   (`data.reason: attempt_gone`). The status answer (with `result`) is the task's
//!   `result` (as a tool result whose structured content it is) or its `error.data`.
//!
//! Which run: a new attempt's task follows the attempt until its agent run ends (a setup script
//! that completes is not the end); a `follow_up` task follows its own process: while it is the
//! attempt's latest the attempt's status says how it stands, once a later process replaced it,
//! the process's own cached status does (a cleanup script still running after it keeps the task
//! `working`, as it does a new attempt's).

use chrono::{TimeZone, Utc};
use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, InputRequest, InputRequests, JsonObject, Task,
    TaskPayload,
};
use serde_json::{Value, json};
use uuid::Uuid;

use vk_observer_query::Query;
use vk_observer_query::Since;
use vk_observer_query::approvals::PendingApproval;
use vk_observer_query::detail::Detail;
use vk_observer_query::status::{AttemptState, AttemptStatus, Outcome, Shape, StatusView};
use vk_observer_query::task_handles::TaskHandle;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{ProcessStatus, RunReason};

/// What a client that polls is told to wait between `tasks/get` calls.
pub(crate) const POLL_INTERVAL_MS: u64 = 2000;

/// The input-request key of an approval (`tasks/update` answers under it).
pub(crate) const APPROVAL_KEY_PREFIX: &str = "approval:";

/// JSON-RPC code of a failed task's `error` (the run failed; `data` is the status answer).
const RUN_FAILED_CODE: i64 = -32603;

/// The task `task_id` as the cache shows it now.
pub(crate) fn detailed(
    query: &Query,
    task_id: Uuid,
    handle: &TaskHandle,
) -> Result<DetailedTask, ToolError> {
    let page = query.attempt_statuses(&[handle.attempt_id], Since::None)?;
    let created = rfc3339(handle.created_ms);
    let Some(status) = page.attempts.first() else {
        return not_in_cache(query, task_id, handle, &created);
    };
    let view = StatusView {
        detail: Detail::Compact,
        include_result: true,
    };
    let (answer, _) = page.render(Shape::Single, view)?;
    let stage = stage_of(query, handle, status)?;
    let payload = payload_of(stage, status, answer, handle)?;
    let activity = status
        .last_activity_at
        .as_deref()
        .or(status.updated_at.as_deref());
    let cancel_asked = handle.cancel_requested_ms.map(rfc3339);
    let updated = latest(&created, [activity, cancel_asked.as_deref()]);
    let message = status_message(task_id, &payload, status, handle);
    let task = Task::new(task_id.to_string(), Default::default(), created, updated)
        .with_status_message(message)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    Ok(DetailedTask::new(task, payload))
}

/// `lastUpdatedAt`: the latest of the task's creation and the given instants (the run's last
/// activity, a `tasks/cancel`), never before `createdAt` (a follow-up's attempt, or a run VK
/// began before it answered, was last active before the task existed). RFC 3339 as given.
fn latest(created: &str, others: [Option<&str>; 2]) -> String {
    let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok();
    let mut best = (at(created), created);
    for other in others.into_iter().flatten() {
        if let (Some(t), Some(b)) = (at(other), best.0)
            && t > b
        {
            best = (Some(t), other);
        }
    }
    best.1.to_string()
}

/// `statusMessage`: while the run goes, what the client can do with the tasks methods
/// (`tasks/update` answers an approval, `tasks/cancel` stops the run; a cancel asked and not
/// yet confirmed by VK says so); once it ended, the status's own summary (`result.summary`).
fn status_message(
    task_id: Uuid,
    payload: &TaskPayload,
    status: &AttemptStatus,
    handle: &TaskHandle,
) -> String {
    let running = matches!(
        payload,
        TaskPayload::Working | TaskPayload::InputRequired { .. }
    );
    if let (true, Some(ms)) = (running, handle.cancel_requested_ms) {
        return format!(
            "tasks/cancel asked VK to stop the run at {}; VK is stopping it: the task turns cancelled once VK confirms.",
            rfc3339(ms)
        );
    }
    match payload {
        TaskPayload::InputRequired { input_requests } => {
            let n = input_requests.len();
            let calls = if n == 1 { "call" } else { "calls" };
            format!(
                "The agent waits for a decision on {n} tool {calls} (inputRequests): answer with tasks/update (decision approve or deny); tasks/cancel stops the run."
            )
        }
        TaskPayload::Working => format!(
            "{}; follow it with tasks/get (or subscribe to vk-observer://tasks/{task_id}); tasks/cancel stops it.",
            what_runs(status)
        ),
        _ => status.result.summary.clone(),
    }
}

/// The part of the run going on now, as a sentence's start.
fn what_runs(status: &AttemptStatus) -> &'static str {
    let reason = status
        .latest_process
        .as_ref()
        .filter(|_| status.state == AttemptState::Running)
        .map(|p| RunReason::parse(&p.run_reason));
    match reason {
        Some(RunReason::SetupScript) => "The setup script runs",
        Some(RunReason::CodingAgent) => "The agent runs",
        Some(RunReason::CleanupScript) => "The cleanup script runs after the agent",
        Some(_) => "The run goes on",
        None => "VK prepares the run (the agent starts next)",
    }
}

/// The task of an attempt the cache does not hold: not yet (started, not ingested: `working`),
/// or no more (its token tombstone says the cache held it: VK deleted it, or its task, or
/// retention dropped it long after it ended) — then the run's end cannot be told: `failed`.
fn not_in_cache(
    query: &Query,
    task_id: Uuid,
    handle: &TaskHandle,
    created: &str,
) -> Result<DetailedTask, ToolError> {
    let gone = query.read().attempt_token(handle.attempt_id)? > 0;
    if !gone {
        let task = Task::new(task_id.to_string(), Default::default(), created, created)
            .with_status_message(
                "VK started the run; the cache does not show it yet (tasks/get will); tasks/cancel stops it.",
            )
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        return Ok(DetailedTask::new(task, TaskPayload::Working));
    }
    let message = format!(
        "VK no longer has attempt {}: it (or its task) was deleted, or the cache dropped it after it ended; the run's outcome cannot be read.",
        handle.attempt_id
    );
    let task = Task::new(task_id.to_string(), Default::default(), created, created)
        .with_status_message(message.clone())
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    let error = object(json!({
        "code": RUN_FAILED_CODE,
        "message": message,
        "data": {"attempt_id": handle.attempt_id, "reason": "attempt_gone"},
    }))?;
    Ok(DetailedTask::new(task, TaskPayload::Failed { error }))
}

/// Where the followed run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Running,
    Succeeded,
    Failed,
    Stopped,
}

fn stage_of(
    query: &Query,
    handle: &TaskHandle,
    status: &AttemptStatus,
) -> Result<Stage, ToolError> {
    let latest = status.latest_execution_process_id;
    match handle.execution_process_id {
        Some(pid) if latest != Some(pid) => {
            // Not (or no longer) the attempt's latest run: its own row says how it stands.
            let own = query.process_status(pid)?;
            // VK's cleanup script after the agent is part of the run: it ends when that does.
            let cleaning = status.state == AttemptState::Running
                && status
                    .latest_process
                    .as_ref()
                    .is_some_and(|p| RunReason::parse(&p.run_reason) == RunReason::CleanupScript);
            Ok(match own.as_deref().map(ProcessStatus::parse) {
                None | Some(ProcessStatus::Running) | Some(ProcessStatus::Other(_)) => {
                    Stage::Running
                }
                Some(_) if cleaning => Stage::Running,
                Some(ProcessStatus::Completed) => Stage::Succeeded,
                Some(ProcessStatus::Failed) => Stage::Failed,
                Some(ProcessStatus::Killed) => Stage::Stopped,
            })
        }
        _ => Ok(stage_of_attempt(status)),
    }
}

fn stage_of_attempt(status: &AttemptStatus) -> Stage {
    let prepared_only = status
        .latest_process
        .as_ref()
        .is_some_and(|p| RunReason::parse(&p.run_reason) == RunReason::SetupScript);
    match (status.state, status.result.outcome) {
        (AttemptState::Idle | AttemptState::Running, _) => Stage::Running,
        // A setup script that completed: VK starts the agent next.
        (AttemptState::Completed, _) if prepared_only => Stage::Running,
        (_, Outcome::Cancelled) => Stage::Stopped,
        (AttemptState::Completed, _) => Stage::Succeeded,
        (AttemptState::Failed, _) => Stage::Failed,
    }
}

fn payload_of(
    stage: Stage,
    status: &AttemptStatus,
    answer: Value,
    handle: &TaskHandle,
) -> Result<TaskPayload, ToolError> {
    let cancel_asked = handle.cancel_requested_ms.is_some();
    Ok(match stage {
        Stage::Running => {
            let asks = input_requests(status, handle.execution_process_id)?;
            if asks.is_empty() {
                TaskPayload::Working
            } else {
                TaskPayload::InputRequired {
                    input_requests: asks,
                }
            }
        }
        Stage::Stopped => TaskPayload::Cancelled,
        Stage::Failed if cancel_asked => TaskPayload::Cancelled,
        Stage::Succeeded => TaskPayload::Completed {
            result: tool_result(answer)?,
        },
        Stage::Failed => TaskPayload::Failed {
            error: object(json!({
                "code": RUN_FAILED_CODE,
                "message": status.result.summary,
                "data": answer,
            }))?,
        },
    })
}

/// The status answer as the `tools/call` result the task stands for.
fn tool_result(answer: Value) -> Result<JsonObject, ToolError> {
    let text = answer.to_string();
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(answer);
    object(serde_json::to_value(r).map_err(ToolError::internal)?)
}

fn object(v: Value) -> Result<JsonObject, ToolError> {
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ToolError::internal(format!("not an object: {other}"))),
    }
}

/// One form elicitation per pending approval of the run (of any process of the attempt for a
/// new attempt's task).
fn input_requests(
    status: &AttemptStatus,
    process: Option<Uuid>,
) -> Result<InputRequests, ToolError> {
    status
        .pending_approvals
        .iter()
        .filter(|a| process.is_none_or(|p| a.execution_process_id == p))
        .map(|a| {
            Ok((
                format!("{APPROVAL_KEY_PREFIX}{}", a.approval_id),
                elicitation(a)?,
            ))
        })
        .collect()
}

fn elicitation(a: &PendingApproval) -> Result<InputRequest, ToolError> {
    let expiry = a
        .timeout_at
        .as_deref()
        .map(|t| format!(" (expires {t})"))
        .unwrap_or_default();
    let message = format!(
        "The agent asks to run {}: {}{expiry}. Approve or deny.",
        a.tool_name, a.summary
    );
    let request = json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "decision": {
                        "type": "string",
                        "title": "Decision",
                        "enum": ["approve", "deny"],
                        "description": "approve lets the tool call run; deny refuses it"
                    },
                    "reason": {
                        "type": "string",
                        "title": "Reason",
                        "description": "deny only: told to the agent"
                    }
                },
                "required": ["decision"]
            },
            "_meta": {
                "vk-observer/approval": {
                    "approval_id": a.approval_id,
                    "execution_process_id": a.execution_process_id,
                    "tool_name": a.tool_name,
                    "summary": a.summary,
                    "requested_at": a.requested_at,
                    "timeout_at": a.timeout_at,
                }
            }
        }
    });
    serde_json::from_value(request).map_err(ToolError::internal)
}

fn rfc3339(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or_else(Utc::now)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
