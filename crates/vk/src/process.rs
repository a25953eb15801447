//! Execution processes in VK's words: why a process ran (`run_reason`), where it stands
//! (`status`), and which processes count for an attempt. VK's `/status` counts coding agents,
//! setup and cleanup scripts; a dev server is long-lived and outside the attempt loop (its
//! logs are not followed, it never makes an attempt "running"), and a `dropped` process is one
//! VK discarded. Values VK may add later are kept as strings, never rejected.

use serde_json::Value;
use uuid::Uuid;

use super::fields::{str_of, uuid_of};

/// `run_reason` of an execution process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RunReason {
    CodingAgent,
    SetupScript,
    CleanupScript,
    DevServer,
    /// A reason this daemon does not know (kept verbatim; never relevant).
    Other(String),
}

/// Run reasons in VK's tie-break order for the relevant process.
pub const RELEVANT_REASONS: [RunReason; 3] = [
    RunReason::CodingAgent,
    RunReason::SetupScript,
    RunReason::CleanupScript,
];

impl RunReason {
    pub fn parse(s: &str) -> RunReason {
        match s {
            "codingagent" => RunReason::CodingAgent,
            "setupscript" => RunReason::SetupScript,
            "cleanupscript" => RunReason::CleanupScript,
            "devserver" => RunReason::DevServer,
            other => RunReason::Other(other.to_string()),
        }
    }

    /// VK's spelling.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            RunReason::CodingAgent => "codingagent",
            RunReason::SetupScript => "setupscript",
            RunReason::CleanupScript => "cleanupscript",
            RunReason::DevServer => "devserver",
            RunReason::Other(s) => s,
        }
    }

    /// True when `s` is VK's spelling of this reason (no allocation on hot paths).
    pub fn is(&self, s: &str) -> bool {
        self.as_str() == s
    }

    /// Counts for attempt state and logs (before the `dropped` flag is considered).
    pub fn is_relevant(&self) -> bool {
        RELEVANT_REASONS.contains(self)
    }
}

/// True when `s` spells a relevant run reason (no allocation: used per process on hot paths).
pub fn is_relevant_reason(s: &str) -> bool {
    RELEVANT_REASONS.iter().any(|r| r.is(s))
}

impl std::fmt::Display for RunReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `status` of an execution process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProcessStatus {
    Running,
    Completed,
    Failed,
    /// Stopped (by `stop`, or a dev server shut down); VK leaves `exit_code` null.
    Killed,
    /// A status this daemon does not know, or none (kept verbatim).
    Other(String),
}

impl ProcessStatus {
    pub fn parse(s: &str) -> ProcessStatus {
        match s {
            "running" => ProcessStatus::Running,
            "completed" => ProcessStatus::Completed,
            "failed" => ProcessStatus::Failed,
            "killed" => ProcessStatus::Killed,
            other => ProcessStatus::Other(other.to_string()),
        }
    }

    /// VK's spelling.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            ProcessStatus::Running => "running",
            ProcessStatus::Completed => "completed",
            ProcessStatus::Failed => "failed",
            ProcessStatus::Killed => "killed",
            ProcessStatus::Other(s) => s,
        }
    }

    /// True when `s` is VK's spelling of this status (no allocation on hot paths).
    pub fn is(&self, s: &str) -> bool {
        self.as_str() == s
    }

    pub fn is_running(&self) -> bool {
        *self == ProcessStatus::Running
    }

    /// Ended badly: failed, or stopped before it finished.
    pub fn is_failure(&self) -> bool {
        matches!(self, ProcessStatus::Failed | ProcessStatus::Killed)
    }
}

impl std::fmt::Display for ProcessStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A process's `run_reason` as sent ("" when absent).
pub fn run_reason(p: &Value) -> &str {
    str_of(p, "run_reason").unwrap_or("")
}

/// A process's `status` as sent ("" when absent).
pub fn status(p: &Value) -> &str {
    str_of(p, "status").unwrap_or("")
}

pub fn is_dropped(p: &Value) -> bool {
    p.get("dropped").and_then(Value::as_bool).unwrap_or(false)
}

/// A process that counts for attempt state and logs: not a dev server, not dropped.
pub fn is_relevant(p: &Value) -> bool {
    is_relevant_reason(run_reason(p)) && !is_dropped(p)
}

/// Process fields the daemon decides on (which logs to follow, which streams to keep open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFacts {
    pub id: Uuid,
    pub session_id: Option<Uuid>,
    pub run_reason: RunReason,
    pub status: ProcessStatus,
}

impl ProcessFacts {
    /// None when `id`, `run_reason` or `status` is missing: such an object decides nothing.
    pub fn from_value(v: &Value) -> Option<ProcessFacts> {
        Some(ProcessFacts {
            id: uuid_of(v, "id")?,
            session_id: uuid_of(v, "session_id"),
            run_reason: RunReason::parse(str_of(v, "run_reason")?),
            status: ProcessStatus::parse(str_of(v, "status")?),
        })
    }

    pub fn is_running(&self) -> bool {
        self.status.is_running()
    }

    /// Dev servers are long-lived and outside the attempt loop: their logs are not followed.
    pub fn is_dev_server(&self) -> bool {
        self.run_reason == RunReason::DevServer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknowns_are_kept() {
        for s in [
            "codingagent",
            "setupscript",
            "cleanupscript",
            "devserver",
            "newkind",
        ] {
            assert_eq!(RunReason::parse(s).as_str(), s);
        }
        for s in ["running", "completed", "failed", "killed", ""] {
            assert_eq!(ProcessStatus::parse(s).as_str(), s);
        }
        assert!(!RunReason::parse("newkind").is_relevant());
        assert!(!RunReason::DevServer.is_relevant());
        assert!(ProcessStatus::Killed.is_failure());
    }

    #[test]
    fn facts_need_id_reason_and_status() {
        let v = serde_json::json!({"id": Uuid::from_u128(1), "run_reason": "devserver",
            "status": "running", "session_id": 7});
        let f = ProcessFacts::from_value(&v).unwrap();
        assert!(f.is_dev_server() && f.is_running() && f.session_id.is_none());
        assert!(ProcessFacts::from_value(&serde_json::json!({"id": Uuid::from_u128(1)})).is_none());
    }
}
