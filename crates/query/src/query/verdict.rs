//! The `result` of `get_attempt_status` (seed 003): what the attempt's latest relevant process
//! came to, when it ended, how, and what an orchestrator should do next, in the seed's words
//! (`recommended_next_action`) and as the MCP tool to call (`next_tool`).
//!
//! The rules, first match wins (state is `get_attempt_status.state`; "changes" is VK's change
//! summary as cached, absent until a process of the attempt has finished):
//!
//! | state / latest process            | condition                          | action           | next_tool                 |
//! |-----------------------------------|------------------------------------|------------------|---------------------------|
//! | idle                              | the attempt has a session          | `follow_up`      | `follow_up`               |
//! | idle                              | no session yet                     | none             | `wait_for_attempt_change` |
//! | running                           | an approval is pending             | `respond_approval` | `respond_approval`      |
//! | running                           |                                    | none             | `wait_for_attempt_change` |
//! | completed                         | VK could not diff (summary_failed) | `mark_inreview`  | `update_task`             |
//! | completed                         | changes cached, zero files         | `mark_done`      | `update_task`             |
//! | completed                         | otherwise                          | `review_changes` | `get_attempt_changes`     |
//! | failed, a setup script            |                                    | `retry`          | `start_task_attempt`      |
//! | failed, agent or cleanup script   |                                    | `follow_up`      | `follow_up`               |
//! | killed                            | changes cached with files          | `review_changes` | `get_attempt_changes`     |
//! | killed                            | otherwise                          | `follow_up`      | `follow_up`               |
//!
//! Why these: a failed setup script means the agent never worked in a usable workspace, so a
//! new attempt is the remedy; a failed agent or cleanup keeps its session and context, so
//! telling it what failed (`last_error`) is cheaper than starting over. A stopped run may have
//! left work worth reviewing. A completed run that changed nothing has nothing to review.
//!
//! One word of the seed is never produced: `stop`, because whether a running agent is stuck
//! depends on the clock (compare `last_activity_at` with now), and a status must be a pure
//! function of the cached rows to be memoized per attempt token (`status_memo`).
//! `respond_approval` comes from the approvals index (`store::approvals`), which is under the
//! attempt token like every other input.
//!
//! Every input (the attempt's processes and sessions, its change summary, the failing
//! process's log entries) is under the attempt token, so the memo stays exact.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::rows::ProcessRow;
use crate::store::StoreReader;
use crate::store::keys::Channel;
use crate::tool_error::ToolError;
use crate::vk::{ProcessStatus, RunReason, rfc3339};

/// Coarse state of an attempt.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AttemptState {
    /// No relevant execution process yet (dev servers do not count).
    Idle,
    /// The latest relevant process is running.
    Running,
    /// The latest relevant process completed.
    Completed,
    /// The latest relevant process failed or was killed.
    Failed,
}

/// Log entries scanned backwards for the last error (bounds the cost of a status on a huge
/// log; the error that ended a run is near its end).
const ERROR_SCAN: usize = 200;
/// Characters kept of `last_error`.
const ERROR_CLIP: usize = 300;

/// What the latest relevant process came to.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing has run yet.
    NotStarted,
    /// Still running.
    InProgress,
    /// Completed successfully.
    Succeeded,
    /// Failed (non-zero exit or error).
    Failed,
    /// Stopped or killed before it finished.
    Killed,
}

/// What an orchestrator should do next, in seed 003's words.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NextAction {
    /// Send the agent a message (the run failed or was stopped, or nothing has run yet).
    FollowUp,
    /// Look at what the run changed.
    ReviewChanges,
    /// Answer a pending approval: the agent is blocked until it is approved or denied.
    RespondApproval,
    /// Stop the running agent (not produced: being stuck depends on the clock).
    Stop,
    /// Start a new attempt (the workspace setup failed).
    Retry,
    /// Hand the task to a human (VK could not diff the workspace).
    MarkInreview,
    /// Close the task (the run completed and changed nothing).
    MarkDone,
}

/// A compact verdict an orchestrator can route on.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct AttemptResult {
    /// `not_started`, `in_progress`, `succeeded`, `failed` or `killed`.
    pub outcome: Outcome,
    /// Seed 003's next step: `follow_up`, `review_changes`, `respond_approval` (the agent is
    /// blocked on `pending_approvals`), `retry`, `mark_inreview` or `mark_done` (`stop` is never
    /// produced); null while running unblocked or while the attempt is being prepared (wait
    /// instead).
    pub recommended_next_action: Option<NextAction>,
    /// The MCP tool that carries out the next step: `follow_up`, `get_attempt_changes`,
    /// `respond_approval`, `start_task_attempt`, `update_task` (status `inreview` or `done`) or
    /// `wait_for_attempt_change`.
    pub next_tool: String,
    /// One sentence saying why.
    pub reason: String,
    /// When the latest relevant process ended (RFC 3339); null while running or idle.
    pub finalized_at: Option<String>,
    /// Its exit code; null while running, when killed, or when VK recorded none.
    pub exit_code: Option<i64>,
    /// After a failure or a stop: the process's last `error_message` log entry, else its last
    /// stderr line (at most 300 characters); null otherwise or when its logs hold neither.
    pub last_error: Option<String>,
}

/// What the verdict is computed from (all under the attempt token).
pub struct VerdictInput<'a> {
    pub state: AttemptState,
    /// The latest relevant process and its id.
    pub process: Option<(Uuid, &'a ProcessRow)>,
    pub has_session: bool,
    /// The cached change summary of the attempt, if any.
    pub changes: Option<&'a Value>,
    /// The agent is blocked on a pending approval of a running process.
    pub awaiting_approval: bool,
}

/// The verdict of an attempt; reads the failing process's logs for `last_error`.
pub fn verdict(reader: &StoreReader, input: VerdictInput) -> Result<AttemptResult, ToolError> {
    let process = input.process.map(|(_, p)| p);
    let (outcome, action, next_tool, reason) = rule(&input);
    let last_error = match (input.state, input.process) {
        (AttemptState::Failed, Some((pid, _))) => last_error(reader, pid)?,
        _ => None,
    };
    let finished = input.state != AttemptState::Running;
    Ok(AttemptResult {
        outcome,
        recommended_next_action: action,
        next_tool: next_tool.to_string(),
        reason: reason.to_string(),
        finalized_at: process
            .filter(|_| finished)
            .and_then(|p| p.completed_at)
            .map(rfc3339),
        exit_code: process.filter(|_| finished).and_then(|p| p.exit_code),
        last_error,
    })
}

type Rule = (Outcome, Option<NextAction>, &'static str, &'static str);

/// The table of the module doc.
fn rule(input: &VerdictInput) -> Rule {
    use NextAction as A;
    let process = input.process.map(|(_, p)| p);
    match input.state {
        AttemptState::Idle if input.has_session => (
            Outcome::NotStarted,
            Some(A::FollowUp),
            "follow_up",
            "A session exists but nothing has run yet; send it a prompt with follow_up.",
        ),
        AttemptState::Idle => (
            Outcome::NotStarted,
            None,
            "wait_for_attempt_change",
            "The attempt is being prepared; wait for its first process.",
        ),
        AttemptState::Running if input.awaiting_approval => (
            Outcome::InProgress,
            Some(A::RespondApproval),
            "respond_approval",
            "The agent is blocked waiting for a decision on a tool call (pending_approvals); approve or deny it with respond_approval.",
        ),
        AttemptState::Running => (
            Outcome::InProgress,
            None,
            "wait_for_attempt_change",
            "A process is running; wait for a change instead of polling (stop_attempt if it is stuck or unwanted).",
        ),
        AttemptState::Completed => completed_rule(input.changes),
        AttemptState::Failed if process.is_some_and(|p| ProcessStatus::Killed.is(p.status())) => {
            killed_rule(input.changes)
        }
        AttemptState::Failed if process.is_some_and(|p| RunReason::SetupScript.is(p.reason())) => (
            Outcome::Failed,
            Some(A::Retry),
            "start_task_attempt",
            "The setup script failed, so the agent never had a usable workspace; fix the setup and start a new attempt.",
        ),
        AttemptState::Failed => (
            Outcome::Failed,
            Some(A::FollowUp),
            "follow_up",
            "The run failed; tell the agent what went wrong (last_error, tail_attempt_logs) with follow_up.",
        ),
    }
}

fn completed_rule(changes: Option<&Value>) -> Rule {
    let (action, tool, reason) = match ChangeFacts::of(changes) {
        ChangeFacts::Undiffable => (
            NextAction::MarkInreview,
            "update_task",
            "The run completed but VK could not diff its workspace; hand the task to a human (update_task status inreview).",
        ),
        ChangeFacts::Files(0) => (
            NextAction::MarkDone,
            "update_task",
            "The run completed without changing any file; close the task (update_task status done) or follow_up if changes were expected.",
        ),
        _ => (
            NextAction::ReviewChanges,
            "get_attempt_changes",
            "The run completed; review what it changed.",
        ),
    };
    (Outcome::Succeeded, Some(action), tool, reason)
}

fn killed_rule(changes: Option<&Value>) -> Rule {
    match ChangeFacts::of(changes) {
        ChangeFacts::Files(n) if n > 0 => (
            Outcome::Killed,
            Some(NextAction::ReviewChanges),
            "get_attempt_changes",
            "The run was stopped after changing files; review what it left before continuing.",
        ),
        _ => (
            Outcome::Killed,
            Some(NextAction::FollowUp),
            "follow_up",
            "The run was stopped before changing anything; continue it differently with follow_up.",
        ),
    }
}

/// What the cached change summary says.
enum ChangeFacts {
    /// No summary cached yet.
    Unknown,
    /// VK could not compute one (`blocked` with `summary_failed`).
    Undiffable,
    /// This many changed files.
    Files(u64),
}

impl ChangeFacts {
    fn of(changes: Option<&Value>) -> ChangeFacts {
        let Some(v) = changes else {
            return ChangeFacts::Unknown;
        };
        if v.get("blocked").and_then(Value::as_bool) == Some(true)
            && v.get("blockedReason").and_then(Value::as_str) == Some("summary_failed")
        {
            return ChangeFacts::Undiffable;
        }
        match v.pointer("/summary/fileCount").and_then(Value::as_u64) {
            Some(n) => ChangeFacts::Files(n),
            None => ChangeFacts::Unknown,
        }
    }
}

/// The last `error_message` entry of the process's normalized log, else the last non-empty
/// stderr line of its raw log, clipped.
fn last_error(reader: &StoreReader, pid: Uuid) -> Result<Option<String>, ToolError> {
    let normalized = reader.log_tail(pid, Channel::Normalized, None, ERROR_SCAN)?;
    let found = normalized
        .iter()
        .rev()
        .find_map(|e| error_message(e.entry.get()));
    let found = match found {
        Some(t) => Some(t),
        None => reader
            .log_tail(pid, Channel::Raw, None, ERROR_SCAN)?
            .iter()
            .rev()
            .find_map(|e| stderr_line(e.entry.get())),
    };
    Ok(found.map(|t| crate::tool_error::clip(&t, ERROR_CLIP)))
}

/// The text of a normalized `error_message` entry.
fn error_message(entry: &str) -> Option<String> {
    let v: Value = serde_json::from_str(entry).ok()?;
    let content = v.get("content")?;
    if content.pointer("/entry_type/type").and_then(Value::as_str) != Some("error_message") {
        return None;
    }
    let text = content.get("content")?.as_str()?.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The last non-empty line of a raw `STDERR` chunk.
fn stderr_line(entry: &str) -> Option<String> {
    let v: Value = serde_json::from_str(entry).ok()?;
    if v.get("type").and_then(Value::as_str) != Some("STDERR") {
        return None;
    }
    v.get("content")?
        .as_str()?
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn error_texts_come_from_error_entries_and_stderr_only() {
        let err = json!({"type": "NORMALIZED_ENTRY", "content": {"entry_type": {"type": "error_message"},
                          "content": " boom \n"}});
        let msg = json!({"type": "NORMALIZED_ENTRY", "content": {"entry_type": {"type": "assistant_message"},
                          "content": "fine"}});
        assert_eq!(error_message(&err.to_string()).as_deref(), Some("boom"));
        assert_eq!(error_message(&msg.to_string()), None);
        let raw = json!({"type": "STDERR", "content": "first\nsecond line\n\n"});
        let out = json!({"type": "STDOUT", "content": "not an error\n"});
        assert_eq!(
            stderr_line(&raw.to_string()).as_deref(),
            Some("second line")
        );
        assert_eq!(stderr_line(&out.to_string()), None);
    }

    #[test]
    fn change_facts_tell_empty_undiffable_and_unknown_apart() {
        let none = json!({"summary": {"fileCount": 0}, "blocked": false});
        let failed = json!({"summary": {"fileCount": 0}, "blocked": true, "blockedReason": "summary_failed"});
        assert!(matches!(
            completed_rule(Some(&none)).1,
            Some(NextAction::MarkDone)
        ));
        assert!(matches!(
            completed_rule(Some(&failed)).1,
            Some(NextAction::MarkInreview)
        ));
        assert!(matches!(
            completed_rule(None).1,
            Some(NextAction::ReviewChanges)
        ));
        let some = json!({"summary": {"fileCount": 2}});
        assert!(matches!(
            killed_rule(Some(&some)).1,
            Some(NextAction::ReviewChanges)
        ));
        assert!(matches!(killed_rule(None).1, Some(NextAction::FollowUp)));
    }
}
