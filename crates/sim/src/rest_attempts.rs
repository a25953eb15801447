//! Task-attempt (VK workspace) REST and the diff WebSocket: list, get, create (idempotent;
//! runs the standard script in the background), status, changes, repos, stop
//! and start-dev-server.

use std::sync::Arc;

use axum::Json;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::core::{Inner, task_prompt};
use super::http::{AppState, fail, not_found, ok};
use super::types::{AgentOutcome, AttemptScript, ProcessStatus, RunReason, SimFile};
use super::{idempotency, render, script};

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    task_id: Option<Uuid>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ProfileId {
    executor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    variant: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct RepoInput {
    repo_id: Uuid,
    target_branch: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CreateAttempt {
    task_id: Uuid,
    executor_profile_id: ProfileId,
    repos: Vec<RepoInput>,
    #[serde(default)]
    prompt_preset: Option<Value>,
}

#[derive(Deserialize)]
pub(crate) struct ChangesQuery {
    #[serde(default)]
    force: bool,
}

pub(crate) async fn list(State(inner): State<AppState>, Query(q): Query<ListQuery>) -> Response {
    let w = inner.world();
    let mut v: Vec<_> = w
        .workspaces
        .values()
        .filter(|ws| q.task_id.is_none_or(|t| ws.task_id == t))
        .collect();
    v.sort_by_key(|ws| std::cmp::Reverse(ws.ord));
    ok(v.into_iter()
        .filter_map(|ws| render::workspace_json(&w, ws.id))
        .collect::<Vec<_>>())
}

pub(crate) async fn get(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    render::workspace_json(&inner.world(), id).map_or_else(not_found, ok)
}

pub(crate) async fn status(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    render::attempt_status_json(&inner.world(), id).map_or_else(not_found, ok)
}

pub(crate) async fn changes(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Query(q): Query<ChangesQuery>,
) -> Response {
    inner.count(|c| *c.changes_reads.entry(id).or_default() += 1);
    if inner.faults().garbage_changes {
        return (StatusCode::OK, "{\"success\": tru").into_response();
    }
    render::changes_json(&inner.world(), id, q.force).map_or_else(not_found, ok)
}

pub(crate) async fn repos(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    if !w.workspaces.contains_key(&id) {
        return not_found();
    }
    ok(render::attempt_repos_json(&w, id))
}

/// The file the standard script's agent writes.
fn standard_file(repo: &str, prompt: &str) -> SimFile {
    let content = format!("written by sim-agent\nprompt: {prompt}\n");
    SimFile {
        repo: repo.to_string(),
        path: "sim_agent_output.txt".to_string(),
        change: "added".to_string(),
        additions: content.lines().count() as u64,
        deletions: 0,
        content,
    }
}

/// What VK refuses before it creates anything: no repos, an unknown executor, a target branch
/// that does not exist.
fn refuse_create(inner: &AppState, body: &CreateAttempt) -> Option<Response> {
    if body.repos.is_empty() {
        return Some(fail(
            StatusCode::BAD_REQUEST,
            "At least one repository is required",
        ));
    }
    if !matches!(
        body.executor_profile_id.executor.as_str(),
        "CLAUDE_CODE" | "CODEX"
    ) {
        let msg = format!("Unknown executor: {}", body.executor_profile_id.executor);
        return Some(fail(StatusCode::BAD_REQUEST, &msg));
    }
    // VK creates the worktree on the target branch inside this call: an unknown one fails it
    // (500, workspace removed; docs/vk-contract.md §11.3, message inferred).
    let missing = {
        let mut w = inner.world();
        body.repos
            .iter()
            .find(|r| !w.git.branch_exists(r.repo_id, &r.target_branch))
            .map(|r| r.target_branch.clone())
    };
    missing.map(|b| {
        let msg = format!("Failed to create workspace: Branch not found: {b}");
        fail(StatusCode::INTERNAL_SERVER_ERROR, &msg)
    })
}

pub(crate) async fn create(
    State(inner): State<AppState>,
    headers: HeaderMap,
    Json(body): Json<CreateAttempt>,
) -> Response {
    if let Some(refused) = refuse_create(&inner, &body) {
        return refused;
    }
    let payload = serde_json::to_value(&body).unwrap_or(Value::Null);
    let key = idempotency::key(&headers);
    let inner2 = inner.clone();
    idempotency::run(
        &inner,
        "create_task_attempt",
        key,
        &payload,
        || async move {
            let prompt = {
                let w = inner2.world();
                w.tasks.get(&body.task_id).map(task_prompt)
            };
            let Some(prompt) = prompt else {
                return Err(not_found());
            };
            let repos = body
                .repos
                .iter()
                .map(|r| (r.repo_id, r.target_branch.clone()))
                .collect();
            let executor = body.executor_profile_id.executor.clone();
            let Some((ws, session, created)) =
                inner2.create_attempt(body.task_id, &executor, repos)
            else {
                return Err(not_found());
            };
            inner2.count(|c| c.attempt_creations += 1);
            let repo = inner2.world().first_repo_name(ws).unwrap_or_default();
            let s = AttemptScript {
                executor,
                agent: if prompt.contains("FAIL") {
                    AgentOutcome::Fail
                } else {
                    AgentOutcome::Succeed
                },
                files: vec![standard_file(&repo, &prompt)],
                // A task whose text says ASK: the agent asks before its Bash call (VK's
                // approvals), as a client starting it through REST would see.
                approval: prompt
                    .contains("ASK")
                    .then(super::types::ApprovalScript::default),
                ..AttemptScript::default()
            };
            // VK starts the first process (setup script, else the agent) before it answers.
            if let Some(first) = script::start_attempt(&inner2, ws, session, &prompt, &s) {
                tokio::spawn(script::continue_attempt(
                    inner2.clone(),
                    ws,
                    session,
                    first,
                    prompt,
                    s,
                ));
            }
            Ok(created)
        },
    )
    .await
}

/// Kills the attempt's running setup/agent/cleanup processes (after `stop_delay`, VK's grace
/// before the kill); dev servers are left alone.
pub(crate) async fn stop(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let running: Vec<Uuid> = {
        let w = inner.world();
        if !w.workspaces.contains_key(&id) {
            return not_found();
        }
        w.processes_of_workspace(id)
            .into_iter()
            .filter(|p| p.status == ProcessStatus::Running && p.run_reason != RunReason::DevServer)
            .map(|p| p.id)
            .collect()
    };
    inner.count(|c| c.stops += 1);
    tokio::time::sleep(inner.cfg.stop_delay).await;
    for pid in running {
        inner.finish_process(pid, ProcessStatus::Killed, None);
    }
    ok(Value::Null)
}

pub(crate) async fn start_dev_server(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
) -> Response {
    if !inner.world().workspaces.contains_key(&id) {
        return not_found();
    }
    match script::start_dev_server(&inner, id) {
        Some(_) => ok(Value::Null),
        None => fail(StatusCode::BAD_REQUEST, "No session found for this attempt"),
    }
}

pub(crate) async fn diff_ws(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    ws: WebSocketUpgrade,
) -> Response {
    ws.on_upgrade(move |s| serve_diff(inner, s, id))
}

/// The diff frames: summary/blocked first, then one `add /entries/<repo~1path>` per file.
fn diff_frames(inner: &Inner, id: Uuid) -> Vec<Value> {
    let w = inner.world();
    let (summary, exceeded) = render::diff_summary(&w, id);
    let mut frames = vec![json!({"JsonPatch": [
        {"op": "add", "path": "/summary", "value": summary},
        {"op": "add", "path": "/blocked", "value": exceeded},
        {"op": "add", "path": "/blockedReason",
         "value": if exceeded { Some("threshold_exceeded") } else { None }},
    ]})];
    if exceeded {
        return frames;
    }
    for f in w.changes.get(&id).map(Vec::as_slice).unwrap_or(&[]) {
        let full = format!("{}/{}", f.repo, f.path);
        let key = full.replace('~', "~0").replace('/', "~1");
        let deleted = f.change == "deleted";
        frames.push(
            json!({"JsonPatch": [{"op": "add", "path": format!("/entries/{key}"),
            "value": {"type": "DIFF", "content": {
                "change": f.change,
                "oldPath": if f.change == "added" { None } else { Some(full.clone()) },
                "newPath": if deleted { None } else { Some(full.clone()) },
                "oldContent": null,
                "newContent": if deleted { None } else { Some(f.content.clone()) },
                "contentOmitted": false, "additions": f.additions, "deletions": f.deletions,
            }}}]}),
        );
    }
    frames
}

async fn serve_diff(inner: Arc<Inner>, mut socket: WebSocket, id: Uuid) {
    let kill = inner.conn_token();
    let mut changed = inner.diff_tx.subscribe();
    if !inner.world().workspaces.contains_key(&id) {
        return;
    }
    loop {
        for f in diff_frames(&inner, id) {
            if socket
                .send(Message::Text(f.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
        }
        loop {
            tokio::select! {
                _ = kill.cancelled() => return,
                _ = inner.shutdown.cancelled() => return,
                incoming = socket.recv() => {
                    if !matches!(incoming, Some(Ok(_))) { return; }
                }
                c = changed.recv() => match c {
                    Ok(a) if a == id => break,
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(_) => return,
                },
            }
        }
    }
}
