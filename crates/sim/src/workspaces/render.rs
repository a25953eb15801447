//! JSON views of the simulated rows in VK 0.1.44's shapes: `Repo` (+ `target_branch`),
//! `Workspace` (REST) and the workspaces stream's value (+ `is_running`, `is_errored`),
//! `Session`, `ExecutionProcess` with its `executor_action` in 0.1.x's words, and log entries.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::types::{ProcessStatus, RunReason};
use crate::world::{Process, Repo, Session, Workspace, World};

/// The scripts a simulated repo would run, by the `context` of a `ScriptRequest` (the world
/// keeps them redacted, as the fork serves them; 0.1.x sends the text).
fn script_text(context: &str) -> &'static str {
    match context {
        "SetupScript" => "bash vk-setup.sh",
        "CleanupScript" => "bash vk-cleanup.sh",
        "ArchiveScript" => "bash vk-archive.sh",
        _ => "bash vk-dev.sh",
    }
}

/// A registered repo (`GET /api/repos`): no per-repo scripts, so a start runs the agent first.
pub(crate) fn repo_json(r: &Repo) -> Value {
    json!({
        "id": r.id, "path": r.path, "name": r.name, "display_name": r.name,
        "setup_script": null, "cleanup_script": null, "archive_script": null,
        "copy_files": null, "parallel_setup_script": false, "dev_server_script": null,
        "default_target_branch": null, "default_working_dir": null,
        "created_at": r.created_at, "updated_at": r.created_at,
    })
}

/// Every repo of every project, once, in registration order: 0.1.x's registered repos.
pub(crate) fn registered_repos(w: &World) -> Vec<&Repo> {
    let mut seen = std::collections::HashSet::new();
    w.projects
        .iter()
        .flat_map(|p| p.repos.iter())
        .filter(|r| seen.insert(r.id))
        .collect()
}

pub(crate) fn find_repo(w: &World, id: Uuid) -> Option<&Repo> {
    w.projects
        .iter()
        .flat_map(|p| p.repos.iter())
        .find(|r| r.id == id)
}

/// A workspace's repos with their target branches, in its order.
pub(crate) fn workspace_repos<'w>(w: &'w World, ws: &Workspace) -> Vec<(&'w Repo, String)> {
    ws.repos
        .iter()
        .filter_map(|(id, target)| find_repo(w, *id).map(|r| (r, target.clone())))
        .collect()
}

/// `GET /api/workspaces/{id}/repos`: `RepoWithTargetBranch`.
pub(crate) fn workspace_repos_json(w: &World, ws: &Workspace) -> Vec<Value> {
    workspace_repos(w, ws)
        .into_iter()
        .map(|(r, target)| {
            let mut v = repo_json(r);
            if let Some(o) = v.as_object_mut() {
                o.insert("target_branch".into(), target.into());
            }
            v
        })
        .collect()
}

/// The name of the only repo of a workspace (VK's working dir then), None with 0 or 2+.
fn single_repo(w: &World, ws: &Workspace) -> Option<String> {
    match workspace_repos(w, ws).as_slice() {
        [(r, _)] => Some(r.name.clone()),
        _ => None,
    }
}

/// A workspace as REST answers it (no `is_running` / `is_errored`).
pub(crate) fn workspace_json(w: &World, ws: &Workspace) -> Value {
    let name = w
        .tasks
        .get(&ws.task_id)
        .map_or_else(|| ws.branch.clone(), |t| t.title.clone());
    json!({
        "id": ws.id, "task_id": null, "container_ref": ws.container_ref, "branch": ws.branch,
        "setup_completed_at": null, "created_at": ws.created_at, "updated_at": ws.updated_at,
        "archived": ws.archived, "pinned": ws.pinned, "name": name, "worktree_deleted": false,
    })
}

/// What VK 0.1.x derives for the workspaces stream from a workspace's processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Flags {
    running: bool,
    /// (ord, failed or killed) of the newest relevant process.
    latest: Option<(u64, bool)>,
}

impl Flags {
    fn see(&mut self, p: &Process) {
        // Relevant: setup, agent, cleanup (VK skips dev servers and archive scripts).
        if p.run_reason == RunReason::DevServer {
            return;
        }
        self.running |= p.status == ProcessStatus::Running;
        if self.latest.is_none_or(|(ord, _)| p.ord > ord) {
            let failed = matches!(p.status, ProcessStatus::Failed | ProcessStatus::Killed);
            self.latest = Some((p.ord, failed));
        }
    }

    fn errored(&self) -> bool {
        self.latest.is_some_and(|(_, failed)| failed)
    }
}

/// The flags of one workspace.
pub(crate) fn flags_of(w: &World, ws: Uuid) -> Flags {
    let mut f = Flags::default();
    for p in w.processes_of_workspace(ws) {
        f.see(p);
    }
    f
}

/// The flags of every workspace from one pass over the processes (snapshots).
pub(crate) fn all_flags(w: &World) -> HashMap<Uuid, Flags> {
    let mut out: HashMap<Uuid, Flags> = HashMap::new();
    for p in w.processes.values() {
        if let Some(s) = w.sessions.get(&p.session_id) {
            out.entry(s.workspace_id).or_default().see(p);
        }
    }
    out
}

/// A workspace as the workspaces stream (and SSE) send it: REST's fields + the two flags.
pub(crate) fn workspace_stream_json(w: &World, ws: &Workspace, flags: Flags) -> Value {
    let mut v = workspace_json(w, ws);
    if let Some(o) = v.as_object_mut() {
        o.insert("is_running".into(), flags.running.into());
        o.insert("is_errored".into(), flags.errored().into());
    }
    v
}

/// `Session`: the agent's working dir is the repo's name when the workspace has one repo.
pub(crate) fn session_json(w: &World, s: &Session) -> Value {
    let dir = w
        .workspaces
        .get(&s.workspace_id)
        .and_then(|ws| single_repo(w, ws));
    json!({
        "id": s.id, "workspace_id": s.workspace_id, "name": null, "executor": s.executor,
        "agent_working_dir": dir, "created_at": s.created_at, "updated_at": s.updated_at,
    })
}

/// `ExecutionProcess` in 0.1.x's shape.
pub(crate) fn process_json(w: &World, p: &Process) -> Value {
    let dir = w
        .sessions
        .get(&p.session_id)
        .and_then(|s| w.workspaces.get(&s.workspace_id))
        .and_then(|ws| single_repo(w, ws));
    json!({
        "id": p.id, "session_id": p.session_id, "run_reason": p.run_reason.as_str(),
        "executor_action": wire_action(&p.action, dir.as_deref()),
        "status": p.status.as_str(), "exit_code": p.exit_code, "dropped": false,
        "started_at": p.started_at, "completed_at": p.completed_at,
        "created_at": p.created_at, "updated_at": p.updated_at,
    })
}

/// An executor action (and its `next_action` chain) in 0.1.x's words: `executor_config` for
/// the fork's `executor_profile_id`, `reset_to_message_id` on follow-ups, the script's text,
/// and the agent's working dir when the workspace has one repo.
pub(crate) fn wire_action(action: &Value, single_repo: Option<&str>) -> Value {
    let Some(o) = action.as_object() else {
        return action.clone();
    };
    let mut out = Map::new();
    for (k, v) in o {
        let v = match k.as_str() {
            "typ" => wire_typ(v, single_repo),
            "next_action" => wire_action(v, single_repo),
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    Value::Object(out)
}

fn wire_typ(typ: &Value, single_repo: Option<&str>) -> Value {
    let Some(o) = typ.as_object() else {
        return typ.clone();
    };
    let mut t = o.clone();
    if let Some(profile) = t.remove("executor_profile_id") {
        t.insert("executor_config".into(), profile);
    }
    let kind = t
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind == "CodingAgentFollowUpRequest" && !t.contains_key("reset_to_message_id") {
        t.insert("reset_to_message_id".into(), Value::Null);
    }
    if kind.starts_with("CodingAgent")
        && t.get("working_dir").is_none_or(Value::is_null)
        && let Some(dir) = single_repo
    {
        t.insert("working_dir".into(), dir.into());
    }
    if kind == "ScriptRequest" && t.get("script").and_then(Value::as_str) == Some("<redacted>") {
        let context = t.get("context").and_then(Value::as_str).unwrap_or("");
        t.insert("script".into(), script_text(context).into());
    }
    Value::Object(t)
}

/// A log entry as 0.1.x sends it: a normalized entry always carries `metadata` (null when
/// none), a Bash call its `category`, and a pending approval only its `approval_id`. Raw
/// chunks (`{type: STDOUT|STDERR, content}`) are sent as stored.
pub(crate) fn log_entry(entry: &Value) -> Value {
    let mut e = entry.clone();
    if e.get("type").and_then(Value::as_str) != Some("NORMALIZED_ENTRY") {
        return e;
    }
    if let Some(c) = e.get_mut("content").and_then(Value::as_object_mut)
        && !c.contains_key("metadata")
    {
        c.insert("metadata".into(), Value::Null);
    }
    if let Some(a) = e
        .pointer_mut("/content/entry_type/action_type")
        .and_then(Value::as_object_mut)
        && a.get("action").and_then(Value::as_str) == Some("command_run")
        && !a.contains_key("category")
    {
        a.insert("category".into(), "other".into());
    }
    if let Some(s) = e.pointer_mut("/content/entry_type/status")
        && s.get("status").and_then(Value::as_str) == Some("pending_approval")
    {
        let id = s.get("approval_id").cloned().unwrap_or(Value::Null);
        *s = json!({"status": "pending_approval", "approval_id": id});
    }
    e
}

/// Is this a normalized entry 0.1.x's replay puts last (the stderr an `error_message` stands
/// for is normalized after stdout when VK re-reads a finished log)?
pub(crate) fn replayed_last(entry: &Value) -> bool {
    entry
        .pointer("/content/entry_type/type")
        .and_then(Value::as_str)
        == Some("error_message")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_chain_is_told_in_0_1_words() {
        let cleanup = World::script_action("CleanupScript", Some("alpha"), Value::Null);
        let fork = crate::core::agent_action("p", "CLAUDE_CODE", None, Some(Uuid::nil()), cleanup);
        let wire = wire_action(&fork, Some("alpha"));
        let typ = &wire["typ"];
        assert_eq!(typ["type"], "CodingAgentFollowUpRequest");
        assert_eq!(typ["executor_config"], json!({"executor": "CLAUDE_CODE"}));
        assert!(typ.get("executor_profile_id").is_none());
        assert_eq!(
            (&typ["reset_to_message_id"], &typ["working_dir"]),
            (&Value::Null, &json!("alpha"))
        );
        let next = &wire["next_action"]["typ"];
        assert_eq!(
            (&next["script"], &next["working_dir"]),
            (&json!("bash vk-cleanup.sh"), &json!("alpha"))
        );
        assert_eq!(wire_action(&fork, None)["typ"]["working_dir"], Value::Null);
    }

    #[test]
    fn a_normalized_entry_gets_0_1_fields_and_a_raw_chunk_stays() {
        let pending = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
            "entry_type": {"type": "tool_use", "tool_name": "Bash",
                "action_type": {"action": "command_run", "command": "ls", "result": null},
                "status": {"status": "pending_approval", "approval_id": "a",
                           "requested_at": "t", "timeout_at": "u"}},
            "content": "ls"}});
        let e = log_entry(&pending);
        assert_eq!(e["content"]["metadata"], Value::Null);
        let entry_type = &e["content"]["entry_type"];
        assert_eq!(entry_type["action_type"]["category"], "other");
        assert_eq!(
            entry_type["status"],
            json!({"status": "pending_approval", "approval_id": "a"})
        );
        let raw = json!({"type": "STDERR", "content": "x\n"});
        assert_eq!(log_entry(&raw), raw);
        assert!(replayed_last(
            &json!({"content": {"entry_type": {"type": "error_message"}}})
        ));
    }
}
