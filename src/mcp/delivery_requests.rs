//! Typed arguments of the delivery tools (branch status, rebase, abort, merge, push). `repo_id`
//! is optional when the attempt has exactly one repository; with several it is required
//! (`repo_id_required`, listing them).

use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchStatusArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// Read the branch status from VK now instead of answering from the cache (which is
    /// re-read when a process of the attempt ends and after every git action made through this
    /// server). Default false; the first call for an attempt always reads from VK.
    #[serde(default)]
    pub refresh: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RebaseArgs {
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
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RepoActionArgs {
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
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PushArgs {
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
}
