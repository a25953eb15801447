//! Server-level REST: `/health`, `/api/info`, `/api/profiles`, `/api/config/status|reload`,
//! `/api/projects` (read-only; projects live in VK's config), project repositories and a repo's
//! branches.

use std::sync::atomic::Ordering;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use uuid::Uuid;

use super::http::{AppState, fail, not_found, ok};
use super::render;
use super::util::VK_DATA;

pub(crate) async fn health() -> Response {
    ok("OK")
}

fn retry() -> Value {
    json!({"error_patterns": [], "delay_seconds": 15, "max_attempts": 3})
}

/// The executor profiles: Claude Code with four variants, Codex with one.
fn executors() -> Value {
    let claude = |extra: Value| {
        let mut v = json!({"append_prompt": null, "auto_retry": retry()});
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        json!({"CLAUDE_CODE": v})
    };
    json!({
        "CLAUDE_CODE": {
            "OPUS": claude(json!({"model": "opus"})),
            "DEFAULT": claude(json!({"dangerously_skip_permissions": true,
                                     "base_command_override": "<redacted>"})),
            "PLAN": claude(json!({"plan": true})),
            "APPROVALS": claude(json!({"approvals": true})),
        },
        "CODEX": {
            "DEFAULT": {"CODEX": {"append_prompt": null, "auto_retry": retry(),
                                  "sandbox": "workspace-write"}},
        },
    })
}

pub(crate) async fn info(State(inner): State<AppState>) -> Response {
    let projects: Vec<Value> = inner
        .world()
        .projects
        .iter()
        .map(render::config_project_json)
        .collect();
    let resolution = |src: &str, fallback: bool| json!({"source": src, "status": "READY", "fallback_to_latest": fallback});
    ok(json!({
        "config": {
            "config_version": "v10", "theme": "SYSTEM",
            "executor_profile": {"executor": "CLAUDE_CODE"},
            "executor_profiles": {"executors": {"CLAUDE_CODE": {"DEFAULT": {"CLAUDE_CODE": {
                "append_prompt": null, "auto_retry": retry(),
                "dangerously_skip_permissions": true, "base_command_override": "<redacted>"}}}}},
            "disclaimer_acknowledged": false, "onboarding_acknowledged": false,
            "notifications": {"sound_enabled": true, "push_enabled": true,
                              "sound_file": "COW_MOOING"},
            "editor": {"editor_type": "VS_CODE", "custom_command": null,
                       "remote_ssh_host": null, "remote_ssh_user": null},
            "github": {"pat": null, "oauth_token": null, "username": null,
                       "primary_email": null, "default_pr_base": "main"},
            "workspace_dir": null, "last_app_version": "0.0.143",
            "show_release_notes": false, "language": "BROWSER", "git_branch_prefix": "vk",
            "git_no_verify": false, "showcases": {"seen_features": []},
            "pr_auto_description_enabled": true, "pr_auto_description_prompt": null,
            "llman_claude_code_path": null, "diff_preview_guard": "BALANCED",
            "access_control": {
                "mode": if inner.cfg.auth_token.is_some() { "TOKEN" } else { "DISABLED" },
                "token": null, "allow_localhost_bypass": false},
            "projects": projects,
        },
        "executors": executors(),
        "environment": {"os_type": "Debian", "os_version": "12.0.0",
                        "os_architecture": "x86_64", "bitness": "64-bit"},
        "capabilities": {"CLAUDE_CODE": ["SESSION_FORK"]},
        "agent_command_resolutions": {
            "CLAUDE_CODE": resolution("NPX_LATEST", true),
            "CODEX": resolution("NPX_LATEST", true),
        },
    }))
}

pub(crate) async fn profiles() -> Response {
    let content =
        serde_json::to_string_pretty(&json!({"executors": executors()})).unwrap_or_default();
    ok(json!({"content": content, "path": format!("{VK_DATA}/config/config.yaml")}))
}

fn config_status(inner: &super::core::Inner) -> Value {
    let dir = format!("{VK_DATA}/config");
    json!({
        "config_dir": dir, "config_path": format!("{dir}/config.yaml"),
        "projects_path": format!("{dir}/projects.yaml"),
        "projects_dir": format!("{dir}/projects.d"),
        "projects_ui_path": format!("{dir}/projects.ui.yaml"),
        "secret_env_path": format!("{dir}/secret.env"),
        "schema_path": format!("{dir}/config.schema.json"),
        "projects_schema_path": format!("{dir}/projects.schema.json"),
        "loaded_at_unix_ms": inner.loaded_at.load(Ordering::SeqCst),
        "last_error": null, "dirty": false,
    })
}

pub(crate) async fn config_get(State(inner): State<AppState>) -> Response {
    ok(config_status(&inner))
}

pub(crate) async fn config_reload(State(inner): State<AppState>) -> Response {
    inner.reload_config();
    ok(config_status(&inner))
}

pub(crate) async fn projects(State(inner): State<AppState>) -> Response {
    let list: Vec<Value> = inner
        .world()
        .projects
        .iter()
        .map(render::project_json)
        .collect();
    ok(list)
}

pub(crate) async fn create_project() -> Response {
    fail(
        StatusCode::METHOD_NOT_ALLOWED,
        "Projects settings 已静态化：请编辑 `projects.yaml`（或 `projects.d/*.yaml`）+ reload（POST /api/config/reload）。",
    )
}

pub(crate) async fn repositories(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    match w.project(id) {
        Some(p) => ok(p.repos.iter().map(render::repo_json).collect::<Vec<_>>()),
        None => not_found(),
    }
}

/// `GET /api/repos/{repo_id}/branches`: VK's `GitBranch` list (docs/vk-contract.md §11.3): the
/// current branch first, then the others; local branches only here (a simulated repo has no
/// remote). Unknown repo → 404.
pub(crate) async fn repo_branches(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let mut w = inner.world();
    let current = match w.repo_mut(id) {
        Some(r) => r.current_branch.clone(),
        None => return not_found(),
    };
    let mut names = w.git.base_names(id);
    let mut attempt_branches: Vec<(u64, String)> = w
        .workspaces
        .values()
        .filter(|ws| ws.repos.iter().any(|(r, _)| *r == id))
        .map(|ws| (ws.ord, ws.branch.clone()))
        .collect();
    attempt_branches.sort();
    names.extend(attempt_branches.into_iter().rev().map(|(_, b)| b));
    if let Some(c) = &current
        && !names.contains(c)
    {
        names.push(c.clone());
    }
    names.sort_by_key(|n| Some(n) != current.as_ref());
    let date = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let list: Vec<Value> = names
        .into_iter()
        .map(|name| {
            let is_current = Some(&name) == current.as_ref();
            json!({"name": name, "is_current": is_current, "is_remote": false,
                   "last_commit_date": date})
        })
        .collect();
    ok(list)
}
