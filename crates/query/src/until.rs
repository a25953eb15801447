//! `until` of `wait_for_attempt_change`: the target states a wait returns on, in the words of
//! `get_attempt_status` (`state`: `idle`, `running`, `completed`, `failed`; `result.outcome`
//! `cancelled` for a stopped run) plus `needs_input` (an approval is pending:
//! `waiting_for: approval`). Also the final agent message a wait answers for an attempt that
//! reached a finished state, so an orchestrator needs no tail call to read the conclusion.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::rows::ProcessRow;
use super::status::{AttemptState, AttemptStatus, Outcome};
use vk_observer_store::StoreReader;
use vk_observer_store::keys::Channel;
use vk_observer_tool_error::{InvalidReason, ToolError};
use vk_observer_vk as vk;

/// One target state of `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum UntilState {
    // `state` idle: no relevant process yet.
    Idle,
    // `state` running (an attempt blocked on an approval is running too).
    Running,
    // `state` completed.
    Completed,
    // `state` failed (a stopped run included).
    Failed,
    // `result.outcome` cancelled: the run was stopped.
    Cancelled,
    // An approval is pending (`waiting_for: approval`).
    NeedsInput,
}

impl UntilState {
    /// Every word, in the order of the declaration.
    pub(crate) const ALL: [UntilState; 6] = [
        UntilState::Idle,
        UntilState::Running,
        UntilState::Completed,
        UntilState::Failed,
        UntilState::Cancelled,
        UntilState::NeedsInput,
    ];

    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            UntilState::Idle => "idle",
            UntilState::Running => "running",
            UntilState::Completed => "completed",
            UntilState::Failed => "failed",
            UntilState::Cancelled => "cancelled",
            UntilState::NeedsInput => "needs_input",
        }
    }

    fn parse(word: &str) -> Option<UntilState> {
        UntilState::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// True when the status is in this state.
    pub(crate) fn holds(self, s: &AttemptStatus) -> bool {
        match self {
            UntilState::Idle => s.state == AttemptState::Idle,
            UntilState::Running => s.state == AttemptState::Running,
            UntilState::Completed => s.state == AttemptState::Completed,
            UntilState::Failed => s.state == AttemptState::Failed,
            UntilState::Cancelled => s.result.outcome == Outcome::Cancelled,
            UntilState::NeedsInput => s.waiting_for.is_some(),
        }
    }
}

/// The words `until` takes, comma-separated (for hints).
fn valid_words() -> String {
    UntilState::ALL.map(UntilState::as_str).join(", ")
}

/// A non-empty set of target states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Until(Vec<UntilState>);

impl Until {
    /// `until` as the caller sent it: a non-empty array of the words of [`UntilState`].
    /// Anything else is `invalid_argument` with `details.reason` `wrong_type`, `empty_set` or
    /// `unknown_word`, and a hint listing the words.
    pub fn parse(v: &Value) -> Result<Until, ToolError> {
        let example = r#"e.g. until: ["completed","failed","needs_input"]"#;
        let Value::Array(items) = v else {
            return Err(ToolError::invalid_because(
                InvalidReason::WrongType,
                format!(
                    "until is an array of state words ({}), {example}.",
                    valid_words()
                ),
                json!({"field": "until", "expected": "array of strings", "valid": UntilState::ALL}),
            ));
        };
        if items.is_empty() {
            return Err(ToolError::invalid_because(
                InvalidReason::EmptySet,
                format!(
                    "until needs at least one state word ({}), {example}; omit until to return on any change.",
                    valid_words()
                ),
                json!({"field": "until", "valid": UntilState::ALL}),
            ));
        }
        let mut set = Vec::with_capacity(items.len());
        for item in items {
            let Some(word) = item.as_str() else {
                return Err(ToolError::invalid_because(
                    InvalidReason::WrongType,
                    format!(
                        "until holds state words as strings ({}), {example}.",
                        valid_words()
                    ),
                    json!({"field": "until", "expected": "array of strings", "valid": UntilState::ALL}),
                ));
            };
            let Some(state) = UntilState::parse(word) else {
                return Err(ToolError::invalid_because(
                    InvalidReason::UnknownWord,
                    format!(
                        "until does not know {word:?}; the words are: {}.",
                        valid_words()
                    ),
                    json!({"field": "until", "got": word, "valid": UntilState::ALL}),
                ));
            };
            if !set.contains(&state) {
                set.push(state);
            }
        }
        Ok(Until(set))
    }

    /// True when the status is in one of the target states.
    pub(crate) fn reached_by(&self, s: &AttemptStatus) -> bool {
        self.0.iter().any(|t| t.holds(s))
    }
}

/// Characters of a final agent message a wait answers at most; the whole entry is read with
/// `tail_attempt_logs` (`after_entry_index` = `entry_index` − 1, `limit` 1, `detail` 2).
pub(crate) const FINAL_MESSAGE_MAX_CHARS: usize = 2_000;

/// Final messages one wait answers at most (a project-wide wait may list many finished
/// attempts; the rest are read with `tail_session_messages`).
pub(crate) const FINAL_MESSAGES_MAX: usize = 10;

/// Log entries scanned back from the end for the last agent message.
const FINAL_MESSAGE_SCAN: usize = 200;

/// The last agent message of a finished attempt's latest coding-agent run.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct FinalMessage {
    /// The attempt (UUID).
    pub attempt_id: Uuid,
    /// The coding-agent process the message is from (UUID); from detail 1 (it is the one
    /// `tail_attempt_logs` reads by default).
    pub execution_process_id: Uuid,
    /// Index of the `assistant_message` entry in that process's normalized log.
    pub entry_index: u64,
    /// The message text, at most 2000 characters (then ending with `…`).
    pub text: String,
    /// True when `text` was clipped.
    pub truncated: bool,
}

/// How long after a run's end a wait that reached a finished state holds its answer while the
/// run's log is not read to its end: VK reports the end (REST, the process stream) and streams
/// the agent's last lines (the log socket) apart, and the final message is among those lines.
/// The store's "log complete" ends the hold at once (it wakes the wait); this bounds it when a
/// log is never read to its end.
const LOG_SETTLE_MS: i64 = 2_000;

/// When a wait may answer `attempt`'s final message: None when it may now (no coding-agent run,
/// its normalized log read to its end, or its end `LOG_SETTLE_MS` ago); else the moment the hold
/// ends.
pub(crate) fn log_settles_at(
    reader: &StoreReader,
    attempt: Uuid,
) -> Result<Option<tokio::time::Instant>, ToolError> {
    let processes = reader.processes_of_attempt_as::<ProcessRow>(attempt)?;
    let Some((pid, p)) = vk::log_process(&processes) else {
        return Ok(None);
    };
    if !vk::RunReason::CodingAgent.is(p.reason())
        || reader.logs_complete(*pid, Channel::Normalized)?
    {
        return Ok(None);
    }
    let Some(ended) = p.completed_at.or(p.updated_at) else {
        return Ok(None);
    };
    let settle = chrono::TimeDelta::milliseconds(LOG_SETTLE_MS);
    let left = (ended + settle - chrono::Utc::now()).to_std().ok();
    Ok(left
        .filter(|d| !d.is_zero())
        .map(|d| tokio::time::Instant::now() + d))
}

/// True for the states an attempt ends a run in (a final message makes sense).
pub(crate) fn finished(s: &AttemptStatus) -> bool {
    matches!(s.state, AttemptState::Completed | AttemptState::Failed)
}

/// The final agent message of `attempt`: the last `assistant_message` entry of its latest
/// coding-agent process (looking at most 200 entries back); None without one.
pub(crate) fn final_message(
    reader: &StoreReader,
    attempt: Uuid,
) -> Result<Option<FinalMessage>, ToolError> {
    let processes = reader.processes_of_attempt_as::<ProcessRow>(attempt)?;
    let Some((pid, p)) = vk::log_process(&processes) else {
        return Ok(None);
    };
    if !vk::RunReason::CodingAgent.is(p.reason()) {
        return Ok(None);
    }
    let Some((index, text)) = last_assistant_message(reader, *pid)? else {
        return Ok(None);
    };
    let truncated = text.chars().count() > FINAL_MESSAGE_MAX_CHARS;
    Ok(Some(FinalMessage {
        attempt_id: attempt,
        execution_process_id: *pid,
        entry_index: index,
        text: vk_observer_tool_error::clip(&text, FINAL_MESSAGE_MAX_CHARS),
        truncated,
    }))
}

/// The last `assistant_message` of a process's normalized log within the last 200 entries:
/// its index and text.
pub(crate) fn last_assistant_message(
    reader: &StoreReader,
    pid: Uuid,
) -> Result<Option<(u64, String)>, ToolError> {
    let entries = reader.log_tail(pid, Channel::Normalized, None, FINAL_MESSAGE_SCAN)?;
    for e in entries.iter().rev() {
        let Ok(v) = serde_json::from_str::<Value>(e.entry.get()) else {
            continue;
        };
        let content = v.get("content").unwrap_or(&Value::Null);
        let kind = content
            .get("entry_type")
            .and_then(|t| t.get("type"))
            .and_then(Value::as_str);
        if kind == Some("assistant_message") {
            return Ok(content
                .get("content")
                .and_then(Value::as_str)
                .map(|t| (e.index, t.to_owned())));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(e: ToolError) -> String {
        e.details["reason"].as_str().unwrap().to_string()
    }

    #[test]
    fn parses_the_words_and_refuses_the_rest() {
        let u = Until::parse(&json!(["completed", "needs_input", "completed"])).unwrap();
        assert_eq!(
            u,
            Until(vec![UntilState::Completed, UntilState::NeedsInput])
        );
        for (bad, why) in [
            (json!([]), "empty_set"),
            (json!("completed"), "wrong_type"),
            (json!([1]), "wrong_type"),
            (json!(["done"]), "unknown_word"),
        ] {
            let e = Until::parse(&bad).unwrap_err();
            assert_eq!(e.code, "invalid_argument");
            assert!(e.hint.contains("needs_input"), "{}", e.hint);
            assert_eq!(reason(e), why, "{bad}");
        }
    }

    #[test]
    fn words_serialize_as_parsed() {
        for s in UntilState::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(UntilState::parse(s.as_str()), Some(s));
        }
    }
}
