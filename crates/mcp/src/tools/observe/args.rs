//! Typed arguments of the observe tools. Every field carries a description (format, allowed
//! values, defaults); modes that need "exactly one of" are written as root-level
//! `if/then/else` (never a root `oneOf`, which Claude clients reject) and checked again at run
//! time by the handlers.

use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use vk_observer_query::detail::Detail;
use vk_observer_query::until::UntilState;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["attempt_id"]},
    "then" = {"not": {"required": ["attempt_ids"]}},
    "else" = {"required": ["attempt_ids"]}
))]
pub(crate) struct StatusArgs {
    /// One attempt id (UUID string). Give exactly one of `attempt_id` or `attempt_ids`.
    #[serde(default)]
    pub attempt_id: Option<Uuid>,
    /// Up to 100 attempt ids (UUID strings) answered in one call. Give exactly one of
    /// `attempt_id` or `attempt_ids`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 100))]
    pub attempt_ids: Option<Vec<Uuid>>,
    /// Opaque `token` from an earlier response: only attempts changed since then are returned
    /// (the rest are counted in `unchanged`). Omit to get every requested attempt.
    #[serde(default)]
    pub since_token: Option<String>,
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
    /// Include each status's `result` (verdict and next step). Default true.
    #[serde(default)]
    pub include_result: Option<bool>,
}

/// Which log of the process.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub(crate) enum LogChannel {
    // The executor's structured entries (messages, tool calls); best for agents.
    #[default]
    Normalized,
    // Raw stdout/stderr chunks.
    Raw,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["cursor"]},
    "then" = {"not": {"required": ["after_entry_index"]}}
))]
pub(crate) struct TailLogsArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// `normalized` (default) or `raw`.
    #[serde(default)]
    pub channel: Option<LogChannel>,
    /// Entries per page, 1–500 (default 50); larger values are capped at 500.
    #[serde(default)]
    pub limit: Option<u32>,
    /// Page OLDER history: return the entries just below this index (use `next_cursor` from the
    /// previous page). Cannot be combined with `after_entry_index`.
    #[serde(default)]
    pub cursor: Option<u64>,
    /// Incremental tail: return only entries with a HIGHER index than this (use the last
    /// `entry_index` you have). Cannot be combined with `cursor`.
    #[serde(default)]
    pub after_entry_index: Option<u64>,
    /// Opaque `token` of your previous page: the answer then also lists entries replaced in
    /// place since then (`replaced`) and the tail of an earlier process after a follow-up.
    #[serde(default)]
    pub since_token: Option<String>,
    /// Read this execution process (UUID string) of the attempt instead of the latest one.
    #[serde(default)]
    pub execution_process_id: Option<Uuid>,
    /// Detail level of the entries: 0 (default) compact entries `{entry_index, kind, text,
    /// clipped?, tool?}` with `text` clipped at 500 characters; 1 the same with timestamps,
    /// command output and text up to 4000 characters; 2 VK's entries verbatim
    /// (`{entry_index, entry}`). Read one clipped entry whole with `after_entry_index` = its
    /// index − 1, `limit` 1, `detail` 2.
    #[serde(default)]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChangesArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// Return the file list even when the diff guard's thresholds are exceeded (default false).
    #[serde(default)]
    pub force: Option<bool>,
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
    /// Include the changed paths (`files`). Default true; false returns the summary alone
    /// (cheapest).
    #[serde(default)]
    pub include_files: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["session_id"]},
    "then" = {"not": {"required": ["attempt_id"]}},
    "else" = {"required": ["attempt_id"]}
))]
pub(crate) struct MessagesArgs {
    /// Session id (UUID string). Give exactly one of `session_id` or `attempt_id`.
    #[serde(default)]
    pub session_id: Option<Uuid>,
    /// Attempt id (UUID string): its latest session is used. Give exactly one of `session_id`
    /// or `attempt_id`.
    #[serde(default)]
    pub attempt_id: Option<Uuid>,
    /// `turn` (default): one item per coding-agent run, its prompt and the agent's last
    /// message. `message`: the conversation message by message (prompts, agent messages,
    /// tool uses, errors, feedback), compact, each with its own `cursor`.
    #[serde(default)]
    pub by: Option<MessagesBy>,
    /// Page OLDER items: the turns with `turn_index` below this, or with `by: "message"` the
    /// messages before this message `cursor` (use `next_cursor`).
    #[serde(default)]
    pub cursor: Option<u64>,
    /// Items per page: turns 1–50 (default 10), messages 1–100 (default 20).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
}

/// How tail_session_messages splits the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MessagesBy {
    /// One item per coding-agent run: the prompt and the agent's last message.
    Turn,
    /// One item per message: prompts, agent messages, tool uses, errors, feedback.
    Message,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["attempt_ids"]},
    "then" = {"not": {"required": ["project_id"]}},
    "else" = {"required": ["project_id"]}
))]
pub(crate) struct WaitArgs {
    /// Attempts to watch (1–100 UUID strings). Give exactly one of `attempt_ids` or `project_id`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 100))]
    pub attempt_ids: Option<Vec<Uuid>>,
    /// Watch every attempt of this project (UUID string). Give exactly one of `attempt_ids` or
    /// `project_id`.
    #[serde(default)]
    pub project_id: Option<Uuid>,
    /// Opaque `token` from an earlier response: return at once if a watched attempt changed
    /// after it. Omit to wait for the next change from now (with `until`: to return at once
    /// if any watched attempt is already in a target state).
    #[serde(default)]
    pub since_token: Option<String>,
    /// Return only when a watched attempt is in one of these states (1–6 words, any order):
    /// `idle`, `running`, `completed`, `failed` (as get_attempt_status's `state`; a stopped run
    /// is `failed`), `cancelled` (a stopped run: `result.outcome` cancelled), `needs_input` (an
    /// approval is pending). Answers at once when one already is (with `since_token`: one that
    /// changed after it); other changes keep waiting. Outcome `reached` lists those attempts
    /// and their final agent message; `deleted` when a watched attempt is deleted instead.
    #[serde(default)]
    #[schemars(with = "Option<Vec<UntilState>>", length(min = 1, max = 6))]
    pub until: Option<serde_json::Value>,
    /// How long to wait at most, in milliseconds (default 25000). Capped at 50000, below common
    /// MCP client request timeouts, unless the call carries a `progressToken` in `_meta` and is
    /// answered as SSE (not stateless JSON mode): progress notifications then come every 10 s
    /// and up to 600000 is allowed. The wait ends up to 10% earlier (jitter).
    #[serde(default)]
    #[schemars(range(min = 1, max = 600000))]
    pub timeout_ms: Option<u64>,
    /// With `project_id` only: also end the wait on new project activity (task created,
    /// updated or deleted too) and answer the items after `since_token` in `activity` (at most
    /// 50, oldest first). Default false.
    #[serde(default)]
    pub include_activity: Option<bool>,
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
}
