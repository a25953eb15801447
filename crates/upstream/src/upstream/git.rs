//! VK's git routes of a task attempt (docs/vk-contract.md §9.8): branch status, rebase,
//! conflicts/abort, merge, push and push/force. Some of VK's answers are not errors to it but
//! `success:false` envelopes carrying `error_data` (a rebase that stopped on conflicts answers
//! 200; a rejected push 409 `force_push_required`), so these calls read the envelope themselves
//! and hand back which of VK's answers it was. Nothing is decided here.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::rest::{UpstreamError, VkClient};
use super::routes;
use super::wire::Envelope;

use crate::vk::GitAction;

/// The request body of `action` on one repo of an attempt.
fn action_body(action: &GitAction, repo_id: Uuid) -> Value {
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
    /// `GET /api/task-attempts/{id}/branch-status`: one entry per repo of the attempt.
    pub async fn branch_status(&self, attempt: Uuid) -> Result<Vec<Value>, UpstreamError> {
        self.get(&routes::branch_status(attempt)).await
    }

    /// Run a git action on one repo of an attempt. VK's other refusals (400 unknown branch,
    /// 404 repo, 500 diverged / dirty worktree / nothing to merge) are `UpstreamError::Status`.
    pub async fn git_action(
        &self,
        attempt: Uuid,
        repo_id: Uuid,
        action: &GitAction,
    ) -> Result<GitAnswer, UpstreamError> {
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
