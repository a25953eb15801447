//! 0.1.x's REST reads: `/api/health`, `/api/info` (version 0.1.44), `/api/repos`,
//! `/api/workspaces[/{id}[/repos|/messages/first]]`, `/api/sessions[?workspace_id=|/{id}]`,
//! `/api/execution-processes/{id}`; unknown ids answer 404 with an empty body, and any other
//! GET is the web app's page (200 `text/html`), any other method a 405 without a body.

use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::render;
use crate::http::{AppState, not_found, ok};
use crate::types::RunReason;
use crate::world::{Session, Workspace, action_prompt};

/// The version `/api/info` reports.
pub(crate) const VERSION: &str = "0.1.44";

/// What the web app's fallback serves for an unknown GET (a stub page, as the recording's).
const WEB_APP: &str = "<html>vk</html>\n";

pub(crate) async fn health() -> Response {
    ok("OK")
}

/// The executor profiles the fork's simulator offers, in 0.1.x's `ExecutorConfigs` shape.
fn executors() -> Value {
    let claude = |extra: Value| {
        let mut v = json!({"append_prompt": null});
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        json!({"CLAUDE_CODE": v})
    };
    json!({
        "CLAUDE_CODE": {
            "DEFAULT": claude(json!({"dangerously_skip_permissions": true,
                                     "base_command_override": "<redacted>"})),
            "APPROVALS": claude(json!({"approvals": true})),
            "OPUS": claude(json!({"model": "opus"})),
            "PLAN": claude(json!({"plan": true})),
        },
        "CODEX": {
            "DEFAULT": {"CODEX": {"append_prompt": null, "sandbox": "workspace-write",
                                  "plan": false}},
        },
    })
}

fn config() -> Value {
    json!({
        "config_version": "v8", "theme": "SYSTEM",
        "executor_profile": {"executor": "CLAUDE_CODE"},
        "disclaimer_acknowledged": false, "onboarding_acknowledged": false,
        "remote_onboarding_acknowledged": false,
        "notifications": {"sound_enabled": true, "push_enabled": true,
                          "sound_file": "COW_MOOING"},
        "editor": {"editor_type": "VS_CODE", "custom_command": null, "remote_ssh_host": null,
                   "remote_ssh_user": null, "auto_install_extension": true},
        "github": {"pat": null, "oauth_token": null, "username": null, "primary_email": null,
                   "default_pr_base": "main"},
        "analytics_enabled": false, "workspace_dir": crate::util::WORKTREES,
        "last_app_version": VERSION, "show_release_notes": false, "language": "BROWSER",
        "git_branch_prefix": "vk", "showcases": {"seen_features": []},
        "pr_auto_description_enabled": true, "pr_auto_description_prompt": null,
        "commit_reminder_enabled": true, "commit_reminder_prompt": null,
        "send_message_shortcut": "ModifierEnter", "relay_enabled": true, "host_nickname": null,
    })
}

pub(crate) async fn info() -> Response {
    ok(json!({
        "version": VERSION,
        "config": config(),
        "machine_id": "vk-sim",
        "login_status": {"status": "loggedout"},
        "remote_auth_degraded": null,
        "executors": executors(),
        "environment": {"os_type": "Debian", "os_version": "12.0.0",
                        "os_architecture": "x86_64", "bitness": "64-bit"},
        "capabilities": {
            "CLAUDE_CODE": ["SESSION_FORK", "CONTEXT_USAGE"],
            "CODEX": ["SESSION_FORK", "SETUP_HELPER", "CONTEXT_USAGE"],
        },
        "shared_api_base": null,
        "preview_proxy_port": null,
    }))
}

pub(crate) async fn repos(State(inner): State<AppState>) -> Response {
    let w = inner.world();
    let list: Vec<Value> = render::registered_repos(&w)
        .into_iter()
        .map(render::repo_json)
        .collect();
    ok(list)
}

/// Every workspace, newest first.
pub(crate) async fn workspaces(State(inner): State<AppState>) -> Response {
    let w = inner.world();
    let mut list: Vec<&Workspace> = w.workspaces.values().collect();
    list.sort_by_key(|ws| std::cmp::Reverse(ws.ord));
    let list: Vec<Value> = list
        .into_iter()
        .map(|ws| render::workspace_json(&w, ws))
        .collect();
    ok(list)
}

pub(crate) async fn workspace(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    w.workspaces
        .get(&id)
        .map_or_else(not_found, |ws| ok(render::workspace_json(&w, ws)))
}

pub(crate) async fn workspace_repos(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
) -> Response {
    let w = inner.world();
    w.workspaces
        .get(&id)
        .map_or_else(not_found, |ws| ok(render::workspace_repos_json(&w, ws)))
}

/// `GET /api/workspaces/{id}/messages/first`: the oldest coding agent's prompt, or null.
pub(crate) async fn first_message(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    if !w.workspaces.contains_key(&id) {
        return not_found();
    }
    let first = w
        .processes_of_workspace(id)
        .into_iter()
        .find(|p| p.run_reason == RunReason::CodingAgent)
        .and_then(|p| action_prompt(&p.action));
    ok(first)
}

#[derive(Deserialize)]
pub(crate) struct SessionsQuery {
    workspace_id: Uuid,
}

/// The sessions of a workspace, oldest first (none for an unknown workspace).
pub(crate) async fn sessions(
    State(inner): State<AppState>,
    Query(q): Query<SessionsQuery>,
) -> Response {
    let w = inner.world();
    let mut list: Vec<&Session> = w
        .sessions
        .values()
        .filter(|s| s.workspace_id == q.workspace_id)
        .collect();
    list.sort_by_key(|s| s.ord);
    let list: Vec<Value> = list
        .into_iter()
        .map(|s| render::session_json(&w, s))
        .collect();
    ok(list)
}

pub(crate) async fn session(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    w.sessions
        .get(&id)
        .map_or_else(not_found, |s| ok(render::session_json(&w, s)))
}

pub(crate) async fn process(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    w.processes
        .get(&id)
        .map_or_else(not_found, |p| ok(render::process_json(&w, p)))
}

/// Anything no route takes: the web app for a GET (200 `text/html`, `/api/tasks` included:
/// 0.1.x has no tasks), 405 without a body for any other method.
pub(crate) async fn fallback(method: Method) -> Response {
    if method == Method::GET || method == Method::HEAD {
        ([(header::CONTENT_TYPE, "text/html")], WEB_APP).into_response()
    } else {
        StatusCode::METHOD_NOT_ALLOWED.into_response()
    }
}
