//! JSON views of the simulated rows, field for field as VK's REST and streams send them
//! (TaskWithAttemptStatus, Workspace, Session, ExecutionProcessPublic, attempt status, changes).

use serde_json::{Value, json};
use uuid::Uuid;

use super::types::{ProcessStatus, RunReason};
use super::world::{Process, Project, Repo, Task, World};

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

/// `TaskWithAttemptStatus`, with VK's derived fields.
pub(crate) fn task_json(w: &World, t: &Task) -> Value {
    let procs: Vec<&Process> = w
        .processes_of_task(t.id)
        .into_iter()
        .filter(|p| p.run_reason != RunReason::DevServer)
        .collect();
    let in_progress = procs.iter().any(|p| p.status == ProcessStatus::Running);
    let failed = procs
        .last()
        .is_some_and(|p| matches!(p.status, ProcessStatus::Failed | ProcessStatus::Killed));
    let executor = w
        .sessions
        .values()
        .filter(|s| {
            w.workspaces
                .get(&s.workspace_id)
                .is_some_and(|ws| ws.task_id == t.id)
        })
        .max_by_key(|s| s.ord)
        .and_then(|s| s.executor.clone())
        .unwrap_or_default();
    let mut v = task_row_json(t);
    if let Some(o) = v.as_object_mut() {
        o.insert("has_in_progress_attempt".into(), in_progress.into());
        o.insert("last_attempt_failed".into(), failed.into());
        o.insert("executor".into(), executor.into());
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
