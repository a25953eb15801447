//! VK's refusals that carry no error kind, recognized from their message texts once, here, into
//! typed answers the proxy matches on. The texts are VK's as recorded on a real VK
//! (docs/vk-contract.md §9.8, ../shared/vk-wire/README.md "Git" and "Approvals"); a text VK
//! rewords is one edit in this file. Nothing is decided here: which error an agent sees, with
//! which hint, is the proxy's business.

use super::rest::UpstreamError;

/// VK's refusal of a git action (rebase, merge, push…), from a `Status` error's message. VK
/// answers these 500 or 400/404 with a message only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitRefusal {
    /// "Branches diverged": the target branch moved since the attempt branch was based on it.
    BranchesDiverged,
    /// "… has uncommitted changes …": the worktree is dirty.
    UncommittedChanges,
    /// git's "nothing to commit": the target already holds the branch's changes.
    NothingToCommit,
    /// 400 "Branch '…' does not exist in the repository".
    UnknownBranch,
    /// 404 "Repository not found": VK does not know the repo for the attempt.
    RepoNotFound,
}

impl GitRefusal {
    /// Which refusal `e` is, if VK's message says (checked in this order); `None` for any other
    /// error.
    pub fn of(e: &UpstreamError) -> Option<GitRefusal> {
        let UpstreamError::Status {
            status, message, ..
        } = e
        else {
            return None;
        };
        if message.contains("Branches diverged") {
            Some(GitRefusal::BranchesDiverged)
        } else if message.contains("has uncommitted changes") {
            Some(GitRefusal::UncommittedChanges)
        } else if message.contains("nothing to commit") {
            Some(GitRefusal::NothingToCommit)
        } else if *status == 400 && message.contains("does not exist") {
            Some(GitRefusal::UnknownBranch)
        } else if *status == 404 && message.contains("Repository not found") {
            Some(GitRefusal::RepoNotFound)
        } else {
            None
        }
    }
}

/// VK's refusal of an approval answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalRefusal {
    /// 500 "Failed to respond to approval": VK holds no such approval for that execution
    /// process (its DB lost it, or the approval is another VK's).
    NoSuchApproval,
}

impl ApprovalRefusal {
    pub fn of(e: &UpstreamError) -> Option<ApprovalRefusal> {
        match e {
            UpstreamError::Status {
                status: 500,
                message,
                ..
            } if message.contains("Failed to respond to approval") => {
                Some(ApprovalRefusal::NoSuchApproval)
            }
            _ => None,
        }
    }
}

/// What VK's 409 to a creating call with an `Idempotency-Key` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyConflict {
    /// VK is still executing an earlier request with this key.
    InProgress,
    /// VK has seen this key with other arguments.
    Reused,
}

impl KeyConflict {
    /// From a 409's message (case-insensitive; "in progress" wins); `None`: another conflict.
    pub fn of_message(message: &str) -> Option<KeyConflict> {
        let lower = message.to_lowercase();
        if lower.contains("in progress") {
            Some(KeyConflict::InProgress)
        } else if lower.contains("idempotency") {
            Some(KeyConflict::Reused)
        } else {
            None
        }
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

    /// VK's texts as recorded on a real VK.
    #[test]
    fn recorded_texts_are_recognized() {
        use GitRefusal::*;
        let cases = [
            (
                500,
                "GitServiceError: Branches diverged: Cannot merge: base branch 'main' is 1 commits ahead of task branch 'vk/ab12-x'.",
                Some(BranchesDiverged),
            ),
            (
                500,
                "GitServiceError: vk/ab12-x has uncommitted changes: src/lib.rs",
                Some(UncommittedChanges),
            ),
            (
                500,
                "GitServiceError: Invalid repository: CLI merge failed: git command failed: --- stderr\nOn branch main\nnothing to commit, working tree clean",
                Some(NothingToCommit),
            ),
            (
                400,
                "Branch 'nope' does not exist in the repository",
                Some(UnknownBranch),
            ),
            (500, "Branch 'nope' does not exist in the repository", None),
            (404, "RepoError: Repository not found", Some(RepoNotFound)),
            (
                500,
                "GitServiceError: Invalid repository: Rebase failed: --- stdout",
                None,
            ),
        ];
        for (code, message, want) in cases {
            assert_eq!(GitRefusal::of(&status(code, message)), want, "{message}");
        }
        let down = UpstreamError::Unreachable {
            url: "http://vk".into(),
            reason: "refused".into(),
        };
        assert_eq!(GitRefusal::of(&down), None);

        assert_eq!(
            ApprovalRefusal::of(&status(500, "Failed to respond to approval")),
            Some(ApprovalRefusal::NoSuchApproval)
        );
        assert_eq!(
            ApprovalRefusal::of(&status(400, "Failed to respond to approval")),
            None
        );

        assert_eq!(
            KeyConflict::of_message("Request In Progress"),
            Some(KeyConflict::InProgress)
        );
        assert_eq!(
            KeyConflict::of_message("Idempotency key reused"),
            Some(KeyConflict::Reused)
        );
        assert_eq!(KeyConflict::of_message("task is running"), None);
    }
}
