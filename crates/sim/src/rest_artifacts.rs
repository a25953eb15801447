//! The simulator's bounded artifact routes, per docs/vk-contract.md §6.4–6.5:
//! `GET /api/task-attempts/{id}/file` and `POST /api/task-attempts/{id}/patch`, served from the
//! attempt's scripted files (`set_changes`). Counted like every route, so tests can prove a
//! blocked path never reached "VK".

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::http::{AppState, fail, not_found, ok};
use super::render;

const FILE_DEFAULT: u64 = 64 * 1024;
const FILE_MAX: u64 = 512 * 1024;
const PATCH_DEFAULT: u64 = 200 * 1024;
const PATCH_MAX: u64 = 2 * 1024 * 1024;

#[derive(Deserialize)]
pub(crate) struct FileQuery {
    path: Option<String>,
    start: Option<u64>,
    max_bytes: Option<u64>,
}

fn outside(path: &str) -> bool {
    path.starts_with('/') || path.split('/').any(|c| c == "..")
}

pub(crate) async fn file(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Query(q): Query<FileQuery>,
) -> Response {
    let w = inner.world();
    if !w.workspaces.contains_key(&id) {
        return not_found();
    }
    let path = q.path.unwrap_or_default();
    if path.is_empty() {
        return fail(StatusCode::BAD_REQUEST, "path is required");
    }
    let start = q.start.unwrap_or(0);
    let max = q.max_bytes.unwrap_or(FILE_DEFAULT);
    let blocked = |reason: &str| {
        ok(
            json!({"path": path, "blocked": true, "blockedReason": reason, "truncated": false,
                  "start": start, "bytes": 0, "totalBytes": null, "content": null}),
        )
    };
    if outside(&path) {
        return blocked("path_outside_workspace");
    }
    if max > FILE_MAX {
        return blocked("size_exceeded");
    }
    let Some(f) = w
        .changes
        .get(&id)
        .and_then(|fs| fs.iter().find(|f| format!("{}/{}", f.repo, f.path) == path))
    else {
        return fail(StatusCode::NOT_FOUND, "File does not exist");
    };
    let bytes = f.content.as_bytes();
    let total = bytes.len() as u64;
    let from = start.min(total) as usize;
    let to = (start.saturating_add(max)).min(total) as usize;
    let slice = &bytes[from..to];
    ok(
        json!({"path": path, "blocked": false, "blockedReason": null,
              "truncated": (to as u64) < total, "start": start, "bytes": slice.len(),
              "totalBytes": total, "content": String::from_utf8_lossy(slice)}),
    )
}

#[derive(Deserialize)]
pub(crate) struct PatchBody {
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    force: bool,
    max_bytes: Option<u64>,
}

pub(crate) async fn patch(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Json(b): Json<PatchBody>,
) -> Response {
    let w = inner.world();
    if !w.workspaces.contains_key(&id) {
        return not_found();
    }
    if b.paths.is_empty() {
        return fail(StatusCode::BAD_REQUEST, "paths must not be empty");
    }
    let max = b.max_bytes.unwrap_or(PATCH_DEFAULT);
    let blocked = |reason: &str| {
        ok(
            json!({"blocked": true, "blockedReason": reason, "truncated": false, "bytes": 0,
                  "paths": b.paths, "patch": null}),
        )
    };
    if b.paths.len() > 100 {
        return blocked("too_many_paths");
    }
    if max > PATCH_MAX {
        return blocked("size_exceeded");
    }
    if b.paths.iter().any(|p| outside(p) || !p.contains('/')) {
        return blocked("path_outside_workspace");
    }
    let exceeded = render::changes_json(&w, id, false)
        .and_then(|c| c.get("blocked").and_then(Value::as_bool))
        .unwrap_or(false);
    if exceeded && !b.force {
        return blocked("threshold_exceeded");
    }
    let mut text = String::new();
    for f in w.changes.get(&id).into_iter().flatten() {
        let full = format!("{}/{}", f.repo, f.path);
        if !b.paths.contains(&full) {
            continue;
        }
        text.push_str(&vk_file_diff(&full, f));
    }
    let mut cut = text.len().min(max as usize);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let truncated = cut < text.len();
    text.truncate(cut);
    ok(
        json!({"blocked": false, "blockedReason": null, "truncated": truncated,
              "bytes": text.len(), "paths": b.paths, "patch": text}),
    )
}

/// One file of VK's patch text (`concatenate_diff_hunks`: `--- a/` / `+++ b/` headers, then the
/// hunk), with as many `+` and `-` lines as the file's counts. VK diffs a missing side as one
/// empty line, so a created file's hunk also deletes an empty line and a deleted one's adds one.
fn vk_file_diff(full: &str, f: &super::types::SimFile) -> String {
    let mut added: Vec<String> = f.content.lines().map(str::to_owned).collect();
    added.resize(f.additions as usize, "more".to_string());
    let mut removed: Vec<String> = (1..=f.deletions).map(|i| format!("old line {i}")).collect();
    match f.change.as_str() {
        "added" => removed = vec![String::new()],
        "deleted" => added = vec![String::new()],
        _ => {}
    }
    let range = |n: usize| match n {
        0 => "0,0".to_string(),
        1 => "1".to_string(),
        _ => format!("1,{n}"),
    };
    let mut out = format!(
        "--- a/{full}\n+++ b/{full}\n@@ -{} +{} @@\n",
        range(removed.len()),
        range(added.len())
    );
    for l in &removed {
        out.push('-');
        out.push_str(l);
        out.push('\n');
    }
    for l in &added {
        out.push('+');
        out.push_str(l);
        out.push('\n');
    }
    out
}
