//! Public value types of the simulator API: configuration, script descriptions, fault switches,
//! call counters and the ground-truth snapshot tests compare the daemon's cache with.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

/// How the simulator behaves; every field mirrors a VK knob or a test convenience.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Period of the SSE `:` keep-alive comment (VK: 15 s).
    pub keepalive: Duration,
    /// Period of the WebSocket pings on object and log streams (VK: 30 s).
    pub ws_ping: Duration,
    /// Delay before SSE/object-stream frames go out (VK's outbox poll). Log WS are immediate.
    pub outbox_delay: Duration,
    /// `VK_LOG_HISTORY_MAX_ENTRIES`: entries of history kept per process and channel in VK's
    /// in-memory log store (what a log WebSocket replays on connect).
    pub history_max_entries: usize,
    /// VK persists logs to its database: history pages serve every entry, not only the
    /// in-memory window (docs/vk-contract.md §4.3). Off by default, like the recordings.
    pub log_db: bool,
    /// When set, `/api/**` requires this token (Bearer / X-API-Token; `?token=` on SSE and WS).
    pub auth_token: Option<String>,
    /// Pause between scripted steps.
    pub step_delay: Duration,
    /// Which VK's wire the simulator speaks (the world and the world-building calls are the same
    /// for both).
    pub dialect: SimDialect,
    /// How long the fork's stop routes (attempt and process) take before they kill and answer:
    /// VK interrupts the agent and gives it about 5 s before the kill (about 7 s observed).
    pub stop_delay: Duration,
}

/// The wire a simulator speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SimDialect {
    /// The fork's: projects, tasks, task attempts, sequenced streams (`tests/fixtures/vk-wire`).
    #[default]
    Fork,
    /// BloopAI VK 0.1.44's workspace-first wire: workspaces, sessions, processes, repos; no
    /// projects or tasks (`tests/fixtures/vk-wire-bloop`, docs/vk-contract.md §12).
    Workspaces,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            keepalive: Duration::from_secs(15),
            ws_ping: Duration::from_secs(30),
            outbox_delay: Duration::ZERO,
            history_max_entries: 5000,
            log_db: false,
            auth_token: None,
            step_delay: Duration::from_millis(20),
            dialect: SimDialect::Fork,
            stop_delay: Duration::ZERO,
        }
    }
}

/// Ids of a freshly created attempt (a VK workspace) and its first session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptIds {
    pub attempt_id: Uuid,
    pub session_id: Uuid,
}

/// `run_reason` of an execution process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunReason {
    SetupScript,
    CodingAgent,
    CleanupScript,
    DevServer,
}

impl RunReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunReason::SetupScript => "setupscript",
            RunReason::CodingAgent => "codingagent",
            RunReason::CleanupScript => "cleanupscript",
            RunReason::DevServer => "devserver",
        }
    }
}

/// Which log history of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Normalized,
    Raw,
}

/// `status` of an execution process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessStatus {
    Running,
    Completed,
    Failed,
    Killed,
}

impl ProcessStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProcessStatus::Running => "running",
            ProcessStatus::Completed => "completed",
            ProcessStatus::Failed => "failed",
            ProcessStatus::Killed => "killed",
        }
    }
}

/// One changed file of an attempt, as VK's diff would report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimFile {
    pub repo: String,
    pub path: String,
    /// `added` / `modified` / `deleted` / `renamed`.
    pub change: String,
    pub additions: u64,
    pub deletions: u64,
    pub content: String,
}

/// How the coding agent of a script ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentOutcome {
    Succeed,
    Fail,
    Killed,
}

/// A scripted attempt: setup → coding agent → cleanup (VK skips cleanup after a failed agent).
#[derive(Debug, Clone)]
pub struct AttemptScript {
    pub executor: String,
    pub setup: bool,
    pub agent: AgentOutcome,
    pub normalized_entries: usize,
    pub raw_entries: usize,
    pub replacements: usize,
    pub cleanup: bool,
    pub files: Vec<SimFile>,
    pub dev_server: bool,
    /// The agent's first Bash call asks for approval and waits for it (VK's APPROVALS variant).
    pub approval: Option<ApprovalScript>,
}

/// A tool call that asks for approval: what it runs and how long VK waits for an answer.
#[derive(Debug, Clone)]
pub struct ApprovalScript {
    /// The Bash command of the tool call.
    pub command: String,
    /// VK's `APPROVAL_TIMEOUT_SECONDS` (1 h); scripts use a short one to see a timeout.
    pub timeout: Duration,
    /// Time between the `created` tool_use entry and the approval (the CLI's hook callback
    /// and `can_use_tool`; about 0.5 s on a real VK). None: one `step_delay`.
    pub ask_after: Option<Duration>,
}

impl Default for ApprovalScript {
    fn default() -> Self {
        Self {
            command: "rm -rf build && cargo build".to_string(),
            timeout: Duration::from_secs(3600),
            ask_after: None,
        }
    }
}

impl Default for AttemptScript {
    fn default() -> Self {
        Self {
            executor: "CLAUDE_CODE".to_string(),
            setup: true,
            agent: AgentOutcome::Succeed,
            normalized_entries: 6,
            raw_entries: 6,
            replacements: 1,
            cleanup: true,
            files: Vec::new(),
            dev_server: false,
            approval: None,
        }
    }
}

/// Fault switches; all off by default.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Inject unparseable `data:` events between real SSE events.
    pub garbage_sse: bool,
    /// Inject non-JSON and wrong-typed frames into object and log WebSockets.
    pub garbage_ws: bool,
    /// Close each log WebSocket abruptly after N frames.
    pub drop_log_ws_after: Option<usize>,
    /// History v2 answers only from entry index K = len/2 on (older entries gone, truncated).
    pub skip_history: bool,
    /// New SSE connections get nothing at all (no headers, no events, no keep-alive), and open
    /// ones stop sending keep-alives: a dead stream. Switching it off drops the stalled ones.
    pub stall_sse: bool,
    /// Hostile upstream: object WebSockets also carry an unknown patch op and a 20 MB junk frame,
    /// log WebSockets a negative index, and SSE a 10 MB line without a newline.
    pub hostile: bool,
    /// Log WebSocket upgrades are refused (502), as behind a proxy without WebSocket support:
    /// only history v2 reaches the logs.
    pub refuse_log_ws: bool,
    /// History v2 answers this long after the request, with the page as it was on arrival.
    pub slow_history: Option<Duration>,
    /// `GET …/changes` answers 200 with a body that is not JSON.
    pub garbage_changes: bool,
    /// Object WebSockets (tasks, processes) opened for a snapshot follow it with every patch of
    /// history, which the snapshot already holds: VK reads its snapshot after it subscribed and
    /// then sends the patches since the subscription (this is the worst case of that race).
    pub replay_after_snapshot: bool,
    /// VK 0.1.x only (wire fact 1): a process's updates on the session stream carry its
    /// earlier status, `running` (VK's update hook read the row before the write committed),
    /// so the stream never shows it ended; REST and a new snapshot do.
    pub stale_process_deltas: bool,
    /// VK 0.1.x only (wire fact 1): the session stream sends nothing of a process (its `add`
    /// lost, and every later change); a new snapshot has it.
    pub lost_process_deltas: bool,
}

/// How many times each route was called.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimCounters {
    pub task_creations: u64,
    pub task_updates: u64,
    pub task_deletions: u64,
    pub attempt_creations: u64,
    pub follow_ups: u64,
    pub queue_posts: u64,
    pub stops: u64,
    /// Every REST GET under `/api` (WS upgrades and SSE excluded).
    pub rest_gets: u64,
    pub sse_connections: u64,
    /// The resume point of each SSE connection, in order (`after_seq` or `Last-Event-ID`).
    pub sse_resumes: Vec<Option<u64>>,
    pub ws_connections: u64,
    /// Processes-stream sockets open now (the daemon keeps one per attempt it watches).
    pub processes_ws_open: u64,
    /// `"METHOD /matched/route"` → calls.
    pub by_route: BTreeMap<String, u64>,
    /// `GET /api/task-attempts/{id}/changes` calls by attempt id.
    pub changes_reads: BTreeMap<uuid::Uuid, u64>,
}

/// The ground truth, as VK's REST would return it now.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    pub projects: BTreeMap<Uuid, Value>,
    pub repos: BTreeMap<Uuid, Vec<Value>>,
    pub tasks: BTreeMap<Uuid, Value>,
    pub attempts: BTreeMap<Uuid, Value>,
    pub sessions: BTreeMap<Uuid, Value>,
    pub processes: BTreeMap<Uuid, Value>,
    pub normalized_logs: BTreeMap<Uuid, Vec<Value>>,
    pub raw_logs: BTreeMap<Uuid, Vec<Value>>,
    pub changes: BTreeMap<Uuid, Value>,
    pub attempt_status: BTreeMap<Uuid, Value>,
}
