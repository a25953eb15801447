//! VK's git routes of a task attempt over the simulated git state (`git`): branch status, rebase,
//! conflicts/abort, merge, push and push/force, with VK's status codes and envelopes (see the
//! module doc of `git` and docs/vk-contract.md §9.8).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::git::GitOutcome;
use super::http::{AppState, fail, not_found, ok};
use super::types::{ProcessStatus, RunReason};
use super::world::World;

#[derive(Deserialize)]
pub(crate) struct RepoBody {
    repo_id: Uuid,
}

#[derive(Deserialize)]
pub(crate) struct RebaseBody {
    repo_id: Uuid,
    old_base_branch: Option<String>,
    new_base_branch: Option<String>,
}

/// Why a git route cannot find its attempt repo.
enum Missing {
    /// Unknown attempt: VK's middleware answers 404 with an empty body.
    Attempt,
    /// A repo that is not the attempt's: the `RepoError` envelope.
    Repo,
}

impl Missing {
    fn response(self) -> Response {
        match self {
            Missing::Attempt => not_found(),
            Missing::Repo => fail(StatusCode::NOT_FOUND, "RepoError: Repository not found"),
        }
    }
}

/// The attempt branch name and the repo's target branch.
fn locate(w: &World, ws: Uuid, repo: Uuid) -> Result<(String, String), Missing> {
    let workspace = w.workspaces.get(&ws).ok_or(Missing::Attempt)?;
    let (_, target) = workspace
        .repos
        .iter()
        .find(|(r, _)| *r == repo)
        .ok_or(Missing::Repo)?;
    Ok((workspace.branch.clone(), target.clone()))
}

/// VK's answer to a git outcome; `base` names the branch a rebase went onto.
fn render(outcome: GitOutcome, base: &str) -> Response {
    match outcome {
        GitOutcome::Ok => ok(Value::Null),
        GitOutcome::Conflicts(files) => {
            let message = format!(
                "Rebase encountered merge conflicts while rebasing 'HEAD' onto '{base}'. Conflicted files: {}. Resolve conflicts and then continue or abort.",
                files.join(", ")
            );
            error_data(
                StatusCode::OK,
                json!({"type": "merge_conflicts", "message": message, "op": "rebase"}),
            )
        }
        GitOutcome::BadRequest(m) => fail(StatusCode::BAD_REQUEST, &m),
        GitOutcome::ForcePushRequired => {
            error_data(StatusCode::CONFLICT, json!({"type": "force_push_required"}))
        }
        GitOutcome::Failed(m) => fail(StatusCode::INTERNAL_SERVER_ERROR, &m),
    }
}

fn error_data(status: StatusCode, data: Value) -> Response {
    (
        status,
        Json(json!({"success": false, "data": null, "error_data": data, "message": null})),
    )
        .into_response()
}

/// `GET /api/task-attempts/{id}/branch-status`.
pub(crate) async fn branch_status(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let mut w = inner.world();
    if !w.workspaces.contains_key(&id) {
        return not_found();
    }
    let repos: Vec<(Uuid, String, String)> = w
        .workspace_repos(id)
        .into_iter()
        .map(|(r, tb)| (r.id, r.name.clone(), tb))
        .collect();
    let list: Vec<Value> = repos
        .into_iter()
        .map(|(rid, name, tb)| {
            let mut v = w.git.status_json(id, rid, &tb);
            if let Some(o) = v.as_object_mut() {
                o.insert("repo_id".into(), json!(rid));
                o.insert("repo_name".into(), json!(name));
            }
            v
        })
        .collect();
    ok(list)
}

/// `POST /api/task-attempts/{id}/rebase`: the new base must exist (400), becomes the target
/// branch, then the rebase (conflicts: 200 with `error_data`).
pub(crate) async fn rebase(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<RebaseBody>,
) -> Response {
    let mut w = inner.world();
    let (branch, target) = match locate(&w, id, body.repo_id) {
        Ok(x) => x,
        Err(m) => return m.response(),
    };
    let new_base = body.new_base_branch.unwrap_or(target);
    // VK's `old_base_branch` only picks the rebase's upstream; the model has one history.
    let _ = body.old_base_branch;
    if !w.git.branch_exists(body.repo_id, &new_base) {
        return render(super::git::unknown_branch(&new_base), &new_base);
    }
    if let Some(ws) = w.workspaces.get_mut(&id)
        && let Some(slot) = ws.repos.iter_mut().find(|(r, _)| *r == body.repo_id)
    {
        slot.1 = new_base.clone();
    }
    let outcome = w.git.rebase(id, body.repo_id, &branch, &new_base);
    render(outcome, &new_base)
}

/// `POST /api/task-attempts/{id}/conflicts/abort`: always 200.
pub(crate) async fn abort(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<RepoBody>,
) -> Response {
    let mut w = inner.world();
    let (_, target) = match locate(&w, id, body.repo_id) {
        Ok(x) => x,
        Err(m) => return m.response(),
    };
    w.git.abort(id, body.repo_id, &target);
    ok(Value::Null)
}

/// `POST /api/task-attempts/{id}/merge`: squash merge; the task goes `done` and the attempt's
/// dev servers are stopped.
pub(crate) async fn merge(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<RepoBody>,
) -> Response {
    let (task, dev_servers) = {
        let mut w = inner.world();
        let (branch, target) = match locate(&w, id, body.repo_id) {
            Ok(x) => x,
            Err(m) => return m.response(),
        };
        if let Err(outcome) = w.git.merge(id, body.repo_id, &branch, &target) {
            return render(outcome, &target);
        }
        let dev: Vec<Uuid> = w
            .processes_of_workspace(id)
            .iter()
            .filter(|p| p.run_reason == RunReason::DevServer && p.status == ProcessStatus::Running)
            .map(|p| p.id)
            .collect();
        (w.workspaces.get(&id).map(|ws| ws.task_id), dev)
    };
    if let Some(task) = task {
        inner.update_task(task, None, None, Some("done"));
    }
    for pid in dev_servers {
        inner.finish_process(pid, ProcessStatus::Killed, None);
    }
    ok(Value::Null)
}

/// `POST /api/task-attempts/{id}/push`: 409 `force_push_required` when rejected.
pub(crate) async fn push(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<RepoBody>,
) -> Response {
    push_with(&inner, id, body.repo_id, false)
}

/// `POST /api/task-attempts/{id}/push/force`.
pub(crate) async fn push_force(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<RepoBody>,
) -> Response {
    push_with(&inner, id, body.repo_id, true)
}

fn push_with(inner: &AppState, id: Uuid, repo: Uuid, force: bool) -> Response {
    let mut w = inner.world();
    let (branch, target) = match locate(&w, id, repo) {
        Ok(x) => x,
        Err(m) => return m.response(),
    };
    let outcome = w.git.push(id, repo, &branch, &target, force);
    render(outcome, &target)
}

#[derive(Deserialize)]
pub(crate) struct RenameBody {
    new_branch_name: String,
}

/// A branch name git accepts (`git check-ref-format --branch`, the rules VK checks).
pub(crate) fn valid_branch_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.ends_with('/')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("@{")
        && !name.contains("//")
        && !name
            .chars()
            .any(|c| c.is_control() || " ~^:?*[\\".contains(c))
        && name
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.'))
}

/// `POST /api/task-attempts/{id}/rename-branch` (docs/vk-contract.md §11.3): `{branch}`; typed
/// refusals `empty_branch_name`, `invalid_branch_name_format` (400), `branch_already_exists`,
/// `rebase_in_progress` (409, with `repo_name`). The same name answers 200 and changes nothing.
pub(crate) async fn rename_branch(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<RenameBody>,
) -> Response {
    let name = body.new_branch_name.trim().to_string();
    let refusal = |status, data: Value| error_data(status, data);
    if name.is_empty() {
        return refusal(
            StatusCode::BAD_REQUEST,
            json!({"type": "empty_branch_name"}),
        );
    }
    if !valid_branch_name(&name) {
        return refusal(
            StatusCode::BAD_REQUEST,
            json!({"type": "invalid_branch_name_format"}),
        );
    }
    let task = {
        let mut w = inner.world();
        let Some(ws) = w.workspaces.get(&id) else {
            return not_found();
        };
        if ws.branch == name {
            return ok(json!({"branch": name}));
        }
        let repos: Vec<(Uuid, String)> = ws.repos.clone();
        let taken = w.workspaces.values().any(|o| o.branch == name);
        for (repo, target) in &repos {
            let repo_name = w
                .workspace_repos(id)
                .into_iter()
                .find(|(r, _)| r.id == *repo)
                .map(|(r, _)| r.name.clone())
                .unwrap_or_default();
            if taken || w.git.branch_exists(*repo, &name) {
                return refusal(
                    StatusCode::CONFLICT,
                    json!({"type": "branch_already_exists", "repo_name": repo_name}),
                );
            }
            if w.git.branch(id, *repo, target).rebase.is_some() {
                return refusal(
                    StatusCode::CONFLICT,
                    json!({"type": "rebase_in_progress", "repo_name": repo_name}),
                );
            }
        }
        let Some(ws) = w.workspaces.get_mut(&id) else {
            return not_found();
        };
        ws.branch = name.clone();
        ws.updated_at = super::util::now_ts();
        ws.task_id
    };
    inner.enqueue([super::world::Change::Workspace(task)]);
    ok(json!({"branch": name}))
}
