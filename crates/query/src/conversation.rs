//! `tail_session_messages` with `by: "message"`: a session's conversation message by message —
//! each turn's prompt, then the agent's messages, tool uses, errors and the user's feedback from
//! the turn's normalized log, in the compact form of `compact_log` — newest page first, paged
//! older by a per-message cursor. Thinking, system, loading and next-action entries are left
//! out (they are in `tail_attempt_logs`).
//!
//! The cursor is a number that orders every message of a session: `turn_index × 2³²` plus 0 for
//! the turn's prompt or `entry_index + 1` for a log entry. A page holds the `limit` messages
//! just below the cursor, so paging older never skips or repeats one, and reading a page costs
//! the entries walked back from the cursor, not the whole session.

use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::compact_log::{self, CompactEntry};
use super::detail::Detail;
use vk_observer_store::StoreReader;
use vk_observer_store::keys::Channel;
use vk_observer_store::reader::Stored;
use vk_observer_tool_error::ToolError;
use vk_observer_vk as vk;

/// Messages per page by default and at most.
pub const MESSAGE_PAGE_DEFAULT: usize = 20;
pub const MESSAGE_PAGE_MAX: usize = 100;
/// Entries read from the store per step when walking a turn's log backwards.
const WALK_CHUNK: usize = 200;
/// VK entry types that are part of the conversation.
const CONVERSATION_KINDS: [&str; 5] = [
    "user_message",
    "assistant_message",
    "tool_use",
    "error_message",
    "user_feedback",
];

/// One message of the conversation.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Message {
    /// Where the message is: pass it as `cursor` (with `by: "message"`) to read the messages
    /// before it. Opaque; ordered like the conversation.
    pub cursor: u64,
    /// The turn (coding-agent run) the message belongs to; 0 = the initial request.
    pub turn_index: u64,
    /// The coding-agent process of that turn (UUID).
    pub execution_process_id: Uuid,
    /// Index of the log entry (read it whole with tail_attempt_logs, `after_entry_index` =
    /// this − 1, `limit` 1, `detail` 2); absent for the turn's prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_index: Option<u64>,
    /// `user` (the turn's prompt, a user message or feedback), `assistant` (messages, tool
    /// uses) or `error`.
    pub role: &'static str,
    /// Seed 003's name for the entry's kind (`prompt`, `assistant_message`, `tool_use`, …);
    /// `kind` (deprecated, goes away in 0.3.0) carries the same value.
    #[serde(rename = "type")]
    pub entry_type: String,
    /// Seed 003's name for the entry's text (clipped below detail 2 like `text`); `text`
    /// (deprecated, goes away in 0.3.0) carries the same value. Absent when the entry has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Seed 003's name for the entry's time (RFC 3339; detail 1 and 2, when VK gave one);
    /// `timestamp` (deprecated, goes away in 0.3.0) carries the same value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The entry as tail_attempt_logs shows it below detail 2 (`kind`, `text`, `clipped`,
    /// `tool`, …); a prompt is kind `prompt`.
    #[serde(flatten)]
    pub entry: CompactEntry,
}

/// Position of a message: turn and place within it (0 = prompt, i + 1 = entry i).
fn position(turn: u64, entry: Option<u64>) -> u64 {
    (turn << 32) | entry.map_or(0, |i| i + 1)
}

fn role_of(kind: &str) -> &'static str {
    match kind {
        "user_message" | "user_feedback" | "prompt" => "user",
        "error_message" => "error",
        _ => "assistant",
    }
}

/// One page of messages: up to `limit` below `cursor` (all when None), oldest first, and
/// whether older ones exist.
pub(crate) fn page(
    reader: &StoreReader,
    agent_runs: &[&Stored],
    cursor: Option<u64>,
    limit: usize,
    detail: Detail,
) -> Result<(Vec<Message>, bool), ToolError> {
    let detail = match detail {
        Detail::Verbatim => Detail::Standard,
        d => d,
    };
    let below = cursor.unwrap_or(u64::MAX);
    let (cursor_turn, cursor_place) = (below >> 32, below & 0xFFFF_FFFF);
    let last_turn = (agent_runs.len() as u64).min(cursor_turn + 1);
    // Newest first; one extra message tells whether older ones exist.
    let mut out: Vec<Message> = Vec::with_capacity(limit + 1);
    for turn in (0..last_turn).rev() {
        let run = &agent_runs[turn as usize];
        let mut before = None;
        if turn == cursor_turn {
            if cursor_place == 0 {
                continue; // the cursor is this turn's prompt: nothing of the turn lies below it
            }
            before = Some(cursor_place - 1); // the cursor's entry index: read below it
        }
        while out.len() <= limit {
            let chunk = reader.log_tail(run.id, Channel::Normalized, before, WALK_CHUNK)?;
            for e in chunk.iter().rev() {
                let Ok(c) = compact_log::compact(e.entry.clone(), Channel::Normalized, detail)
                else {
                    continue;
                };
                if CONVERSATION_KINDS.contains(&c.kind.as_str()) {
                    out.push(message(turn, run.id, Some(e.index), c));
                    if out.len() > limit {
                        break;
                    }
                }
            }
            match chunk.first() {
                Some(first) if chunk.len() == WALK_CHUNK && first.index > 0 => {
                    before = Some(first.index);
                }
                _ => break,
            }
        }
        if out.len() > limit {
            break;
        }
        if let Some(prompt) = vk::prompt_of(&run.value) {
            out.push(message(turn, run.id, None, prompt_entry(&prompt, detail)));
            if out.len() > limit {
                break;
            }
        }
    }
    let has_more = out.len() > limit;
    out.truncate(limit);
    out.reverse();
    Ok((out, has_more))
}

fn message(turn: u64, process: Uuid, entry_index: Option<u64>, entry: CompactEntry) -> Message {
    Message {
        cursor: position(turn, entry_index),
        turn_index: turn,
        execution_process_id: process,
        entry_index,
        role: role_of(&entry.kind),
        entry_type: entry.kind.clone(),
        content: entry.text.clone(),
        at: entry.timestamp.clone(),
        entry,
    }
}

fn prompt_entry(prompt: &str, detail: Detail) -> CompactEntry {
    let limit = match detail {
        Detail::Compact => compact_log::TEXT_CLIP,
        _ => compact_log::TEXT_CLIP_STANDARD,
    };
    compact_log::text_entry("prompt", prompt, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_prompt_before_entries_and_turns_in_sequence() {
        assert!(position(0, None) < position(0, Some(0)));
        assert!(position(0, Some(5)) < position(0, Some(6)));
        assert!(position(0, Some(u32::MAX as u64 - 2)) < position(1, None));
        assert!(position(1, None) < position(1, Some(0)));
    }

    #[test]
    fn messages_carry_the_seed_names_beside_the_old_ones() {
        let mut e = compact_log::text_entry("assistant_message", "Done.", 500);
        e.timestamp = Some("2026-11-22T10:00:00Z".into());
        let m = serde_json::to_value(message(2, Uuid::nil(), Some(7), e)).unwrap();
        assert_eq!(m["role"], "assistant");
        assert_eq!(m["type"], "assistant_message");
        assert_eq!(m["kind"], "assistant_message");
        assert_eq!(m["content"], "Done.");
        assert_eq!(m["text"], "Done.");
        assert_eq!(m["at"], "2026-11-22T10:00:00Z");
        assert_eq!(m["timestamp"], "2026-11-22T10:00:00Z");
    }

    #[test]
    fn roles_follow_vk_kinds() {
        assert_eq!(role_of("prompt"), "user");
        assert_eq!(role_of("user_feedback"), "user");
        assert_eq!(role_of("tool_use"), "assistant");
        assert_eq!(role_of("error_message"), "error");
    }
}
