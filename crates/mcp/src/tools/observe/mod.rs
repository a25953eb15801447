//! Observe tools: `get_attempt_status`, `wait_for_attempt_change` (`wait`), `tail_attempt_logs`,
//! `get_attempt_changes`, `tail_session_messages`. Parse → `query` (status, wait, logs,
//! changes, transcript) → answer; the rules live in `query/`. Arguments in `args`.

mod args;
mod wait;

use rmcp::handler::server::tool::ToolRouter;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

pub(crate) use self::args::{
    ChangesArgs, LogChannel, MessagesArgs, MessagesBy, StatusArgs, TailLogsArgs, WaitArgs,
};
pub(crate) use self::wait::{Parked, WaitPlan, plan};
use super::answer::{detail_output_schema, level_of, rendered, shaped, shaped_with};
use super::args::{Args, input_schema};
use super::paging::{MAX_BATCH, page_size};
use super::{Family, Scope, VkTools};
use vk_observer_query::changes::{CHANGES_RULES, ChangesPage};
use vk_observer_query::conversation::{MESSAGE_PAGE_DEFAULT, MESSAGE_PAGE_MAX};
use vk_observer_query::logs::{LOG_PAGE_DEFAULT, LOG_PAGE_RULES, LogMode, LogPage, LogRequest};
use vk_observer_query::status::{Shape, StatusAnswer, StatusView};
use vk_observer_query::target::SessionTarget;
use vk_observer_query::transcript::{
    TRANSCRIPT_RULES, TURN_PAGE_DEFAULT, TURN_PAGE_MAX, TranscriptPage,
};
use vk_observer_tool_error::ToolError;
use vk_observer_vk::Channel;

pub const GET_ATTEMPT_STATUS: &str = "get_attempt_status";
pub const WAIT_FOR_ATTEMPT_CHANGE: &str = "wait_for_attempt_change";
pub const TAIL_ATTEMPT_LOGS: &str = "tail_attempt_logs";
pub(crate) const GET_ATTEMPT_CHANGES: &str = "get_attempt_changes";
pub(crate) const TAIL_SESSION_MESSAGES: &str = "tail_session_messages";

pub(crate) const FAMILY: Family = Family {
    name: "observe",
    tools: &[
        (GET_ATTEMPT_STATUS, Scope::Read),
        (WAIT_FOR_ATTEMPT_CHANGE, Scope::Read),
        (TAIL_ATTEMPT_LOGS, Scope::Read),
        (GET_ATTEMPT_CHANGES, Scope::Read),
        (TAIL_SESSION_MESSAGES, Scope::Read),
    ],
    router,
};

fn router() -> ToolRouter<VkTools> {
    VkTools::observe_router() + VkTools::wait_router()
}

#[tool_router(router = observe_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::GET_ATTEMPT_STATUS, input_schema = input_schema::<StatusArgs>(),
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

    #[tool(description = describe::TAIL_ATTEMPT_LOGS, input_schema = input_schema::<TailLogsArgs>(),
           output_schema = detail_output_schema::<LogPage>(),
           annotations(title = "Tail attempt logs", read_only_hint = true, open_world_hint = false))]
    async fn tail_attempt_logs(&self, Args(a): Args<TailLogsArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let answer = a.and_then(|a| {
            let mode = match (a.cursor, a.after_entry_index) {
                (Some(_), Some(_)) => {
                    return Err(ToolError::mixed_pagination(
                        &["cursor", "after_entry_index"],
                        "Use only one pagination mode: `cursor` pages older history, `after_entry_index` returns only newer entries.",
                    ));
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

    #[tool(description = describe::GET_ATTEMPT_CHANGES, input_schema = input_schema::<ChangesArgs>(),
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

    #[tool(description = describe::TAIL_SESSION_MESSAGES, input_schema = input_schema::<MessagesArgs>(),
           output_schema = detail_output_schema::<TranscriptPage>(),
           annotations(title = "Tail session messages", read_only_hint = true, open_world_hint = false))]
    async fn tail_session_messages(&self, Args(a): Args<MessagesArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let answer = a.and_then(|a| {
            let Some(target) = SessionTarget::from_ids(a.session_id, a.attempt_id) else {
                return Err(ToolError::ambiguous_target(&["session_id", "attempt_id"]));
            };
            if a.by == Some(MessagesBy::Message) {
                let limit = page_size(a.limit, MESSAGE_PAGE_DEFAULT, MESSAGE_PAGE_MAX, "limit")?;
                let detail = a.detail.unwrap_or_default();
                return self
                    .query
                    .session_messages(target, a.cursor, limit, Some(detail));
            }
            let limit = page_size(a.limit, TURN_PAGE_DEFAULT, TURN_PAGE_MAX, "limit")?;
            self.query.session_messages(target, a.cursor, limit, None)
        });
        shaped(answer, &TRANSCRIPT_RULES, level)
    }
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const GET_ATTEMPT_STATUS: &str = "State of attempts (idle | running | completed | failed; dev servers excluded), latest session/process, failure summary and a result to route on (outcome, last_error_code, next_tool). attempt_id: fields at the top level; attempt_ids: `attempts`.
Use when: checking if an agent run is going, done or failed.
Required: exactly one of attempt_id or attempt_ids (max 100).
Optional: since_token (changed since only), include_result, detail (0|1|2).
Next: result.next_tool (none at detail 0: wait).
Avoid: passing both ids; polling one attempt at a time (batch, or wait_for_attempt_change).";

    pub(crate) const TAIL_ATTEMPT_LOGS: &str = "Read an attempt's log (latest coding agent, else its setup/cleanup script) in oldest-first pages.
Use when: seeing what the agent did or why it failed, or following new output.
Required: attempt_id.
Optional: channel (normalized|raw), limit (1-500), cursor (older page) OR after_entry_index (newer only), since_token (also returns entries replaced in place), execution_process_id, detail (0: compact entries; 2: VK's verbatim).
Next: call again with after_entry_index = last entry_index seen.
Avoid: re-reading the last N entries and de-duplicating; sending cursor and after_entry_index together.";

    pub(crate) const GET_ATTEMPT_CHANGES: &str = "Get what an attempt changed: totals (file_count, added, deleted, total_bytes) and the changed files (repo-prefixed paths).
Use when: reviewing a completed run, or what a running agent changed so far (live: true).
Required: attempt_id.
Optional: force (list files past the diff guard; never past 5000), include_files (false: summary only), detail (0|1|2; 1 adds per-file counts).
Next: get_attempt_patch or get_attempt_file for contents of selected paths; follow_up to ask for fixes.
Avoid: retrying with force after blocked_reason=summary_failed (force does not help); expecting file contents here.";

    pub(crate) const TAIL_SESSION_MESSAGES: &str = "A session's conversation as turns (prompt, final answer) or, by=message, message by message; newest page, oldest first.
Use when: restoring context about what was asked and answered in an attempt.
Required: exactly one of session_id or attempt_id (the attempt's latest session).
Optional: by (turn|message), cursor (next_cursor: older items), limit (turns 1-50, messages 1-100), detail (0|1|2).
Next: follow_up with the same attempt_id, or tail_attempt_logs for the full detail of a turn.
Avoid: both session_id and attempt_id; following live output (use tail_attempt_logs).";

    pub(crate) const WAIT_FOR_ATTEMPT_CHANGE: &str = "Block until a watched attempt changes or, with until, reaches a target state; answers outcome (reached|changed|timeout|token_reset|deleted), statuses, final agent messages, a new token.
Use when: you would otherwise poll get_attempt_status or logs.
Required: one of attempt_ids (1-100) or project_id.
Optional: until (e.g. [\"completed\",\"failed\",\"needs_input\"]), since_token, timeout_ms (default 25000, max 50000; 600000 with a progressToken), include_activity (project_id).
Next: route on outcome; wait again with the returned token.
Avoid: looping without since_token (misses changes)";
}
