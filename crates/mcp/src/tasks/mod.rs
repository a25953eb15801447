//! Attempts as MCP tasks (the tasks extension `io.modelcontextprotocol/tasks`, SEP-2663;
//! design-notes §24). A client that declares the extension and calls `start_task_attempt`, or
//! `follow_up` with `action: send`, gets a task handle (`resultType: "task"`) instead of the
//! tool's answer once VK has accepted the call; the task follows that run of the agent.
//!
//! - The handle (task id → attempt, and the process for a follow-up) is flushed to the store
//!   (`store::task_handles`) before the id is returned, so a task survives a restart; the
//!   tool's own answer rides along in the handle's `_meta` (`vk-observer/answer`).
//! - `tasks/get` computes the state from the cache on every call (`state`).
//! - `tasks/update` answers the run's approvals (`respond_approval`), `tasks/cancel` stops the
//!   run (`stop_attempt`); each is checked against the caller's grant as the tool it stands for
//!   is (`get_attempt_status` for `tasks/get`), and audited like it.
//! - Status pushes: the resource `vk-observer://tasks/{taskId}` (its read is the task as
//!   `tasks/get` answers it), woken by the attempt's notify-hub channel; rmcp 3.11 cannot put
//!   `notifications/tasks` on a `subscriptions/listen` stream (its filter has no task ids).
//!
//! A client that does not declare the extension gets exactly the tool's answer, as before.

pub(crate) mod state;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CreateTaskResult, GetTaskResult,
    MetaObject,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::server::VkTools;
use super::tools::attempts::{FOLLOW_UP, START_TASK_ATTEMPT, STOP_ATTEMPT};
use vk_observer_proxy::approvals::Decision;
use vk_observer_proxy::stop::StopTarget;
use vk_observer_query::task_handles::TaskHandle;
use vk_observer_tool_error::{ErrorCode, ToolError};

/// The `_meta` key under which a task handle carries the tool's own answer.
pub(crate) const ANSWER_META: &str = "vk-observer/answer";

/// The tool `tasks/get` is checked as (scope `read`, the caller's read limits).
const GET_AS: &str = "get_attempt_status";
/// The tool `tasks/update` is checked as (scope `approve`).
const UPDATE_AS: &str = "respond_approval";

/// Whether this call is run as a task: the client declared the extension (per request, or at
/// `initialize` for a session) and the call starts a run of the agent.
pub(crate) fn wanted(request: &CallToolRequestParams, ctx: &RequestContext<RoleServer>) -> bool {
    let declared = ctx
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks());
    declared && starts_a_run(request)
}

fn starts_a_run(request: &CallToolRequestParams) -> bool {
    match request.name.as_ref() {
        START_TASK_ATTEMPT => true,
        FOLLOW_UP => {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get("action"))
                .and_then(Value::as_str)
                == Some("send")
        }
        _ => false,
    }
}

impl VkTools {
    /// The task a successful run-starting call becomes; a refusal stays the tool's error.
    pub(crate) async fn into_task(
        &self,
        tool: &str,
        answer: CallToolResult,
    ) -> Result<CallToolResponse, ErrorData> {
        let ids = answer
            .structured_content
            .as_ref()
            .filter(|_| answer.is_error != Some(true))
            .and_then(|s| run_ids(tool, s));
        let Some((attempt_id, execution_process_id)) = ids else {
            return Ok(CallToolResponse::Complete(answer));
        };
        let handle = TaskHandle {
            tool: tool.to_string(),
            attempt_id,
            execution_process_id,
            created_ms: chrono::Utc::now().timestamp_millis(),
            cancel_requested_ms: None,
        };
        let proxy = self.proxy().map_err(|e| refusal(&e))?;
        let recorded = if answers_an_earlier_run(answer.structured_content.as_ref()) {
            proxy.task_of_run(&handle).await
        } else {
            proxy.record_task(&handle).await
        };
        let task_id = recorded.map_err(|e| refusal(&e))?;
        // A run that already had a task answers as that task's handle (its `createdAt`).
        let kept = self.query.task_handle(task_id).map_err(|e| refusal(&e))?;
        let handle = kept.unwrap_or(handle);
        let now = state::detailed(&self.query, task_id, &handle).map_err(|e| refusal(&e))?;
        let mut meta = MetaObject::new();
        if let Some(mut s) = answer.structured_content {
            self.name_first_process(tool, &handle, &mut s)
                .map_err(|e| refusal(&e))?;
            meta.insert(ANSWER_META.into(), s);
        }
        Ok(CallToolResponse::Task(
            CreateTaskResult::new(now.task).with_meta(meta),
        ))
    }

    /// A new attempt's task names the first process VK started for it (setup script, else the
    /// agent) as `execution_process_id` in the answer it carries, as a follow-up's names its
    /// process; null while the cache does not show it (`pending_ingest`).
    fn name_first_process(
        &self,
        tool: &str,
        handle: &TaskHandle,
        answer: &mut Value,
    ) -> Result<(), ToolError> {
        let Some(fields) = answer
            .as_object_mut()
            .filter(|_| tool == START_TASK_ATTEMPT)
        else {
            return Ok(());
        };
        let first = self.query.first_process(handle.attempt_id)?;
        fields.insert("execution_process_id".into(), json!(first));
        Ok(())
    }

    /// `tasks/get`: the task as the cache shows it.
    pub(crate) async fn task_get(
        &self,
        task_id: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (id, handle) = self.task_of(task_id)?;
        self.task_allowed(ctx, GET_AS, "attempt_id", &handle.attempt_id.to_string())?;
        let task = state::detailed(&self.query, id, &handle).map_err(|e| refusal(&e))?;
        Ok(GetTaskResult::new(task))
    }

    /// `tasks/update`: each `approval:<id>` answer goes to `respond_approval`; keys that name
    /// no approval, or one already answered, are ignored (as the extension asks).
    pub(crate) async fn task_update(
        &self,
        task_id: &str,
        responses: &std::collections::BTreeMap<String, Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_of(task_id)?;
        for (key, response) in responses {
            let Some(approval) = key.strip_prefix(state::APPROVAL_KEY_PREFIX) else {
                continue;
            };
            let Some(decision) = decision_of(response) else {
                continue; // `cancel`: the user dismissed the question; it stays pending
            };
            let args = self.task_allowed(ctx, UPDATE_AS, "approval_id", approval)?;
            let grant = self.grant_of(ctx);
            let audit = super::access::audit_context(&grant, Some(&args), &self.query);
            let proxy = self.proxy().map_err(|e| refusal(&e))?;
            let answered = vk_observer_proxy::audit::audited(
                audit,
                proxy.respond_approval(approval, decision, None),
            )
            .await;
            match answered {
                Ok(_) => {}
                Err(e) if ignorable(&e) => {}
                Err(e) => return Err(refusal(&e)),
            }
        }
        Ok(())
    }

    /// `tasks/cancel`: ask VK to stop the run as `stop_attempt` does (the follow-up's process,
    /// or the attempt) and answer at once: VK's stop returns only once the run ended (about
    /// 7 s for an agent that ignores the interrupt), so it goes on in the background and the
    /// task turns `cancelled` when the cache shows the run stopped (a later `tasks/get`). The
    /// cancel is noted first (flushed), so the run's end reads `cancelled`; a stop VK refuses
    /// takes the note back. A task that already ended is refused (`-32602`), as the extension asks.
    pub(crate) async fn task_cancel(
        &self,
        task_id: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (id, handle) = self.task_of(task_id)?;
        let (field, target) = match handle.execution_process_id {
            Some(pid) => ("execution_process_id", StopTarget::Process(pid)),
            None => ("attempt_id", StopTarget::Attempt(handle.attempt_id)),
        };
        let target_id = match target {
            StopTarget::Process(p) | StopTarget::Attempt(p) => p.to_string(),
        };
        let args = self.task_allowed(ctx, STOP_ATTEMPT, field, &target_id)?;
        let now = state::detailed(&self.query, id, &handle).map_err(|e| refusal(&e))?;
        if now.task.status.is_terminal() {
            return Err(already_ended(task_id, now.task.status));
        }
        let proxy = self.proxy().map_err(|e| refusal(&e))?.clone();
        proxy
            .note_task_cancel(id, handle)
            .await
            .map_err(|e| refusal(&e))?;
        let grant = self.grant_of(ctx);
        let audit = super::access::audit_context(&grant, Some(&args), &self.query);
        tokio::spawn(async move {
            let stopped =
                vk_observer_proxy::audit::audited(audit, proxy.stop(target, false, None)).await;
            if let Err(e) = stopped {
                tracing::warn!(task_id = %id, code = ?e.code, hint = %e.hint, "tasks/cancel: VK did not stop the run");
                if let Err(e) = proxy.forget_task_cancel(id).await {
                    tracing::warn!(task_id = %id, hint = %e.hint, "tasks/cancel: cannot take the cancel back");
                }
            }
        });
        Ok(())
    }

    /// The handle of `task_id`, or an invalid-params error naming it.
    fn task_of(&self, task_id: &str) -> Result<(Uuid, TaskHandle), ErrorData> {
        let found = Uuid::parse_str(task_id)
            .ok()
            .map(|id| Ok::<_, ToolError>((id, self.query.task_handle(id)?)))
            .transpose()
            .map_err(|e| refusal(&e))?;
        match found {
            Some((id, Some(handle))) => Ok((id, handle)),
            _ => {
                let e = ToolError::new(
                    ErrorCode::NotFound,
                    false,
                    "No task has this id: use the taskId a task-augmented start_task_attempt or follow_up returned.",
                )
                .with_details(json!({ "task_id": task_id }));
                Err(ErrorData::invalid_params(
                    e.hint.clone(),
                    Some(envelope(&e)),
                ))
            }
        }
    }

    /// The caller may do to the task what `tool` with `field: id` would do; the arguments.
    fn task_allowed(
        &self,
        ctx: &RequestContext<RoleServer>,
        tool: &str,
        field: &str,
        id: &str,
    ) -> Result<Map<String, Value>, ErrorData> {
        let mut args = Map::new();
        args.insert(field.into(), id.into());
        self.grant_of(ctx)
            .check(tool, Some(&args), &self.query)
            .map_err(|e| ErrorData::invalid_request(e.hint.clone(), Some(envelope(&e))))?;
        Ok(args)
    }
}

/// The answer names a run an earlier call started: a `request_id` replay (`replayed`), or a
/// running attempt reused (`reused`); that run may already have a task.
fn answers_an_earlier_run(answer: Option<&Value>) -> bool {
    let flag = |k: &str| answer.and_then(|a| a.get(k)).and_then(Value::as_bool) == Some(true);
    flag("replayed") || flag("reused")
}

/// The attempt and (for a follow-up) the process a tool's answer names.
fn run_ids(tool: &str, answer: &Value) -> Option<(Uuid, Option<Uuid>)> {
    let id = |k: &str| {
        answer
            .get(k)
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
    };
    let attempt = id("attempt_id")?;
    match tool {
        FOLLOW_UP => Some((attempt, Some(id("execution_process_id")?))),
        _ => Some((attempt, None)),
    }
}

/// An elicitation result as `respond_approval`'s decision: `accept` with `decision`, or
/// `decline` (deny). None for `cancel` or a shape that is neither.
fn decision_of(response: &Value) -> Option<Decision> {
    let reason = || {
        response
            .pointer("/content/reason")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string)
    };
    match response.get("action").and_then(Value::as_str)? {
        "accept" => match response
            .pointer("/content/decision")
            .and_then(Value::as_str)?
        {
            "approve" => Some(Decision::Approve),
            "deny" => Some(Decision::Deny(reason())),
            _ => None,
        },
        "decline" => Some(Decision::Deny(reason())),
        _ => None,
    }
}

/// Answers the extension says to ignore: the approval is no longer outstanding.
fn ignorable(e: &ToolError) -> bool {
    matches!(
        e.code,
        ErrorCode::ApprovalAlreadyAnswered
            | ErrorCode::ApprovalTimedOut
            | ErrorCode::UnknownApproval
    )
}

/// `tasks/cancel` of a task that already ended: invalid params, the envelope naming its status.
fn already_ended(task_id: &str, status: rmcp::model::TaskStatus) -> ErrorData {
    let e = ToolError::new(
        ErrorCode::Conflict,
        false,
        "The task already ended: there is no run to cancel (tasks/get shows how it ended).",
    )
    .with_details(json!({ "task_id": task_id, "status": status }));
    ErrorData::invalid_params(e.hint.clone(), Some(envelope(&e)))
}

fn envelope(e: &ToolError) -> Value {
    serde_json::to_value(e).unwrap_or_default()
}

/// A tool error as the JSON-RPC error of a tasks/* request, the envelope in `data`.
fn refusal(e: &ToolError) -> ErrorData {
    super::transport::resources::to_protocol_error(e)
}
