//! `get_context`: which project, task and attempt a directory belongs to, found by matching the
//! path against the cached attempts' workspace folders (`container_ref`). Only meaningful for a
//! client running inside an attempt workspace, so the tool is listed only then.

use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::detail::Rules;
use super::{Freshness, Query};
use vk_observer_tool_error::{ErrorCode, ToolError};
use vk_observer_vk::{string_of, uuid_of};

/// A repository of the attempt workspace.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct WorkspaceRepo {
    /// Repository id (UUID).
    pub repo_id: Uuid,
    /// Folder name of the repository inside the workspace.
    pub repo_name: String,
    /// Branch the attempt's work targets (merge/rebase base).
    pub target_branch: Option<String>,
}

/// Answer of `get_context`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct WorkspaceContext {
    /// Project id (UUID).
    pub project_id: Option<Uuid>,
    /// Project name.
    pub project_name: Option<String>,
    /// Task id (UUID).
    pub task_id: Option<Uuid>,
    /// Task title.
    pub task_title: Option<String>,
    /// Task status (`todo`, `inprogress`, `inreview`, `done`, `cancelled`).
    pub task_status: Option<String>,
    /// Attempt id (UUID) of this workspace.
    pub attempt_id: Uuid,
    /// Git branch of the attempt.
    pub workspace_branch: Option<String>,
    /// Workspace folder on the VK host.
    pub workspace_path: String,
    /// Repositories of the workspace with their target branches.
    pub workspace_repos: Vec<WorkspaceRepo>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// What each detail level shows of `get_context`: ids, names and branches at 0 (seed 002's
/// `attempt_id` and `workspace_branch` beside the project and task, null when unknown); the
/// workspace folder on the VK host from 1.
pub const CONTEXT_RULES: Rules = Rules {
    finish: None,
    kept: &[
        "project_id",
        "project_name",
        "task_id",
        "task_title",
        "task_status",
        "attempt_id",
        "workspace_branch",
        "workspace_repos",
    ],
    standard: &["workspace_path"],
    verbatim: &[],
    nested: &[],
};

/// Lexically normalized absolute path (no `.`/`..`), so prefixes compare reliably.
pub(crate) fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

impl Query {
    /// The attempt whose workspace contains `dir`, if any (the deepest match wins).
    pub fn attempt_at(&self, dir: &Path) -> Result<Option<(Uuid, String)>, ToolError> {
        let dir = normalize(dir);
        let mut best: Option<(Uuid, String, usize)> = None;
        for a in self.read().attempts()? {
            let Some(root) = string_of(&a.value, "container_ref") else {
                continue;
            };
            let root_path = normalize(Path::new(&root));
            if root.is_empty() || !dir.starts_with(&root_path) {
                continue;
            }
            let depth = root_path.components().count();
            if best.as_ref().is_none_or(|(_, _, d)| depth > *d) {
                best = Some((a.id, root, depth));
            }
        }
        Ok(best.map(|(id, root, _)| (id, root)))
    }

    pub fn context_for(&self, dir: &Path) -> Result<WorkspaceContext, ToolError> {
        let token = self.token();
        let Some((attempt_id, root)) = self.attempt_at(dir)? else {
            return Err(ToolError::new(
                ErrorCode::NoWorkspaceContext,
                false,
                "This client is not running inside a VK attempt workspace. Use list_projects → list_tasks → list_task_attempts instead.",
            )
            .with_details(serde_json::json!({ "path": dir.display().to_string() })));
        };
        let reader = self.read();
        let attempt = reader
            .attempt(attempt_id)?
            .ok_or_else(|| ToolError::internal("attempt vanished during read"))?;
        let task = match uuid_of(&attempt.value, "task_id") {
            Some(t) => reader.task(t)?,
            None => None,
        };
        let project_id = task.as_ref().and_then(|t| uuid_of(&t.value, "project_id"));
        let project = match project_id {
            Some(p) => reader.project(p)?,
            None => None,
        };
        let mut workspace_repos: Vec<WorkspaceRepo> = reader
            .attempt_repos(attempt_id)?
            .into_iter()
            .map(|r| WorkspaceRepo {
                repo_id: r.id,
                repo_name: string_of(&r.value, "name").unwrap_or_default(),
                target_branch: string_of(&r.value, "target_branch"),
            })
            .collect();
        workspace_repos.sort_by(|a, b| a.repo_name.cmp(&b.repo_name));
        Ok(WorkspaceContext {
            project_id,
            project_name: project.and_then(|p| string_of(&p.value, "name")),
            task_id: task.as_ref().map(|t| t.id),
            task_title: task.as_ref().and_then(|t| string_of(&t.value, "title")),
            task_status: task.as_ref().and_then(|t| string_of(&t.value, "status")),
            attempt_id,
            workspace_branch: string_of(&attempt.value, "branch"),
            workspace_path: root,
            workspace_repos,
            token,
            freshness: self.freshness(),
        })
    }
}
