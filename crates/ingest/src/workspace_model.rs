//! VK 0.1.x's workspace-first objects in the fork's shapes (issue 38; docs/vk-contract.md §12.2).
//!
//! The store, the query layer and the tools know projects → tasks → attempts → sessions →
//! processes, as the fork sends them. VK 0.1.x (BloopAI 0.1.15–0.1.44 and the forks that keep
//! its API) has no local projects or tasks: its unit is the **workspace** (our attempt), with
//! sessions and execution processes below it and registered repos beside it. This module is the
//! seam: pure functions from 0.1.x's JSON to the JSON the store already keeps, so nothing above
//! ingest learns which dialect fed it. What the daemon reads, and where it comes from here:
//!
//! - **Attempt** = the workspace, same id. `branch`, `container_ref` (null in the start reply
//!   and on orphans), `created_at`, `updated_at` as sent; `task_id` from the [`Board`] (VK's
//!   own `task_id` is null on 0.1.44); `agent_working_dir` from the workspace where an older
//!   0.1.x has it (0.1.44 keeps it on the session; the daemon does not read it). The flags
//!   `is_running`/`is_errored` (workspaces stream only; REST lacks them) and `archived` feed the
//!   task's status instead of the attempt row, so their flips move no attempt token.
//! - **Task**, where no [`Board`] links the workspace to another task: one per workspace, id =
//!   the workspace id. `title` = the workspace's `name` (else its first prompt cut as VK names
//!   workspaces, else its branch); `description` = its first prompt (the oldest coding agent's
//!   `executor_action.typ.prompt`, what `GET /api/workspaces/{id}/messages/first` answers);
//!   `status` by [`task_status`]; `created_at` = the workspace's; `updated_at` = the newest of
//!   the workspace's `updated_at` and its relevant processes' `created_at`/`completed_at` (VK
//!   moves neither the workspace's nor a process's `updated_at` when a process ends, and the
//!   store ignores a task version older than the stored one, so this never goes back while the
//!   ingest only learns more). The listing's `has_in_progress_attempt`, `last_attempt_failed`
//!   and executor are not read from the task: the store derives them from the rows below.
//! - **Project**: one per set of repos ([`project_id`]: UUID v5 of the sorted repo ids, so
//!   stable across daemon and VK restarts while VK keeps its repo rows), named by its repos'
//!   names joined by `" + "`; a workspace without repos (an orphan of a failed start, a bare
//!   `POST /api/workspaces` record) stands in the project of the empty set, [`NO_REPOSITORY`].
//!   Its repos are 0.1.x's `Repo` cut to the fork's fields ([`repo`]).
//! - **Session**: same id and fields the daemon reads (`workspace_id`, `executor`,
//!   `created_at`, `updated_at`); 0.1.x's `name` and `agent_working_dir` are left out.
//! - **Process**: same id and fields (`session_id`, `run_reason`, `status`, `exit_code`,
//!   `dropped`, `started_at`, `completed_at`, `created_at`, `executor_action.typ.prompt`), with
//!   `updated_at` = the newest of `updated_at` and `completed_at`, the action's
//!   `executor_config` also named `executor_profile_id` (the fork's name), and script bodies
//!   redacted as the fork does. 0.1.x's `archivescript` run reason is kept verbatim: the daemon's
//!   unknown reason, never relevant (VK's own `is_running`/`is_errored` skip it too).
//!
//! Pure: no I/O, no clock. The caller (the workspace-first ingest) reads the workspaces stream,
//! each workspace's repos and its sessions' processes, and chooses its [`Board`] once.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use vk_observer_vk::{self as vk, ProcessStatus, is_relevant, string_of, ts_of};

/// The name of the project of workspaces without repos.
pub(crate) const NO_REPOSITORY: &str = "(no repository)";

/// The namespace of [`project_id`]: UUID v5 of `urn:vk-observer:project-of-repos` in the URL
/// namespace (pinned by a test; changing it moves every derived project id).
pub(crate) const PROJECT_NAMESPACE: Uuid = Uuid::from_u128(0x8d69f0d5_e32f_5213_8613_2773bd72f653);

/// VK names a workspace after its first prompt cut to this many characters
/// (`WORKSPACE_NAME_MAX_LEN` in VK's `workspace.rs`).
const NAME_MAX_CHARS: usize = 60;

/// What the fork writes for a script's body (`executor_action.typ.script`).
const REDACTED: &str = "<redacted>";

/// The fork's task statuses a workspace can stand in (the fork has `cancelled` too: nothing on
/// 0.1.x means it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskStatus {
    Todo,
    InProgress,
    InReview,
    Done,
}

impl TaskStatus {
    /// The fork's spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Todo => "todo",
            TaskStatus::InProgress => "inprogress",
            TaskStatus::InReview => "inreview",
            TaskStatus::Done => "done",
        }
    }
}

/// Which task a workspace stands under: the seam where a board supplies tasks. The daemon's
/// own (`workspaces::tasks`: a task `start_task_attempt` made the workspace for) answers it
/// today; a fork's board (vibe-kanban-indie's `/api/projects` + `/api/issues`) can answer it
/// later from its issues' links, without touching the tools.
pub(crate) trait Board {
    /// The task this workspace belongs to; `None`: the workspace stands as its own task (in
    /// the project of its repos), as on a VK without a board.
    fn linked_task(&self, workspace: Uuid) -> Option<Uuid>;
}

/// No board: every workspace is its own task.
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OnePerWorkspace;

#[cfg(test)]
impl Board for OnePerWorkspace {
    fn linked_task(&self, _workspace: Uuid) -> Option<Uuid> {
        None
    }
}

/// What the ingest knows of one workspace: its JSON (a workspaces-stream value, with
/// `is_running`/`is_errored`, or a REST read, without), its repos (`GET
/// /api/workspaces/{id}/repos`: 0.1.x `Repo`s with `target_branch`) and the processes of all
/// its sessions (0.1.x's JSON or already mapped: both read the same).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Workspace<'a> {
    pub json: &'a Value,
    pub repos: &'a [Value],
    pub processes: &'a [Value],
}

/// A derived project: its id, its JSON, and its repos in the fork's shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Project {
    pub id: Uuid,
    pub json: Value,
    pub repos: Vec<Value>,
}

/// A workspace's own task and the project it stands in (no board task links it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OwnTask {
    pub task: Value,
    pub project: Project,
}

/// One workspace in the fork's shapes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mapped {
    /// The attempt row.
    pub attempt: Value,
    /// The attempt's repos with their target branches (`AttemptReposSnapshot`).
    pub attempt_repos: Vec<Value>,
    /// The task and project derived from the workspace; `None` when the board's task links it.
    pub own: Option<OwnTask>,
}

/// A workspace in the fork's shapes (see the module doc); `None` without an `id`.
pub(crate) fn map_workspace(board: &dyn Board, ws: Workspace<'_>) -> Option<Mapped> {
    let id = vk::object_id(ws.json)?;
    let (task_id, own) = match board.linked_task(id) {
        Some(task) => (task, None),
        None => {
            let project = project_of(ws.repos);
            let task = own_task(ws, id, project.id);
            (id, Some(OwnTask { task, project }))
        }
    };
    Some(Mapped {
        attempt: attempt(ws.json, task_id),
        attempt_repos: ws.repos.iter().map(repo).collect(),
        own,
    })
}

/// The attempt row of a workspace under `task_id` (the fork's workspace fields).
pub(crate) fn attempt(ws: &Value, task_id: Uuid) -> Value {
    let mut out = pick(
        ws,
        &[
            "id",
            "container_ref",
            "branch",
            "agent_working_dir",
            "setup_completed_at",
            "created_at",
            "updated_at",
        ],
    );
    out.insert("task_id".into(), json!(task_id));
    Value::Object(out)
}

/// The task a workspace stands as (id `task_id`, in project `project_id`).
pub(crate) fn own_task(ws: Workspace<'_>, task_id: Uuid, project_id: Uuid) -> Value {
    let prompt = first_prompt(ws.processes);
    json!({
        "id": task_id,
        "project_id": project_id,
        "title": task_title(ws.json, prompt.as_deref()),
        "description": prompt,
        "status": task_status(ws.json, ws.processes).as_str(),
        "created_at": ws.json.get("created_at").cloned().unwrap_or(Value::Null),
        "updated_at": task_updated_at(ws.json, ws.processes),
    })
}

/// The status a workspace's task stands in, the first rule that holds:
///
/// 1. `inprogress` while a relevant process (coding agent, setup or cleanup script, not
///    dropped) runs, or the workspace says `is_running` (VK's same rule; either suffices, since
///    either can be stale: wire fact 1);
/// 2. `done` once archived (VK archives a workspace on merge; starting a process un-archives
///    it, and rule 1 comes first);
/// 3. `inreview` once a relevant process ran (ended: completed, failed or killed, as the fork
///    moves a task to `inreview` on every end) or the workspace says `is_errored`; whether it
///    failed the listing says from the processes (`last_attempt_failed`);
/// 4. `todo`: nothing relevant ever ran (an orphan, a bare record, a start not yet read, a
///    workspace with only dev servers or archive scripts).
pub(crate) fn task_status(ws: &Value, processes: &[Value]) -> TaskStatus {
    let flag = |f: &str| ws.get(f).and_then(Value::as_bool) == Some(true);
    let mut relevant = processes.iter().filter(|p| is_relevant(p)).peekable();
    let ran = relevant.peek().is_some();
    let running = relevant.any(|p| ProcessStatus::Running.is(vk::status(p)));
    if running || flag("is_running") {
        TaskStatus::InProgress
    } else if flag("archived") {
        TaskStatus::Done
    } else if ran || flag("is_errored") {
        TaskStatus::InReview
    } else {
        TaskStatus::Todo
    }
}

/// The task's `updated_at`: the newest of the workspace's and its relevant processes'
/// `created_at` and `completed_at` (dropped ones too: their activity happened), as sent.
fn task_updated_at(ws: &Value, processes: &[Value]) -> Value {
    let mut newest = ws
        .get("updated_at")
        .filter(|_| ts_of(ws, "updated_at").is_some());
    let mut at = ts_of(ws, "updated_at");
    for p in processes
        .iter()
        .filter(|p| vk::is_relevant_reason(vk::run_reason(p)))
    {
        for field in ["created_at", "completed_at"] {
            if let Some(t) = ts_of(p, field).filter(|t| at.is_none_or(|a| *t > a)) {
                (at, newest) = (Some(t), p.get(field));
            }
        }
    }
    newest.cloned().unwrap_or(Value::Null)
}

/// The first prompt of a workspace: the oldest coding agent's (created_at, then id; one without
/// a time last), dropped ones included (it is what the workspace was started for).
pub(crate) fn first_prompt(processes: &[Value]) -> Option<String> {
    processes
        .iter()
        .filter(|p| vk::RunReason::CodingAgent.is(vk::run_reason(p)))
        .filter_map(|p| {
            let at = ts_of(p, "created_at");
            Some(((at.is_none(), at, vk::object_id(p)), vk::prompt_of(p)?))
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, prompt)| prompt)
}

/// A task's title: the workspace's `name`, else its first prompt cut as VK names workspaces
/// (60 characters, at a word, `...`), else its branch, else its id.
pub(crate) fn task_title(ws: &Value, first_prompt: Option<&str>) -> String {
    let name = string_of(ws, "name").filter(|n| !n.trim().is_empty());
    name.or_else(|| first_prompt.map(cut_as_vk_names).filter(|n| !n.is_empty()))
        .or_else(|| string_of(ws, "branch").filter(|b| !b.is_empty()))
        .unwrap_or_else(|| string_of(ws, "id").unwrap_or_default())
}

/// VK's `Workspace::truncate_to_name`.
fn cut_as_vk_names(prompt: &str) -> String {
    let trimmed = prompt.trim();
    if trimmed.chars().count() <= NAME_MAX_CHARS {
        return trimmed.to_owned();
    }
    let cut: String = trimmed.chars().take(NAME_MAX_CHARS).collect();
    match cut.rfind(' ') {
        Some(space) => format!("{}...", &cut[..space]),
        None => format!("{cut}..."),
    }
}

/// The id of the project of a repo set: UUID v5 in [`PROJECT_NAMESPACE`] of the repo ids,
/// lowercase and hyphenated, sorted, deduplicated, joined by `,` (the empty set: of `""`).
pub(crate) fn project_id(repo_ids: &[Uuid]) -> Uuid {
    let mut ids: Vec<String> = repo_ids.iter().map(Uuid::to_string).collect();
    ids.sort();
    ids.dedup();
    Uuid::new_v5(&PROJECT_NAMESPACE, ids.join(",").as_bytes())
}

/// The project of a workspace's repos (0.1.x `Repo`s; ones without an id are skipped).
pub(crate) fn project_of(repos: &[Value]) -> Project {
    let mut by_id: BTreeMap<Uuid, &Value> = BTreeMap::new();
    for r in repos {
        if let Some(id) = vk::object_id(r) {
            by_id.insert(id, r);
        }
    }
    let ids: Vec<Uuid> = by_id.keys().copied().collect();
    let id = project_id(&ids);
    let mut names: Vec<String> = by_id
        .iter()
        .map(|(rid, r)| string_of(r, "name").unwrap_or_else(|| rid.to_string()))
        .collect();
    names.sort();
    let name = if names.is_empty() {
        NO_REPOSITORY.to_owned()
    } else {
        names.join(" + ")
    };
    let repos = by_id
        .values()
        .map(|r| {
            let mut r = repo(r);
            if let Some(o) = r.as_object_mut() {
                o.remove("target_branch");
            }
            r
        })
        .collect();
    Project {
        id,
        json: json!({"id": id, "name": name}),
        repos,
    }
}

/// Every project a VK 0.1.x shows: one per registered repo alone (so a VK with repos and no
/// workspace yet has a project to start one in) and one per workspace's repo set; each once,
/// in id order. `registered` = `GET /api/repos`; `workspace_repos` = each workspace's repos.
pub(crate) fn projects<'a>(
    registered: &'a [Value],
    workspace_repos: impl IntoIterator<Item = &'a [Value]>,
) -> Vec<Project> {
    let mut all = BTreeMap::new();
    let singles = registered.iter().map(std::slice::from_ref);
    for set in singles.chain(workspace_repos) {
        let p = project_of(set);
        all.entry(p.id).or_insert(p);
    }
    all.into_values().collect()
}

/// A 0.1.x `Repo` in the fork's shape (`id`, `path`, `name`, `display_name`, `created_at`,
/// `updated_at`, and `target_branch` where the answer has it); the per-repo scripts are left
/// out (the daemon reads none).
pub(crate) fn repo(r: &Value) -> Value {
    let fields = [
        "id",
        "path",
        "name",
        "display_name",
        "created_at",
        "updated_at",
    ];
    let mut out = pick(r, &fields);
    if let Some(t) = r.get("target_branch") {
        out.insert("target_branch".into(), t.clone());
    }
    Value::Object(out)
}

/// A 0.1.x session in the fork's shape.
pub(crate) fn session(s: &Value) -> Value {
    let fields = ["id", "workspace_id", "executor", "created_at", "updated_at"];
    Value::Object(pick(s, &fields))
}

/// A 0.1.x execution process in the fork's shape (see the module doc). Anything but an object
/// is returned as it is (the store's readers are lenient and ingest counts it as garbage).
pub(crate) fn process(p: &Value) -> Value {
    let Some(obj) = p.as_object() else {
        return p.clone();
    };
    let mut out = obj.clone();
    if let Some(action) = obj.get("executor_action") {
        out.insert("executor_action".into(), executor_action(action));
    }
    let completed = ts_of(p, "completed_at");
    if completed.is_some() && completed > ts_of(p, "updated_at") {
        out.insert("updated_at".into(), obj["completed_at"].clone());
    }
    Value::Object(out)
}

/// An action chain (`{typ, next_action}`) in the fork's words: `executor_profile_id` beside
/// 0.1.x's `executor_config` (executor, and variant when set), script bodies redacted.
fn executor_action(action: &Value) -> Value {
    let Some(obj) = action.as_object() else {
        return action.clone();
    };
    let mut out = obj.clone();
    if let Some(Value::Object(typ)) = obj.get("typ") {
        let mut typ = typ.clone();
        if !typ.contains_key("executor_profile_id")
            && let Some(Value::Object(config)) = typ.get("executor_config")
        {
            let profile = pick(&Value::Object(config.clone()), &["executor", "variant"]);
            let profile: Map<String, Value> =
                profile.into_iter().filter(|(_, v)| !v.is_null()).collect();
            typ.insert("executor_profile_id".into(), Value::Object(profile));
        }
        if typ.get("script").is_some_and(Value::is_string) {
            typ.insert("script".into(), json!(REDACTED));
        }
        out.insert("typ".into(), Value::Object(typ));
    }
    if let Some(next) = obj.get("next_action").filter(|n| !n.is_null()) {
        out.insert("next_action".into(), executor_action(next));
    }
    Value::Object(out)
}

/// The listed fields of `v` that it has (absent ones stay absent).
fn pick(v: &Value, fields: &[&str]) -> Map<String, Value> {
    fields
        .iter()
        .filter_map(|f| Some(((*f).to_owned(), v.get(*f)?.clone())))
        .collect()
}

#[cfg(test)]
#[path = "workspace_model_tests.rs"]
mod tests;
