//! Messages from the stream tasks to the coordinator. Stream tasks write what they learned to
//! the store themselves (through the writer handle); signals only carry what the coordinator
//! needs to decide what to fetch, open or close next.

use serde_json::Value;
use uuid::Uuid;

use vk_observer_vk::{Channel, ProcessFacts};

#[derive(Debug)]
pub enum Signal {
    /// `invalidate` from SSE or the companion of an object-stream frame.
    TaskHints { task_ids: Vec<Uuid> },
    /// An SSE event was received; its id is applied once the hints before it are handled.
    SseSeq { seq: u64 },
    /// VK cannot resume (`invalidate_all`, restarted, lagged): refetch everything.
    ResyncAll {
        reason: String,
        watermark: Option<u64>,
    },
    /// A projects snapshot was written.
    Projects { ids: Vec<Uuid> },
    /// A tasks-stream snapshot of a project was written.
    TasksSnapshot {
        project_id: Uuid,
        task_ids: Vec<Uuid>,
    },
    /// Processes of an attempt as now stored (snapshot or single changes).
    Processes {
        attempt_id: Uuid,
        snapshot: bool,
        processes: Vec<ProcessFacts>,
        removed: Vec<Uuid>,
    },
    /// A process stream ended for good (VK says the workspace is gone).
    ProcessStreamGone { attempt_id: Uuid },
    /// A log follower finished: `complete` means every entry of the ended process is stored.
    LogDone {
        process_id: Uuid,
        channel: Channel,
        complete: bool,
        /// It stopped after repeated upstream failures; otherwise an incomplete end means the
        /// process still ran at its last look.
        gave_up: bool,
    },
    /// A REST refresh of a task's attempts finished.
    TaskRefreshed { task_id: Uuid, attempts: Vec<Uuid> },
    /// Read an attempt's branch status from VK now (after a git action made through the
    /// daemon, on `refresh: true`, or on a first read). VK has no stream of git state, so this
    /// REST read is the only way it enters the cache; `done` hears once it is stored (or why
    /// not), so the asking tool can answer from the cache right after.
    RefreshBranchStatus {
        attempt_id: Uuid,
        done: Option<tokio::sync::oneshot::Sender<super::error::IngestResult<()>>>,
    },
    /// A `tool_use` entry of a normalized log arrived (the process may be a coding agent whose
    /// tools change files: its attempt's change summary may be due for a re-read).
    ToolUseLogged { attempt_id: Uuid, process_id: Uuid },
    /// A re-read of an attempt's change summary ended (`ok`: VK answered and it was stored).
    ChangesRefreshed { attempt_id: Uuid, ok: bool },
    /// A mutation went through the proxy: refresh this scope now instead of waiting for SSE.
    Nudge {
        task_id: Option<Uuid>,
        attempt_id: Option<Uuid>,
    },
    /// VK 0.1.x: a task kept by the daemon (VK 0.1.x has none of its own) was created or
    /// edited: `create_task` / `update_task` (docs/agent-guide.md "Which VK").
    DraftTask { task: Value },
    /// VK 0.1.x: a daemon-kept task was deleted.
    DraftRemoved { task_id: Uuid },
    /// VK 0.1.x: `start_task_attempt` started this workspace for this task (a daemon-kept task,
    /// or a workspace's own): the workspace stands as an attempt of that task.
    Linked { task_id: Uuid, workspace_id: Uuid },
}
