//! 0.1.x's mutations: `POST /api/workspaces/start` (a workspace, its session and the first
//! coding agent; no idempotency key: a retry is a second workspace), follow-ups, stopping a
//! process or a workspace, deleting a workspace, and the one-message queue of a session. Runs go
//! through the world and the scripted agent as on the fork; a workspace started here stands on a
//! task of its own, invisible on this wire.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{approvals, render};
use crate::core::{Inner, agent_action, lock};
use crate::http::{AppState, fail, not_found, ok};
use crate::script;
use crate::types::{AgentOutcome, ApprovalScript, AttemptScript, ProcessStatus, RunReason};
use crate::util::now_ts;
use crate::world::{Change, World};

/// VK 0.1.x waits this long for an approval (`APPROVAL_TIMEOUT_SECONDS`, 10 h).
const APPROVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(36_000);

/// VK names a workspace without a name after its prompt, cut to this many characters.
const NAME_MAX_CHARS: usize = 60;

#[derive(Debug, Deserialize)]
pub(crate) struct ExecutorConfig {
    executor: String,
    #[serde(default)]
    variant: Option<String>,
}

impl ExecutorConfig {
    /// As VK stores it: `{executor}` plus `variant` when set.
    fn json(&self) -> Value {
        match &self.variant {
            Some(v) => json!({"executor": self.executor, "variant": v}),
            None => json!({"executor": self.executor}),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct RepoInput {
    repo_id: Uuid,
    target_branch: String,
}

/// `CreateAndStartWorkspaceRequest` (`linked_issue`, `attachment_ids` are not used here).
#[derive(Debug, Deserialize)]
pub(crate) struct StartBody {
    #[serde(default)]
    name: Option<String>,
    repos: Vec<RepoInput>,
    executor_config: ExecutorConfig,
    prompt: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct FollowUpBody {
    prompt: String,
    executor_config: ExecutorConfig,
}

#[derive(Debug, Deserialize)]
pub(crate) struct QueueBody {
    message: String,
    executor_config: ExecutorConfig,
}

/// The scripted agent of a run: the prompt's `FAIL` fails it, the `APPROVALS` variant (or an
/// `APPROVAL` prompt, as the recording's stand-in agent reads it; or `ASK`, as the fork's
/// simulator reads it) asks before its Bash call, and `SLOW` slows it; repos have no scripts,
/// so no setup or cleanup run.
fn agent_script(cfg: &ExecutorConfig, prompt: &str) -> AttemptScript {
    let asks = cfg.variant.as_deref() == Some("APPROVALS")
        || prompt.contains("APPROVAL")
        || prompt.contains("ASK");
    AttemptScript {
        executor: cfg.executor.clone(),
        setup: false,
        cleanup: false,
        agent: if prompt.contains("FAIL") {
            AgentOutcome::Fail
        } else {
            AgentOutcome::Succeed
        },
        approval: asks.then(|| ApprovalScript {
            timeout: APPROVAL_TIMEOUT,
            ..ApprovalScript::default()
        }),
        ..AttemptScript::default()
    }
}

/// VK's name for a workspace started without one: its prompt, cut at a word.
fn name_from_prompt(prompt: &str) -> String {
    let prompt = prompt.trim();
    if prompt.chars().count() <= NAME_MAX_CHARS {
        return prompt.to_string();
    }
    let cut: String = prompt.chars().take(NAME_MAX_CHARS).collect();
    let at_word = cut.rsplit_once(' ').map_or(cut.as_str(), |(head, _)| head);
    format!("{}...", at_word.trim_end())
}

/// The workspace record and the task it stands for, made before the repos are checked (a
/// start refused for its repos leaves it behind, without repos or container: WIRE FACT 9).
fn create_record(inner: &Inner, name: &str, prompt: &str) -> (Uuid, Uuid) {
    let (task, ws) = (Uuid::new_v4(), Uuid::new_v4());
    {
        let mut w = inner.world();
        w.add_task_with_id(task, Uuid::nil(), name, Some(prompt));
        w.create_workspace(ws, task, Vec::new());
        lock(&inner.wire).hide_task(task);
    }
    inner.enqueue([Change::Workspace(task)]);
    (task, ws)
}

/// VK's refusals of the repos of a start: unknown repo (404), unknown target branch (400).
fn refuse_repos(w: &mut World, repos: &[RepoInput]) -> Option<Response> {
    for r in repos {
        let Some(name) = render::find_repo(w, r.repo_id).map(|repo| repo.name.clone()) else {
            return Some(fail(StatusCode::NOT_FOUND, "Repository not found."));
        };
        if !w.git.branch_exists(r.repo_id, &r.target_branch) {
            let msg = format!(
                "Branch '{}' does not exist in repository '{name}'",
                r.target_branch
            );
            return Some(fail(StatusCode::BAD_REQUEST, &msg));
        }
    }
    None
}

/// Gives the workspace record its repos (and its task the project holding the first one);
/// the workspace as it is now, before its worktree exists.
fn attach_repos(w: &mut World, task: Uuid, ws: Uuid, repos: &[RepoInput]) -> Option<Value> {
    let first = repos.first()?.repo_id;
    let project = w
        .projects
        .iter()
        .find(|p| p.repos.iter().any(|r| r.id == first))
        .map(|p| p.id);
    if let (Some(p), Some(t)) = (project, w.tasks.get_mut(&task)) {
        t.project_id = p;
    }
    let row = w.workspaces.get_mut(&ws)?;
    row.repos = repos
        .iter()
        .map(|r| (r.repo_id, r.target_branch.clone()))
        .collect();
    w.workspaces
        .get(&ws)
        .map(|row| render::workspace_json(w, row))
}

/// Starts a coding agent on `session` (a follow-up of `agent_session`, else an initial request)
/// and runs it in the background as scripted; the process as 0.1.x shows it.
fn run_agent(
    inner: &AppState,
    (ws, session): (Uuid, Uuid),
    agent_session: Option<Uuid>,
    cfg: &ExecutorConfig,
    prompt: &str,
) -> Option<Value> {
    let variant = cfg.variant.as_deref();
    let action = agent_action(prompt, &cfg.executor, variant, agent_session, Value::Null);
    let pid = inner.start_process_with(session, RunReason::CodingAgent, action)?;
    let process = {
        let w = inner.world();
        w.processes.get(&pid).map(|p| render::process_json(&w, p))
    };
    let s = agent_script(cfg, prompt);
    let run = script::drive_agent_chain(inner.clone(), ws, session, pid, prompt.to_string(), s);
    tokio::spawn(run);
    process
}

/// `POST /api/workspaces/start`: `{workspace, execution_process}` (the workspace as it was
/// before its worktree existed: `container_ref` null; the process is the running agent).
pub(crate) async fn start(State(inner): State<AppState>, Json(body): Json<StartBody>) -> Response {
    if body.prompt.trim().is_empty() {
        let msg = "A workspace prompt is required. Provide a non-empty `prompt`.";
        return fail(StatusCode::BAD_REQUEST, msg);
    }
    if body.repos.is_empty() {
        let msg = "At least one repository is required";
        return fail(StatusCode::BAD_REQUEST, msg);
    }
    let name = body
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| name_from_prompt(&body.prompt));
    let (task, ws) = create_record(&inner, &name, &body.prompt);
    let (workspace, session) = {
        let mut w = inner.world();
        if let Some(refused) = refuse_repos(&mut w, &body.repos) {
            return refused;
        }
        let workspace = attach_repos(&mut w, task, ws, &body.repos);
        w.set_container(ws);
        (workspace, w.add_session(ws, &body.executor_config.executor))
    };
    inner.enqueue([Change::Workspace(task)]);
    let Some(session) = session else {
        return not_found();
    };
    inner.count(|c| c.attempt_creations += 1);
    let process = run_agent(
        &inner,
        (ws, session),
        None,
        &body.executor_config,
        &body.prompt,
    );
    ok(json!({"workspace": workspace, "execution_process": process}))
}

/// `POST /api/sessions/{id}/follow-up`: the new running agent process. A session without an
/// agent turn yet gets an initial request; another executor than the session's is a 409; a
/// running agent is no obstacle (0.1.x has no concurrency guard).
pub(crate) async fn follow_up(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<FollowUpBody>,
) -> Response {
    let found = {
        let w = inner.world();
        w.sessions.get(&id).map(|s| {
            let turns = w
                .processes
                .values()
                .any(|p| p.session_id == id && p.run_reason == RunReason::CodingAgent);
            let executor = s.executor.clone().unwrap_or_default();
            (s.workspace_id, executor, turns.then_some(s.agent_session))
        })
    };
    let Some((ws, executor, agent_session)) = found else {
        return not_found();
    };
    if executor != body.executor_config.executor {
        let msg = format!(
            "Executor mismatch: session uses {executor} but request specified {}.",
            body.executor_config.executor
        );
        return fail(StatusCode::CONFLICT, &msg);
    }
    let task = inner.world().task_of_session(id);
    if let Some(task) = task {
        inner.update_task(task, None, None, Some("inprogress"));
    }
    let cfg = &body.executor_config;
    let Some(process) = run_agent(&inner, (ws, id), agent_session, cfg, &body.prompt) else {
        return not_found();
    };
    inner.count(|c| c.follow_ups += 1);
    ok(process)
}

/// Stops one process as 0.1.x does: status `killed` (no exit code) at once, a pending approval
/// cancelled first.
fn stop(inner: &Inner, pid: Uuid) {
    approvals::cancel_for_process(inner, pid);
    inner.finish_process(pid, ProcessStatus::Killed, None);
}

/// The running processes of a workspace (dev servers too when `dev_servers`, else only them
/// excluded), oldest first.
fn running_of(w: &World, ws: Uuid, dev_servers: bool) -> Vec<Uuid> {
    w.processes_of_workspace(ws)
        .into_iter()
        .filter(|p| p.status == ProcessStatus::Running)
        .filter(|p| (p.run_reason == RunReason::DevServer) == dev_servers)
        .map(|p| p.id)
        .collect()
}

/// `POST /api/execution-processes/{id}/stop`.
pub(crate) async fn stop_process(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    if !inner.world().processes.contains_key(&id) {
        return not_found();
    }
    inner.count(|c| c.stops += 1);
    stop(&inner, id);
    ok(Value::Null)
}

/// `POST /api/workspaces/{id}/execution/stop`: every running process but the dev servers.
pub(crate) async fn stop_workspace(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
) -> Response {
    let running = {
        let w = inner.world();
        if !w.workspaces.contains_key(&id) {
            return not_found();
        }
        running_of(&w, id, false)
    };
    inner.count(|c| c.stops += 1);
    for pid in running {
        stop(&inner, pid);
    }
    ok(Value::Null)
}

/// Removes a workspace with its sessions, processes, logs and queued messages.
fn remove_workspace(w: &mut World, ws: Uuid) {
    w.workspaces.remove(&ws);
    w.changes.remove(&ws);
    for s in w.sessions_of(ws) {
        w.sessions.remove(&s);
        w.queue.remove(&s);
        w.turns.retain(|t| t.session_id != s);
        let procs: Vec<Uuid> = w
            .processes
            .values()
            .filter(|p| p.session_id == s)
            .map(|p| p.id)
            .collect();
        for p in procs {
            w.processes.remove(&p);
            w.logs.remove(&p);
        }
    }
}

/// `DELETE /api/workspaces/{id}`: 202 and the rows gone (its dev servers stopped first); 409
/// while another of its processes runs.
pub(crate) async fn delete_workspace(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
) -> Response {
    let dev_servers = {
        let w = inner.world();
        if !w.workspaces.contains_key(&id) {
            return not_found();
        }
        if !running_of(&w, id, false).is_empty() {
            let msg =
                "Cannot delete workspace while processes are running. Stop all processes first.";
            return fail(StatusCode::CONFLICT, msg);
        }
        running_of(&w, id, true)
    };
    for pid in dev_servers {
        stop(&inner, pid);
    }
    let task = {
        let mut w = inner.world();
        let task = w.workspaces.get(&id).map(|ws| ws.task_id);
        remove_workspace(&mut w, id);
        if let Some(t) = task
            && !w.workspaces.values().any(|ws| ws.task_id == t)
            && lock(&inner.wire).unhide_task(t)
        {
            w.tasks.remove(&t);
        }
        task
    };
    if let Some(t) = task {
        inner.enqueue([Change::Workspace(t)]);
    }
    (StatusCode::ACCEPTED, ok(Value::Null)).into_response()
}

/// `GET /api/sessions/{id}/queue`: `{status: empty}` or `{status: queued, message}`.
pub(crate) async fn queue_get(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    if !w.sessions.contains_key(&id) {
        return not_found();
    }
    match w.queue.get(&id) {
        Some((msg, _)) => ok(json!({"status": "queued", "message": msg})),
        None => ok(json!({"status": "empty"})),
    }
}

/// `POST /api/sessions/{id}/queue`: one slot a session, a second message replaces the first;
/// it runs as a follow-up when the session's run ends (held in memory: a restart loses it).
pub(crate) async fn queue_post(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<QueueBody>,
) -> Response {
    let msg = json!({"session_id": id,
                     "data": {"message": body.message,
                              "executor_config": body.executor_config.json()},
                     "queued_at": now_ts()});
    {
        let mut w = inner.world();
        if !w.sessions.contains_key(&id) {
            return not_found();
        }
        w.queue.insert(id, (msg.clone(), None));
    }
    inner.count(|c| c.queue_posts += 1);
    ok(json!({"status": "queued", "message": msg}))
}

/// `DELETE /api/sessions/{id}/queue`.
pub(crate) async fn queue_delete(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let mut w = inner.world();
    if !w.sessions.contains_key(&id) {
        return not_found();
    }
    w.queue.remove(&id);
    ok(json!({"status": "empty"}))
}
