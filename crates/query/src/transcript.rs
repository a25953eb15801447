//! `tail_session_messages`: a session's conversation as turns — one per coding-agent process:
//! the prompt it was given and the agent's final answer (its last assistant message) — newest
//! page first, paged older by `cursor`. Built from cached processes and normalized logs.

use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::conversation::{self, Message};
use super::detail::Detail;
use super::detail::Rules;
use super::target::{self, SessionTarget};
use super::{Freshness, Query, View};
use vk_observer_store::StoreReader;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{self as vk, ts_string};

pub const TURN_PAGE_DEFAULT: usize = 10;
pub const TURN_PAGE_MAX: usize = 50;

/// One exchange: the prompt and the agent's final message.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Turn {
    /// Position of the turn in the session (0 = the initial request); use as `cursor` bound.
    pub turn_index: u64,
    /// The coding-agent process that ran this turn (UUID).
    pub execution_process_id: Uuid,
    /// The prompt sent to the agent; null if VK did not record one.
    pub prompt: Option<String>,
    /// The agent's last assistant message in this turn; null while none was written yet.
    pub summary: Option<String>,
    /// `running`, `completed`, `failed` or `killed`.
    pub status: String,
    /// When the turn started (RFC 3339).
    pub created_at: Option<String>,
    /// When it ended (RFC 3339); null while running.
    pub completed_at: Option<String>,
}

/// Answer of `tail_session_messages`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct TranscriptPage {
    /// The session (UUID).
    pub session_id: Uuid,
    /// Its attempt (UUID).
    pub attempt_id: Uuid,
    /// Executor of the session (e.g. `CLAUDE_CODE`).
    pub executor: Option<String>,
    /// Turns, oldest first (`by: "turn"`, the default); absent with `by: "message"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<Turn>>,
    /// With `by: "message"`: the conversation message by message, oldest first (each turn's
    /// prompt, then the agent's messages, tool uses, errors and feedback, compact); absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    /// True when older turns (messages) exist; pass `next_cursor` as `cursor` to read them.
    pub has_more: bool,
    /// When older ones exist: the `turn_index` of the first turn on this page, or with
    /// `by: "message"` the first message's `cursor`; else null.
    pub next_cursor: Option<u64>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// What each detail level shows of `tail_session_messages`: turns with prompt, answer and
/// status at 0; the executor and the turns' times from 1.
pub const TRANSCRIPT_RULES: Rules = Rules {
    finish: None,
    kept: &["has_more"],
    standard: &["executor"],
    verbatim: &[],
    nested: &[(
        "turns",
        &Rules {
            finish: None,
            kept: &[],
            standard: &["created_at", "completed_at"],
            verbatim: &[],
            nested: &[],
        },
    )],
};

impl Query {
    pub fn session_messages(
        &self,
        target: SessionTarget,
        cursor: Option<u64>,
        limit: usize,
        by_message: Option<Detail>,
    ) -> Result<TranscriptPage, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        let session = target::session(&reader, target)?;
        let attempt_id = vk::uuid_of(&session.value, "workspace_id")
            .ok_or_else(|| ToolError::internal("cached session has no workspace_id"))?;
        let processes = reader.processes_of_attempt(attempt_id)?;
        let agent_runs = vk::agent_runs_of_session(&processes, session.id);
        if let Some(detail) = by_message {
            let limit = limit.clamp(1, conversation::MESSAGE_PAGE_MAX);
            let (messages, has_more) =
                conversation::page(&reader, &agent_runs, cursor, limit, detail)?;
            return Ok(TranscriptPage {
                session_id: session.id,
                attempt_id,
                executor: vk::string_of(&session.value, "executor"),
                turns: None,
                next_cursor: messages.first().filter(|_| has_more).map(|m| m.cursor),
                messages: Some(messages),
                has_more,
                token,
                freshness,
            });
        }
        let end = cursor
            .map(|c| (c as usize).min(agent_runs.len()))
            .unwrap_or(agent_runs.len());
        let limit = limit.clamp(1, TURN_PAGE_MAX);
        let start = end.saturating_sub(limit);
        let mut turns = Vec::with_capacity(end - start);
        for (i, p) in agent_runs.iter().enumerate().take(end).skip(start) {
            turns.push(Turn {
                turn_index: i as u64,
                execution_process_id: p.id,
                prompt: vk::prompt_of(&p.value),
                summary: last_assistant_message(&reader, p.id)?,
                status: vk::status(&p.value).to_string(),
                created_at: ts_string(&p.value, "created_at"),
                completed_at: ts_string(&p.value, "completed_at"),
            });
        }
        Ok(TranscriptPage {
            session_id: session.id,
            attempt_id,
            executor: vk::string_of(&session.value, "executor"),
            turns: Some(turns),
            messages: None,
            has_more: start > 0,
            next_cursor: (start > 0).then_some(start as u64),
            token,
            freshness,
        })
    }
}

/// The agent's last message of a process (the text of `until::last_assistant_message`).
fn last_assistant_message(reader: &StoreReader, pid: Uuid) -> Result<Option<String>, ToolError> {
    Ok(super::until::last_assistant_message(reader, pid)?.map(|(_, text)| text))
}
