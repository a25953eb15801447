//! Tool approvals as VK's fork does them (`crates/tasks/src/approvals`, the Claude executor's
//! permission bridge, `routes/approvals.rs`; timings and races in the wire README "Approvals").
//!
//! A scripted agent asks before one Bash call: the `tool_use` entry is appended `created`, then
//! VK stores the approval (uuid, `timeout_at`), sets the task `inreview` and replaces the entry
//! in place with `{"status":"pending_approval",approval_id,requested_at,timeout_at}`. The agent
//! is blocked until `POST /api/approvals/{id}/respond` or the timeout:
//! - approved: entry `created`, task `inprogress`, the raw `approval_response` line, then the
//!   tool runs (entry `success` with its result) and the agent goes on;
//! - denied: entry `{"status":"denied","reason":…}`, task `inprogress`, the raw line and a
//!   `user_feedback {denied_tool}` entry whose content is the reason; the agent goes on
//!   (VK answers the CLI `interrupt: false`);
//! - timed out: entry `timed_out`, task `inprogress`, the raw line and an `error_message`
//!   "Approval timed out for tool Bash"; the agent goes on.
//!
//! The respond route answers the bare `ApprovalStatus` (no envelope); an unknown or non-uuid
//! id or another execution process → 500 envelope "Failed to respond to approval"; a second
//! respond → 200 with the recorded status and nothing changes.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::core::Inner;
use super::http::{AppState, fail};
use super::script::bash;
use super::types::{ApprovalScript, Channel, ProcessStatus};

/// VK's `ApprovalStatus`, tagged by `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SimApprovalStatus {
    Pending,
    Approved,
    Denied {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    TimedOut,
}

/// VK's `ApprovalResponse` body.
#[derive(Debug, Deserialize)]
pub(crate) struct RespondBody {
    pub execution_process_id: Uuid,
    pub status: SimApprovalStatus,
}

/// What answering an approval did.
pub(crate) enum Answer {
    /// No such approval, or it belongs to another execution process.
    Unknown,
    /// Already answered (or the answer was `pending`): its recorded status, nothing changed.
    Recorded(SimApprovalStatus),
    /// Answered now with this status: the entry is patched and the agent unblocked.
    Answered(SimApprovalStatus),
}

/// One approval row (VK's `approvals` table plus the in-memory waiter).
pub(crate) struct SimApproval {
    pub execution_process_id: Uuid,
    pub entry_index: u64,
    /// The tool_use entry as it was before the approval (status `created`).
    pub entry: Value,
    pub status: SimApprovalStatus,
    /// When it was asked and when VK gives up waiting (RFC 3339, nanoseconds).
    pub created_at: String,
    pub timeout_at: String,
    waiter: Option<oneshot::Sender<SimApprovalStatus>>,
}

/// What ended the wait of a scripted tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Answered(SimApprovalStatus),
    /// The process was stopped while it waited.
    Stopped,
}

fn ts(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// The entry with its `entry_type.status` replaced.
fn with_status(entry: &Value, status: Value) -> Value {
    let mut e = entry.clone();
    if let Some(s) = e.pointer_mut("/content/entry_type/status") {
        *s = status;
    }
    e
}

fn tool_status_of(status: &SimApprovalStatus) -> Value {
    match status {
        SimApprovalStatus::Approved => json!({"status": "created"}),
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}

fn set_task_status(inner: &Inner, pid: Uuid, from: &str, to: &str) {
    let task = {
        let w = inner.world();
        let session = w.processes.get(&pid).map(|p| p.session_id);
        session
            .and_then(|s| w.task_of_session(s))
            .filter(|t| w.tasks.get(t).is_some_and(|t| t.status == from))
    };
    if let Some(task) = task {
        inner.update_task(task, None, None, Some(to));
    }
}

fn running(inner: &Inner, pid: Uuid) -> bool {
    inner
        .world()
        .processes
        .get(&pid)
        .is_some_and(|p| p.status == ProcessStatus::Running)
}

/// Asks for approval of the `created` tool_use entry at `idx` and waits for the decision (or
/// `timeout`, or the process being stopped). Marks the entry and the task as VK does.
pub(crate) async fn ask(
    inner: &Inner,
    pid: Uuid,
    idx: u64,
    entry: Value,
    timeout: Duration,
) -> Decision {
    let id = Uuid::new_v4();
    let now = Utc::now();
    let timeout_at =
        now + chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::hours(1));
    let (tx, mut rx) = oneshot::channel();
    inner.world().approvals.insert(
        id,
        SimApproval {
            execution_process_id: pid,
            entry_index: idx,
            entry: entry.clone(),
            status: SimApprovalStatus::Pending,
            created_at: ts(now),
            timeout_at: ts(timeout_at),
            waiter: Some(tx),
        },
    );
    set_task_status(inner, pid, "inprogress", "inreview");
    let pending = json!({"status": "pending_approval", "approval_id": id.to_string(),
                         "requested_at": ts(now), "timeout_at": ts(timeout_at)});
    inner.replace_log(pid, Channel::Normalized, idx, with_status(&entry, pending));
    inner.approvals_changed();
    let deadline = tokio::time::Instant::now() + timeout;
    let tick = inner.cfg.step_delay.max(Duration::from_millis(5));
    loop {
        tokio::select! {
            answer = &mut rx => {
                let status = answer.unwrap_or(SimApprovalStatus::TimedOut);
                return Decision::Answered(status);
            }
            _ = tokio::time::sleep(tick) => {
                if !running(inner, pid) {
                    return Decision::Stopped;
                }
                if tokio::time::Instant::now() >= deadline {
                    time_out(inner, id);
                    return Decision::Answered(SimApprovalStatus::TimedOut);
                }
            }
        }
    }
}

/// VK's timeout watcher: the row becomes `timed_out` and the entry too (if still pending).
fn time_out(inner: &Inner, id: Uuid) {
    let replaced = {
        let mut w = inner.world();
        let Some(a) = w.approvals.get_mut(&id) else {
            return;
        };
        if a.status != SimApprovalStatus::Pending {
            return;
        }
        a.status = SimApprovalStatus::TimedOut;
        a.waiter = None;
        (
            a.execution_process_id,
            a.entry_index,
            with_status(&a.entry, json!({"status": "timed_out"})),
        )
    };
    let (pid, idx, entry) = replaced;
    inner.replace_log(pid, Channel::Normalized, idx, entry);
    set_task_status(inner, pid, "inreview", "inprogress");
    inner.approvals_changed();
}

/// What the executor does with the decision: the raw `approval_response` line, then a
/// `user_feedback` (denied) or `error_message` (timed out) entry. Approved tools run after.
pub(crate) fn record_decision(inner: &Inner, pid: Uuid, entry: &Value, status: &SimApprovalStatus) {
    let call_id = entry
        .pointer("/content/metadata/tool_call_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let tool = entry
        .pointer("/content/entry_type/tool_name")
        .and_then(Value::as_str)
        .unwrap_or("Bash");
    let line = json!({"type": "approval_response", "call_id": call_id, "tool_name": tool,
                      "approval_status": status});
    inner.append_log(
        pid,
        Channel::Raw,
        json!({"type": "STDOUT", "content": format!("{line}\n")}),
    );
    let follow = match status {
        SimApprovalStatus::Denied { reason } => {
            let text = reason
                .as_deref()
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .unwrap_or("User denied this tool use request");
            Some(
                json!({"timestamp": null, "entry_type": {"type": "user_feedback",
                        "denied_tool": tool}, "content": text}),
            )
        }
        SimApprovalStatus::TimedOut => Some(json!({"timestamp": null,
            "entry_type": {"type": "error_message", "error_type": {"type": "other"}},
            "content": format!("Approval timed out for tool {tool}")})),
        _ => None,
    };
    if let Some(content) = follow {
        inner.append_log(
            pid,
            Channel::Normalized,
            json!({"type": "NORMALIZED_ENTRY", "content": content}),
        );
    }
}

fn respond_failed() -> Response {
    fail(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Failed to respond to approval",
    )
}

/// Answers approval `id` of process `pid` with `status` (both dialects' respond routes).
pub(crate) fn answer(inner: &Inner, id: Uuid, pid: Uuid, status: SimApprovalStatus) -> Answer {
    let answered = {
        let mut w = inner.world();
        let Some(a) = w.approvals.get_mut(&id) else {
            return Answer::Unknown;
        };
        if a.execution_process_id != pid {
            return Answer::Unknown;
        }
        if a.status != SimApprovalStatus::Pending || status == SimApprovalStatus::Pending {
            // Idempotent: the recorded status, nothing changes.
            return Answer::Recorded(a.status.clone());
        }
        a.status = status.clone();
        let waiter = a.waiter.take();
        let entry = with_status(&a.entry, tool_status_of(&a.status));
        (a.execution_process_id, a.entry_index, entry, waiter)
    };
    let (pid, idx, entry, waiter) = answered;
    // VK unblocks the agent first and patches the entry after, so a fast tool's `success` can
    // land before the `created` patch (its race, in the README). The simulator patches first:
    // tests see VK's usual order, never the lost update.
    inner.replace_log(pid, Channel::Normalized, idx, entry);
    set_task_status(inner, pid, "inreview", "inprogress");
    if let Some(w) = waiter {
        let _ = w.send(status.clone());
    }
    inner.approvals_changed();
    Answer::Answered(status)
}

/// `POST /api/approvals/{id}/respond`.
pub(crate) async fn respond(
    State(inner): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<RespondBody>,
) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return respond_failed();
    };
    match answer(&inner, id, body.execution_process_id, body.status) {
        Answer::Unknown => respond_failed(),
        Answer::Recorded(status) | Answer::Answered(status) => Json(status).into_response(),
    }
}

/// Every approval of the simulator, for tests: (approval id, process, status).
pub(crate) fn list(inner: &Inner) -> Vec<(Uuid, Uuid, SimApprovalStatus)> {
    let w = inner.world();
    let mut out: Vec<_> = w
        .approvals
        .iter()
        .map(|(id, a)| (*id, a.execution_process_id, a.status.clone()))
        .collect();
    out.sort_by_key(|(id, _, _)| *id);
    out
}

/// The approval step of a script: the Bash call asks, waits, and runs if approved (its entry
/// then `success` with a result). False when the process was stopped meanwhile.
pub(crate) async fn tool_call_with_approval(inner: &Inner, pid: Uuid, a: &ApprovalScript) -> bool {
    let entry = bash(&a.command, "", false);
    let Some(idx) = inner.append_log(pid, Channel::Normalized, entry.clone()) else {
        return false;
    };
    // The CLI's hook callback and can_use_tool come a moment after the tool_use line.
    tokio::time::sleep(a.ask_after.unwrap_or(inner.cfg.step_delay)).await;
    if !running(inner, pid) {
        return false;
    }
    let Decision::Answered(status) = ask(inner, pid, idx, entry.clone(), a.timeout).await else {
        return false;
    };
    record_decision(inner, pid, &entry, &status);
    if status == SimApprovalStatus::Approved {
        tokio::time::sleep(inner.cfg.step_delay).await;
        let done = bash(&a.command, "build ok", true);
        inner.replace_log(pid, Channel::Normalized, idx, done);
    }
    running(inner, pid)
}
