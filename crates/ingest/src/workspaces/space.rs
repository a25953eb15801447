//! What the board knows of one VK 0.1.x workspace, and the domain events that say it in the
//! fork's shapes (`workspace_model`). Pure: the board feeds it what its streams and reads
//! learned and writes what it answers.

use std::collections::BTreeMap;

use serde_json::Value;
use uuid::Uuid;

use super::super::workspace_model::{self as model, Board, Workspace};
use vk_observer_store::events::DomainEvent;
use vk_observer_vk::{self as vk, ProcessStatus};

/// One workspace: its latest JSON, what REST said of it, and its sessions' processes.
#[derive(Debug, Clone)]
pub(crate) struct Space {
    /// The latest workspaces-stream value (with `is_running`/`is_errored`).
    pub json: Value,
    /// Its repos and sessions, once read (`GET …/repos`, `GET /api/sessions?workspace_id=`).
    pub details: Option<Details>,
    /// Each session's processes (0.1.x JSON), once its stream sent a snapshot.
    pub processes: BTreeMap<Uuid, Vec<Value>>,
    /// Its details could not be read (VK kept failing): left out of the board meanwhile.
    pub unreadable: bool,
    /// When a process that says it runs while VK's flag says nothing does is read again.
    pub recheck_at: Option<std::time::Instant>,
}

/// A workspace's REST details.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Details {
    pub repos: Vec<Value>,
    pub sessions: Vec<Value>,
}

impl Space {
    pub(crate) fn new(json: Value) -> Space {
        Space {
            json,
            details: None,
            processes: BTreeMap::new(),
            unreadable: false,
            recheck_at: None,
        }
    }

    pub(crate) fn id(&self) -> Option<Uuid> {
        vk::object_id(&self.json)
    }

    /// The ids of its sessions (empty before the details are read).
    pub(crate) fn session_ids(&self) -> Vec<Uuid> {
        let sessions = self.details.as_ref().map(|d| d.sessions.as_slice());
        sessions
            .unwrap_or_default()
            .iter()
            .filter_map(vk::object_id)
            .collect()
    }

    /// Every session's processes are known (a session without a snapshot yet holds it back:
    /// a processes snapshot of some sessions would remove the others' processes for a while).
    pub(crate) fn processes_known(&self) -> bool {
        self.details.is_some()
            && self
                .session_ids()
                .iter()
                .all(|s| self.processes.contains_key(s))
    }

    /// Every known process, of all sessions.
    pub(crate) fn all_processes(&self) -> Vec<Value> {
        self.processes.values().flatten().cloned().collect()
    }

    /// VK's `is_running` flag (the workspaces stream's; `None` without it).
    pub(crate) fn flag_running(&self) -> Option<bool> {
        self.json.get("is_running").and_then(Value::as_bool)
    }

    /// VK says the workspace runs something, or one of its processes still says it runs.
    pub(crate) fn is_active(&self) -> bool {
        let flag = self.json.get("is_running").and_then(Value::as_bool) == Some(true);
        flag || !self.running_processes().is_empty()
    }

    /// Processes that say they run (maybe stale: wire fact 1), dev servers aside.
    pub(crate) fn running_processes(&self) -> Vec<Uuid> {
        self.processes
            .values()
            .flatten()
            .filter(|p| ProcessStatus::Running.is(vk::status(p)))
            .filter(|p| !vk::RunReason::DevServer.is(vk::run_reason(p)))
            .filter_map(vk::object_id)
            .collect()
    }

    /// Puts a process read from REST in its session's list (a stale delta corrected).
    pub(crate) fn correct_process(&mut self, process: &Value) -> bool {
        let (Some(id), Some(session)) =
            (vk::object_id(process), vk::uuid_of(process, "session_id"))
        else {
            return false;
        };
        let Some(list) = self.processes.get_mut(&session) else {
            return false;
        };
        match list.iter_mut().find(|p| vk::object_id(p) == Some(id)) {
            Some(old) if old != process => {
                *old = process.clone();
                true
            }
            _ => false,
        }
    }

    /// Its repos (empty before the details are read).
    pub(crate) fn repos(&self) -> &[Value] {
        self.details.as_ref().map_or(&[], |d| d.repos.as_slice())
    }

    /// The workspace in the fork's shapes, as an attempt of `task_id` when a task links it
    /// (its own task otherwise); `None` before its details are read.
    pub(crate) fn mapped(&self, linked: Option<Uuid>) -> Option<model::Mapped> {
        let details = self.details.as_ref()?;
        let processes = self.all_processes();
        let ws = Workspace {
            json: &self.json,
            repos: &details.repos,
            processes: &processes,
        };
        model::map_workspace(&Linked(linked), ws)
    }

    /// The rows below the attempt: its repos, its sessions and (when every session reported)
    /// its processes; nothing before its details are read.
    pub(crate) fn attempt_events(&self) -> Vec<DomainEvent> {
        let (Some(id), Some(details)) = (self.id(), self.details.as_ref()) else {
            return Vec::new();
        };
        let mut events = vec![
            DomainEvent::AttemptReposSnapshot {
                attempt_id: id,
                repos: details.repos.iter().map(model::repo).collect(),
            },
            DomainEvent::SessionsSnapshot {
                attempt_id: id,
                sessions: details.sessions.iter().map(model::session).collect(),
            },
        ];
        if self.processes_known() {
            events.push(DomainEvent::ProcessesSnapshot {
                attempt_id: id,
                processes: self.all_processes().iter().map(model::process).collect(),
            });
        }
        events
    }

    /// The status its task would have from this workspace alone (`workspace_model`'s rule).
    pub(crate) fn task_status(&self) -> model::TaskStatus {
        model::task_status(&self.json, &self.all_processes())
    }
}

/// A board of one link: the task a workspace stands under, decided by the board's links.
struct Linked(Option<Uuid>);

impl Board for Linked {
    fn linked_task(&self, _workspace: Uuid) -> Option<Uuid> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn space() -> Space {
        let id = Uuid::from_u128(1);
        let session = Uuid::from_u128(2);
        let mut s = Space::new(json!({"id": id, "name": "w", "is_running": true,
            "created_at": "2026-11-28T10:00:00Z", "updated_at": "2026-11-28T10:00:00Z"}));
        s.details = Some(Details {
            repos: vec![
                json!({"id": Uuid::from_u128(3), "name": "alpha", "target_branch": "main"}),
            ],
            sessions: vec![json!({"id": session, "workspace_id": id, "executor": "CLAUDE_CODE"})],
        });
        s
    }

    #[test]
    fn processes_are_held_back_until_every_session_reported() {
        let mut s = space();
        let kinds = |s: &Space| {
            s.attempt_events()
                .iter()
                .filter(|e| matches!(e, DomainEvent::ProcessesSnapshot { .. }))
                .count()
        };
        assert_eq!(kinds(&s), 0);
        s.processes.insert(Uuid::from_u128(2), vec![]);
        assert_eq!(kinds(&s), 1);
    }

    #[test]
    fn a_stale_running_process_is_corrected_by_its_read() {
        let mut s = space();
        let p = json!({"id": Uuid::from_u128(9), "session_id": Uuid::from_u128(2),
            "run_reason": "codingagent", "status": "running"});
        s.processes.insert(Uuid::from_u128(2), vec![p.clone()]);
        assert_eq!(s.running_processes(), vec![Uuid::from_u128(9)]);
        let mut done = p;
        done["status"] = json!("completed");
        assert!(s.correct_process(&done));
        assert!(s.running_processes().is_empty());
        assert!(
            !s.correct_process(&done),
            "the same read twice changes nothing"
        );
    }

    #[test]
    fn nothing_is_said_before_the_details_are_read() {
        let s = Space::new(json!({"id": Uuid::from_u128(1)}));
        assert!(s.attempt_events().is_empty());
        assert!(s.mapped(None).is_none());
    }
}
