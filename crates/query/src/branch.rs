//! `get_attempt_branch_status`'s read model: VK's branch status of an attempt (one entry per
//! repo, as stored by ingest from `GET /branch-status`) in the tool's shape, with the time VK
//! answered it (`as_of`). The delivery tools (`proxy::git`) read the same model for their
//! pre-checks and answers. VK's numbers are nullable (VK could not compute them); they stay null.

use chrono::{DateTime, TimeZone, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use vk_observer_store::StoreReader;
use vk_observer_tool_error::ToolError;

/// One of VK's merge records of the repo.
#[derive(Debug, Clone, Deserialize)]
struct VkMerge {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    merge_commit: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    pr_info: Option<Value>,
}

/// VK's `RepoBranchStatus` (every field lenient).
#[derive(Debug, Clone, Deserialize)]
struct VkRepoStatus {
    repo_id: Uuid,
    #[serde(default)]
    repo_name: String,
    #[serde(default)]
    target_branch_name: String,
    commits_ahead: Option<u64>,
    commits_behind: Option<u64>,
    has_uncommitted_changes: Option<bool>,
    uncommitted_count: Option<u64>,
    untracked_count: Option<u64>,
    head_oid: Option<String>,
    remote_commits_ahead: Option<u64>,
    remote_commits_behind: Option<u64>,
    #[serde(default)]
    merges: Vec<VkMerge>,
    #[serde(default)]
    is_rebase_in_progress: bool,
    conflict_op: Option<String>,
    #[serde(default)]
    conflicted_files: Vec<String>,
}

/// Git state of one repository of an attempt, as VK reported it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RepoBranchStatus {
    /// Repository id (UUID); pass it as `repo_id` to the delivery tools.
    pub repo_id: Uuid,
    /// Repository name.
    pub repo_name: String,
    /// The branch the attempt merges into (and rebases onto by default).
    pub target_branch: String,
    /// Commits on the attempt branch not on the target branch; null when VK could not tell.
    pub commits_ahead: Option<u64>,
    /// Commits on the target branch not on the attempt branch (> 0: rebase before merging);
    /// null when VK could not tell.
    pub commits_behind: Option<u64>,
    /// Tracked files with uncommitted changes in the worktree (null: unknown).
    pub uncommitted_count: Option<u64>,
    /// Untracked files in the worktree (null: unknown).
    pub untracked_count: Option<u64>,
    /// Commit the worktree's HEAD is at (40 hex digits); during a stopped rebase, the new base.
    pub head_oid: Option<String>,
    /// True once VK recorded a merge of this repo (a direct merge or a merged pull request).
    pub merged: bool,
    /// The newest merge's commit (40 hex digits); null when not merged.
    pub merge_commit: Option<String>,
    /// When the newest merge was recorded (RFC 3339); null when not merged.
    pub merged_at: Option<String>,
    /// True while a `git rebase` is stopped in the worktree (on conflicts, or half way).
    pub rebase_in_progress: bool,
    /// The git operation holding conflicts: `rebase`, `merge`, `cherry_pick` or `revert`;
    /// null when there are none.
    pub conflict_op: Option<String>,
    /// Files in conflicted (unmerged) state; empty when none.
    pub conflicted_files: Vec<String>,
    /// Commits on the remote branch not in the local one; VK computes it only for an open pull
    /// request, otherwise null.
    pub remote_commits_behind: Option<u64>,
    /// Local commits not on the remote branch; only for an open pull request, otherwise null.
    pub remote_commits_ahead: Option<u64>,
    /// True when the branch is ready for `merge_attempt`: commits ahead, none behind, no
    /// conflicts or stopped rebase, a clean worktree (running processes are not part of it:
    /// see the attempt's status).
    pub ready_to_merge: bool,
}

impl RepoBranchStatus {
    fn from_vk(v: VkRepoStatus) -> Self {
        let newest = v.merges.first();
        let merge_commit = newest.and_then(|m| {
            m.merge_commit.clone().or_else(|| {
                m.pr_info
                    .as_ref()?
                    .get("merge_commit_sha")?
                    .as_str()
                    .map(str::to_string)
            })
        });
        let merged = v.merges.iter().any(|m| {
            m.kind.as_deref() == Some("direct")
                || m.pr_info.as_ref().and_then(|p| p.get("status")?.as_str()) == Some("merged")
        });
        let conflicts = v.is_rebase_in_progress || !v.conflicted_files.is_empty();
        let ready_to_merge = v.commits_ahead.unwrap_or(0) > 0
            && v.commits_behind == Some(0)
            && !conflicts
            && v.uncommitted_count.unwrap_or(0) == 0
            && v.has_uncommitted_changes != Some(true);
        RepoBranchStatus {
            repo_id: v.repo_id,
            repo_name: v.repo_name,
            target_branch: v.target_branch_name,
            commits_ahead: v.commits_ahead,
            commits_behind: v.commits_behind,
            uncommitted_count: v.uncommitted_count,
            untracked_count: v.untracked_count,
            head_oid: v.head_oid,
            merged,
            merge_commit: if merged { merge_commit } else { None },
            merged_at: newest.filter(|_| merged).and_then(|m| m.created_at.clone()),
            rebase_in_progress: v.is_rebase_in_progress,
            conflict_op: v.conflict_op,
            conflicted_files: v.conflicted_files,
            remote_commits_behind: v.remote_commits_behind,
            remote_commits_ahead: v.remote_commits_ahead,
            ready_to_merge,
        }
    }

    /// Conflicts or a stopped rebase hold the worktree.
    pub fn has_conflicts(&self) -> bool {
        self.rebase_in_progress || !self.conflicted_files.is_empty()
    }
}

/// An attempt's cached branch status.
#[derive(Debug, Clone)]
pub struct CachedBranchStatus {
    pub repos: Vec<RepoBranchStatus>,
    /// When VK answered it.
    pub as_of: DateTime<Utc>,
}

impl CachedBranchStatus {
    pub fn repo(&self, repo_id: Uuid) -> Option<&RepoBranchStatus> {
        self.repos.iter().find(|r| r.repo_id == repo_id)
    }

    /// `as_of` as RFC 3339 (milliseconds).
    pub fn as_of_text(&self) -> String {
        self.as_of
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    /// Milliseconds since VK answered.
    pub fn age_ms(&self) -> u64 {
        u64::try_from((Utc::now() - self.as_of).num_milliseconds()).unwrap_or(0)
    }
}

/// The attempt's branch status as cached; None before ingest first read it.
pub fn cached(
    reader: &StoreReader,
    attempt: Uuid,
) -> Result<Option<CachedBranchStatus>, ToolError> {
    let Some((stored, read_at_ms)) = reader.branch_status(attempt)? else {
        return Ok(None);
    };
    let repos = stored
        .value
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|v| serde_json::from_value::<VkRepoStatus>(v.clone()).ok())
                .map(RepoBranchStatus::from_vk)
                .collect()
        })
        .unwrap_or_default();
    let as_of = Utc
        .timestamp_millis_opt(read_at_ms)
        .single()
        .unwrap_or_else(Utc::now);
    Ok(Some(CachedBranchStatus { repos, as_of }))
}
