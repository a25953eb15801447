//! The workspaces dialect's axum router: the routes of VK 0.1.44 the simulator serves (paths as
//! in the recording's ROUTES.md), the web app's fallback, token auth and call counting.

use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};

use super::{approvals, git, logs, rest, runs, sse, streams};
use crate::http::{self, AppState};
use crate::rest_git as fork_git;

pub(crate) fn build(state: AppState) -> Router {
    let ep = "/api/execution-processes/{id}";
    Router::new()
        .route("/api/health", get(rest::health))
        .route("/api/info", get(rest::info))
        .route("/api/events", get(sse::events))
        .route("/api/repos", get(rest::repos))
        .route("/api/workspaces", get(rest::workspaces))
        .route("/api/workspaces/start", post(runs::start))
        .route("/api/workspaces/streams/ws", get(streams::workspaces_ws))
        .route(
            "/api/workspaces/{id}",
            get(rest::workspace).delete(runs::delete_workspace),
        )
        .route("/api/workspaces/{id}/repos", get(rest::workspace_repos))
        .route(
            "/api/workspaces/{id}/messages/first",
            get(rest::first_message),
        )
        .route("/api/workspaces/{id}/git/status", get(git::status))
        .route("/api/workspaces/{id}/git/merge", post(git::merge))
        // The fork's handlers: same bodies ({repo_id, …}) and answers as 0.1.x's
        // (rec-0.1: rest-git-rebase-*.json, rest-git-conflicts-abort.json, rest-git-push*.json).
        .route("/api/workspaces/{id}/git/rebase", post(fork_git::rebase))
        .route(
            "/api/workspaces/{id}/git/conflicts/abort",
            post(fork_git::abort),
        )
        .route("/api/workspaces/{id}/git/push", post(fork_git::push))
        .route(
            "/api/workspaces/{id}/git/push/force",
            post(fork_git::push_force),
        )
        .route(
            "/api/workspaces/{id}/execution/stop",
            post(runs::stop_workspace),
        )
        .route("/api/sessions", get(rest::sessions))
        .route("/api/sessions/{id}", get(rest::session))
        .route("/api/sessions/{id}/follow-up", post(runs::follow_up))
        .route(
            "/api/sessions/{id}/queue",
            get(runs::queue_get)
                .post(runs::queue_post)
                .delete(runs::queue_delete),
        )
        .route(
            "/api/execution-processes/stream/session/ws",
            get(streams::session_ws),
        )
        .route(ep, get(rest::process))
        .route(&format!("{ep}/stop"), post(runs::stop_process))
        .route(
            &format!("{ep}/normalized-logs/ws"),
            get(logs::normalized_ws),
        )
        .route(&format!("{ep}/raw-logs/ws"), get(logs::raw_ws))
        .route("/api/approvals/stream/ws", get(approvals::stream_ws))
        .route("/api/approvals/{id}/respond", post(approvals::respond))
        .fallback(rest::fallback)
        .layer(from_fn_with_state(state.clone(), http::count))
        .layer(from_fn_with_state(state.clone(), http::auth))
        .with_state(state)
}
