//! Target resolution, written once for every tool: how the ids an agent passes become the
//! cached objects a read or a mutation acts on. An attempt id names the attempt or, for
//! session-scoped tools, the attempt's latest session (VK's "latest": newest `created_at`, id
//! ascending), and a log tool's process is the named one or the attempt's log process; an id
//! the cache does not hold is always the same `not_found` envelope (from
//! `ToolError::unknown_*`), and an attempt without a session yet is `no_session_yet`.
//! Query, proxy and MCP resolve through here, so a rule change lands in every tool at once.

use uuid::Uuid;

use vk_observer_store::StoreReader;
use vk_observer_store::reader::Stored;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{self as vk, RunReason};

/// What a session-scoped tool (`tail_session_messages`, `follow_up`) targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionTarget {
    /// This session.
    Session(Uuid),
    /// The attempt's latest session.
    Attempt(Uuid),
}

impl SessionTarget {
    /// From a tool's two optional ids: exactly one must be given (None otherwise; the caller
    /// answers `invalid_argument`, reason `ambiguous_target`, naming its own fields).
    pub fn from_ids(session_id: Option<Uuid>, attempt_id: Option<Uuid>) -> Option<SessionTarget> {
        match (session_id, attempt_id) {
            (Some(s), None) => Some(SessionTarget::Session(s)),
            (None, Some(a)) => Some(SessionTarget::Attempt(a)),
            _ => None,
        }
    }
}

/// The cached attempt, or the unknown-attempt envelope.
pub fn attempt(reader: &StoreReader, id: Uuid) -> Result<Stored, ToolError> {
    reader
        .attempt(id)?
        .ok_or_else(|| ToolError::unknown_attempt(id))
}

/// The cached task, or the unknown-task envelope.
pub fn task(reader: &StoreReader, id: Uuid) -> Result<Stored, ToolError> {
    reader.task(id)?.ok_or_else(|| ToolError::unknown_task(id))
}

/// The cached project, or the unknown-project envelope.
pub fn project(reader: &StoreReader, id: Uuid) -> Result<Stored, ToolError> {
    reader
        .project(id)?
        .ok_or_else(|| ToolError::unknown_project(id))
}

/// The process a log tool reads among an attempt's `processes`: the one named (it must be one
/// of them, and not a dev server: their logs are not cached), else VK's log process of the
/// attempt (`vk::log_process`); None when the attempt has none yet.
pub(crate) fn log_process(
    processes: &[Stored],
    named: Option<Uuid>,
) -> Result<Option<&Stored>, ToolError> {
    let Some(pid) = named else {
        return Ok(vk::log_process(processes));
    };
    let p = processes.iter().find(|p| p.id == pid).ok_or_else(|| {
        ToolError::not_found(
            "execution_process",
            pid,
            "That execution_process_id is not a process of this attempt; omit it to follow the attempt's latest process.",
        )
    })?;
    if RunReason::DevServer.is(vk::run_reason(&p.value)) {
        return Err(ToolError::invalid_field(
            "execution_process_id",
            "Dev server logs are not cached; omit execution_process_id to read the attempt's agent log.",
        ));
    }
    Ok(Some(p))
}

/// The session a tool acts on: the one named, or the latest session of the attempt named.
pub fn session(reader: &StoreReader, target: SessionTarget) -> Result<Stored, ToolError> {
    match target {
        SessionTarget::Session(id) => reader
            .session(id)?
            .ok_or_else(|| ToolError::unknown_session(id)),
        SessionTarget::Attempt(a) => {
            attempt(reader, a)?;
            let sessions = reader.sessions_of_attempt(a)?;
            vk::latest(&sessions)
                .cloned()
                .ok_or_else(|| ToolError::no_session_yet(a))
        }
    }
}
