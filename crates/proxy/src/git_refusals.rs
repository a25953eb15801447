//! The delivery tools' stable error codes: refusals made before VK is called (from the branch
//! status just re-read and the cached processes) and VK's own refusals of a git action mapped to
//! the same codes, each with a hint naming the next call. VK's git refusals carry no error kind
//! (500/400 with a message); `upstream::refusal::GitRefusal` recognizes their texts (recorded in
//! docs/vk-contract.md §9.8) and `vk_refusal` maps what it recognized to codes and hints.
//! A VK 0.1.x words its refusals otherwise (`upstream::git_v01::refusal_of` recognizes them);
//! `vk_refusal_v01` maps them to the same codes, so a client sees one vocabulary on both.

use serde_json::json;
use uuid::Uuid;

use super::upstream_error;
use vk_observer_query::branch::RepoBranchStatus;
use vk_observer_tool_error::{ErrorCode, ToolError, clip};
use vk_observer_upstream::UpstreamError;
use vk_observer_upstream::git_v01;
use vk_observer_upstream::refusal::GitRefusal;

/// A coding agent or script of the attempt is running (dev servers do not count).
pub(crate) fn process_running(attempt: Uuid, action: &str) -> ToolError {
    ToolError::new(
        ErrorCode::ProcessRunning,
        true,
        format!("A process of this attempt is still running; {action} only once it ended. Call wait_for_attempt_change with this attempt_id until state is no longer `running` (or stop_attempt), then retry."),
    )
    .with_details(json!({ "attempt_id": attempt }))
}

/// The target branch has commits the attempt branch lacks.
pub(crate) fn branch_behind(repo: &RepoBranchStatus) -> ToolError {
    ToolError::new(
        ErrorCode::BranchBehind,
        false,
        format!(
            "The attempt branch is {} commit(s) behind `{}`. Call rebase_attempt with this attempt_id and repo_id first, then merge.",
            repo.commits_behind.unwrap_or(0),
            repo.target_branch
        ),
    )
    .with_details(json!({ "repo_id": repo.repo_id, "commits_behind": repo.commits_behind, "target_branch": repo.target_branch }))
}

/// Conflicts or a stopped rebase hold the worktree.
pub(crate) fn conflicts_present(repo: &RepoBranchStatus) -> ToolError {
    ToolError::new(
        ErrorCode::ConflictsPresent,
        false,
        "The worktree holds unresolved conflicts (a rebase stopped on them). Call abort_attempt_conflicts with this attempt_id and repo_id to go back, or ask the agent to resolve them with follow_up, then retry.",
    )
    .with_details(json!({ "repo_id": repo.repo_id, "conflicted_files": repo.conflicted_files, "conflict_op": repo.conflict_op, "rebase_in_progress": repo.rebase_in_progress }))
}

/// A rebase is already stopped in the worktree.
pub(crate) fn rebase_in_progress(repo_id: Uuid, files: &[String]) -> ToolError {
    ToolError::new(
        ErrorCode::RebaseInProgress,
        false,
        "A rebase is already in progress in this worktree. Call abort_attempt_conflicts with this attempt_id and repo_id (or have the agent resolve the conflicts with follow_up) before rebasing again.",
    )
    .with_details(json!({ "repo_id": repo_id, "conflicted_files": files }))
}

/// Tracked files with uncommitted changes (VK refuses rebase and push on a dirty worktree).
pub(crate) fn uncommitted_changes(
    repo_id: Uuid,
    count: Option<u64>,
    vk_message: Option<&str>,
) -> ToolError {
    ToolError::new(
        ErrorCode::UncommittedChanges,
        false,
        "The attempt's worktree has uncommitted changes to tracked files. Ask the agent to commit them (follow_up), or check them with get_attempt_changes, then retry.",
    )
    .with_details(json!({ "repo_id": repo_id, "uncommitted_count": count, "vk_message": vk_message.map(|m| clip(m, 300)) }))
}

/// The branch has nothing VK could squash onto the target.
pub(crate) fn nothing_to_merge(repo: &RepoBranchStatus) -> ToolError {
    if repo.merged {
        return ToolError::new(
            ErrorCode::AlreadyMerged,
            false,
            "This repo of the attempt is already merged and has no commits since. Nothing to do; push_attempt publishes the branch if needed.",
        )
        .with_details(json!({ "repo_id": repo.repo_id, "merge_commit": repo.merge_commit }));
    }
    ToolError::new(
        ErrorCode::NothingToMerge,
        false,
        "The attempt branch has no commits ahead of its target branch. Check get_attempt_changes; ask the agent to commit its work with follow_up.",
    )
    .with_details(json!({ "repo_id": repo.repo_id, "commits_ahead": repo.commits_ahead }))
}

/// VK's 409 `force_push_required`: never forced automatically.
pub(crate) fn force_push_required(repo_id: Uuid, remote_branch: &str) -> ToolError {
    ToolError::new(
        ErrorCode::ForcePushRequired,
        false,
        "VK's push was rejected: the remote branch has commits the local branch does not contain (after a merge or rebase the branch was rewritten). Call push_attempt again with force=true only if overwriting the remote branch is intended.",
    )
    .with_details(json!({ "repo_id": repo_id, "remote_branch": remote_branch }))
}

/// `repo_id` names no repository of the attempt.
pub(crate) fn unknown_repo(attempt: Uuid, repo_id: Uuid, known: &[Uuid]) -> ToolError {
    ToolError::not_found(
        "repo",
        repo_id,
        "repo_id is not a repository of this attempt. Call get_attempt_branch_status with the attempt_id and use one of its repos[].repo_id.",
    )
    .with_details(json!({ "kind": "repo", "id": repo_id, "attempt_id": attempt, "repo_ids": known }))
}

/// The attempt has several repositories and none was named.
pub(crate) fn repo_id_required(attempt: Uuid, known: &[Uuid]) -> ToolError {
    ToolError::new(
        ErrorCode::RepoIdRequired,
        false,
        "This attempt has several repositories: pass repo_id (one of details.repo_ids, also listed by get_attempt_branch_status).",
    )
    .with_details(json!({ "attempt_id": attempt, "repo_ids": known }))
}

/// VK answered the branch status with no repository for the attempt.
pub(crate) fn no_repos(attempt: Uuid) -> ToolError {
    ToolError::new(
        ErrorCode::NoRepos,
        true,
        "VK lists no repository for this attempt (its worktree may not exist yet, or was removed). Retry get_attempt_branch_status with refresh=true shortly.",
    )
    .with_details(json!({ "attempt_id": attempt }))
}

/// VK's own refusal of a git action, as the same codes as the pre-checks where VK's message
/// says which (recognized by `upstream::refusal::GitRefusal`), else VK's answer as any upstream
/// error.
pub(crate) fn vk_refusal(e: UpstreamError, repo_id: Uuid) -> ToolError {
    match GitRefusal::of(&e) {
        Some(refusal) => refused(refusal, e, repo_id),
        None => upstream_error(e),
    }
}

/// VK 0.1.x's refusal of a git action (its typed ones, HTTP 200 `success:false`, reach the
/// answer instead: `GitAnswer`), as the codes of the fork's. A 409 VK does not name is
/// `conflict`: 0.1.x's git routes take no idempotency key, so it is never a key conflict.
pub(crate) fn vk_refusal_v01(e: UpstreamError, repo_id: Uuid) -> ToolError {
    if let Some(refusal) = git_v01::refusal_of(&e) {
        return refused(refusal, e, repo_id);
    }
    match e {
        UpstreamError::Status {
            status: 409,
            path,
            message,
        } => {
            let message = clip(&message, 300);
            ToolError::new(
                ErrorCode::Conflict,
                false,
                format!("VK refused in the current state: {message}. Check get_attempt_branch_status with refresh=true."),
            )
            .with_details(json!({ "repo_id": repo_id, "status": 409, "path": path, "vk_message": message }))
        }
        e => upstream_error(e),
    }
}

/// A refusal VK's message named, as its code and hint.
fn refused(refusal: GitRefusal, e: UpstreamError, repo_id: Uuid) -> ToolError {
    let UpstreamError::Status {
        status, message, ..
    } = &e
    else {
        return upstream_error(e);
    };
    let details = json!({ "repo_id": repo_id, "status": status, "vk_message": clip(message, 300) });
    match refusal {
        GitRefusal::BranchesDiverged => ToolError::new(
            ErrorCode::BranchBehind,
            false,
            "VK refused the merge: the target branch moved since the branch was based on it. Call rebase_attempt with this attempt_id and repo_id, then merge.",
        )
        .with_details(details),
        GitRefusal::UncommittedChanges => uncommitted_changes(repo_id, None, Some(message)),
        GitRefusal::NothingToCommit => ToolError::new(
            ErrorCode::NothingToMerge,
            false,
            "VK found nothing to merge: the target branch already has this branch's changes (merged before?). Check get_attempt_branch_status (merged, merge_commit).",
        )
        .with_details(details),
        GitRefusal::UnknownBranch => ToolError::new(
            ErrorCode::UnknownBranch,
            false,
            "VK does not know that branch in this repository. Pass an existing branch as new_base_branch/old_base_branch, or omit them to use the attempt's target branch.",
        )
        .with_details(details),
        GitRefusal::RepoNotFound => ToolError::not_found(
            "repo",
            repo_id,
            "VK does not know this repository for the attempt. Call get_attempt_branch_status with refresh=true and use one of its repos[].repo_id.",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, message: &str) -> UpstreamError {
        UpstreamError::Status {
            status,
            path: "/api/task-attempts/x/merge".into(),
            message: message.into(),
        }
    }

    /// VK's refusal texts as recorded on a real VK (../shared/vk-wire/README.md "Git").
    #[test]
    fn recorded_vk_refusals_map_to_the_precheck_codes() {
        let repo = Uuid::nil();
        let cases = [
            (
                500,
                "GitServiceError: Branches diverged: Cannot merge: base branch 'main' is 1 commits ahead of task branch 'vk/ab12-x'. The base branch has moved forward since the task was created.",
                "branch_behind",
            ),
            (
                500,
                "GitServiceError: unknown branch has uncommitted changes: README.md",
                "uncommitted_changes",
            ),
            (
                500,
                "GitServiceError: vk/ab12-x has uncommitted changes: src/lib.rs",
                "uncommitted_changes",
            ),
            (
                500,
                "GitServiceError: Invalid repository: CLI merge failed: git command failed: --- stderr\nOn branch main\nnothing to commit, working tree clean",
                "nothing_to_merge",
            ),
            (
                400,
                "Branch 'nope' does not exist in the repository",
                "unknown_branch",
            ),
            (404, "RepoError: Repository not found", "not_found"),
            (
                500,
                "GitServiceError: Invalid repository: Rebase failed: --- stdout",
                "upstream_error",
            ),
        ];
        for (code, message, want) in cases {
            let e = vk_refusal(status(code, message), repo);
            assert_eq!(e.code, want, "{message}");
        }
        let e = vk_refusal(
            status(500, "GitServiceError: x has uncommitted changes: a"),
            repo,
        );
        assert_eq!(
            e.details["vk_message"],
            "GitServiceError: x has uncommitted changes: a"
        );
        let down = UpstreamError::Unreachable {
            url: "http://vk".into(),
            reason: "refused".into(),
        };
        assert_eq!(vk_refusal(down, repo).code, "upstream_unavailable");
    }

    /// VK 0.1.x's texts (recorded on v0.1.44, or its `ApiError` mapping) get the fork's codes.
    #[test]
    fn v01_refusals_map_to_the_same_codes() {
        let repo = Uuid::nil();
        let cases = [
            (
                409,
                "Cannot merge: base branch 'main' is 1 commits ahead of task branch 'vk/969d-ws-a-single'. The base branch has moved forward since the task was created. Rebase onto the target branch first, then retry the merge.",
                "branch_behind",
            ),
            (
                409,
                "Branch 'vk/969d-x' has uncommitted changes (a.txt). Commit or revert them before retrying.",
                "uncommitted_changes",
            ),
            (
                200,
                "Branch 'nope' does not exist in the repository",
                "unknown_branch",
            ),
            (404, "Repository not found.", "not_found"),
            (
                409,
                "Merge failed due to conflicts. Please resolve conflicts manually.",
                "conflict",
            ),
            (409, "Request in progress", "conflict"),
            (
                500,
                "Git operation failed: Invalid repository: x",
                "upstream_error",
            ),
        ];
        for (code, message, want) in cases {
            let e = vk_refusal_v01(status(code, message), repo);
            assert_eq!(e.code, want, "{message}");
        }
        let gone = UpstreamError::NotFound {
            path: "/api/workspaces/x/git/merge".into(),
        };
        assert_eq!(vk_refusal_v01(gone, repo).code, "not_found");
    }
}
