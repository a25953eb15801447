//! Typed arguments of the mutating and artifact tools. Mode rules are in the schema without a
//! root combinator (root `if/then/else`), and enforced again at run time by the proxy.

use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use crate::query::detail::Detail;
use crate::query::tasks::TaskStatus;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTaskArgs {
    /// Project id (UUID string) from list_projects.
    pub project_id: Uuid,
    /// Task title (non-empty).
    pub title: String,
    /// What the agent should do; the prompt of the first attempt.
    #[serde(default)]
    pub description: Option<String>,
    /// Initial status: `todo` (default), `inprogress`, `inreview`, `done` or `cancelled`.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// the same arguments returns the same task instead of creating another.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level of the answer's task or status: 0 (default) the fields needed to decide
    /// the next call; 1 adds timestamps and metadata; 2 every field.
    #[serde(default)]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTaskArgs {
    /// Task id (UUID string).
    pub task_id: Uuid,
    /// New title.
    #[serde(default)]
    pub title: Option<String>,
    /// New description (an empty string clears it).
    #[serde(default)]
    pub description: Option<String>,
    /// New status: `todo`, `inprogress`, `inreview`, `done` or `cancelled`.
    #[serde(default)]
    pub status: Option<TaskStatus>,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// the same arguments returns the first answer (`replayed: true`) without writing again;
    /// the same key with other arguments fails with `idempotency_conflict`.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level of the answer's task or status: 0 (default) the fields needed to decide
    /// the next call; 1 adds timestamps and metadata; 2 every field.
    #[serde(default)]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteTaskArgs {
    /// Task id (UUID string). Its attempts and worktrees are deleted too.
    pub task_id: Uuid,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// task answers the same `deleted_task_id` (`replayed: true`) even though the task is gone;
    /// the same key with another task_id fails with `idempotency_conflict`.
    #[serde(default)]
    pub request_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RepoTarget {
    /// Repository id (UUID string) from list_repos.
    pub repo_id: Uuid,
    /// Branch the attempt's work is based on and targets (e.g. `main`).
    pub target_branch: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartAttemptArgs {
    /// Task id (UUID string).
    pub task_id: Uuid,
    /// Executor identifier exactly as list_executors returns it (e.g. `CLAUDE_CODE`).
    pub executor: String,
    /// Executor variant from list_executors `variants`; omit for the default.
    #[serde(default)]
    pub variant: Option<String>,
    /// Repositories to work in, each with its target branch (at least one).
    #[schemars(length(min = 1))]
    pub repos: Vec<RepoTarget>,
    /// When the task already has a running attempt, return it instead of starting another
    /// (default false).
    #[serde(default)]
    pub reuse_running_attempt: Option<bool>,
    /// Idempotency key: a retry with the same key and arguments returns the same attempt.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level of the answer's task or status: 0 (default) the fields needed to decide
    /// the next call; 1 adds timestamps and metadata; 2 every field.
    #[serde(default)]
    pub detail: Option<Detail>,
}

/// What follow_up does.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum FollowUpActionArg {
    // Start a new agent run in the session with `prompt` now.
    Send,
    // Queue `prompt` to run when the current run finishes (replaces a queued one).
    Queue,
    // Remove the queued message.
    Cancel,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"properties": {"action": {"enum": ["send", "queue"]}}, "required": ["action"]},
    "then" = {
        "required": ["prompt"],
        "if": {"required": ["attempt_id"]},
        "then": {"not": {"required": ["session_id"]}},
        "else": {"required": ["session_id"]}
    },
    "else" = {
        "if": {"required": ["attempt_id"]},
        "then": {"not": {"required": ["session_id"]}},
        "else": {"required": ["session_id"]}
    }
))]
pub struct FollowUpArgs {
    /// `send` (run `prompt` now), `queue` (run `prompt` after the current run) or `cancel`
    /// (drop the queued message). `prompt` is required for send and queue.
    pub action: FollowUpActionArg,
    /// The message for the agent; required when action is `send` or `queue`, not allowed for
    /// `cancel`.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Executor variant for this run (from list_executors); omit to keep the session's.
    #[serde(default)]
    pub variant: Option<String>,
    /// Attempt id (UUID string): acts on its latest session. Give exactly one of `attempt_id`
    /// or `session_id`.
    #[serde(default)]
    pub attempt_id: Option<Uuid>,
    /// Session id (UUID string). Give exactly one of `attempt_id` or `session_id`.
    #[serde(default)]
    pub session_id: Option<Uuid>,
    /// Idempotency key for send, queue and cancel: a retry with the same key and arguments
    /// returns the first answer (`replayed: true`) without acting again (no second run, no
    /// second cancel); the same key with other arguments fails with `idempotency_conflict`.
    #[serde(default)]
    pub request_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["attempt_id"]},
    "then" = {"not": {"required": ["execution_process_id"]}},
    "else" = {
        "required": ["execution_process_id"],
        "not": {
            "required": ["force"],
            "properties": {"force": {
                "const": true,
                "description": "force=true is refused with execution_process_id (VK's process stop has no force variant)."
            }}
        }
    }
))]
pub struct StopArgs {
    /// Attempt id (UUID string): stops its running agent and scripts, never its dev servers.
    /// Give exactly one of `attempt_id` or `execution_process_id`.
    #[serde(default)]
    pub attempt_id: Option<Uuid>,
    /// Execution process id (UUID string): stops that one process, a dev server included.
    /// Give exactly one of `attempt_id` or `execution_process_id`.
    #[serde(default)]
    pub execution_process_id: Option<Uuid>,
    /// Attempt stops only: VK's force path, which also marks processes VK lost the handle of
    /// (e.g. after a VK restart) as killed. Not a harder kill: every stop interrupts, waits
    /// about 5 s, then kills. Not allowed with `execution_process_id` (VK's process stop has no
    /// force variant). Default false.
    #[serde(default)]
    pub force: Option<bool>,
    /// Idempotency key: a retry with the same key and arguments answers the first stop
    /// (`replayed: true`) without calling VK again; the same key with other arguments fails
    /// with `idempotency_conflict`.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level of the answer's task or status: 0 (default) the fields needed to decide
    /// the next call; 1 adds timestamps and metadata; 2 every field.
    #[serde(default)]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// File path inside the workspace, `<repo>/<path>` as get_attempt_changes lists it. No
    /// absolute paths, no `..`.
    pub path: String,
    /// Byte offset to start at (default 0). Byte mode only: not with `start_line`/`end_line`.
    #[serde(default)]
    pub start: Option<u64>,
    /// Most bytes to return, 1–524288 (default 65536). In line mode the cap on the lines
    /// returned (whole lines only).
    #[serde(default)]
    #[schemars(range(min = 1, max = 524288))]
    pub max_bytes: Option<u64>,
    /// Line mode: first line to return, 1-based (default 1 when only `end_line` is given).
    /// Lines end after `\n`; content comes back verbatim (`\r\n` stays). Not with `start`.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub start_line: Option<u64>,
    /// Line mode: last line to return, inclusive, ≥ `start_line` (default: as many lines as fit
    /// `max_bytes`). Not with `start`.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub end_line: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// 1–100 paths, `<repo>/<path>` as get_attempt_changes lists them.
    #[schemars(length(min = 1, max = 100))]
    pub paths: Vec<String>,
    /// Produce the patch even when the diff guard's thresholds are exceeded (default false).
    #[serde(default)]
    pub force: Option<bool>,
    /// Most bytes of patch text to return, 1–2097152 (default 204800); longer patches are cut
    /// with `truncated: true`.
    #[serde(default)]
    #[schemars(range(min = 1, max = 2097152))]
    pub max_bytes: Option<u64>,
}
