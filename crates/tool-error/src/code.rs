//! The closed set of error codes a tool answers with: `ToolError.code`. Each variant is
//! serialized as the snake_case string agents branch on (`invalid_argument`, `branch_behind`…);
//! those strings are MCP API and never change (the table test below pins every one). A new code
//! is a new variant, its doc saying when it is used, and a row in the table.

use serde::{Deserialize, Serialize};

/// A tool error's stable, machine-readable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// `merge_attempt` on a repo that is already merged with no commits since.
    AlreadyMerged,
    /// `respond_approval` on an approval VK already answered (it keeps the first answer).
    ApprovalAlreadyAnswered,
    /// VK refused an approval answer: it holds no such approval for the execution process.
    ApprovalRejected,
    /// `respond_approval` after VK stopped waiting (timeout passed, the tool was denied).
    ApprovalTimedOut,
    /// The target branch has commits the attempt branch lacks (pre-check or VK's "diverged").
    BranchBehind,
    /// A wait was cancelled by the client.
    Cancelled,
    /// VK answered 409 to a mutation in the current state (no more specific reason known).
    Conflict,
    /// Unresolved conflicts (a stopped rebase) hold the attempt's worktree.
    ConflictsPresent,
    /// VK rejected a push: the remote branch has commits the local one lacks.
    ForcePushRequired,
    /// The caller's scopes (its token's, or the in-workspace default) do not allow this tool or
    /// this target; refused before VK is asked. The hint names the scope.
    Forbidden,
    /// A `request_id` reused with other arguments (by the daemon's records or VK's).
    IdempotencyConflict,
    /// VK is still executing an earlier request with the same idempotency key.
    InProgress,
    /// The daemon's cache could not be read (a store error).
    Internal,
    /// An argument is missing, malformed or out of range (or VK rejected the request as such).
    /// Where the daemon names the class of mistake, `details.reason` is an [`InvalidReason`]
    /// (before issue 25, `ambiguous_target` and `mixed_pagination` were codes of their own;
    /// `changes_not_ready` is gone too: `get_attempt_changes` answers `ready: false`).
    InvalidArgument,
    /// VK lists no repository for the attempt.
    NoRepos,
    /// The attempt exists but VK has not created its first session yet.
    NoSessionYet,
    /// A workspace-relative tool was called from outside any VK attempt workspace.
    NoWorkspaceContext,
    /// The daemon cannot do this in its setup: no VK connection for mutations, ingest stopped.
    NotConfigured,
    /// An id the cache (or VK) does not know: attempt, session, task, project, repo…
    NotFound,
    /// Something the daemon loads from VK (the executor list) is not loaded yet.
    NotReady,
    /// The attempt branch has nothing to merge onto its target branch.
    NothingToMerge,
    /// A coding agent or script of the attempt is still running.
    ProcessRunning,
    /// A rebase is already stopped in the worktree.
    RebaseInProgress,
    /// The attempt has several repositories and the call named none.
    RepoIdRequired,
    /// `resources/subscribe` on a daemon serving MCP statelessly.
    SubscriptionsUnavailable,
    /// A session already holds its cap of resource subscriptions.
    TooManySubscriptions,
    /// The daemon already holds its maximum of parked waits.
    TooManyWaiters,
    /// Tracked files with uncommitted changes in the worktree (pre-check or VK's refusal).
    UncommittedChanges,
    /// An `approval_id` the cache does not hold.
    UnknownApproval,
    /// VK does not know the named branch in the repository.
    UnknownBranch,
    /// VK failed or answered something the daemon cannot read or does not expect.
    UpstreamError,
    /// VK did not answer in time (a branch status read).
    UpstreamTimeout,
    /// VK is not reachable.
    UpstreamUnavailable,
}

impl ErrorCode {
    /// Every code, in the order of the declaration.
    #[cfg(test)]
    pub(crate) const ALL: [ErrorCode; 33] = [
        ErrorCode::AlreadyMerged,
        ErrorCode::ApprovalAlreadyAnswered,
        ErrorCode::ApprovalRejected,
        ErrorCode::ApprovalTimedOut,
        ErrorCode::BranchBehind,
        ErrorCode::Cancelled,
        ErrorCode::Conflict,
        ErrorCode::ConflictsPresent,
        ErrorCode::ForcePushRequired,
        ErrorCode::Forbidden,
        ErrorCode::IdempotencyConflict,
        ErrorCode::InProgress,
        ErrorCode::Internal,
        ErrorCode::InvalidArgument,
        ErrorCode::NoRepos,
        ErrorCode::NoSessionYet,
        ErrorCode::NoWorkspaceContext,
        ErrorCode::NotConfigured,
        ErrorCode::NotFound,
        ErrorCode::NotReady,
        ErrorCode::NothingToMerge,
        ErrorCode::ProcessRunning,
        ErrorCode::RebaseInProgress,
        ErrorCode::RepoIdRequired,
        ErrorCode::SubscriptionsUnavailable,
        ErrorCode::TooManySubscriptions,
        ErrorCode::TooManyWaiters,
        ErrorCode::UncommittedChanges,
        ErrorCode::UnknownApproval,
        ErrorCode::UnknownBranch,
        ErrorCode::UpstreamError,
        ErrorCode::UpstreamTimeout,
        ErrorCode::UpstreamUnavailable,
    ];

    /// The code as agents see it (the same string serde writes), e.g. for a metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::AlreadyMerged => "already_merged",
            ErrorCode::ApprovalAlreadyAnswered => "approval_already_answered",
            ErrorCode::ApprovalRejected => "approval_rejected",
            ErrorCode::ApprovalTimedOut => "approval_timed_out",
            ErrorCode::BranchBehind => "branch_behind",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Conflict => "conflict",
            ErrorCode::ConflictsPresent => "conflicts_present",
            ErrorCode::ForcePushRequired => "force_push_required",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::IdempotencyConflict => "idempotency_conflict",
            ErrorCode::InProgress => "in_progress",
            ErrorCode::Internal => "internal",
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NoRepos => "no_repos",
            ErrorCode::NoSessionYet => "no_session_yet",
            ErrorCode::NoWorkspaceContext => "no_workspace_context",
            ErrorCode::NotConfigured => "not_configured",
            ErrorCode::NotFound => "not_found",
            ErrorCode::NotReady => "not_ready",
            ErrorCode::NothingToMerge => "nothing_to_merge",
            ErrorCode::ProcessRunning => "process_running",
            ErrorCode::RebaseInProgress => "rebase_in_progress",
            ErrorCode::RepoIdRequired => "repo_id_required",
            ErrorCode::SubscriptionsUnavailable => "subscriptions_unavailable",
            ErrorCode::TooManySubscriptions => "too_many_subscriptions",
            ErrorCode::TooManyWaiters => "too_many_waiters",
            ErrorCode::UncommittedChanges => "uncommitted_changes",
            ErrorCode::UnknownApproval => "unknown_approval",
            ErrorCode::UnknownBranch => "unknown_branch",
            ErrorCode::UpstreamError => "upstream_error",
            ErrorCode::UpstreamTimeout => "upstream_timeout",
            ErrorCode::UpstreamUnavailable => "upstream_unavailable",
        }
    }
}

/// Why an argument was refused: `details.reason` of an `invalid_argument` error, for the
/// mistakes a client may want to branch on (seed 002 calls them invalid-argument errors). Its
/// strings are MCP API like the codes' (pinned by the table test below).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidReason {
    /// None, or more than one, of several mutually exclusive target fields (`details.fields`).
    AmbiguousTarget,
    /// Two pagination modes at once, e.g. `cursor` and `after_entry_index` (`details.fields`).
    MixedPagination,
    /// A task title that is blank or longer than 255 characters (`details.field`, `max`).
    TitleLength,
    /// A task description longer than the daemon sends to VK (`details.field`, `max`).
    DescriptionLength,
    /// A repo's `target_branch` was omitted but VK reports no current branch for it (detached
    /// HEAD) to default to (`details.field`, `repo_id`).
    NoCurrentBranch,
    /// A word outside a field's vocabulary (`details.field`, `got`, `valid`: the words).
    UnknownWord,
    /// An empty list where at least one item is needed (`details.field`, `valid`).
    EmptySet,
    /// A value of the wrong JSON type (`details.field`, `expected`).
    WrongType,
    /// A fleet node was asked to create on a project that lives on several hosts without
    /// `host` (`details.field`, `hosts`: the project's hosts).
    HostRequired,
    /// A token of another kind of daemon or another fleet: a host daemon's token given to a
    /// fleet node, a fleet node's to a host daemon, or one naming no host stream this fleet
    /// holds (`details.field`, `expected`: the kind this daemon issues).
    ForeignToken,
}

impl InvalidReason {
    /// Every reason, in the order of the declaration.
    #[cfg(test)]
    pub(crate) const ALL: [InvalidReason; 10] = [
        InvalidReason::AmbiguousTarget,
        InvalidReason::MixedPagination,
        InvalidReason::TitleLength,
        InvalidReason::DescriptionLength,
        InvalidReason::NoCurrentBranch,
        InvalidReason::UnknownWord,
        InvalidReason::EmptySet,
        InvalidReason::WrongType,
        InvalidReason::HostRequired,
        InvalidReason::ForeignToken,
    ];

    /// The reason as clients see it in `details.reason`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            InvalidReason::AmbiguousTarget => "ambiguous_target",
            InvalidReason::MixedPagination => "mixed_pagination",
            InvalidReason::TitleLength => "title_length",
            InvalidReason::DescriptionLength => "description_length",
            InvalidReason::NoCurrentBranch => "no_current_branch",
            InvalidReason::UnknownWord => "unknown_word",
            InvalidReason::EmptySet => "empty_set",
            InvalidReason::WrongType => "wrong_type",
            InvalidReason::HostRequired => "host_required",
            InvalidReason::ForeignToken => "foreign_token",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compare with the wire string (tests and callers that hold a code as text).
impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode::{self, *};
    use super::InvalidReason;

    /// The MCP API: every code and its exact string. Change a row only with the docs and
    /// `tests/mcp_schema.rs`; agents branch on these strings.
    const TABLE: [(ErrorCode, &str); 33] = [
        (AlreadyMerged, "already_merged"),
        (ApprovalAlreadyAnswered, "approval_already_answered"),
        (ApprovalRejected, "approval_rejected"),
        (ApprovalTimedOut, "approval_timed_out"),
        (BranchBehind, "branch_behind"),
        (Cancelled, "cancelled"),
        (Conflict, "conflict"),
        (ConflictsPresent, "conflicts_present"),
        (ForcePushRequired, "force_push_required"),
        (Forbidden, "forbidden"),
        (IdempotencyConflict, "idempotency_conflict"),
        (InProgress, "in_progress"),
        (Internal, "internal"),
        (InvalidArgument, "invalid_argument"),
        (NoRepos, "no_repos"),
        (NoSessionYet, "no_session_yet"),
        (NoWorkspaceContext, "no_workspace_context"),
        (NotConfigured, "not_configured"),
        (NotFound, "not_found"),
        (NotReady, "not_ready"),
        (NothingToMerge, "nothing_to_merge"),
        (ProcessRunning, "process_running"),
        (RebaseInProgress, "rebase_in_progress"),
        (RepoIdRequired, "repo_id_required"),
        (SubscriptionsUnavailable, "subscriptions_unavailable"),
        (TooManySubscriptions, "too_many_subscriptions"),
        (TooManyWaiters, "too_many_waiters"),
        (UncommittedChanges, "uncommitted_changes"),
        (UnknownApproval, "unknown_approval"),
        (UnknownBranch, "unknown_branch"),
        (UpstreamError, "upstream_error"),
        (UpstreamTimeout, "upstream_timeout"),
        (UpstreamUnavailable, "upstream_unavailable"),
    ];

    #[test]
    fn every_code_has_its_exact_string() {
        let listed: Vec<ErrorCode> = TABLE.iter().map(|(c, _)| *c).collect();
        assert_eq!(listed, ErrorCode::ALL, "the table lists every code once");
        for (code, text) in TABLE {
            assert_eq!(code.as_str(), text);
            assert_eq!(serde_json::to_value(code).unwrap(), text, "{code:?}");
            let back: ErrorCode = serde_json::from_value(text.into()).unwrap();
            assert_eq!(back, code);
        }
    }

    /// `details.reason` strings are MCP API too.
    #[test]
    fn every_reason_has_its_exact_string() {
        let table = [
            (InvalidReason::AmbiguousTarget, "ambiguous_target"),
            (InvalidReason::MixedPagination, "mixed_pagination"),
            (InvalidReason::TitleLength, "title_length"),
            (InvalidReason::DescriptionLength, "description_length"),
            (InvalidReason::NoCurrentBranch, "no_current_branch"),
            (InvalidReason::UnknownWord, "unknown_word"),
            (InvalidReason::EmptySet, "empty_set"),
            (InvalidReason::WrongType, "wrong_type"),
            (InvalidReason::HostRequired, "host_required"),
            (InvalidReason::ForeignToken, "foreign_token"),
        ];
        let listed: Vec<InvalidReason> = table.iter().map(|(r, _)| *r).collect();
        assert_eq!(listed, InvalidReason::ALL);
        for (reason, text) in table {
            assert_eq!(reason.as_str(), text);
            assert_eq!(serde_json::to_value(reason).unwrap(), text, "{reason:?}");
        }
    }
}
