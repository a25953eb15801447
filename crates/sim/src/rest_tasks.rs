//! Task REST: list (newest first), get, create (idempotent), update, delete (202).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::http::{AppState, fail, not_found, ok};
use super::{idempotency, render};

const NO_PROJECT: &str = "Project not found in projects config. Edit `projects.yaml` (or `projects.d/*.yaml`; if you don't have those files, edit inline `projects` in `config.yaml`) and reload (POST /api/config/reload).";

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TaskStatus {
    Todo,
    InProgress,
    InReview,
    Done,
    Cancelled,
}

impl TaskStatus {
    fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Todo => "todo",
            TaskStatus::InProgress => "inprogress",
            TaskStatus::InReview => "inreview",
            TaskStatus::Done => "done",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct TasksQuery {
    project_id: Option<Uuid>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CreateTask {
    project_id: Uuid,
    title: String,
    description: Option<String>,
    status: Option<TaskStatus>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct UpdateTask {
    title: Option<String>,
    description: Option<String>,
    status: Option<TaskStatus>,
}

pub(crate) async fn list(State(inner): State<AppState>, Query(q): Query<TasksQuery>) -> Response {
    let w = inner.world();
    let mut tasks: Vec<_> = w
        .tasks
        .values()
        .filter(|t| q.project_id.is_none_or(|p| t.project_id == p))
        .collect();
    tasks.sort_by_key(|t| std::cmp::Reverse(t.ord));
    let facts = render::all_task_facts(&w);
    let none = render::TaskFacts::default();
    ok(tasks
        .into_iter()
        .map(|t| render::task_json_with(t, facts.get(&t.id).unwrap_or(&none)))
        .collect::<Vec<_>>())
}

pub(crate) async fn get(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    w.tasks
        .get(&id)
        .map_or_else(not_found, |t| ok(render::task_json(&w, t)))
}

pub(crate) async fn create(
    State(inner): State<AppState>,
    headers: HeaderMap,
    Json(body): Json<CreateTask>,
) -> Response {
    if inner.world().project(body.project_id).is_none() {
        return fail(StatusCode::BAD_REQUEST, NO_PROJECT);
    }
    let payload = serde_json::to_value(&body).unwrap_or(Value::Null);
    let key = idempotency::key(&headers);
    let inner2 = inner.clone();
    idempotency::run(&inner, "create_task", key, &payload, || async move {
        let id = inner2.add_task(body.project_id, &body.title, body.description.as_deref());
        if let Some(s) = body.status.filter(|s| !matches!(s, TaskStatus::Todo)) {
            let mut w = inner2.world();
            if let Some(t) = w.tasks.get_mut(&id) {
                t.status = s.as_str().to_string();
            }
        }
        inner2.count(|c| c.task_creations += 1);
        let w = inner2.world();
        Ok(w.tasks
            .get(&id)
            .map(render::task_row_json)
            .unwrap_or(json!(null)))
    })
    .await
}

pub(crate) async fn update(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(body): Json<UpdateTask>,
) -> Response {
    let desc = body
        .description
        .as_deref()
        .map(|d| if d.trim().is_empty() { None } else { Some(d) });
    let status = body.status.map(TaskStatus::as_str);
    if !inner.update_task(id, body.title.as_deref(), desc, status) {
        return not_found();
    }
    inner.count(|c| c.task_updates += 1);
    let w = inner.world();
    w.tasks
        .get(&id)
        .map_or_else(not_found, |t| ok(render::task_row_json(t)))
}

pub(crate) async fn delete(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let running = {
        let w = inner.world();
        w.workspaces
            .iter()
            .filter(|(_, ws)| ws.task_id == id)
            .flat_map(|(wid, _)| w.processes_of_workspace(*wid))
            .any(|p| p.status == super::types::ProcessStatus::Running)
    };
    if running {
        // VK refuses while any process of the task runs, dev servers included (contract §9.4).
        return fail(
            StatusCode::CONFLICT,
            "Cannot delete task while it has running execution processes",
        );
    }
    if !inner.delete_task(id) {
        return not_found();
    }
    inner.count(|c| c.task_deletions += 1);
    (StatusCode::ACCEPTED, ok(Value::Null)).into_response()
}
