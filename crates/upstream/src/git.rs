//! VK's git routes of a task attempt (docs/vk-contract.md §9.8): branch status, rebase,
//! conflicts/abort, merge, push and push/force, and the branch rename. Some of VK's answers are not errors to it but
//! `success:false` envelopes carrying `error_data` (a rebase that stopped on conflicts answers
//! 200; a rejected push 409 `force_push_required`), so these calls read the envelope themselves
//! and hand back which of VK's answers it was. Nothing is decided here.
//!
//! On a VK 0.1.x (`dialect()` = `Workspaces`) the branch status and the git actions go to its
//! workspace routes instead (`git_v01`), with the same bodies and answers.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::dialect::Dialect;
use super::rest::{UpstreamError, VkClient};
use super::routes;
use super::wire::Envelope;

use vk_observer_vk::GitAction;

/// The request body of `action` on one repo of an attempt (the same on both dialects).
pub(crate) fn action_body(action: &GitAction, repo_id: Uuid) -> Value {
    match action {
        GitAction::Rebase {
            old_base_branch,
            new_base_branch,
        } => json!({
            "repo_id": repo_id,
            "old_base_branch": old_base_branch,
            "new_base_branch": new_base_branch,
        }),
        _ => json!({ "repo_id": repo_id }),
    }
}

/// VK's answer to a git action that is not a plain failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitAnswer {
    /// `success: true`.
    Done,
    /// `error_data.type = merge_conflicts` (a rebase stopped; the worktree is mid-operation).
    MergeConflicts { message: String, op: Option<String> },
    /// `error_data.type = rebase_in_progress`.
    RebaseInProgress,
    /// 409 `error_data.type = force_push_required`.
    ForcePushRequired,
}

impl VkClient {
    /// `GET /api/task-attempts/{id}/branch-status`: one entry per repo of the attempt. On a
    /// VK 0.1.x, `GET /api/workspaces/{id}/git/status`, whose entries are the fork's.
    pub async fn branch_status(&self, attempt: Uuid) -> Result<Vec<Value>, UpstreamError> {
        if self.dialect() == Some(Dialect::Workspaces) {
            return self.git_status_v01(attempt).await;
        }
        self.get(&routes::branch_status(attempt)).await
    }

    /// Run a git action on one repo of an attempt. VK's other refusals (400 unknown branch,
    /// 404 repo, 500 diverged / dirty worktree / nothing to merge) are `UpstreamError::Status`
    /// (on a VK 0.1.x, `git_v01::refusal_of` names its texts).
    pub async fn git_action(
        &self,
        attempt: Uuid,
        repo_id: Uuid,
        action: &GitAction,
    ) -> Result<GitAnswer, UpstreamError> {
        if self.dialect() == Some(Dialect::Workspaces) {
            return self.git_action_v01(attempt, repo_id, action).await;
        }
        let path = routes::git_action(attempt, action);
        let rb = self
            .request(Method::POST, &path)
            .json(&action_body(action, repo_id));
        let resp = rb
            .timeout(std::time::Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| UpstreamError::Unreachable {
                url: self.url(&path),
                reason: e.to_string(),
            })?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| UpstreamError::Unreachable {
            url: self.url(&path),
            reason: e.to_string(),
        })?;
        if status == StatusCode::NOT_FOUND && body.is_empty() {
            return Err(UpstreamError::NotFound { path });
        }
        let Ok(env) = serde_json::from_slice::<Envelope<Value>>(&body) else {
            return Err(UpstreamError::Status {
                status: status.as_u16(),
                path,
                message: String::from_utf8_lossy(&body).chars().take(500).collect(),
            });
        };
        if status.is_success() && env.success {
            return Ok(GitAnswer::Done);
        }
        let kind = env
            .error_data
            .as_ref()
            .and_then(|d| d.get("type"))
            .and_then(Value::as_str);
        let text = |key: &str| {
            env.error_data
                .as_ref()
                .and_then(|d| d.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        match kind {
            Some("merge_conflicts") => Ok(GitAnswer::MergeConflicts {
                message: text("message").unwrap_or_default(),
                op: text("op"),
            }),
            Some("rebase_in_progress") => Ok(GitAnswer::RebaseInProgress),
            Some("force_push_required") => Ok(GitAnswer::ForcePushRequired),
            _ => Err(UpstreamError::Status {
                status: status.as_u16(),
                path,
                message: env.message.unwrap_or_default(),
            }),
        }
    }
}

/// VK's answer to a branch rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenameAnswer {
    /// The branch's name now.
    Renamed(String),
    /// A typed refusal: `error_data.type` (`empty_branch_name`, `invalid_branch_name_format`,
    /// `open_pull_request`, `branch_already_exists`, `rebase_in_progress`) and its `repo_name`.
    Refused {
        kind: String,
        repo_name: Option<String>,
    },
}

impl VkClient {
    /// `POST /api/task-attempts/{id}/rename-branch`. Untyped failures are `UpstreamError`.
    pub async fn rename_branch(
        &self,
        attempt: Uuid,
        new_branch_name: &str,
    ) -> Result<RenameAnswer, UpstreamError> {
        let path = routes::rename_branch(attempt);
        let rb = self
            .request(Method::POST, &path)
            .json(&json!({ "new_branch_name": new_branch_name }))
            .timeout(std::time::Duration::from_secs(30));
        let unreachable = |e: reqwest::Error| UpstreamError::Unreachable {
            url: self.url(&path),
            reason: e.to_string(),
        };
        let resp = rb.send().await.map_err(unreachable)?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(unreachable)?;
        if status == StatusCode::NOT_FOUND && body.is_empty() {
            return Err(UpstreamError::NotFound { path });
        }
        let env = serde_json::from_slice::<Envelope<Value>>(&body).ok();
        let data = env.as_ref().and_then(|e| e.data.as_ref());
        if status.is_success()
            && let Some(branch) = data.and_then(|d| d.get("branch")).and_then(Value::as_str)
        {
            return Ok(RenameAnswer::Renamed(branch.to_string()));
        }
        let error_data = env.as_ref().and_then(|e| e.error_data.as_ref());
        match error_data
            .and_then(|d| d.get("type"))
            .and_then(Value::as_str)
        {
            Some(kind) => Ok(RenameAnswer::Refused {
                kind: kind.to_string(),
                repo_name: error_data
                    .and_then(|d| d.get("repo_name"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            }),
            None => Err(UpstreamError::Status {
                status: status.as_u16(),
                path,
                message: env
                    .and_then(|e| e.message)
                    .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(500).collect()),
            }),
        }
    }
}
