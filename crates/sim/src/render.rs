//! JSON views of the simulated rows, field for field as VK's REST and streams send them
//! (TaskWithAttemptStatus, Workspace, Session, ExecutionProcessPublic, attempt status, changes).

use std::collections::HashMap;

use serde_json::{Value, json};
use uuid::Uuid;

use super::types::{ProcessStatus, RunReason};
use super::world::{Process, Project, Repo, Session, Task, World};

/// VK's Balanced diff preview guard.
const GUARD_MAX_FILES: u64 = 500;
const GUARD_MAX_LINES: u64 = 25_000;
const GUARD_MAX_BYTES: u64 = 50 * 1024 * 1024;

pub(crate) fn project_json(p: &Project) -> Value {
    json!({
        "id": p.id, "name": p.name,
        "dev_script": "bash vk-dev.sh",
        "dev_script_working_dir": p.repos.first().map(|r| r.name.clone()),
        "default_agent_working_dir": null, "git_no_verify_override": null,
        "scheduler_max_concurrent": 1, "scheduler_max_retries": 3,
        "default_continuation_turns": 0,
        "mcp_auto_executor_policy_mode": "inherit_all",
        "mcp_auto_executor_policy_allow_list": [],
        "after_prepare_hook": null, "before_cleanup_hook": null, "remote_project_id": null,
    })
}

pub(crate) fn repo_json(r: &Repo) -> Value {
    json!({
        "id": r.id, "path": r.path, "name": r.name, "display_name": r.name,
        "created_at": r.created_at, "updated_at": r.created_at,
    })
}

/// The project as it appears in `config.projects` of `/api/info`.
pub(crate) fn config_project_json(p: &Project) -> Value {
    let repos: Vec<Value> = p
        .repos
        .iter()
        .map(|r| {
            json!({"path": r.path, "display_name": r.name, "setup_script": "bash vk-setup.sh",
                   "cleanup_script": "bash vk-cleanup.sh", "copy_files": null,
                   "parallel_setup_script": false})
        })
        .collect();
    let mut v = project_json(p);
    if let Some(o) = v.as_object_mut() {
        o.insert("repos".into(), Value::Array(repos));
    }
    v
}

/// A task row without the derived attempt fields (what POST/PUT /api/tasks return).
pub(crate) fn task_row_json(t: &Task) -> Value {
    json!({
        "id": t.id, "project_id": t.project_id, "title": t.title,
        "description": t.description, "status": t.status, "task_kind": "default",
        "milestone_id": null, "milestone_node_id": null, "parent_workspace_id": null,
        "origin_task_id": null, "created_by_kind": "human_ui",
        "continuation_turns_override": null, "shared_task_id": null,
        "archived_kanban_id": null, "created_at": t.created_at, "updated_at": t.updated_at,
    })
}

/// VK's fields of a task derived from its attempts: whether a (non dev-server) process runs,
/// whether the newest one failed, and the newest session's executor.
#[derive(Default)]
pub(crate) struct TaskFacts {
    in_progress: bool,
    /// (ord, failed or killed) of the newest process.
    newest_process: Option<(u64, bool)>,
    /// (ord, executor) of the newest session.
    newest_session: Option<(u64, String)>,
}

impl TaskFacts {
    fn see_process(&mut self, p: &Process) {
        if p.run_reason == RunReason::DevServer {
            return;
        }
        self.in_progress |= p.status == ProcessStatus::Running;
        if self.newest_process.is_none_or(|(ord, _)| p.ord > ord) {
            let failed = matches!(p.status, ProcessStatus::Failed | ProcessStatus::Killed);
            self.newest_process = Some((p.ord, failed));
        }
    }

    fn see_session(&mut self, s: &Session) {
        if self
            .newest_session
            .as_ref()
            .is_none_or(|(ord, _)| s.ord > *ord)
        {
            self.newest_session = Some((s.ord, s.executor.clone().unwrap_or_default()));
        }
    }
}

/// The facts of every task from one pass over sessions and processes: a list or snapshot of
/// thousands of tasks would otherwise scan every process once per task (the scale board:
/// 11,098 tasks × 21,000 processes under the world lock).
pub(crate) fn all_task_facts(w: &World) -> HashMap<Uuid, TaskFacts> {
    let mut facts: HashMap<Uuid, TaskFacts> = HashMap::new();
    for s in w.sessions.values() {
        if let Some(ws) = w.workspaces.get(&s.workspace_id) {
            facts.entry(ws.task_id).or_default().see_session(s);
        }
    }
    for p in w.processes.values() {
        if let Some(task) = w.task_of_session(p.session_id) {
            facts.entry(task).or_default().see_process(p);
        }
    }
    facts
}

/// `TaskWithAttemptStatus`, with VK's derived fields.
pub(crate) fn task_json(w: &World, t: &Task) -> Value {
    let mut facts = TaskFacts::default();
    for p in w.processes_of_task(t.id) {
        facts.see_process(p);
    }
    w.sessions
        .values()
        .filter(|s| {
            w.workspaces
                .get(&s.workspace_id)
                .is_some_and(|ws| ws.task_id == t.id)
        })
        .for_each(|s| facts.see_session(s));
    task_json_with(t, &facts)
}

/// `TaskWithAttemptStatus` from facts already gathered (`all_task_facts`; none: no attempt).
pub(crate) fn task_json_with(t: &Task, facts: &TaskFacts) -> Value {
    let mut v = task_row_json(t);
    if let Some(o) = v.as_object_mut() {
        o.insert("has_in_progress_attempt".into(), facts.in_progress.into());
        let failed = facts.newest_process.is_some_and(|(_, failed)| failed);
        o.insert("last_attempt_failed".into(), failed.into());
        let executor = facts.newest_session.as_ref().map(|(_, e)| e.clone());
        o.insert("executor".into(), executor.unwrap_or_default().into());
        o.insert("dispatch_state".into(), Value::Null);
        o.insert("orchestration".into(), Value::Null);
    }
    v
}

pub(crate) fn workspace_json(w: &World, id: Uuid) -> Option<Value> {
    let ws = w.workspaces.get(&id)?;
    Some(json!({
        "id": ws.id, "task_id": ws.task_id, "container_ref": ws.container_ref,
        "branch": ws.branch, "agent_working_dir": null, "setup_completed_at": null,
        "latest_hook_run": null, "after_prepare_hook_status": null,
        "after_prepare_hook_ran_at": null, "after_prepare_hook_error_summary": null,
        "before_cleanup_hook_status": null, "before_cleanup_hook_ran_at": null,
        "before_cleanup_hook_error_summary": null,
        "created_at": ws.created_at, "updated_at": ws.updated_at,
    }))
}

pub(crate) fn session_json(w: &World, id: Uuid) -> Option<Value> {
    let s = w.sessions.get(&id)?;
    Some(json!({
        "id": s.id, "workspace_id": s.workspace_id, "executor": s.executor,
        "created_at": s.created_at, "updated_at": s.updated_at,
    }))
}

pub(crate) fn process_json(p: &Process) -> Value {
    json!({
        "id": p.id, "session_id": p.session_id, "run_reason": p.run_reason.as_str(),
        "executor_action": p.action, "status": p.status.as_str(), "exit_code": p.exit_code,
        "dropped": false, "started_at": p.started_at, "completed_at": p.completed_at,
        "created_at": p.created_at, "updated_at": p.updated_at,
    })
}

/// `GET /api/task-attempts/{id}/status`, VK's rules: the newest setup/agent/cleanup process.
pub(crate) fn attempt_status_json(w: &World, id: Uuid) -> Option<Value> {
    let ws = w.workspaces.get(&id)?;
    let latest_session = w.sessions_of(id).first().and_then(|s| w.sessions.get(s));
    let latest = w
        .processes_of_workspace(id)
        .into_iter()
        .rfind(|p| p.run_reason != RunReason::DevServer);
    let (state, failure) = match latest.map(|p| (p.status, p.exit_code)) {
        None => ("idle", None),
        Some((ProcessStatus::Running, _)) => ("running", None),
        Some((ProcessStatus::Completed, _)) => ("completed", None),
        Some((ProcessStatus::Failed, Some(code))) => {
            ("failed", Some(format!("failed (exit_code={code})")))
        }
        Some((ProcessStatus::Failed, None)) => ("failed", Some("failed".to_string())),
        Some((ProcessStatus::Killed, _)) => ("failed", Some("killed".to_string())),
    };
    // RFC 3339 strings with a fixed format order like the instants they encode.
    let last_activity = latest
        .map(|p| match &p.completed_at {
            Some(c) if *c > p.updated_at => c.clone(),
            _ => p.updated_at.clone(),
        })
        .or_else(|| latest_session.map(|s| s.updated_at.clone()));
    Some(json!({
        "attempt_id": ws.id, "task_id": ws.task_id, "workspace_branch": ws.branch,
        "created_at": ws.created_at, "updated_at": ws.updated_at,
        "latest_session_id": latest_session.map(|s| s.id),
        "latest_execution_process_id": latest.map(|p| p.id),
        "state": state, "last_activity_at": last_activity, "failure_summary": failure,
    }))
}

/// `{fileCount, added, deleted, totalBytes}` of an attempt's files.
pub(crate) fn diff_summary(w: &World, id: Uuid) -> (Value, bool) {
    let files = w.changes.get(&id).map(Vec::as_slice).unwrap_or(&[]);
    let count = files.len() as u64;
    let added: u64 = files.iter().map(|f| f.additions).sum();
    let deleted: u64 = files.iter().map(|f| f.deletions).sum();
    let bytes: u64 = files.iter().map(|f| f.content.len() as u64).sum();
    let exceeded =
        count > GUARD_MAX_FILES || added + deleted > GUARD_MAX_LINES || bytes > GUARD_MAX_BYTES;
    (
        json!({"fileCount": count, "added": added, "deleted": deleted, "totalBytes": bytes}),
        exceeded,
    )
}

/// `GET /api/task-attempts/{id}/changes[?force=true]`.
pub(crate) fn changes_json(w: &World, id: Uuid, force: bool) -> Option<Value> {
    w.workspaces.get(&id)?;
    let (summary, exceeded) = diff_summary(w, id);
    let blocked = !force && exceeded;
    let mut files: Vec<String> = Vec::new();
    if !blocked {
        files = w
            .changes
            .get(&id)
            .map(|fs| {
                fs.iter()
                    .map(|f| format!("{}/{}", f.repo, f.path))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files.dedup();
    }
    Some(json!({
        "summary": summary, "blocked": blocked,
        "blockedReason": if blocked { Some("threshold_exceeded") } else { None },
        "files": files,
    }))
}

/// `GET /api/task-attempts/{id}/repos`.
pub(crate) fn attempt_repos_json(w: &World, id: Uuid) -> Vec<Value> {
    w.workspace_repos(id)
        .into_iter()
        .map(|(r, tb)| {
            let mut v = repo_json(r);
            if let Some(o) = v.as_object_mut() {
                o.insert("target_branch".into(), tb.into());
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::{ScaleSpec, load};

    #[test]
    fn every_task_renders_the_same_from_the_one_pass_facts() {
        let mut w = World::default();
        load(
            &mut w,
            ScaleSpec {
                tasks: 120,
                attempts: 240,
                side_tasks: 10,
                small_tasks: 5,
                entries: 10,
            },
        );
        // A task with two attempts whose newest process was killed, a dev server running on
        // another, and a session without a process; a task with no attempt.
        let project = w.add_project("extra", &["r"]);
        let task = w.add_task(project, "mixed", None);
        let _bare = w.add_task(project, "bare", None);
        for (executor, reason, end) in [
            (
                "CODEX",
                RunReason::CodingAgent,
                Some(ProcessStatus::Completed),
            ),
            ("GEMINI", RunReason::DevServer, None),
            (
                "CLAUDE_CODE",
                RunReason::CodingAgent,
                Some(ProcessStatus::Killed),
            ),
        ] {
            let ws = w
                .create_workspace(Uuid::new_v4(), task, Vec::new())
                .unwrap();
            let session = w.add_session(ws, executor).unwrap();
            let pid = w.insert_process(session, reason, Value::Null);
            if let Some(status) = end {
                w.complete_process(pid, status, None);
            }
        }
        let ws = w
            .create_workspace(Uuid::new_v4(), task, Vec::new())
            .unwrap();
        w.add_session(ws, "AMP").unwrap();
        let facts = all_task_facts(&w);
        let none = TaskFacts::default();
        for t in w.tasks.values() {
            let one_pass = task_json_with(t, facts.get(&t.id).unwrap_or(&none));
            assert_eq!(one_pass, task_json(&w, t), "task {}", t.title);
        }
        let mixed = task_json(&w, &w.tasks[&task]);
        assert_eq!(mixed["last_attempt_failed"], true);
        assert_eq!(mixed["has_in_progress_attempt"], false);
        assert_eq!(mixed["executor"], "AMP");
    }
}
