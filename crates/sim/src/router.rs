//! The simulator's axum router: every VK route it serves, with auth and call counting.

use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};

use super::http::{self, AppState};
use super::{
    logs, rest_artifacts as artifacts, rest_attempts as att, rest_git as git, rest_meta as meta,
    rest_processes as proc_, rest_sessions as ses, rest_tasks as tasks, sse, ws_objects as ws,
};

pub(crate) fn build(state: AppState) -> Router {
    let ep = "/api/execution-processes/{id}";
    Router::new()
        .route("/health", get(meta::health))
        .route("/api/info", get(meta::info))
        .route("/api/profiles", get(meta::profiles))
        .route("/api/config/status", get(meta::config_get))
        .route("/api/config/reload", post(meta::config_reload))
        .route("/api/events", get(sse::events))
        .route(
            "/api/projects",
            get(meta::projects).post(meta::create_project),
        )
        .route("/api/projects/{id}/repositories", get(meta::repositories))
        .route("/api/projects/stream/ws", get(ws::projects_ws))
        .route("/api/repos/{id}/branches", get(meta::repo_branches))
        .route("/api/tasks", get(tasks::list).post(tasks::create))
        .route("/api/tasks/stream/ws", get(ws::tasks_ws))
        .route(
            "/api/tasks/{id}",
            get(tasks::get).put(tasks::update).delete(tasks::delete),
        )
        .route("/api/task-attempts", get(att::list).post(att::create))
        .route("/api/task-attempts/{id}", get(att::get))
        .route("/api/task-attempts/{id}/status", get(att::status))
        .route("/api/task-attempts/{id}/changes", get(att::changes))
        .route("/api/task-attempts/{id}/repos", get(att::repos))
        .route("/api/task-attempts/{id}/file", get(artifacts::file))
        .route("/api/task-attempts/{id}/patch", post(artifacts::patch))
        .route(
            "/api/task-attempts/{id}/branch-status",
            get(git::branch_status),
        )
        .route("/api/task-attempts/{id}/rebase", post(git::rebase))
        .route("/api/task-attempts/{id}/conflicts/abort", post(git::abort))
        .route("/api/task-attempts/{id}/merge", post(git::merge))
        .route(
            "/api/task-attempts/{id}/rename-branch",
            post(git::rename_branch),
        )
        .route("/api/task-attempts/{id}/push", post(git::push))
        .route("/api/task-attempts/{id}/push/force", post(git::push_force))
        .route("/api/task-attempts/{id}/diff/ws", get(att::diff_ws))
        .route("/api/task-attempts/{id}/stop", post(att::stop))
        .route(
            "/api/task-attempts/{id}/start-dev-server",
            post(att::start_dev_server),
        )
        .route("/api/sessions", get(ses::list))
        .route("/api/sessions/{id}", get(ses::get))
        .route("/api/sessions/{id}/messages", get(ses::messages))
        .route("/api/sessions/{id}/follow-up", post(ses::follow_up))
        .route(
            "/api/sessions/{id}/queue",
            get(ses::queue_get)
                .post(ses::queue_post)
                .delete(ses::queue_delete),
        )
        .route("/api/execution-processes/stream/ws", get(ws::processes_ws))
        .route(ep, get(proc_::get))
        .route(&format!("{ep}/stop"), post(proc_::stop))
        .route(
            &format!("{ep}/normalized-logs/v2"),
            get(logs::normalized_history),
        )
        .route(&format!("{ep}/raw-logs/v2"), get(logs::raw_history))
        .route(
            &format!("{ep}/normalized-logs/v2/ws"),
            get(logs::normalized_ws),
        )
        .route(&format!("{ep}/raw-logs/v2/ws"), get(logs::raw_ws))
        .route(
            "/api/approvals/{id}/respond",
            post(super::approvals::respond),
        )
        .layer(from_fn_with_state(state.clone(), http::count))
        .layer(from_fn_with_state(state.clone(), http::auth))
        .with_state(state)
}
