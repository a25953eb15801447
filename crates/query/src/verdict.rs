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
//! | failed `setup_script_failed`      |                                    | `retry`          | `start_task_attempt`      |
//! | failed `executor_not_found`, `setup_required` |                        | `mark_inreview`  | `update_task`             |
//! | failed, any other code            |                                    | `follow_up`      | `follow_up`               |
//! | killed (`stopped`)                | changes cached with files          | `review_changes` | `get_attempt_changes`     |
//! | killed (`stopped`)                | otherwise                          | `follow_up`      | `follow_up`               |
//!
//! Why these: a failed setup script means the agent never worked in a usable workspace, so a
//! new attempt is the remedy; a missing or unconfigured executor fails every run until a human
//! fixes VK's machine; a failed agent or cleanup keeps its session and context, so telling it
//! what failed (`last_error`) is cheaper than starting over. A stopped run may have left work
//! worth reviewing. A completed run that changed nothing has nothing to review.
//!
//! The words: `outcome` is seed 003's (`success`, `failure`, `cancelled` for a stop, `unknown`
//! while nothing has ended), `state` the finer one it is derived from (`RunState`),
//! `last_error_code` why a failed or stopped run ended (`query::last_error`), `summary` the
//! sentence of the table's row (`reason`, deprecated, repeats it at detail 1).
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

use super::last_error::{self, LastErrorCode};
use super::rows::ProcessRow;
use vk_observer_store::StoreReader;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::rfc3339;

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

/// Seed 003's verdict word: how the run came out, in four words an orchestrator routes on.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The latest relevant process completed (exit code 0).
    Success,
    /// It failed: `last_error_code` says how.
    Failure,
    /// It was stopped through VK (`last_error_code` `stopped`): by a user or by VK itself.
    Cancelled,
    /// Not decided yet: nothing has run, or a process is still running.
    Unknown,
}

/// What the latest relevant process came to, in finer words than `Outcome` (the words
/// `result.outcome` used before 0.2.0).
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
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

impl RunState {
    /// The seed's word for this state.
    pub(crate) fn outcome(self) -> Outcome {
        match self {
            RunState::NotStarted | RunState::InProgress => Outcome::Unknown,
            RunState::Succeeded => Outcome::Success,
            RunState::Failed => Outcome::Failure,
            RunState::Killed => Outcome::Cancelled,
        }
    }
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
    /// `success`, `failure`, `cancelled` (stopped) or `unknown` (nothing has run yet, or still
    /// running).
    pub outcome: Outcome,
    /// The finer word (detail 1): `not_started`, `in_progress`, `succeeded`, `failed` or
    /// `killed` (what `outcome` said before 0.2.0).
    pub state: RunState,
    /// One sentence: the conclusion and what to do about it.
    pub summary: String,
    /// Seed 003's next step: `follow_up`, `review_changes`, `respond_approval` (the agent is
    /// blocked on `pending_approvals`), `retry`, `mark_inreview` or `mark_done` (`stop` is never
    /// produced); null while running unblocked or while the attempt is being prepared (wait
    /// instead).
    pub recommended_next_action: Option<NextAction>,
    /// The MCP tool that carries out the next step: `follow_up`, `get_attempt_changes`,
    /// `respond_approval`, `start_task_attempt`, `update_task` (status `inreview` or `done`) or
    /// `wait_for_attempt_change`.
    pub next_tool: String,
    /// When the latest relevant process ended (RFC 3339); null while running or idle.
    pub finalized_at: Option<String>,
    /// Its exit code; null while running, when stopped, or when VK recorded none.
    pub exit_code: Option<i64>,
    /// Why the run ended badly (a closed set, see `LastErrorCode`); null unless the outcome is
    /// `failure` or `cancelled`.
    pub last_error_code: Option<LastErrorCode>,
    /// After a failure or a stop: the process's last `error_message` log entry, else its last
    /// stderr line (at most 300 characters); null otherwise or when its logs hold neither. For
    /// Claude this is often just its last stderr chunk: route on `last_error_code`.
    pub last_error: Option<String>,
    /// Deprecated (goes away in 0.3.0), detail 1: the same sentence as `summary`.
    pub reason: String,
}

/// What the verdict is computed from (all under the attempt token).
pub(crate) struct VerdictInput<'a> {
    pub state: AttemptState,
    /// The latest relevant process and its id.
    pub process: Option<(Uuid, &'a ProcessRow)>,
    pub has_session: bool,
    /// The cached change summary of the attempt, if any.
    pub changes: Option<&'a Value>,
    /// The agent is blocked on a pending approval of a running process.
    pub awaiting_approval: bool,
}

/// The verdict of an attempt; reads the failing process's logs for `last_error_code` and
/// `last_error`.
pub(crate) fn verdict(
    reader: &StoreReader,
    input: VerdictInput,
) -> Result<AttemptResult, ToolError> {
    let process = input.process.map(|(_, p)| p);
    let (last_error_code, last_error) = match (input.state, input.process) {
        (AttemptState::Failed, Some((pid, p))) => {
            let ev = last_error::evidence(reader, pid, p.exit_code)?;
            (last_error::classify(p, &ev), ev.last_error)
        }
        _ => (None, None),
    };
    let (state, action, next_tool, sentence) = rule(&input, last_error_code);
    let finished = input.state != AttemptState::Running;
    Ok(AttemptResult {
        outcome: state.outcome(),
        state,
        summary: sentence.to_string(),
        recommended_next_action: action,
        next_tool: next_tool.to_string(),
        finalized_at: process
            .filter(|_| finished)
            .and_then(|p| p.completed_at)
            .map(rfc3339),
        exit_code: process.filter(|_| finished).and_then(|p| p.exit_code),
        last_error_code,
        last_error,
        reason: sentence.to_string(),
    })
}

type Rule = (RunState, Option<NextAction>, &'static str, &'static str);

/// The table of the module doc (`code`: the failed or stopped run's `last_error_code`).
fn rule(input: &VerdictInput, code: Option<LastErrorCode>) -> Rule {
    use NextAction as A;
    match input.state {
        AttemptState::Idle if input.has_session => (
            RunState::NotStarted,
            Some(A::FollowUp),
            "follow_up",
            "A session exists but nothing has run yet; send it a prompt with follow_up.",
        ),
        AttemptState::Idle => (
            RunState::NotStarted,
            None,
            "wait_for_attempt_change",
            "The attempt is being prepared; wait for its first process.",
        ),
        AttemptState::Running if input.awaiting_approval => (
            RunState::InProgress,
            Some(A::RespondApproval),
            "respond_approval",
            "The agent is blocked waiting for a decision on a tool call (pending_approvals); approve or deny it with respond_approval.",
        ),
        AttemptState::Running => (
            RunState::InProgress,
            None,
            "wait_for_attempt_change",
            "A process is running; wait for a change instead of polling (stop_attempt if it is stuck or unwanted).",
        ),
        AttemptState::Completed => completed_rule(input.changes),
        AttemptState::Failed if code == Some(LastErrorCode::Stopped) => killed_rule(input.changes),
        AttemptState::Failed => failed_rule(code),
    }
}

/// A failed run, by its `last_error_code`.
fn failed_rule(code: Option<LastErrorCode>) -> Rule {
    use LastErrorCode as C;
    use NextAction as A;
    let (action, tool, sentence) = match code {
        Some(C::SetupScriptFailed) => (
            A::Retry,
            "start_task_attempt",
            "The setup script failed, so the agent never had a usable workspace; fix the setup and start a new attempt.",
        ),
        Some(C::ExecutorNotFound) => (
            A::MarkInreview,
            "update_task",
            "The executor's program is not installed where VK runs; a human must install it (update_task status inreview), then follow_up.",
        ),
        Some(C::SetupRequired) => (
            A::MarkInreview,
            "update_task",
            "The executor needs setting up (e.g. a login, see last_error); a human must do it (update_task status inreview), then follow_up.",
        ),
        Some(C::AgentKilledBySignal) => (
            A::FollowUp,
            "follow_up",
            "The agent was killed by a signal VK did not send (out of memory, a crash, an external kill); continue it with follow_up, in smaller steps.",
        ),
        Some(C::CleanupScriptFailed) => (
            A::FollowUp,
            "follow_up",
            "The cleanup script failed after the agent's run; its work is in the workspace (get_attempt_changes): fix the cleanup or tell the agent with follow_up.",
        ),
        Some(C::VkRestarted) => (
            A::FollowUp,
            "follow_up",
            "VK went away while the run was going and marked it failed on restart; continue it with follow_up.",
        ),
        Some(C::StartFailed) => (
            A::FollowUp,
            "follow_up",
            "VK could not start the process (last_error); once the cause is fixed, run it again with follow_up.",
        ),
        _ => (
            A::FollowUp,
            "follow_up",
            "The run failed; tell the agent what went wrong (last_error, tail_attempt_logs) with follow_up.",
        ),
    };
    (RunState::Failed, Some(action), tool, sentence)
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
    (RunState::Succeeded, Some(action), tool, reason)
}

fn killed_rule(changes: Option<&Value>) -> Rule {
    match ChangeFacts::of(changes) {
        ChangeFacts::Files(n) if n > 0 => (
            RunState::Killed,
            Some(NextAction::ReviewChanges),
            "get_attempt_changes",
            "The run was stopped after changing files; review what it left before continuing.",
        ),
        _ => (
            RunState::Killed,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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

    /// Seed 003's four words, pinned against the finer ones they are derived from.
    #[test]
    fn outcome_words_come_from_the_run_state() {
        let table = [
            (RunState::NotStarted, "not_started", "unknown"),
            (RunState::InProgress, "in_progress", "unknown"),
            (RunState::Succeeded, "succeeded", "success"),
            (RunState::Failed, "failed", "failure"),
            (RunState::Killed, "killed", "cancelled"),
        ];
        for (state, word, outcome) in table {
            assert_eq!(serde_json::to_value(state).unwrap(), json!(word));
            assert_eq!(
                serde_json::to_value(state.outcome()).unwrap(),
                json!(outcome)
            );
        }
    }

    #[test]
    fn failures_route_on_their_code() {
        use LastErrorCode as C;
        let route = |c| {
            let (state, action, tool, _) = failed_rule(Some(c));
            assert_eq!(state, RunState::Failed);
            (action.unwrap(), tool)
        };
        assert_eq!(
            route(C::SetupScriptFailed),
            (NextAction::Retry, "start_task_attempt")
        );
        for c in [C::ExecutorNotFound, C::SetupRequired] {
            assert_eq!(route(c), (NextAction::MarkInreview, "update_task"));
        }
        for c in [
            C::AgentExitNonzero,
            C::AgentKilledBySignal,
            C::CleanupScriptFailed,
            C::StartFailed,
            C::VkRestarted,
        ] {
            assert_eq!(route(c), (NextAction::FollowUp, "follow_up"));
        }
    }
}
