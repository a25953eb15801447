//! VK's git actions on an attempt repo, by name: the delivery tools choose one, `upstream` turns
//! it into VK's route and body, `proxy` decides what may be asked and reads the answer.

/// One of VK's git actions on an attempt repo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitAction {
    /// `POST /rebase` with optional bases (VK defaults both to the target branch).
    Rebase {
        old_base_branch: Option<String>,
        new_base_branch: Option<String>,
    },
    /// `POST /conflicts/abort`.
    AbortConflicts,
    /// `POST /merge`.
    Merge,
    /// `POST /push`, or `/push/force` when `force`.
    Push { force: bool },
}
