//! Repositories' current branches, read live from VK's `GET /api/repos/{id}/branches`
//! (docs/vk-contract.md §11.3) and kept [`BRANCH_MAX_AGE`]: `list_repos` shows them and
//! `start_task_attempt` defaults an omitted `target_branch` to them.
//!
//! Why live and not cached at ingest: VK's event streams carry no branch facts, and the branch
//! checked out in a repo's checkout changes outside VK (a `git checkout` by its user), so an
//! ingest-time copy would have no signal to refresh on. A read when asked, kept a few seconds,
//! is as fresh as VK itself and costs one small GET per repository shown. VK unreachable leaves
//! the fields out with `branches_unavailable`; the rest of the list still comes from the cache.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use dashmap::DashMap;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use uuid::Uuid;

use super::{Proxy, upstream_error};
use vk_observer_query::catalog::{BranchesRead, BranchesUnavailable, RepoList};
use vk_observer_tool_error::{ErrorCode, ToolError};
use vk_observer_upstream::rest::VkClient;

/// How long a branch read is reused before VK is asked again.
pub(crate) const BRANCH_MAX_AGE: Duration = Duration::from_secs(5);
/// The longest `list_repos` waits for VK's branch answers before answering without them.
const BRANCH_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// What VK said about one repository's branches.
#[derive(Debug, Clone)]
pub(crate) struct BranchRead {
    /// The branch marked `is_current`; None when HEAD is detached.
    pub current: Option<String>,
    /// When VK answered.
    pub as_of: DateTime<Utc>,
    read_at: Instant,
}

/// The kept branch reads, by repository (shared by every clone of the proxy).
#[derive(Clone, Default)]
pub struct RepoBranches {
    reads: Arc<DashMap<Uuid, BranchRead>>,
}

impl RepoBranches {
    fn fresh(&self, repo: Uuid) -> Option<BranchRead> {
        self.reads
            .get(&repo)
            .filter(|r| r.read_at.elapsed() < BRANCH_MAX_AGE)
            .map(|r| r.clone())
    }
}

/// The current branch in VK's `GitBranch` list: the local one with `is_current`.
fn current_of(branches: &[Value]) -> Option<String> {
    branches
        .iter()
        .find(|b| b["is_current"] == json!(true) && b["is_remote"] != json!(true))
        .and_then(|b| b["name"].as_str())
        .map(str::to_string)
}

async fn read_branches(client: &VkClient, repo: Uuid) -> Result<BranchRead, ToolError> {
    let list = client.repo_branches(repo).await.map_err(upstream_error)?;
    Ok(BranchRead {
        current: current_of(&list),
        as_of: Utc::now(),
        read_at: Instant::now(),
    })
}

impl Proxy {
    /// The repository's branch read, from the last [`BRANCH_MAX_AGE`] or from VK now.
    pub(crate) async fn repo_branch(&self, repo: Uuid) -> Result<BranchRead, ToolError> {
        if let Some(r) = self.branches.fresh(repo) {
            return Ok(r);
        }
        let read = read_branches(&self.client, repo).await?;
        self.branches.reads.insert(repo, read.clone());
        Ok(read)
    }

    /// `list_repos`' page with each repository's current branch, read concurrently and
    /// bounded by [`BRANCH_READ_TIMEOUT`]; repositories VK did not answer for are listed in
    /// `branches_unavailable`.
    pub async fn with_current_branches(&self, mut list: RepoList) -> RepoList {
        let mut reads = JoinSet::new();
        for r in &list.repos {
            let (proxy, id) = (self.clone(), r.repo_id);
            reads.spawn(async move { (id, proxy.repo_branch(id).await) });
        }
        let mut answers: Vec<(Uuid, Result<BranchRead, ToolError>)> = Vec::new();
        let deadline = tokio::time::sleep(BRANCH_READ_TIMEOUT);
        tokio::pin!(deadline);
        while !reads.is_empty() {
            tokio::select! {
                next = reads.join_next() => match next {
                    Some(Ok(a)) => answers.push(a),
                    Some(Err(_)) | None => {}
                },
                _ = &mut deadline => break,
            }
        }
        reads.abort_all();
        let mut failed: Option<ToolError> = None;
        let mut oldest: Option<DateTime<Utc>> = None;
        for repo in &mut list.repos {
            match answers.iter().find(|(id, _)| *id == repo.repo_id) {
                Some((_, Ok(read))) => {
                    repo.head_detached = read.current.is_none();
                    repo.current_branch = read.current.clone();
                    oldest = Some(oldest.map_or(read.as_of, |o| o.min(read.as_of)));
                }
                Some((_, Err(e))) => {
                    failed.get_or_insert_with(|| e.clone());
                }
                None => {
                    failed.get_or_insert_with(|| {
                        ToolError::new(
                            ErrorCode::UpstreamUnavailable,
                            true,
                            "VK did not answer in time",
                        )
                    });
                }
            }
        }
        list.branches = oldest.map(|t| BranchesRead {
            as_of: t.to_rfc3339_opts(SecondsFormat::Millis, true),
            max_age_ms: BRANCH_MAX_AGE.as_millis() as u64,
        });
        let missing: Vec<Uuid> = list
            .repos
            .iter()
            .filter(|r| r.current_branch.is_none() && !r.head_detached)
            .map(|r| r.repo_id)
            .collect();
        list.branches_unavailable = failed.filter(|_| !missing.is_empty()).map(|e| {
            BranchesUnavailable {
                code: e.code.as_str().to_string(),
                hint: "VK could not be asked for these repositories' current branches; retry list_repos later, or pass target_branch explicitly to start_task_attempt.".into(),
                repo_ids: missing,
            }
        });
        list
    }
}

/// `list_repos` without a VK connection (schema tests): every repository's branch is unknown.
pub fn branches_not_configured(mut list: RepoList) -> RepoList {
    let repo_ids: Vec<Uuid> = list.repos.iter().map(|r| r.repo_id).collect();
    if !repo_ids.is_empty() {
        list.branches_unavailable = Some(BranchesUnavailable {
            code: ErrorCode::NotConfigured.as_str().to_string(),
            hint: "This server has no VK connection: current branches are unknown; pass target_branch explicitly.".into(),
            repo_ids,
        });
    }
    list
}
