//! Domain events: what ingest tells the store writer. Each variant is a fact about VK's state,
//! already decoded from the wire; snapshots carry the full membership of a scope so the writer
//! can compute removals. Entities stay VK's JSON objects (`Value`), log entries VK's raw bytes.

use serde_json::Value;
use serde_json::value::RawValue;
use uuid::Uuid;

pub use vk_observer_vk::Channel;

/// Serialized (externally tagged, so raw log entries stay raw) when a batch is replicated to a
/// fleet (`store::outbox`, design-notes §23).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DomainEvent {
    /// The whole project list (VK's projects stream only ever sends full snapshots).
    ProjectsSnapshot {
        projects: Vec<Value>,
    },
    /// All repositories of a project.
    ReposSnapshot {
        project_id: Uuid,
        repos: Vec<Value>,
    },
    TaskUpserted {
        task: Value,
    },
    TaskRemoved {
        task_id: Uuid,
    },
    /// Every task of a project (a tasks-stream snapshot).
    TasksSnapshot {
        project_id: Uuid,
        tasks: Vec<Value>,
    },
    /// Every attempt (VK workspace) of a task.
    AttemptsSnapshot {
        task_id: Uuid,
        attempts: Vec<Value>,
    },
    /// Every session of an attempt.
    SessionsSnapshot {
        attempt_id: Uuid,
        sessions: Vec<Value>,
    },
    ProcessUpserted {
        attempt_id: Uuid,
        process: Value,
    },
    ProcessRemoved {
        attempt_id: Uuid,
        process_id: Uuid,
    },
    /// Every execution process of an attempt (a process-stream snapshot).
    ProcessesSnapshot {
        attempt_id: Uuid,
        processes: Vec<Value>,
    },
    /// Log entries by index; an index already stored with other content is a replacement.
    LogEntriesPut {
        attempt_id: Uuid,
        process_id: Uuid,
        channel: Channel,
        entries: Vec<(u64, Box<RawValue>)>,
    },
    /// The process has ended and its whole log is stored (meta only: moves no token, but wakes
    /// the waits on `attempt_id`, so a wait holding a run's final message answers at once).
    LogsComplete {
        process_id: Uuid,
        channel: Channel,
        /// The process's attempt (absent in batches replicated by hosts of before 2026-11-29).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt_id: Option<Uuid>,
    },
    /// VK's log history answered `history_truncated`: it no longer has this log's entries below
    /// `oldest_available` (u64::MAX when it had none at all). Recorded only if the cache lacks
    /// one of them, so a log the daemon streamed live from entry 0 is not marked.
    LogHistoryLost {
        attempt_id: Uuid,
        process_id: Uuid,
        channel: Channel,
        oldest_available: u64,
    },
    /// A coding agent's token usage and cost, read from its raw stdout (Claude Code's
    /// stream-json, `ingest::usage`): the run's totals once its `result` line was read, else
    /// the sum of its assistant messages so far. Kept per process; a running sum never
    /// replaces the totals, nor a sum of more messages (`store::usage`).
    ProcessUsage {
        attempt_id: Uuid,
        process_id: Uuid,
        usage: super::usage::ProcessUsage,
    },
    /// VK's change summary of an attempt (`GET /api/task-attempts/{id}/changes?force=true`),
    /// with the time it was read under [`CHANGES_AS_OF`]. A summary equal to the stored one
    /// apart from that time changes nothing (the stored time stays: "unchanged since").
    ChangesUpdated {
        attempt_id: Uuid,
        changes: Value,
    },
    /// What the daemon needs of VK's `/api/info`: executors with variants, capabilities, the
    /// configured executor profile and the diff guard preset (nothing secret is kept).
    ServerInfo {
        info: Value,
    },
    /// The repositories of an attempt with their target branches (`/task-attempts/{id}/repos`).
    AttemptReposSnapshot {
        attempt_id: Uuid,
        repos: Vec<Value>,
    },
    /// VK's branch status of an attempt (`GET /api/task-attempts/{id}/branch-status`: one
    /// entry per repo) and when VK answered it (unix ms). The status moves the attempt's token
    /// only when it differs from the stored one; the read time is meta.
    BranchStatusRead {
        attempt_id: Uuid,
        repos: Vec<Value>,
        read_at_ms: i64,
    },
    /// The last VK SSE sequence id applied (meta only: moves no token).
    UpstreamSeq {
        seq: u64,
    },
    /// What identifies the running VK (meta only): changes when VK restarts.
    UpstreamIncarnation {
        id: String,
    },
    /// Fleet node only: one host's `ServerInfo` (its VK's executors and diff guard), kept per
    /// host beside the others.
    HostServerInfo {
        host: String,
        info: Value,
    },
    /// Fleet node only: the whole project list of one host; removes only projects whose
    /// `host` field names it (other hosts' projects stay).
    HostProjectsSnapshot {
        host: String,
        projects: Vec<Value>,
    },
    /// Fleet node only: one host's tasks of a project; a task it omits loses only this host
    /// from its `hosts` (a project on several hosts keeps the other hosts' tasks).
    HostTasksSnapshot {
        host: String,
        project_id: Uuid,
        tasks: Vec<Value>,
    },
    /// Fleet node only: one host's version of a task. The task keeps in `hosts` every host
    /// that reports it (a copied VK database gives two hosts one task id); the row shows the
    /// newest version any of them sent.
    HostTaskUpserted {
        host: String,
        task: Value,
    },
    /// Fleet node only: one host deleted a task; it takes only that host off the task (and
    /// off its attempts), and the task goes once no host reports it.
    HostTaskRemoved {
        host: String,
        task_id: Uuid,
    },
    /// Fleet node only: one host's attempts of a task; an attempt keeps in `hosts` every host
    /// that reports it, and one this host's list omits loses only this host.
    HostAttemptsSnapshot {
        host: String,
        task_id: Uuid,
        attempts: Vec<Value>,
    },
    /// Fleet node only (meta, moves no token): the last message applied from a host's stream,
    /// written in the same batch as that message's events.
    FleetPosition {
        host: String,
        position: FleetPosition,
    },
}

/// Where a fleet node is in one host's stream (`DomainEvent::FleetPosition`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FleetPosition {
    /// The stream's creation time: a recreated stream is read again from its start.
    #[serde(default)]
    pub stream_created: String,
    /// The JetStream sequence of the last message applied (or skipped as garbage).
    pub stream_seq: u64,
    /// The host store's epoch and token of the last batch applied (0 before any).
    pub epoch: u64,
    pub token: u64,
    /// The meta-only batch after `token` applied last (0: the token's own batch).
    #[serde(default)]
    pub meta: u32,
}

impl DomainEvent {
    /// Facts about this daemon's own VK connection, never replicated to a fleet.
    pub fn is_local_meta(&self) -> bool {
        matches!(
            self,
            DomainEvent::UpstreamSeq { .. }
                | DomainEvent::UpstreamIncarnation { .. }
                | DomainEvent::FleetPosition { .. }
        )
    }
}

/// The key a fleet node adds to project, task and attempt JSON: the name of the host that owns
/// it (`fleet::tag`; design-notes §23).
pub const HOST_FIELD: &str = "host";
/// The key under which a fleet node keeps, in a project's, task's or attempt's JSON, every host
/// that reports it (sorted): one id may live on several hosts (a copied VK database);
/// `HOST_FIELD` names the host whose version the row shows.
pub const HOSTS_FIELD: &str = "hosts";

/// The hosts a fleet node's row names in `hosts` when there are several (an id a copied VK
/// database gives more than one host), sorted; empty for one host, and off a fleet node.
pub fn several_hosts(row: &Value) -> Vec<String> {
    only_several(vk_observer_vk::strings(row.get(HOSTS_FIELD)))
}

/// `hosts` as answers show them: the list while it names more than one host, else none.
pub fn only_several(hosts: Vec<String>) -> Vec<String> {
    if hosts.len() < 2 {
        return Vec::new();
    }
    hosts
}

/// The key of a stored change summary under which ingest records when it read it from VK (an
/// RFC 3339 time; VK's answer has no such key).
pub const CHANGES_AS_OF: &str = "asOf";

/// The key of a stored change summary under which ingest keeps the per-file line counts it
/// read from VK's `/patch` (`{"<repo>/<path>": {"added": n, "deleted": n}}`; absent when they
/// could not be read, see `ingest::file_stats`).
pub const CHANGES_FILE_STATS: &str = "fileStats";

impl DomainEvent {
    /// Short name for logs and the event record.
    pub fn kind(&self) -> &'static str {
        match self {
            DomainEvent::ProjectsSnapshot { .. } => "projects_snapshot",
            DomainEvent::ReposSnapshot { .. } => "repos_snapshot",
            DomainEvent::TaskUpserted { .. } => "task_upserted",
            DomainEvent::TaskRemoved { .. } => "task_removed",
            DomainEvent::TasksSnapshot { .. } => "tasks_snapshot",
            DomainEvent::AttemptsSnapshot { .. } => "attempts_snapshot",
            DomainEvent::SessionsSnapshot { .. } => "sessions_snapshot",
            DomainEvent::ProcessUpserted { .. } => "process_upserted",
            DomainEvent::ProcessRemoved { .. } => "process_removed",
            DomainEvent::ProcessesSnapshot { .. } => "processes_snapshot",
            DomainEvent::LogEntriesPut { .. } => "log_entries_put",
            DomainEvent::LogsComplete { .. } => "logs_complete",
            DomainEvent::LogHistoryLost { .. } => "log_history_lost",
            DomainEvent::ProcessUsage { .. } => "process_usage",
            DomainEvent::ChangesUpdated { .. } => "changes_updated",
            DomainEvent::ServerInfo { .. } => "server_info",
            DomainEvent::AttemptReposSnapshot { .. } => "attempt_repos_snapshot",
            DomainEvent::BranchStatusRead { .. } => "branch_status_read",
            DomainEvent::UpstreamSeq { .. } => "upstream_seq",
            DomainEvent::UpstreamIncarnation { .. } => "upstream_incarnation",
            DomainEvent::HostServerInfo { .. } => "host_server_info",
            DomainEvent::HostProjectsSnapshot { .. } => "host_projects_snapshot",
            DomainEvent::HostTasksSnapshot { .. } => "host_tasks_snapshot",
            DomainEvent::HostTaskUpserted { .. } => "host_task_upserted",
            DomainEvent::HostTaskRemoved { .. } => "host_task_removed",
            DomainEvent::HostAttemptsSnapshot { .. } => "host_attempts_snapshot",
            DomainEvent::FleetPosition { .. } => "fleet_position",
        }
    }
}
