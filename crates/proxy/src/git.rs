//! Delivery: an attempt's branch status and VK's git actions on one of its repos (rebase,
//! conflicts/abort, merge, push). VK streams no git state, so the branch status enters the cache
//! only through ingest's refetch job (`Signal::RefreshBranchStatus`, applied by the writer as
//! `DomainEvent::BranchStatusRead`); this module asks for it and waits for the job's reply, then
//! answers from the cache, so the one-writer and one-way rules hold.
//!
//! Every action: re-read the branch status, refuse what VK would refuse or what would do harm
//! (`git_refusals`: a running process, conflicts, a branch behind, a dirty worktree), call VK,
//! re-read the branch status, answer from it. With `request_id` (`idempotency`) a retry returns
//! the first call's outcome instead of acting twice. VK's git routes take no `Idempotency-Key`,
//! so a retry after a daemon crash between VK's answer and the record re-runs the action; VK
//! then refuses a second merge (`nothing_to_merge`) and a repeated push is a no-op.
//!
//! **VK 0.1.x** (`dialect()` = `Workspaces`; attempt id = workspace id): the client calls its
//! workspace routes (`upstream::git_v01`) with the same bodies, and its ingest stores the
//! branch status as on the fork (its entries hold every field of the fork's; the extra
//! `is_target_remote` has no place in the answer). Its refusals, worded otherwise, get the
//! fork's codes (`git_refusals::vk_refusal_v01`).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::git_refusals as refuse;
use super::{Proxy, upstream_error};
use vk_observer_ingest::Signal;
use vk_observer_ingest::error::IngestError;
use vk_observer_query::Freshness;
use vk_observer_query::branch::{self, CachedBranchStatus, RepoBranchStatus};
use vk_observer_query::rows::ProcessRow;
use vk_observer_query::target;
use vk_observer_tool_error::{ErrorCode, ToolError};
use vk_observer_upstream::UpstreamError;
use vk_observer_upstream::git::GitAnswer;
/// The git actions VK offers, as the delivery tools name them (re-exported so the tools reach
/// VK only through the proxy).
pub(crate) use vk_observer_vk::GitAction;
use vk_observer_vk::{ProcessStatus, RunReason};

/// How long a tool waits for ingest to read the branch status from VK.
const BRANCH_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Answer of `get_attempt_branch_status`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AttemptBranchStatus {
    /// The attempt (UUID).
    pub attempt_id: Uuid,
    /// One entry per repository of the attempt, in VK's order.
    pub repos: Vec<RepoBranchStatus>,
    /// When VK answered this branch status (RFC 3339). It is re-read when a process of the
    /// attempt ends, after every git action made through the daemon, and on `refresh: true`.
    pub as_of: String,
    /// Milliseconds since `as_of`.
    pub age_ms: u64,
    /// True when this call read it from VK (refresh, or nothing cached yet).
    pub refreshed: bool,
    /// Store token at which this answer was read (opaque; a `since_token` for
    /// wait_for_attempt_change).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// `rebase_attempt`'s outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RebaseOutcome {
    /// The branch now sits on the new base.
    Ok,
    /// The rebase stopped on conflicts; the worktree is mid-rebase (see `conflicted_files`).
    Conflicts,
    /// VK answered, but the branch status read after it still shows a rebase under way with no
    /// conflicted file: finish or abort it (abort_attempt_conflicts) before acting again.
    InProgress,
}

/// What an action did, as recorded for `request_id` replays.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ActionOutcome {
    rebase: Option<RebaseOutcome>,
    conflicted_files: Vec<String>,
    op: Option<String>,
    had_conflicts: bool,
    merge_commit: Option<String>,
    head_oid: Option<String>,
}

/// Answer of the git actions (`rebase_attempt`, `abort_attempt_conflicts`, `merge_attempt`,
/// `push_attempt`); fields that do not apply to the action are null.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GitActionDone {
    /// The attempt (UUID).
    pub attempt_id: Uuid,
    /// The repository acted on (UUID).
    pub repo_id: Uuid,
    /// `rebase`, `abort_conflicts`, `merge`, `push` or `force_push`.
    pub action: String,
    /// rebase_attempt: `ok`, `conflicts` or `in_progress` (seed 003's rebase `status`); null
    /// for the other actions.
    pub status: Option<RebaseOutcome>,
    /// Deprecated (goes away in 0.3.0): the same value as `status`.
    pub outcome: Option<RebaseOutcome>,
    /// rebase_attempt with `conflicts`: the conflicted files; empty otherwise.
    pub conflicted_files: Vec<String>,
    /// rebase_attempt with `conflicts`: the stopped operation (`rebase`); null otherwise.
    pub op: Option<String>,
    /// abort_attempt_conflicts: true when conflicts or a stopped rebase were there to abort.
    pub had_conflicts: bool,
    /// merge_attempt: true (VK merged; a refusal is an error, never `merged: false`); null for
    /// the other actions.
    pub merged: Option<bool>,
    /// merge_attempt: the squash commit VK made on the target branch (40 hex digits).
    pub merge_commit: Option<String>,
    /// push_attempt: true (VK pushed; a refusal is an error); null for the other actions.
    pub pushed: Option<bool>,
    /// push_attempt: the remote branch VK pushed to (the attempt branch's name).
    pub remote_branch: Option<String>,
    /// push_attempt: the commit the remote branch now points at.
    pub head_oid: Option<String>,
    /// The repo's branch status re-read from VK after the action.
    pub branch: Option<RepoBranchStatus>,
    /// When that branch status was read (RFC 3339).
    pub as_of: Option<String>,
    /// True when this answers a repeated `request_id` (the action was not run again).
    pub replayed: bool,
    /// Store token at which the re-read branch status is visible (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

impl Proxy {
    /// The attempt's branch status from the cache; read from VK first when `refresh` or when
    /// nothing is cached yet.
    pub async fn branch_status(
        &self,
        attempt_id: Uuid,
        refresh: bool,
    ) -> Result<AttemptBranchStatus, ToolError> {
        target::attempt(&self.query.read(), attempt_id)?;
        let cached = branch::cached(&self.query.read(), attempt_id)?.is_some();
        let refreshed = refresh || !cached;
        if refreshed {
            self.reread_branch_status(attempt_id).await?;
        }
        // The token is read before the data, like every read: a change in between is
        // reported again rather than missed.
        let token = self.query.token();
        let status = branch::cached(&self.query.read(), attempt_id)?
            .ok_or_else(|| ToolError::internal("branch status missing after its read"))?;
        Ok(AttemptBranchStatus {
            attempt_id,
            as_of: status.as_of_text(),
            age_ms: status.age_ms(),
            repos: status.repos,
            refreshed,
            token,
            freshness: self.query.freshness(),
        })
    }

    /// Ask ingest to read the branch status from VK and wait until it is stored.
    async fn reread_branch_status(
        &self,
        attempt_id: Uuid,
    ) -> Result<CachedBranchStatus, ToolError> {
        let (done, reply) = oneshot::channel();
        let asked = self.signals.send(Signal::RefreshBranchStatus {
            attempt_id,
            done: Some(done),
        });
        if asked.is_err() {
            return Err(ingest_stopped());
        }
        match tokio::time::timeout(BRANCH_READ_TIMEOUT, reply).await {
            Err(_) => Err(branch_read_timeout()),
            Ok(Err(_)) => Err(ingest_stopped()),
            Ok(Ok(Err(IngestError::Upstream(e)))) => Err(match e {
                UpstreamError::NotFound { .. } => ToolError::unknown_attempt(attempt_id),
                e => upstream_error(e),
            }),
            Ok(Ok(Err(e))) => Err(ToolError::internal(e)),
            Ok(Ok(Ok(()))) => branch::cached(&self.query.read(), attempt_id)?
                .ok_or_else(|| ToolError::internal("branch status missing after its read")),
        }
    }

    /// Run one git action (see the module doc for the steps).
    pub async fn git_action(
        &self,
        attempt_id: Uuid,
        repo_id: Option<Uuid>,
        action: GitAction,
        request_id: Option<&str>,
    ) -> Result<GitActionDone, ToolError> {
        let attempt = target::attempt(&self.query.read(), attempt_id)?;
        let remote_branch = attempt
            .value
            .get("branch")
            .and_then(Value::as_str)
            .map(str::to_string);
        let (tool, name) = names(&action);
        let payload = json!({ "attempt_id": attempt_id, "repo_id": repo_id, "action": format!("{action:?}") });
        let outcome = self
            .idem
            .run(tool, request_id, &payload, || async {
                let before = self.reread_branch_status(attempt_id).await?;
                let repo = pick_repo(&before, attempt_id, repo_id)?.clone();
                self.precheck(attempt_id, &repo, &action)?;
                let answer = self
                    .client
                    .git_action(attempt_id, repo.repo_id, &action)
                    .await
                    .map_err(|e| match self.on_vk_01() {
                        true => refuse::vk_refusal_v01(e, repo.repo_id),
                        false => refuse::vk_refusal(e, repo.repo_id),
                    })?;
                let after = self.reread_branch_status(attempt_id).await?;
                let done = outcome_of(
                    &action,
                    answer,
                    &repo,
                    after.repo(repo.repo_id),
                    &remote_branch,
                )?;
                let mut v = serde_json::to_value(&done).map_err(ToolError::internal)?;
                v["repo_id"] = json!(repo.repo_id);
                Ok(v)
            })
            .await?;
        let done: ActionOutcome =
            serde_json::from_value(outcome.result.clone()).map_err(ToolError::internal)?;
        let acted_on = outcome.result["repo_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ToolError::internal("recorded outcome without repo_id"))?;
        if matches!(action, GitAction::Merge) && !outcome.replayed {
            // VK set the task `done` and stopped dev servers: refresh them now.
            self.nudge(None, Some(attempt_id));
        }
        let token = self.query.token();
        let (branch, as_of) = self.status_after(attempt_id, acted_on)?;
        let pushed = matches!(action, GitAction::Push { .. });
        Ok(GitActionDone {
            attempt_id,
            repo_id: acted_on,
            action: name.to_string(),
            status: done.rebase,
            outcome: done.rebase,
            conflicted_files: done.conflicted_files,
            op: done.op,
            had_conflicts: done.had_conflicts,
            merged: matches!(action, GitAction::Merge).then_some(true),
            merge_commit: done.merge_commit,
            pushed: pushed.then_some(true),
            remote_branch: remote_branch.filter(|_| pushed),
            head_oid: done.head_oid,
            branch,
            as_of,
            replayed: outcome.replayed,
            token,
            freshness: self.query.freshness(),
        })
    }

    /// The acted-on repo's status to answer with, and when it was read (the cached one).
    fn status_after(
        &self,
        attempt_id: Uuid,
        repo_id: Uuid,
    ) -> Result<(Option<RepoBranchStatus>, Option<String>), ToolError> {
        let cached = branch::cached(&self.query.read(), attempt_id)?;
        Ok((
            cached.as_ref().and_then(|c| c.repo(repo_id).cloned()),
            cached.as_ref().map(CachedBranchStatus::as_of_text),
        ))
    }

    /// Refusals before VK is called, from the status just read and the cached processes.
    fn precheck(
        &self,
        attempt: Uuid,
        repo: &RepoBranchStatus,
        action: &GitAction,
    ) -> Result<(), ToolError> {
        let dirty = repo.uncommitted_count.unwrap_or(0) > 0;
        match action {
            GitAction::Rebase { .. } => {
                self.refuse_running(attempt, "rebase")?;
                if repo.has_conflicts() {
                    return Err(refuse::rebase_in_progress(
                        repo.repo_id,
                        &repo.conflicted_files,
                    ));
                }
                if dirty {
                    return Err(refuse::uncommitted_changes(
                        repo.repo_id,
                        repo.uncommitted_count,
                        None,
                    ));
                }
            }
            GitAction::Merge => {
                self.refuse_running(attempt, "merge")?;
                if repo.has_conflicts() {
                    return Err(refuse::conflicts_present(repo));
                }
                if repo.commits_behind.unwrap_or(0) > 0 {
                    return Err(refuse::branch_behind(repo));
                }
                if dirty {
                    return Err(refuse::uncommitted_changes(
                        repo.repo_id,
                        repo.uncommitted_count,
                        None,
                    ));
                }
                if repo.commits_ahead == Some(0) {
                    return Err(refuse::nothing_to_merge(repo));
                }
            }
            GitAction::Push { .. } => {
                if repo.has_conflicts() {
                    return Err(refuse::conflicts_present(repo));
                }
                if dirty {
                    return Err(refuse::uncommitted_changes(
                        repo.repo_id,
                        repo.uncommitted_count,
                        None,
                    ));
                }
            }
            GitAction::AbortConflicts => {}
        }
        Ok(())
    }

    /// `process_running` when a non-dev-server process of the attempt runs (as cached).
    fn refuse_running(&self, attempt: Uuid, what: &str) -> Result<(), ToolError> {
        let processes = self
            .query
            .read()
            .processes_of_attempt_as::<ProcessRow>(attempt)?;
        let running = processes.iter().any(|(_, p)| {
            ProcessStatus::Running.is(p.status()) && !RunReason::DevServer.is(p.reason())
        });
        if running {
            return Err(refuse::process_running(attempt, what));
        }
        Ok(())
    }
}

/// The idempotency scope (tool name) and the action's name in answers.
fn names(action: &GitAction) -> (&'static str, &'static str) {
    match action {
        GitAction::Rebase { .. } => ("rebase_attempt", "rebase"),
        GitAction::AbortConflicts => ("abort_attempt_conflicts", "abort_conflicts"),
        GitAction::Merge => ("merge_attempt", "merge"),
        GitAction::Push { force: false } => ("push_attempt", "push"),
        GitAction::Push { force: true } => ("push_attempt", "force_push"),
    }
}

/// The repo a call targets: the named one, or the only one.
fn pick_repo(
    status: &CachedBranchStatus,
    attempt: Uuid,
    repo_id: Option<Uuid>,
) -> Result<&RepoBranchStatus, ToolError> {
    let known: Vec<Uuid> = status.repos.iter().map(|r| r.repo_id).collect();
    match repo_id {
        Some(id) => status
            .repo(id)
            .ok_or_else(|| refuse::unknown_repo(attempt, id, &known)),
        None => match status.repos.as_slice() {
            [only] => Ok(only),
            [] => Err(refuse::no_repos(attempt)),
            _ => Err(refuse::repo_id_required(attempt, &known)),
        },
    }
}

/// What VK's answer means for the action, with the branch status read after it.
fn outcome_of(
    action: &GitAction,
    answer: GitAnswer,
    before: &RepoBranchStatus,
    after: Option<&RepoBranchStatus>,
    remote_branch: &Option<String>,
) -> Result<ActionOutcome, ToolError> {
    let mut done = ActionOutcome::default();
    match (action, answer) {
        (GitAction::Rebase { .. }, GitAnswer::Done) => {
            let stuck =
                after.is_some_and(|a| a.rebase_in_progress && a.conflicted_files.is_empty());
            done.rebase = Some(if stuck {
                RebaseOutcome::InProgress
            } else {
                RebaseOutcome::Ok
            });
        }
        (GitAction::Rebase { .. }, GitAnswer::MergeConflicts { op, .. }) => {
            done.rebase = Some(RebaseOutcome::Conflicts);
            done.conflicted_files = after
                .map(|a| a.conflicted_files.clone())
                .unwrap_or_default();
            done.op = op.or_else(|| after.and_then(|a| a.conflict_op.clone()));
        }
        (_, GitAnswer::RebaseInProgress) => {
            return Err(refuse::rebase_in_progress(
                before.repo_id,
                &before.conflicted_files,
            ));
        }
        (GitAction::Push { .. }, GitAnswer::ForcePushRequired) => {
            let branch = remote_branch.as_deref().unwrap_or("");
            return Err(refuse::force_push_required(before.repo_id, branch));
        }
        (GitAction::AbortConflicts, GitAnswer::Done) => done.had_conflicts = before.has_conflicts(),
        (GitAction::Merge, GitAnswer::Done) => {
            done.merge_commit = after.and_then(|a| a.merge_commit.clone());
        }
        (GitAction::Push { .. }, GitAnswer::Done) => {
            done.head_oid = after.and_then(|a| a.head_oid.clone());
        }
        (_, other) => {
            return Err(ToolError::new(
                ErrorCode::UpstreamError,
                false,
                "VK answered this git action in a way the daemon does not expect; check get_attempt_branch_status with refresh=true.",
            )
            .with_details(json!({ "answer": format!("{other:?}") })));
        }
    }
    Ok(done)
}

fn branch_read_timeout() -> ToolError {
    ToolError::new(
        ErrorCode::UpstreamTimeout,
        true,
        "VK did not answer the branch status within 30 s; retry shortly (with the same request_id for an action).",
    )
}

fn ingest_stopped() -> ToolError {
    ToolError::new(
        ErrorCode::NotConfigured,
        true,
        "The daemon's ingest is not running (shutting down?); retry once it is up.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(rebasing: bool, conflicted: &[&str]) -> RepoBranchStatus {
        serde_json::from_value(json!({
            "repo_id": Uuid::nil(), "repo_name": "demo", "target_branch": "main",
            "commits_ahead": 1, "commits_behind": 0, "uncommitted_count": 0,
            "untracked_count": 0, "head_oid": null, "merged": false, "merge_commit": null,
            "merged_at": null, "rebase_in_progress": rebasing, "conflict_op": null,
            "conflicted_files": conflicted, "remote_commits_behind": null,
            "remote_commits_ahead": null, "ready_to_merge": false
        }))
        .unwrap()
    }

    #[test]
    fn a_rebase_left_under_way_is_in_progress() {
        let rebase = GitAction::Rebase {
            old_base_branch: None,
            new_base_branch: None,
        };
        let before = status(false, &[]);
        let status_of = |after: RepoBranchStatus| {
            outcome_of(&rebase, GitAnswer::Done, &before, Some(&after), &None)
                .unwrap()
                .rebase
        };
        assert_eq!(status_of(status(false, &[])), Some(RebaseOutcome::Ok));
        assert_eq!(
            status_of(status(true, &[])),
            Some(RebaseOutcome::InProgress)
        );
        let stopped = GitAnswer::MergeConflicts {
            message: String::new(),
            op: None,
        };
        let done = outcome_of(
            &rebase,
            stopped,
            &before,
            Some(&status(true, &["a"])),
            &None,
        );
        assert_eq!(done.unwrap().rebase, Some(RebaseOutcome::Conflicts));
        assert_eq!(
            serde_json::to_value(RebaseOutcome::InProgress).unwrap(),
            "in_progress"
        );
    }
}
