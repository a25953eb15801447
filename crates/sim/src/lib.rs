//! The built-in VK simulator: an in-process axum server speaking VK's wire contract (routes,
//! JSON shapes, SSE/WS sequencing, resume and snapshot rules as recorded from a real VK),
//! driven by world-building calls, scripted scenarios and fault switches, and keeping the
//! ground truth tests compare the daemon's cache with. See `tests/fixtures/vk-wire/README.md`.
//! It speaks one of two dialects over the same world (`SimConfig::dialect`): the fork's, or
//! BloopAI VK 0.1.44's workspace-first one (`workspaces`, `tests/fixtures/vk-wire-bloop/`).

mod agent_stdout;
mod approvals;
mod bus;
mod core;
mod git;
mod http;
mod idempotency;
mod log_entry;
mod logs;
mod proc_logs;
mod render;
mod rest_artifacts;
mod rest_attempts;
mod rest_git;
mod rest_meta;
mod rest_processes;
mod rest_sessions;
mod rest_tasks;
mod router;
pub mod scale;
mod script;
mod sse;
mod truth;
mod types;
mod util;
mod workspaces;
mod world;
mod ws_objects;

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

pub use agent_stdout::{
    SIM_MESSAGE_COST_USD, SIM_MESSAGE_TOKENS, SIM_MODEL, SimRunUsage, sim_run_usage,
};
pub use approvals::SimApprovalStatus;
pub use types::{
    AgentOutcome, ApprovalScript, AttemptIds, AttemptScript, Channel, Faults, ProcessStatus,
    RunReason, SimConfig, SimCounters, SimDialect, SimFile, Truth,
};

use self::core::{Inner, lock, task_prompt};

/// A running simulator; cheap to clone.
#[derive(Clone)]
pub struct Sim {
    inner: Arc<Inner>,
    addr: SocketAddr,
}

impl Sim {
    /// Starts on 127.0.0.1 with an ephemeral port, serving the routes of `cfg.dialect`.
    pub async fn start(cfg: SimConfig) -> anyhow::Result<Sim> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).await
    }

    pub(crate) async fn start_on(addr: SocketAddr, cfg: SimConfig) -> anyhow::Result<Sim> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let inner = Inner::new(cfg);
        let app = match inner.cfg.dialect {
            SimDialect::Fork => router::build(inner.clone()),
            SimDialect::Workspaces => workspaces::router(inner.clone()),
        };
        let stop = inner.shutdown.clone();
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "vk simulator server ended");
            }
        });
        Ok(Sim { inner, addr })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server and every stream and background task.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.drop_connections();
        tokio::task::yield_now().await;
    }

    pub fn add_project(&self, name: &str, repo_names: &[&str]) -> Uuid {
        self.inner.add_project(name, repo_names)
    }

    /// A project with a given id: the same project on several simulated hosts of a fleet.
    pub fn add_project_with_id(&self, id: Uuid, name: &str, repo_names: &[&str]) -> Uuid {
        self.inner.add_project_with_id(id, name, repo_names)
    }

    /// Builds the scale board (`scale`) straight into the simulated database, logs included,
    /// and returns its rows. Call it before a daemon connects: no change is announced.
    pub fn load_scale(&self, spec: scale::ScaleSpec) -> scale::ScaleRows {
        let mut w = self.inner.world();
        scale::load(&mut w, spec)
    }

    pub fn add_task(&self, project_id: Uuid, title: &str, description: Option<&str>) -> Uuid {
        self.inner.add_task(project_id, title, description)
    }

    /// A task with a given id: the same task on several simulated hosts of a fleet (a VK
    /// database copied to another machine).
    pub fn add_task_with_id(
        &self,
        id: Uuid,
        project_id: Uuid,
        title: &str,
        description: Option<&str>,
    ) -> Uuid {
        self.inner
            .add_task_with_id(id, project_id, title, description)
    }

    pub fn update_task(
        &self,
        task_id: Uuid,
        title: Option<&str>,
        description: Option<&str>,
        status: Option<&str>,
    ) -> bool {
        self.inner
            .update_task(task_id, title, description.map(Some), status)
    }

    pub fn delete_task(&self, task_id: Uuid) -> bool {
        self.inner.delete_task(task_id)
    }

    /// Workspace on all the project's repos (target `main`) plus its first session.
    /// Returns nil ids when the task does not exist.
    pub fn create_attempt(&self, task_id: Uuid, executor: &str) -> AttemptIds {
        match self.inner.create_attempt(task_id, executor, Vec::new()) {
            Some((attempt_id, session_id, _)) => AttemptIds {
                attempt_id,
                session_id,
            },
            None => AttemptIds {
                attempt_id: Uuid::nil(),
                session_id: Uuid::nil(),
            },
        }
    }

    /// An attempt without any session; returns the nil uuid when the task does not exist.
    pub fn create_bare_attempt(&self, task_id: Uuid) -> Uuid {
        self.create_bare_attempt_with_id(Uuid::new_v4(), task_id)
    }

    /// An attempt with a given id and no session: the same attempt on several simulated hosts
    /// of a fleet (a VK database copied to another machine). Nil when the task does not exist.
    pub fn create_bare_attempt_with_id(&self, id: Uuid, task_id: Uuid) -> Uuid {
        self.inner
            .create_bare_attempt(id, task_id)
            .unwrap_or_else(Uuid::nil)
    }

    /// Returns the nil uuid when the attempt does not exist.
    pub fn add_session(&self, attempt_id: Uuid, executor: &str) -> Uuid {
        self.inner
            .add_session(attempt_id, executor)
            .unwrap_or_else(Uuid::nil)
    }

    /// Returns the nil uuid when the session does not exist.
    pub fn start_process(&self, session_id: Uuid, run_reason: RunReason) -> Uuid {
        let action = self.inner.default_action(session_id, run_reason);
        self.inner
            .start_process_with(session_id, run_reason, action)
            .unwrap_or_else(Uuid::nil)
    }

    /// Appends to a live process's log; returns the entry index (u64::MAX when not live).
    pub fn append_log(&self, pid: Uuid, channel: Channel, entry: Value) -> u64 {
        self.inner
            .append_log(pid, channel, entry)
            .unwrap_or(u64::MAX)
    }

    /// Rewrites an entry of a live process's log in place; false when the process or entry is
    /// unknown or the log has ended (VK never changes a log after `finished`).
    pub fn replace_log(&self, pid: Uuid, channel: Channel, entry_index: u64, entry: Value) -> bool {
        self.inner.replace_log(pid, channel, entry_index, entry)
    }

    pub fn finish_process(&self, pid: Uuid, status: ProcessStatus, exit_code: Option<i64>) {
        self.inner.finish_process(pid, status, exit_code);
    }

    pub fn set_changes(&self, attempt_id: Uuid, files: Vec<SimFile>) {
        self.inner.set_changes(attempt_id, files);
    }

    /// One file written in the attempt's workspace (added to or replacing its changes).
    pub fn edit_file(&self, attempt_id: Uuid, file: SimFile) {
        self.inner.edit_file(attempt_id, file);
    }

    /// Creates an attempt and runs the script to its end.
    pub async fn run_attempt_script(&self, task_id: Uuid, script: AttemptScript) -> AttemptIds {
        self.run_attempt_script_on(task_id, None, script).await
    }

    /// Like [`run_attempt_script`](Self::run_attempt_script), with every repo of the project
    /// targeting `target_branch` (None: `main`); the branch must exist (`move_base` makes one).
    pub async fn run_attempt_script_on(
        &self,
        task_id: Uuid,
        target_branch: Option<&str>,
        script: AttemptScript,
    ) -> AttemptIds {
        let repos: Vec<(Uuid, String)> = match target_branch {
            None => Vec::new(),
            Some(b) => {
                let w = self.inner.world();
                let project = w.tasks.get(&task_id).map(|t| t.project_id);
                project
                    .and_then(|p| w.project(p))
                    .map(|p| p.repos.iter().map(|r| (r.id, b.to_string())).collect())
                    .unwrap_or_default()
            }
        };
        let ids = match self.inner.create_attempt(task_id, &script.executor, repos) {
            Some((attempt_id, session_id, _)) => AttemptIds {
                attempt_id,
                session_id,
            },
            None => AttemptIds {
                attempt_id: Uuid::nil(),
                session_id: Uuid::nil(),
            },
        };
        let prompt = {
            let w = self.inner.world();
            w.tasks.get(&task_id).map(task_prompt).unwrap_or_default()
        };
        if !ids.attempt_id.is_nil() {
            script::drive_attempt(
                self.inner.clone(),
                ids.attempt_id,
                ids.session_id,
                prompt,
                script,
            )
            .await;
        }
        ids
    }

    /// A follow-up on the session, run to its end; returns the new agent process id.
    pub async fn follow_up_script(
        &self,
        session_id: Uuid,
        prompt: &str,
        script: AttemptScript,
    ) -> Uuid {
        let Some((ws, pid)) =
            script::start_follow_up(&self.inner, session_id, prompt, None, &script)
        else {
            return Uuid::nil();
        };
        let inner = self.inner.clone();
        script::drive_agent_chain(inner, ws, session_id, pid, prompt.to_string(), script).await;
        pid
    }

    /// Repo ids of an attempt, in VK's order (empty for an unknown attempt).
    pub fn attempt_repo_ids(&self, attempt_id: Uuid) -> Vec<Uuid> {
        let w = self.inner.world();
        w.workspaces
            .get(&attempt_id)
            .map(|ws| ws.repos.iter().map(|(r, _)| *r).collect())
            .unwrap_or_default()
    }

    /// Scripted git: the agent commits on the attempt's branch in `repo_id` (ahead + 1).
    /// False for an attempt or repo VK would not know.
    pub fn agent_commit(&self, attempt_id: Uuid, repo_id: Uuid) -> bool {
        let mut w = self.inner.world();
        let Some(target) = git_target(&w, attempt_id, repo_id) else {
            return false;
        };
        w.git.commit(attempt_id, repo_id, &target);
        true
    }

    /// Scripted git: someone commits on base branch `branch` of `repo_id` (created from `main`
    /// when new), so attempts on it fall behind by one; with `conflicting_file`, rebasing an
    /// attempt branch that has commits onto it stops on conflicts in that file.
    pub fn move_base(&self, repo_id: Uuid, branch: &str, conflicting_file: Option<&str>) {
        self.inner
            .world()
            .git
            .move_base(repo_id, branch, conflicting_file);
    }

    /// Scripted git: a rebase of the attempt's branch in `repo_id` onto its target, as VK's
    /// rebase route does it (a user clicking Rebase in VK's UI). The conflicted files when it
    /// stopped on conflicts; empty when it went through or could not run.
    pub fn rebase(&self, attempt_id: Uuid, repo_id: Uuid) -> Vec<String> {
        let mut w = self.inner.world();
        let Some(target) = git_target(&w, attempt_id, repo_id) else {
            return Vec::new();
        };
        let name = w
            .workspaces
            .get(&attempt_id)
            .map(|ws| ws.branch.clone())
            .unwrap_or_default();
        match w.git.rebase(attempt_id, repo_id, &name, &target) {
            git::GitOutcome::Conflicts(files) => files,
            _ => Vec::new(),
        }
    }

    /// Scripted git: check out `branch` in the repo's own checkout (what `GET
    /// /api/repos/{id}/branches` marks `is_current`); None detaches HEAD. False for an unknown
    /// repo.
    pub fn set_repo_current_branch(&self, repo_id: Uuid, branch: Option<&str>) -> bool {
        let mut w = self.inner.world();
        let Some(repo) = w.repo_mut(repo_id) else {
            return false;
        };
        repo.current_branch = branch.map(str::to_string);
        if let Some(b) = branch {
            w.git.ensure_base(repo_id, b);
        }
        true
    }

    /// Repo ids of a project, in VK's order (empty for an unknown project).
    pub fn project_repo_ids(&self, project_id: Uuid) -> Vec<Uuid> {
        let w = self.inner.world();
        w.project(project_id)
            .map(|p| p.repos.iter().map(|r| r.id).collect())
            .unwrap_or_default()
    }

    /// Scripted git: tracked files with uncommitted changes in the attempt's worktree of
    /// `repo_id` (an empty list cleans it). False for an unknown attempt or repo.
    pub fn set_uncommitted(&self, attempt_id: Uuid, repo_id: Uuid, files: &[&str]) -> bool {
        let mut w = self.inner.world();
        let Some(target) = git_target(&w, attempt_id, repo_id) else {
            return false;
        };
        w.git.branch(attempt_id, repo_id, &target).uncommitted =
            files.iter().map(|f| f.to_string()).collect();
        true
    }

    pub fn drop_connections(&self) {
        self.inner.drop_connections();
    }

    pub fn restart(&self) {
        self.inner.restart();
    }

    pub fn set_faults(&self, f: Faults) {
        let was_stalled = std::mem::replace(&mut *lock(&self.inner.faults), f.clone()).stall_sse;
        if was_stalled && !f.stall_sse {
            // A stalled stream stays dead after the fault (as a half-open TCP connection would);
            // end it so the next fault starts from live connections.
            self.inner.drop_connections();
        }
    }

    pub fn counters(&self) -> SimCounters {
        lock(&self.inner.counters).clone()
    }

    /// Every tool approval asked so far: (approval id, execution process, status).
    pub fn approvals(&self) -> Vec<(Uuid, Uuid, SimApprovalStatus)> {
        approvals::list(&self.inner)
    }

    /// The ground truth in the fork's shapes (the world's rows). In the workspaces dialect the
    /// log entries are as its log sockets send them (0.1.x's normalized entries always carry
    /// `metadata`); the other rows keep the fork's shapes, task and attempt ids included.
    pub fn truth(&self) -> Truth {
        let mut t = truth::build(&self.inner.world());
        if self.inner.cfg.dialect == SimDialect::Workspaces {
            workspaces::wire_logs(&mut t);
        }
        t
    }
}

/// The target branch of an attempt's repo.
fn git_target(w: &world::World, attempt: Uuid, repo: Uuid) -> Option<String> {
    let ws = w.workspaces.get(&attempt)?;
    ws.repos
        .iter()
        .find(|(r, _)| *r == repo)
        .map(|(_, t)| t.clone())
}
