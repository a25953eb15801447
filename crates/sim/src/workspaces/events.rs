//! The workspaces dialect's change feed: turns the world's outbox changes into VK 0.1.x's JSON
//! Patch operations on `/workspaces/{id}` and `/execution_processes/{id}` (one operation a
//! patch, no sequence numbers) on the simulator's bus, which SSE replays and the object
//! WebSockets follow; and what a restart of a 0.1.x server does to the world.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use uuid::Uuid;

use super::render;
use crate::core::{Inner, lock};
use crate::types::ProcessStatus;
use crate::util::unix_ms;
use crate::world::{Change, Workspace, World};

/// What the feed has announced so far: the first sight of a workspace or process is an `add`,
/// later ones a `replace` (only when the workspace's value changed), and rows that are gone
/// from the world are `remove`d.
#[derive(Default)]
pub(crate) struct Wire {
    /// Workspace → (its task, the stream value last announced).
    workspaces: HashMap<Uuid, (Uuid, Value)>,
    /// Process → its workspace, once announced.
    processes: HashMap<Uuid, Uuid>,
    /// Tasks made by `POST /api/workspaces/start` to stand for one workspace each.
    hidden_tasks: HashSet<Uuid>,
}

impl Wire {
    pub(crate) fn hide_task(&mut self, task: Uuid) {
        self.hidden_tasks.insert(task);
    }

    /// Forgets a task made for a workspace; true when it was one.
    pub(crate) fn unhide_task(&mut self, task: Uuid) -> bool {
        self.hidden_tasks.remove(&task)
    }
}

fn patch(op: &str, path: String, value: Option<Value>) -> Value {
    match value {
        Some(v) => json!([{"op": op, "path": path, "value": v}]),
        None => json!([{"op": op, "path": path}]),
    }
}

/// Turns one outbox change into 0.1.x patches (rows read as they are now) and publishes them.
pub(crate) fn dispatch(inner: &Inner, change: Change) {
    let patches = {
        let w = inner.world();
        let mut wire = lock(&inner.wire);
        match change {
            Change::TaskCreated(_) => Vec::new(),
            Change::TaskUpdated(t) | Change::TaskDeleted(t) | Change::Workspace(t) => {
                task_patches(&w, &mut wire, t)
            }
            Change::ProcessCreated(pid) | Change::ProcessUpdated(pid) => {
                process_patches(&w, &mut wire, pid)
            }
        }
    };
    for p in patches {
        inner.bus.push(p);
    }
}

/// The workspaces of task `t`: new ones added, changed ones replaced, vanished ones removed
/// (with the processes announced under them).
fn task_patches(w: &World, wire: &mut Wire, t: Uuid) -> Vec<Value> {
    let mut current: Vec<&Workspace> = w.workspaces.values().filter(|ws| ws.task_id == t).collect();
    current.sort_by_key(|ws| ws.ord);
    let mut out: Vec<Value> = current
        .into_iter()
        .filter_map(|ws| announce_workspace(w, wire, ws))
        .collect();
    let mut gone: Vec<Uuid> = wire
        .workspaces
        .iter()
        .filter(|(id, (task, _))| *task == t && !w.workspaces.contains_key(id))
        .map(|(id, _)| *id)
        .collect();
    gone.sort();
    for id in gone {
        out.extend(forget_workspace(wire, id));
    }
    out
}

/// `add` or `replace /workspaces/{id}` when the stream value is new or changed.
fn announce_workspace(w: &World, wire: &mut Wire, ws: &Workspace) -> Option<Value> {
    let value = render::workspace_stream_json(w, ws, render::flags_of(w, ws.id));
    let op = match wire.workspaces.get(&ws.id) {
        Some((_, old)) if *old == value => return None,
        Some(_) => "replace",
        None => "add",
    };
    wire.workspaces.insert(ws.id, (ws.task_id, value.clone()));
    Some(patch(op, format!("/workspaces/{}", ws.id), Some(value)))
}

/// `remove /workspaces/{id}`, then `remove /execution_processes/{pid}` for its processes.
fn forget_workspace(wire: &mut Wire, id: Uuid) -> Vec<Value> {
    wire.workspaces.remove(&id);
    let mut out = vec![patch("remove", format!("/workspaces/{id}"), None)];
    let mut procs: Vec<Uuid> = wire
        .processes
        .iter()
        .filter(|(_, ws)| **ws == id)
        .map(|(pid, _)| *pid)
        .collect();
    procs.sort();
    for pid in procs {
        wire.processes.remove(&pid);
        out.push(patch("remove", format!("/execution_processes/{pid}"), None));
    }
    out
}

/// The process (`add` the first time, `replace` after), then its workspace if its value moved
/// (a process starting or ending flips `is_running` / `is_errored`).
fn process_patches(w: &World, wire: &mut Wire, pid: Uuid) -> Vec<Value> {
    let Some(p) = w.processes.get(&pid) else {
        return Vec::new();
    };
    let Some(ws) = w
        .sessions
        .get(&p.session_id)
        .and_then(|s| w.workspaces.get(&s.workspace_id))
    else {
        return Vec::new();
    };
    let op = match wire.processes.insert(pid, ws.id) {
        Some(_) => "replace",
        None => "add",
    };
    let path = format!("/execution_processes/{pid}");
    let mut out = vec![patch(op, path, Some(render::process_json(w, p)))];
    out.extend(announce_workspace(w, wire, ws));
    out
}

/// A restart of VK 0.1.x: every stream and socket ends without a close frame, the in-memory
/// event history (SSE's replay) is gone, running processes were killed by the shutdown (no
/// event: nobody was connected to see it), queued messages and pending approvals are lost.
pub(crate) fn restart(inner: &Inner) {
    // The old server writes its running processes killed as it goes (no delta reaches a
    // client), then every socket ends; the new one starts from the database: a client that
    // reconnects at once never reads a process of the old run as running.
    {
        let mut w = inner.world();
        let mut running: Vec<(u64, Uuid)> = w
            .processes
            .values()
            .filter(|p| p.status == ProcessStatus::Running)
            .map(|p| (p.ord, p.id))
            .collect();
        running.sort();
        for (_, pid) in running {
            w.complete_process(pid, ProcessStatus::Killed, None);
        }
        w.queue.clear();
    }
    inner.drop_connections();
    inner.bus.reset();
    inner.loaded_at.store(unix_ms(), Ordering::SeqCst);
    // Pending approvals belong to running processes: none is pending any more.
    inner.approvals_changed();
}
