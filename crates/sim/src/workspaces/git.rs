//! 0.1.x's git reads and merge over the simulated git state (`crate::git`):
//! `GET /api/workspaces/{id}/git/status` (one `RepoBranchStatus` a repo) and
//! `POST /api/workspaces/{id}/git/merge {repo_id}` (a squash merge that archives the workspace
//! unless it is pinned; 409 when the target moved). Rebase, conflicts/abort and push are the
//! fork's handlers at 0.1.x's paths (`router.rs`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::render;
use crate::git::GitOutcome;
use crate::http::{AppState, fail, not_found, ok};
use crate::types::{ProcessStatus, RunReason};
use crate::world::Change;

#[derive(Deserialize)]
pub(crate) struct RepoBody {
    repo_id: Uuid,
}

/// `GET /api/workspaces/{id}/git/status`.
pub(crate) async fn status(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let mut w = inner.world();
    let Some(ws) = w.workspaces.get(&id) else {
        return not_found();
    };
    let repos: Vec<(Uuid, String, String)> = render::workspace_repos(&w, ws)
        .into_iter()
        .map(|(r, target)| (r.id, r.name.clone(), target))
        .collect();
    let list: Vec<Value> = repos
        .into_iter()
        .map(|(repo, name, target)| {
            let mut v = w.git.status_json(id, repo, &target);
            if let Some(o) = v.as_object_mut() {
                o.insert("repo_id".into(), json!(repo));
                o.insert("repo_name".into(), json!(name));
                o.insert("is_target_remote".into(), json!(false));
            }
            v
        })
        .collect();
    ok(list)
}

/// `POST /api/workspaces/{id}/git/merge`: `data: null`; the workspace archived (not when
/// pinned) and its dev servers stopped.
pub(crate) async fn merge(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<RepoBody>,
) -> Response {
    let (task, dev_servers) = {
        let mut w = inner.world();
        let Some(ws) = w.workspaces.get(&id) else {
            return not_found();
        };
        let (branch, task) = (ws.branch.clone(), ws.task_id);
        let target = ws.repos.iter().find(|(r, _)| *r == body.repo_id);
        let Some(target) = target.map(|(_, t)| t.clone()) else {
            return fail(StatusCode::NOT_FOUND, "Repository not found.");
        };
        let behind = w.git.status_json(id, body.repo_id, &target)["commits_behind"].as_u64();
        if let Some(n) = behind.filter(|n| *n > 0) {
            let msg = format!(
                "Cannot merge: base branch '{target}' is {n} commits ahead of task branch \
                 '{branch}'. The base branch has moved forward since the task was created. \
                 Rebase onto the target branch first, then retry the merge."
            );
            return fail(StatusCode::CONFLICT, &msg);
        }
        match w.git.merge(id, body.repo_id, &branch, &target) {
            Ok(_) => {}
            Err(GitOutcome::Failed(m) | GitOutcome::BadRequest(m)) => {
                return fail(StatusCode::INTERNAL_SERVER_ERROR, &m);
            }
            Err(_) => return fail(StatusCode::INTERNAL_SERVER_ERROR, "merge failed"),
        }
        if let Some(ws) = w.workspaces.get_mut(&id)
            && !ws.pinned
        {
            ws.archived = true;
            ws.updated_at = crate::util::now_ts();
        }
        let dev: Vec<Uuid> = w
            .processes_of_workspace(id)
            .iter()
            .filter(|p| p.run_reason == RunReason::DevServer && p.status == ProcessStatus::Running)
            .map(|p| p.id)
            .collect();
        (task, dev)
    };
    inner.enqueue([Change::Workspace(task)]);
    for pid in dev_servers {
        inner.finish_process(pid, ProcessStatus::Killed, None);
    }
    ok(Value::Null)
}
