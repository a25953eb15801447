//! Delivery tools: an attempt's branch status and VK's git actions on one of its repos
//! (rebase, abort conflicts, merge, push). Parse → `proxy::git` → answer. `repo_id` is
//! optional when the attempt has exactly one repository; with several it is required
//! (`repo_id_required`, listing them).

use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use super::answer::{plain, plain_output_schema};
use super::args::{Args, input_schema};
use super::{Family, Scope, VkTools};
use vk_observer_proxy::git::{AttemptBranchStatus, GitActionDone};
use vk_observer_query::detail::Detail;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::GitAction;

pub(crate) const GET_ATTEMPT_BRANCH_STATUS: &str = "get_attempt_branch_status";
pub(crate) const REBASE_ATTEMPT: &str = "rebase_attempt";
pub(crate) const ABORT_ATTEMPT_CONFLICTS: &str = "abort_attempt_conflicts";
pub(crate) const MERGE_ATTEMPT: &str = "merge_attempt";
pub(crate) const PUSH_ATTEMPT: &str = "push_attempt";

pub(crate) const FAMILY: Family = Family {
    name: "delivery",
    tools: &[
        (GET_ATTEMPT_BRANCH_STATUS, Scope::Read),
        (REBASE_ATTEMPT, Scope::Deliver),
        (ABORT_ATTEMPT_CONFLICTS, Scope::Deliver),
        (MERGE_ATTEMPT, Scope::Deliver),
        (PUSH_ATTEMPT, Scope::Deliver),
    ],
    router: VkTools::delivery_router,
};

#[tool_router(router = delivery_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::GET_ATTEMPT_BRANCH_STATUS, input_schema = input_schema::<BranchStatusArgs>(),
           output_schema = plain_output_schema::<AttemptBranchStatus>(),
           annotations(title = "Get attempt branch status", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_branch_status(&self, Args(a): Args<BranchStatusArgs>) -> CallToolResult {
        let r = async {
            let a = a?;
            self.proxy()?
                .branch_status(a.attempt_id, a.refresh.unwrap_or(false))
                .await
        };
        plain(r.await)
    }

    #[tool(description = describe::REBASE_ATTEMPT, input_schema = input_schema::<RebaseArgs>(),
           output_schema = plain_output_schema::<GitActionDone>(),
           annotations(title = "Rebase attempt", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    pub(crate) async fn rebase_attempt(&self, Args(a): Args<RebaseArgs>) -> CallToolResult {
        let r = async {
            let a = a?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            let action = GitAction::Rebase {
                old_base_branch: a.old_base_branch.filter(|b| !b.trim().is_empty()),
                new_base_branch: a.new_base_branch.filter(|b| !b.trim().is_empty()),
            };
            self.proxy()?
                .git_action(a.attempt_id, a.repo_id, action, a.request_id.as_deref())
                .await
        };
        plain(r.await)
    }

    #[tool(description = describe::ABORT_ATTEMPT_CONFLICTS, input_schema = input_schema::<RepoActionArgs>(),
           output_schema = plain_output_schema::<GitActionDone>(),
           annotations(title = "Abort attempt conflicts", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false))]
    pub(crate) async fn abort_attempt_conflicts(
        &self,
        Args(a): Args<RepoActionArgs>,
    ) -> CallToolResult {
        self.repo_action(a, GitAction::AbortConflicts).await
    }

    #[tool(description = describe::MERGE_ATTEMPT, input_schema = input_schema::<RepoActionArgs>(),
           output_schema = plain_output_schema::<GitActionDone>(),
           annotations(title = "Merge attempt", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    pub(crate) async fn merge_attempt(&self, Args(a): Args<RepoActionArgs>) -> CallToolResult {
        self.repo_action(a, GitAction::Merge).await
    }

    #[tool(description = describe::PUSH_ATTEMPT, input_schema = input_schema::<PushArgs>(),
           output_schema = plain_output_schema::<GitActionDone>(),
           annotations(title = "Push attempt", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true))]
    pub(crate) async fn push_attempt(&self, Args(a): Args<PushArgs>) -> CallToolResult {
        let r = async {
            let a = a?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            let action = GitAction::Push {
                force: a.force.unwrap_or(false),
            };
            self.proxy()?
                .git_action(a.attempt_id, a.repo_id, action, a.request_id.as_deref())
                .await
        };
        plain(r.await)
    }
}

impl VkTools {
    /// A git action that takes nothing but the attempt, its repo and the request id.
    async fn repo_action(
        &self,
        a: Result<RepoActionArgs, ToolError>,
        action: GitAction,
    ) -> CallToolResult {
        let r = async {
            let a = a?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            self.proxy()?
                .git_action(a.attempt_id, a.repo_id, action, a.request_id.as_deref())
                .await
        };
        plain(r.await)
    }
}

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BranchStatusArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// Read the branch status from VK now instead of answering from the cache (which is
    /// re-read when a process of the attempt ends and after every git action made through this
    /// server). Default false; the first call for an attempt always reads from VK.
    #[serde(default)]
    pub refresh: Option<bool>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RebaseArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// Repository id (UUID string) from get_attempt_branch_status `repos[].repo_id`. May be
    /// omitted when the attempt has exactly one repository.
    #[serde(default)]
    pub repo_id: Option<Uuid>,
    /// Branch to rebase onto; it becomes the attempt's target branch. Default: the current
    /// target branch.
    #[serde(default)]
    pub new_base_branch: Option<String>,
    /// The branch the attempt branch was based on (the rebase's upstream). Default: the current
    /// target branch.
    #[serde(default)]
    pub old_base_branch: Option<String>,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// arguments returns the first answer (`replayed: true`) without rebasing again.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
    /// Fleet node: the host to run it on, needed when several hosts report its attempt (a copied
    /// VK database; the refusal's `details.hosts` names them). A host daemon accepts only its
    /// own name.
    #[serde(default)]
    pub host: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RepoActionArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// Repository id (UUID string) from get_attempt_branch_status `repos[].repo_id`. May be
    /// omitted when the attempt has exactly one repository.
    #[serde(default)]
    pub repo_id: Option<Uuid>,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// arguments returns the first answer (`replayed: true`) without acting again.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
    /// Fleet node: the host to run it on, needed when several hosts report its attempt (a copied
    /// VK database; the refusal's `details.hosts` names them). A host daemon accepts only its
    /// own name.
    #[serde(default)]
    pub host: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PushArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// Repository id (UUID string) from get_attempt_branch_status `repos[].repo_id`. May be
    /// omitted when the attempt has exactly one repository.
    #[serde(default)]
    pub repo_id: Option<Uuid>,
    /// Overwrite the remote branch (VK's force push). Default false: a rejected push answers
    /// `force_push_required` and is never forced automatically.
    #[serde(default)]
    pub force: Option<bool>,
    /// Idempotency key (e.g. a fresh UUID per logical request): a retry with the same key and
    /// arguments returns the first answer (`replayed: true`) without pushing again.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
    /// Fleet node: the host to run it on, needed when several hosts report its attempt (a copied
    /// VK database; the refusal's `details.hosts` names them). A host daemon accepts only its
    /// own name.
    #[serde(default)]
    pub host: Option<String>,
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {

    pub(crate) const GET_ATTEMPT_BRANCH_STATUS: &str = "Git state of an attempt per repo: target branch, ahead/behind, uncommitted, merged, conflicts, ready_to_merge, as_of (when VK was read).
Use when: deciding whether to rebase, merge or push.
Required: attempt_id.
Optional: refresh (read VK now; the cache is re-read when a process ends and after every git action here).
Next: rebase_attempt if commits_behind > 0; merge_attempt if ready_to_merge; abort_attempt_conflicts if conflicted_files.
Avoid: refresh=true in a loop; wait_for_attempt_change instead.";

    pub(crate) const REBASE_ATTEMPT: &str = "Rebase an attempt branch onto its target (or new_base_branch). outcome `ok`, or `conflicts` with conflicted_files and op (left mid-rebase).
Use when: commits_behind > 0, or to move onto another base.
Required: attempt_id; repo_id if the attempt has several repos.
Optional: new_base_branch (becomes the target), old_base_branch, request_id, host (fleet node: an attempt several hosts report).
Next: merge_attempt after ok; after conflicts follow_up (agent resolves) or abort_attempt_conflicts.
Avoid: rebasing while a process runs (process_running) or mid-rebase (rebase_in_progress).";

    pub(crate) const ABORT_ATTEMPT_CONFLICTS: &str = "Abort a rebase stopped on conflicts: the branch back where it was, worktree clean (had_conflicts false: nothing to abort).
Use when: rebase_attempt answered `conflicts` and the agent should not resolve them.
Required: attempt_id; repo_id if the attempt has several repos.
Optional: request_id, host (fleet node: an attempt several hosts report).
Next: get_attempt_branch_status; follow_up to adapt the change, then rebase_attempt.
Avoid: aborting while the agent resolves the conflicts.";

    pub(crate) const MERGE_ATTEMPT: &str = "Squash-merge an attempt branch into its target branch; answers merge_commit. VK sets the task done and stops the attempt's dev servers.
Use when: ready_to_merge and the changes were reviewed.
Required: attempt_id; repo_id if the attempt has several repos.
Optional: request_id, host (fleet node: an attempt several hosts report).
Next: push_attempt (force=true if pushed before the merge).
Avoid: merging while a process runs (process_running), when behind (branch_behind: rebase first) or with conflicts (conflicts_present).";

    pub(crate) const PUSH_ATTEMPT: &str =
    "Push an attempt branch to its repo's remote (same name); answers remote_branch and head_oid.
Use when: publishing the branch, before or after merge_attempt.
Required: attempt_id; repo_id if the attempt has several repos.
Optional: force (overwrite the remote branch), request_id, host (fleet node: an attempt several hosts report).
Next: on force_push_required decide, then push_attempt with force=true.
Avoid: force=true by default; pushing with uncommitted changes or conflicts.";
}
