//! Delivery tools: an attempt's branch status and VK's git actions on one of its repos
//! (rebase, abort conflicts, merge, push). Parse → `proxy::git` → respond.

use rmcp::Json;
use rmcp::handler::server::tool::ToolRouter;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

use super::VkTools;
use super::args::{Args, input_schema};
use super::delivery_requests::*;
use super::descriptions as d;
use super::respond::respond;
use crate::proxy::git::{AttemptBranchStatus, GitActionDone};
use crate::tool_error::ToolError;
use crate::upstream::git::GitAction;

#[tool_router(router = delivery_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = d::GET_ATTEMPT_BRANCH_STATUS, input_schema = input_schema::<BranchStatusArgs>(),
           annotations(title = "Get attempt branch status", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_branch_status(
        &self,
        Args(a): Args<BranchStatusArgs>,
    ) -> Result<Json<AttemptBranchStatus>, CallToolResult> {
        let r = async {
            let a = a?;
            self.proxy()?
                .branch_status(a.attempt_id, a.refresh.unwrap_or(false))
                .await
        };
        respond(r.await)
    }

    #[tool(description = d::REBASE_ATTEMPT, input_schema = input_schema::<RebaseArgs>(),
           annotations(title = "Rebase attempt", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    async fn rebase_attempt(
        &self,
        Args(a): Args<RebaseArgs>,
    ) -> Result<Json<GitActionDone>, CallToolResult> {
        let r = async {
            let a = a?;
            let action = GitAction::Rebase {
                old_base_branch: a.old_base_branch.filter(|b| !b.trim().is_empty()),
                new_base_branch: a.new_base_branch.filter(|b| !b.trim().is_empty()),
            };
            self.proxy()?
                .git_action(a.attempt_id, a.repo_id, action, a.request_id.as_deref())
                .await
        };
        respond(r.await)
    }

    #[tool(description = d::ABORT_ATTEMPT_CONFLICTS, input_schema = input_schema::<RepoActionArgs>(),
           annotations(title = "Abort attempt conflicts", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false))]
    async fn abort_attempt_conflicts(
        &self,
        Args(a): Args<RepoActionArgs>,
    ) -> Result<Json<GitActionDone>, CallToolResult> {
        self.repo_action(a, GitAction::AbortConflicts).await
    }

    #[tool(description = d::MERGE_ATTEMPT, input_schema = input_schema::<RepoActionArgs>(),
           annotations(title = "Merge attempt", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    async fn merge_attempt(
        &self,
        Args(a): Args<RepoActionArgs>,
    ) -> Result<Json<GitActionDone>, CallToolResult> {
        self.repo_action(a, GitAction::Merge).await
    }

    #[tool(description = d::PUSH_ATTEMPT, input_schema = input_schema::<PushArgs>(),
           annotations(title = "Push attempt", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true))]
    async fn push_attempt(
        &self,
        Args(a): Args<PushArgs>,
    ) -> Result<Json<GitActionDone>, CallToolResult> {
        let r = async {
            let a = a?;
            let action = GitAction::Push {
                force: a.force.unwrap_or(false),
            };
            self.proxy()?
                .git_action(a.attempt_id, a.repo_id, action, a.request_id.as_deref())
                .await
        };
        respond(r.await)
    }
}

impl VkTools {
    /// A git action that takes nothing but the attempt, its repo and the request id.
    async fn repo_action(
        &self,
        a: Result<RepoActionArgs, ToolError>,
        action: GitAction,
    ) -> Result<Json<GitActionDone>, CallToolResult> {
        let r = async {
            let a = a?;
            self.proxy()?
                .git_action(a.attempt_id, a.repo_id, action, a.request_id.as_deref())
                .await
        };
        respond(r.await)
    }
}

pub(crate) fn router() -> ToolRouter<VkTools> {
    VkTools::delivery_router()
}
