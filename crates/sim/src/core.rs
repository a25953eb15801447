//! The simulator's shared state and its mutations: each mutation changes the simulated DB and
//! enqueues the outbox changes VK would; the outbox worker later turns them into sequenced
//! patches read from the current rows (VK's `EventService::dispatch_entry`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::bus::Bus;
use super::render;
use super::types::{
    Channel, Faults, ProcessStatus, RunReason, SimConfig, SimCounters, SimDialect, SimFile,
};
use super::util::unix_ms;
use super::world::{Change, World};

/// Idempotency record of one (scope, key).
pub(crate) enum Idem {
    InProgress(String),
    Done(String, Value),
}

pub(crate) struct Inner {
    pub cfg: SimConfig,
    pub world: Mutex<World>,
    pub bus: Bus,
    outbox: mpsc::UnboundedSender<(Instant, Change)>,
    pub faults: Mutex<Faults>,
    conns: Mutex<CancellationToken>,
    pub shutdown: CancellationToken,
    pub counters: Mutex<SimCounters>,
    pub idem: Mutex<HashMap<(String, String), Idem>>,
    pub loaded_at: AtomicU64,
    projects_seq: Mutex<u64>,
    pub projects_tx: broadcast::Sender<()>,
    pub diff_tx: broadcast::Sender<Uuid>,
    /// What the workspaces dialect has announced (`workspaces::events`); unused by the fork's.
    pub wire: Mutex<super::workspaces::Wire>,
    /// Rings when a tool approval is asked, answered, timed out or cancelled.
    pub approvals_tx: broadcast::Sender<()>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    /// Builds the state and spawns the outbox worker.
    pub(crate) fn new(cfg: SimConfig) -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Self {
            cfg,
            world: Mutex::new(World::default()),
            bus: Bus::new(),
            outbox: tx,
            faults: Mutex::new(Faults::default()),
            conns: Mutex::new(CancellationToken::new()),
            shutdown: CancellationToken::new(),
            counters: Mutex::new(SimCounters::default()),
            idem: Mutex::new(HashMap::new()),
            loaded_at: AtomicU64::new(unix_ms()),
            projects_seq: Mutex::new(0),
            projects_tx: broadcast::channel(64).0,
            diff_tx: broadcast::channel(256).0,
            wire: Mutex::new(super::workspaces::Wire::default()),
            approvals_tx: broadcast::channel(64).0,
        });
        tokio::spawn(outbox_worker(Arc::downgrade(&inner), rx));
        inner
    }

    pub(crate) fn world(&self) -> MutexGuard<'_, World> {
        lock(&self.world)
    }

    pub(crate) fn faults(&self) -> Faults {
        lock(&self.faults).clone()
    }

    /// The token every open SSE/WS connection watches; cancelled by `drop_connections`.
    pub(crate) fn conn_token(&self) -> CancellationToken {
        lock(&self.conns).child_token()
    }

    pub(crate) fn drop_connections(&self) {
        let mut t = lock(&self.conns);
        t.cancel();
        *t = CancellationToken::new();
    }

    pub(crate) fn enqueue(&self, changes: impl IntoIterator<Item = Change>) {
        let now = Instant::now();
        for c in changes {
            let _ = self.outbox.send((now, c));
        }
    }

    /// Projects WS seq: max(last + 1, unix ms).
    pub(crate) fn next_projects_seq(&self) -> u64 {
        let mut last = lock(&self.projects_seq);
        *last = (*last + 1).max(unix_ms());
        *last
    }

    pub(crate) fn projects_snapshot(&self) -> Value {
        let w = self.world();
        let map: serde_json::Map<String, Value> = w
            .projects
            .iter()
            .map(|p| (p.id.to_string(), render::project_json(p)))
            .collect();
        json!([{"op": "replace", "path": "/projects", "value": map}])
    }

    /// Config reload: new `loaded_at_unix_ms`, projects streams re-snapshot.
    pub(crate) fn reload_config(&self) {
        self.loaded_at.store(unix_ms(), Ordering::SeqCst);
        let _ = self.projects_tx.send(());
    }

    pub(crate) fn add_project(&self, name: &str, repos: &[&str]) -> Uuid {
        self.add_project_with_id(Uuid::new_v4(), name, repos)
    }

    pub(crate) fn add_project_with_id(&self, id: Uuid, name: &str, repos: &[&str]) -> Uuid {
        let id = self.world().add_project_with_id(id, name, repos);
        self.reload_config();
        id
    }

    pub(crate) fn add_task(&self, project_id: Uuid, title: &str, desc: Option<&str>) -> Uuid {
        let id = self.world().add_task(project_id, title, desc);
        self.enqueue([Change::TaskCreated(id)]);
        id
    }

    pub(crate) fn add_task_with_id(
        &self,
        id: Uuid,
        project: Uuid,
        title: &str,
        desc: Option<&str>,
    ) -> Uuid {
        let id = self.world().add_task_with_id(id, project, title, desc);
        self.enqueue([Change::TaskCreated(id)]);
        id
    }

    pub(crate) fn update_task(
        &self,
        id: Uuid,
        title: Option<&str>,
        desc: Option<Option<&str>>,
        status: Option<&str>,
    ) -> bool {
        {
            let mut w = self.world();
            let Some(t) = w.tasks.get_mut(&id) else {
                return false;
            };
            if let Some(title) = title {
                t.title = title.to_string();
            }
            if let Some(d) = desc {
                t.description = d.map(str::to_string);
            }
            if let Some(s) = status {
                t.status = s.to_string();
            }
            t.updated_at = super::util::now_ts();
        }
        self.enqueue([Change::TaskUpdated(id)]);
        true
    }

    pub(crate) fn delete_task(&self, id: Uuid) -> bool {
        let ok = self.world().delete_task(id);
        if ok {
            self.enqueue([Change::TaskDeleted(id)]);
        }
        ok
    }

    /// Workspace (+ task inprogress + container) and its first session, as VK's start does:
    /// three task hints, no event for the session.
    pub(crate) fn create_attempt(
        &self,
        task_id: Uuid,
        executor: &str,
        repos: Vec<(Uuid, String)>,
    ) -> Option<(Uuid, Uuid, Value)> {
        let mut changes = Vec::new();
        let ids = {
            let mut w = self.world();
            let ws = w.create_workspace(Uuid::new_v4(), task_id, repos)?;
            let created = render::workspace_json(&w, ws).unwrap_or(Value::Null);
            changes.push(Change::Workspace(task_id));
            changes.extend(w.set_task_status(task_id, "inprogress"));
            changes.extend(w.set_container(ws));
            let session = w.add_session(ws, executor)?;
            (ws, session, created)
        };
        self.enqueue(changes);
        Some(ids)
    }

    /// Workspace `id` with no session yet (the moment between VK creating it and its first
    /// session).
    pub(crate) fn create_bare_attempt(&self, id: Uuid, task_id: Uuid) -> Option<Uuid> {
        let (ws, changes) = {
            let mut w = self.world();
            let ws = w.create_workspace(id, task_id, Vec::new())?;
            let mut changes = vec![Change::Workspace(task_id)];
            changes.extend(w.set_container(ws));
            (ws, changes)
        };
        self.enqueue(changes);
        Some(ws)
    }

    pub(crate) fn add_session(&self, ws: Uuid, executor: &str) -> Option<Uuid> {
        self.world().add_session(ws, executor)
    }

    /// Inserts a running process with the given executor action.
    pub(crate) fn start_process_with(
        &self,
        session: Uuid,
        reason: RunReason,
        action: Value,
    ) -> Option<Uuid> {
        let pid = {
            let mut w = self.world();
            w.sessions.get(&session)?;
            w.insert_process(session, reason, action)
        };
        self.enqueue([Change::ProcessCreated(pid)]);
        Some(pid)
    }

    /// The default executor action for a process started through the world-building API.
    pub(crate) fn default_action(&self, session: Uuid, reason: RunReason) -> Value {
        let w = self.world();
        let ws = w.sessions.get(&session).map(|s| s.workspace_id);
        let dir = ws.and_then(|ws| w.first_repo_name(ws));
        let cleanup = World::script_action("CleanupScript", dir.as_deref(), Value::Null);
        let prompt = w
            .task_of_session(session)
            .and_then(|t| w.tasks.get(&t))
            .map(task_prompt)
            .unwrap_or_default();
        let executor = w
            .sessions
            .get(&session)
            .and_then(|s| s.executor.clone())
            .unwrap_or_else(|| "CLAUDE_CODE".into());
        match reason {
            RunReason::SetupScript => World::script_action(
                "SetupScript",
                dir.as_deref(),
                agent_action(&prompt, &executor, None, None, cleanup),
            ),
            RunReason::CodingAgent => {
                let follow = w
                    .processes
                    .values()
                    .any(|p| p.session_id == session && p.run_reason == RunReason::CodingAgent);
                let agent_session = w.sessions.get(&session).map(|s| s.agent_session);
                agent_action(
                    &prompt,
                    &executor,
                    None,
                    agent_session.filter(|_| follow),
                    cleanup,
                )
            }
            RunReason::CleanupScript => cleanup,
            RunReason::DevServer => World::script_action("DevServer", dir.as_deref(), Value::Null),
        }
    }

    /// Finishes a process; the task goes to `inreview` when its chain ends (VK's finalize).
    pub(crate) fn finish_process(
        &self,
        pid: Uuid,
        status: ProcessStatus,
        exit: Option<i64>,
    ) -> bool {
        let mut changes = Vec::new();
        {
            let mut w = self.world();
            if !w.complete_process(pid, status, exit) {
                return false;
            }
            changes.push(Change::ProcessUpdated(pid));
            let Some(p) = w.processes.get(&pid) else {
                return false;
            };
            if p.run_reason == RunReason::CodingAgent
                && status == ProcessStatus::Completed
                && let Some(ws) = w.sessions.get(&p.session_id).map(|s| s.workspace_id)
            {
                w.agent_committed(ws);
            }
            let Some(p) = w.processes.get(&pid) else {
                return false;
            };
            let continues = status == ProcessStatus::Completed
                && exit == Some(0)
                && !p.action["next_action"].is_null();
            let task = w.task_of_session(p.session_id);
            if p.run_reason != RunReason::DevServer
                && !continues
                && let Some(task) = task
                && !w.task_has_running(task)
            {
                changes.extend(w.set_task_status(task, "inreview"));
            }
        }
        self.enqueue(changes);
        true
    }

    pub(crate) fn append_log(&self, pid: Uuid, ch: Channel, entry: Value) -> Option<u64> {
        self.world().append_log(pid, ch, entry)
    }

    pub(crate) fn replace_log(&self, pid: Uuid, ch: Channel, idx: u64, entry: Value) -> bool {
        self.world().replace_log(pid, ch, idx, entry)
    }

    pub(crate) fn set_changes(&self, attempt: Uuid, files: Vec<SimFile>) {
        self.world().changes.insert(attempt, files);
        let _ = self.diff_tx.send(attempt);
    }

    /// The agent wrote one file: it joins (or replaces, by path) the attempt's changes, and the
    /// diff stream re-sends, as VK's worktree watcher would.
    pub(crate) fn edit_file(&self, attempt: Uuid, file: SimFile) {
        {
            let mut w = self.world();
            let files = w.changes.entry(attempt).or_default();
            match files
                .iter_mut()
                .find(|f| f.repo == file.repo && f.path == file.path)
            {
                Some(f) => *f = file,
                None => files.push(file),
            }
        }
        let _ = self.diff_tx.send(attempt);
    }

    /// Like a VK restart: connections dropped, history gone, ids restart, config reloaded,
    /// running processes marked failed (no exit code) and their tasks put in review.
    pub(crate) fn restart(&self) {
        if self.cfg.dialect == SimDialect::Workspaces {
            super::workspaces::restart(self);
            return;
        }
        self.drop_connections();
        self.bus.reset();
        self.loaded_at.store(unix_ms(), Ordering::SeqCst);
        let running: Vec<Uuid> = {
            let w = self.world();
            let mut v: Vec<_> = w
                .processes
                .values()
                .filter(|p| p.status == ProcessStatus::Running)
                .map(|p| (p.ord, p.id))
                .collect();
            v.sort();
            v.into_iter().map(|(_, id)| id).collect()
        };
        for pid in running {
            let mut changes = Vec::new();
            {
                let mut w = self.world();
                if !w.complete_process(pid, ProcessStatus::Failed, None) {
                    continue;
                }
                changes.push(Change::ProcessUpdated(pid));
                let reason = w.processes.get(&pid).map(|p| p.run_reason);
                let task = w
                    .processes
                    .get(&pid)
                    .and_then(|p| w.task_of_session(p.session_id));
                if reason != Some(RunReason::DevServer)
                    && let Some(task) = task
                {
                    changes.extend(w.set_task_status(task, "inreview"));
                }
            }
            self.enqueue(changes);
        }
    }

    /// Tells the approval streams that the set of pending approvals may have changed.
    pub(crate) fn approvals_changed(&self) {
        let _ = self.approvals_tx.send(());
    }

    pub(crate) fn count(&self, f: impl FnOnce(&mut SimCounters)) {
        f(&mut lock(&self.counters));
    }

    /// Turns one outbox change into sequenced patches, reading the rows as they are now.
    fn dispatch(&self, change: Change) {
        if self.cfg.dialect == SimDialect::Workspaces {
            super::workspaces::dispatch(self, change);
            return;
        }
        let patches: Vec<Value> = {
            let w = self.world();
            let task_patch = |id: Uuid, op: &str| -> Option<Value> {
                let t = w.tasks.get(&id)?;
                Some(json!([{"op": op, "path": format!("/tasks/{id}"),
                             "value": render::task_json(&w, t)}]))
            };
            match change {
                Change::TaskCreated(id) => task_patch(id, "add").into_iter().collect(),
                Change::TaskUpdated(id) | Change::Workspace(id) => {
                    task_patch(id, "replace").into_iter().collect()
                }
                Change::TaskDeleted(id) => {
                    vec![json!([{"op": "remove", "path": format!("/tasks/{id}")}])]
                }
                Change::ProcessCreated(pid) | Change::ProcessUpdated(pid) => {
                    let op = if matches!(change, Change::ProcessCreated(_)) {
                        "add"
                    } else {
                        "replace"
                    };
                    let mut v = Vec::new();
                    if let Some(p) = w.processes.get(&pid) {
                        v.push(
                            json!([{"op": op, "path": format!("/execution_processes/{pid}"),
                                       "value": render::process_json(p)}]),
                        );
                        if let Some(t) = w.task_of_session(p.session_id) {
                            v.extend(task_patch(t, "replace"));
                        }
                    }
                    v
                }
            }
        };
        for p in patches {
            self.bus.push(p);
        }
    }
}

async fn outbox_worker(
    inner: std::sync::Weak<Inner>,
    mut rx: mpsc::UnboundedReceiver<(Instant, Change)>,
) {
    while let Some((at, change)) = rx.recv().await {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let due = at + strong.cfg.outbox_delay;
        let shutdown = strong.shutdown.clone();
        drop(strong);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(due.into()) => {}
        }
        match inner.upgrade() {
            Some(strong) => strong.dispatch(change),
            None => return,
        }
    }
}

/// A task's agent prompt: title, blank line, description.
pub(crate) fn task_prompt(t: &super::world::Task) -> String {
    match &t.description {
        Some(d) if !d.is_empty() => format!("{}\n\n{}", t.title, d),
        _ => t.title.clone(),
    }
}

/// A coding-agent executor action (initial, or follow-up when `agent_session` is set).
pub(crate) fn agent_action(
    prompt: &str,
    executor: &str,
    variant: Option<&str>,
    agent_session: Option<Uuid>,
    next: Value,
) -> Value {
    let mut profile = json!({"executor": executor});
    if let (Some(v), Some(o)) = (variant, profile.as_object_mut()) {
        o.insert("variant".into(), v.into());
    }
    let typ = match agent_session {
        Some(s) => json!({"type": "CodingAgentFollowUpRequest", "prompt": prompt,
                          "session_id": s, "executor_profile_id": profile, "working_dir": null}),
        None => json!({"type": "CodingAgentInitialRequest", "prompt": prompt,
                       "executor_profile_id": profile, "working_dir": null}),
    };
    json!({"typ": typ, "next_action": next})
}
