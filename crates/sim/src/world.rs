//! The simulated VK database: rows for projects, tasks, workspaces (attempts), sessions,
//! processes, coding-agent turns, per-process log stores and attempt changes. Mutations return
//! the outbox changes VK would enqueue for them; they never talk to the network.

use std::collections::HashMap;

use serde_json::{Value, json};
use uuid::Uuid;

pub(crate) use super::log_entry::LogEntry;
pub(crate) use super::proc_logs::{LogEvent, ProcLogs};
use super::types::{Channel, ProcessStatus, RunReason, SimFile};
use super::util::{VK_DATA, WORKTREES, attempt_dir, now_ts};

/// One DB change as VK's outbox records it; the dispatcher reads the current row later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    TaskCreated(Uuid),
    TaskUpdated(Uuid),
    TaskDeleted(Uuid),
    /// Workspace created/updated/deleted: VK emits a task `replace` for its task.
    Workspace(Uuid),
    ProcessCreated(Uuid),
    ProcessUpdated(Uuid),
}

pub(crate) struct Repo {
    pub id: Uuid,
    pub name: String,
    pub path: String,
    pub created_at: String,
    /// The branch checked out in the repo's own checkout (`git symbolic-ref HEAD`); None when
    /// HEAD is detached. `main` for a new repo.
    pub current_branch: Option<String>,
}

pub(crate) struct Project {
    pub id: Uuid,
    pub name: String,
    pub repos: Vec<Repo>,
}

pub(crate) struct Task {
    pub id: Uuid,
    pub project_id: Uuid,
    pub title: String,
    pub description: Option<String>,
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    pub ord: u64,
}

pub(crate) struct Workspace {
    pub id: Uuid,
    pub task_id: Uuid,
    pub container_ref: Option<String>,
    pub branch: String,
    /// (repo id, target branch)
    pub repos: Vec<(Uuid, String)>,
    pub created_at: String,
    pub updated_at: String,
    pub ord: u64,
    /// VK 0.1.x's flags (the workspaces dialect): a merge archives, a new process un-archives.
    pub archived: bool,
    pub pinned: bool,
}

pub(crate) struct Session {
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub executor: Option<String>,
    /// The agent's own session id, used by follow-up requests.
    pub agent_session: Uuid,
    pub created_at: String,
    pub updated_at: String,
    pub ord: u64,
}

pub(crate) struct Process {
    pub id: Uuid,
    pub session_id: Uuid,
    pub run_reason: RunReason,
    pub action: Value,
    pub status: ProcessStatus,
    pub exit_code: Option<i64>,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub ord: u64,
}

pub(crate) struct Turn {
    pub row: i64,
    pub turn_id: Uuid,
    pub session_id: Uuid,
    pub process_id: Uuid,
    pub prompt: Option<String>,
    pub summary: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Default)]
pub(crate) struct World {
    pub projects: Vec<Project>,
    pub tasks: HashMap<Uuid, Task>,
    pub workspaces: HashMap<Uuid, Workspace>,
    pub sessions: HashMap<Uuid, Session>,
    pub processes: HashMap<Uuid, Process>,
    pub logs: HashMap<Uuid, ProcLogs>,
    pub changes: HashMap<Uuid, Vec<SimFile>>,
    pub turns: Vec<Turn>,
    /// session → queued message (VK's `QueuedMessage` JSON) and its idempotency (key, hash).
    pub queue: HashMap<Uuid, (Value, Option<(String, String)>)>,
    /// Git state of every attempt branch and base branch (`git`).
    pub git: super::git::Git,
    /// Tool approvals by id (VK's `approvals` table and waiters).
    pub approvals: HashMap<Uuid, super::approvals::SimApproval>,
    ord: u64,
}

impl World {
    pub(crate) fn next_ord(&mut self) -> u64 {
        self.ord += 1;
        self.ord
    }

    pub(crate) fn add_project(&mut self, name: &str, repo_names: &[&str]) -> Uuid {
        self.add_project_with_id(Uuid::new_v4(), name, repo_names)
    }

    /// A project with a given id (the same project on several machines: a fleet's test).
    pub(crate) fn add_project_with_id(
        &mut self,
        id: Uuid,
        name: &str,
        repo_names: &[&str],
    ) -> Uuid {
        let ts = now_ts();
        let repos = repo_names
            .iter()
            .map(|r| Repo {
                id: Uuid::new_v4(),
                name: (*r).to_string(),
                path: format!("{VK_DATA}/repos/{r}"),
                created_at: ts.clone(),
                current_branch: Some("main".to_string()),
            })
            .collect();
        self.projects.push(Project {
            id,
            name: name.to_string(),
            repos,
        });
        id
    }

    pub(crate) fn repo_mut(&mut self, id: Uuid) -> Option<&mut Repo> {
        self.projects
            .iter_mut()
            .flat_map(|p| p.repos.iter_mut())
            .find(|r| r.id == id)
    }

    pub(crate) fn project(&self, id: Uuid) -> Option<&Project> {
        self.projects.iter().find(|p| p.id == id)
    }

    pub(crate) fn add_task(&mut self, project_id: Uuid, title: &str, desc: Option<&str>) -> Uuid {
        self.add_task_with_id(Uuid::new_v4(), project_id, title, desc)
    }

    pub(crate) fn add_task_with_id(
        &mut self,
        id: Uuid,
        project_id: Uuid,
        title: &str,
        desc: Option<&str>,
    ) -> Uuid {
        let ts = now_ts();
        let ord = self.next_ord();
        self.tasks.insert(
            id,
            Task {
                id,
                project_id,
                title: title.to_string(),
                description: desc.map(str::to_string),
                status: "todo".to_string(),
                created_at: ts.clone(),
                updated_at: ts,
                ord,
            },
        );
        id
    }

    pub(crate) fn set_task_status(&mut self, task_id: Uuid, status: &str) -> Option<Change> {
        let task = self.tasks.get_mut(&task_id)?;
        task.status = status.to_string();
        task.updated_at = now_ts();
        Some(Change::TaskUpdated(task_id))
    }

    /// Removes a task with its attempts, sessions, processes and logs (VK's cascade).
    pub(crate) fn delete_task(&mut self, task_id: Uuid) -> bool {
        if self.tasks.remove(&task_id).is_none() {
            return false;
        }
        let ws: Vec<Uuid> = self
            .workspaces
            .values()
            .filter(|w| w.task_id == task_id)
            .map(|w| w.id)
            .collect();
        for w in ws {
            self.workspaces.remove(&w);
            self.changes.remove(&w);
            let sessions: Vec<Uuid> = self.sessions_of(w);
            for s in sessions {
                self.sessions.remove(&s);
                self.queue.remove(&s);
                let procs: Vec<Uuid> = self
                    .processes
                    .values()
                    .filter(|p| p.session_id == s)
                    .map(|p| p.id)
                    .collect();
                for p in procs {
                    self.processes.remove(&p);
                    self.logs.remove(&p);
                }
                self.turns.retain(|t| t.session_id != s);
            }
        }
        true
    }

    /// Creates workspace `id` with its repos (all of the project's when `repos` is empty).
    pub(crate) fn create_workspace(
        &mut self,
        id: Uuid,
        task_id: Uuid,
        repos: Vec<(Uuid, String)>,
    ) -> Option<Uuid> {
        let task = self.tasks.get(&task_id)?;
        let repos = if repos.is_empty() {
            self.project(task.project_id)
                .map(|p| p.repos.iter().map(|r| (r.id, "main".to_string())).collect())
                .unwrap_or_default()
        } else {
            repos
        };
        let branch = format!("vk/{}", attempt_dir(&id, &task.title));
        let ts = now_ts();
        let ord = self.next_ord();
        self.workspaces.insert(
            id,
            Workspace {
                id,
                task_id,
                container_ref: None,
                branch,
                repos,
                created_at: ts.clone(),
                updated_at: ts,
                ord,
                archived: false,
                pinned: false,
            },
        );
        Some(id)
    }

    /// Sets the worktree folder once the container exists.
    pub(crate) fn set_container(&mut self, ws_id: Uuid) -> Option<Change> {
        let title = {
            let ws = self.workspaces.get(&ws_id)?;
            self.tasks.get(&ws.task_id)?.title.clone()
        };
        let ws = self.workspaces.get_mut(&ws_id)?;
        ws.container_ref = Some(format!("{WORKTREES}/{}", attempt_dir(&ws.id, &title)));
        ws.updated_at = now_ts();
        Some(Change::Workspace(ws.task_id))
    }

    pub(crate) fn add_session(&mut self, ws_id: Uuid, executor: &str) -> Option<Uuid> {
        if !self.workspaces.contains_key(&ws_id) {
            return None;
        }
        let id = Uuid::new_v4();
        let ts = now_ts();
        let ord = self.next_ord();
        self.sessions.insert(
            id,
            Session {
                id,
                workspace_id: ws_id,
                executor: Some(executor.to_string()),
                agent_session: Uuid::new_v4(),
                created_at: ts.clone(),
                updated_at: ts,
                ord,
            },
        );
        Some(id)
    }

    pub(crate) fn sessions_of(&self, ws_id: Uuid) -> Vec<Uuid> {
        let mut s: Vec<&Session> = self
            .sessions
            .values()
            .filter(|s| s.workspace_id == ws_id)
            .collect();
        s.sort_by_key(|s| std::cmp::Reverse(s.ord));
        s.into_iter().map(|s| s.id).collect()
    }

    pub(crate) fn task_of_session(&self, session_id: Uuid) -> Option<Uuid> {
        let s = self.sessions.get(&session_id)?;
        Some(self.workspaces.get(&s.workspace_id)?.task_id)
    }

    /// Processes of a workspace, oldest first.
    pub(crate) fn processes_of_workspace(&self, ws_id: Uuid) -> Vec<&Process> {
        let mut v: Vec<&Process> = self
            .processes
            .values()
            .filter(|p| {
                self.sessions
                    .get(&p.session_id)
                    .is_some_and(|s| s.workspace_id == ws_id)
            })
            .collect();
        v.sort_by_key(|p| p.ord);
        v
    }

    /// Processes of all workspaces of a task, oldest first.
    pub(crate) fn processes_of_task(&self, task_id: Uuid) -> Vec<&Process> {
        let mut v: Vec<&Process> = self
            .processes
            .values()
            .filter(|p| self.task_of_session(p.session_id) == Some(task_id))
            .collect();
        v.sort_by_key(|p| p.ord);
        v
    }

    pub(crate) fn insert_process(
        &mut self,
        session_id: Uuid,
        reason: RunReason,
        action: Value,
    ) -> Uuid {
        let id = Uuid::new_v4();
        let ts = now_ts();
        let ord = self.next_ord();
        self.processes.insert(
            id,
            Process {
                id,
                session_id,
                run_reason: reason,
                action,
                status: ProcessStatus::Running,
                exit_code: None,
                started_at: ts.clone(),
                completed_at: None,
                created_at: ts.clone(),
                updated_at: ts.clone(),
                ord,
            },
        );
        self.logs.insert(id, ProcLogs::new());
        // VK 0.1.x: starting any process un-archives its workspace (the fork has no flag).
        let ws = self.sessions.get(&session_id).map(|s| s.workspace_id);
        if let Some(ws) = ws.and_then(|ws| self.workspaces.get_mut(&ws)) {
            ws.archived = false;
        }
        if reason == RunReason::CodingAgent {
            let prompt = action_prompt(&self.processes[&id].action);
            let row = i64::try_from(self.turns.len()).unwrap_or(i64::MAX - 1) + 1;
            self.turns.push(Turn {
                row,
                turn_id: Uuid::new_v4(),
                session_id,
                process_id: id,
                prompt,
                summary: None,
                created_at: ts.clone(),
                updated_at: ts,
            });
        }
        id
    }

    /// Marks a process finished; returns false when unknown or already finished.
    pub(crate) fn complete_process(
        &mut self,
        pid: Uuid,
        status: ProcessStatus,
        exit: Option<i64>,
    ) -> bool {
        let Some(p) = self.processes.get_mut(&pid) else {
            return false;
        };
        if p.status != ProcessStatus::Running {
            return false;
        }
        p.status = status;
        p.exit_code = exit;
        if status != ProcessStatus::Running {
            p.completed_at = Some(now_ts());
        }
        p.updated_at = now_ts();
        let summary = self
            .logs
            .get(&pid)
            .and_then(|l| last_assistant_text(&l.normalized));
        if let Some(turn) = self.turns.iter_mut().find(|t| t.process_id == pid) {
            turn.summary = summary;
            turn.updated_at = now_ts();
        }
        if let Some(logs) = self.logs.get_mut(&pid) {
            logs.finished = true;
            logs.publish(Channel::Normalized, LogEvent::Finished);
            logs.publish(Channel::Raw, LogEvent::Finished);
        }
        true
    }

    /// Appends a log entry; returns its index, or None for an unknown or finished process.
    pub(crate) fn append_log(&mut self, pid: Uuid, ch: Channel, entry: Value) -> Option<u64> {
        let logs = self.logs.get_mut(&pid)?;
        if logs.finished {
            return None;
        }
        let list = match ch {
            Channel::Normalized => &mut logs.normalized,
            Channel::Raw => &mut logs.raw,
        };
        let idx = list.len() as u64;
        let entry = LogEntry::new(entry);
        list.push(entry.clone());
        logs.publish(ch, LogEvent::Append(idx, entry));
        Some(idx)
    }

    /// Rewrites entry `idx` in place; false for an unknown process or index, or a finished log.
    /// Like appends, rewrites stop when the process ends: VK drops the process's in-memory log
    /// store when it ends (pushing `finished`) and its DB persister stops at `finished`, so a log
    /// is frozen from then on. A scripted rewrite that loses the race against a restart is lost.
    pub(crate) fn replace_log(&mut self, pid: Uuid, ch: Channel, idx: u64, entry: Value) -> bool {
        let Some(logs) = self.logs.get_mut(&pid) else {
            return false;
        };
        if logs.finished {
            return false;
        }
        let list = match ch {
            Channel::Normalized => &mut logs.normalized,
            Channel::Raw => &mut logs.raw,
        };
        let Some(slot) = usize::try_from(idx).ok().and_then(|i| list.get_mut(i)) else {
            return false;
        };
        let entry = LogEntry::new(entry);
        *slot = entry.clone();
        logs.publish(ch, LogEvent::Replace(idx, entry));
        true
    }

    /// Is some setup/agent/cleanup process of this task still running?
    pub(crate) fn task_has_running(&self, task_id: Uuid) -> bool {
        self.processes_of_task(task_id)
            .iter()
            .any(|p| p.run_reason != RunReason::DevServer && p.status == ProcessStatus::Running)
    }

    /// Repos of a workspace with their target branch.
    pub(crate) fn workspace_repos(&self, ws_id: Uuid) -> Vec<(&Repo, String)> {
        let Some(ws) = self.workspaces.get(&ws_id) else {
            return Vec::new();
        };
        let Some(project) = self
            .tasks
            .get(&ws.task_id)
            .and_then(|t| self.project(t.project_id))
        else {
            return Vec::new();
        };
        ws.repos
            .iter()
            .filter_map(|(rid, tb)| {
                project
                    .repos
                    .iter()
                    .find(|r| r.id == *rid)
                    .map(|r| (r, tb.clone()))
            })
            .collect()
    }

    /// A completed coding agent commits on every repo of its attempt (VK's auto-commit).
    pub(crate) fn agent_committed(&mut self, ws_id: Uuid) {
        let repos = self
            .workspaces
            .get(&ws_id)
            .map(|w| w.repos.clone())
            .unwrap_or_default();
        for (repo, target) in repos {
            self.git.commit(ws_id, repo, &target);
        }
    }

    /// The repo name scripts run in (VK: the first repo).
    pub(crate) fn first_repo_name(&self, ws_id: Uuid) -> Option<String> {
        self.workspace_repos(ws_id)
            .first()
            .map(|(r, _)| r.name.clone())
    }

    /// A `ScriptRequest` executor action (script redacted, as VK serves it).
    pub(crate) fn script_action(context: &str, working_dir: Option<&str>, next: Value) -> Value {
        json!({
            "typ": {"type": "ScriptRequest", "script": "<redacted>", "language": "Bash",
                    "context": context, "working_dir": working_dir},
            "next_action": next,
        })
    }
}

/// The prompt inside a coding-agent executor action.
pub(crate) fn action_prompt(action: &Value) -> Option<String> {
    action
        .pointer("/typ/prompt")
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn last_assistant_text(entries: &[LogEntry]) -> Option<String> {
    entries.iter().rev().find_map(|e| {
        let c = e.get("content")?;
        if c.pointer("/entry_type/type")?.as_str()? == "assistant_message" {
            c.get("content")?.as_str().map(str::to_string)
        } else {
            None
        }
    })
}
