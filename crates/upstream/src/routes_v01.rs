//! VK 0.1.x's routes (the workspace-first dialect; docs/vk-contract.md §12), built here and
//! nowhere else, as `routes` does for the fork's. Each was recorded on BloopAI VK v0.1.44
//! (tests/fixtures/vk-wire-bloop/samples/, ROUTES.md of the recording).

use uuid::Uuid;

use vk_observer_vk::Channel;

/// `GET`: every registered repository (0.1.x `Repo`s).
pub(crate) const REPOS: &str = "/api/repos";

/// `GET`: every workspace (no `is_running`/`is_errored`).
pub(crate) const WORKSPACES: &str = "/api/workspaces";

/// `GET`: one workspace (no `is_running`/`is_errored`: only the stream has them).
pub(crate) fn workspace(workspace: Uuid) -> String {
    format!("/api/workspaces/{workspace}")
}

/// `GET`: a workspace's repositories, each with its `target_branch`.
pub(crate) fn workspace_repos(workspace: Uuid) -> String {
    format!("/api/workspaces/{workspace}/repos")
}

/// `GET`: a workspace's sessions.
pub(crate) fn sessions_of_workspace(workspace: Uuid) -> String {
    format!("/api/sessions?workspace_id={workspace}")
}

/// `GET`: one execution process (the database's truth; the streams' deltas can be stale).
pub(crate) fn process(process: Uuid) -> String {
    format!("/api/execution-processes/{process}")
}

/// `POST`: create a workspace and start its agent in one call (no `Idempotency-Key`: a
/// retry makes a second workspace).
pub(crate) const WORKSPACES_START: &str = "/api/workspaces/start";

// ---- WebSockets ----

/// Every workspace: snapshot, `Ready`, then `add`/`replace`/`remove /workspaces/{id}`.
pub const WORKSPACES_WS: &str = "/api/workspaces/streams/ws";

/// One session's execution processes: snapshot, `Ready`, then changes.
pub fn session_processes_ws(session: Uuid) -> String {
    format!("/api/execution-processes/stream/session/ws?session_id={session}")
}

/// Pending approvals: snapshot `replace /pending`, `Ready`, then `replace`/`remove
/// /pending/{id}`.
pub const APPROVALS_WS: &str = "/api/approvals/stream/ws";

/// A process's log stream v1 on `channel` (no resume; a replay once ended renumbers).
pub fn log_ws(process: Uuid, channel: Channel) -> String {
    let segment = match channel {
        Channel::Normalized => "normalized-logs",
        Channel::Raw => "raw-logs",
    };
    format!("/api/execution-processes/{process}/{segment}/ws")
}

// ---- delivery: git and stop (`git_v01`) ----

/// `GET`: the workspace's git state, one `RepoBranchStatus` per repository.
pub(crate) fn git_status(workspace: Uuid) -> String {
    format!("/api/workspaces/{workspace}/git/status")
}

/// `POST`: one git action on a repository of the workspace (the repo goes in the body).
pub(crate) fn git_action(workspace: Uuid, action: &vk_observer_vk::GitAction) -> String {
    use vk_observer_vk::GitAction;
    let segment = match action {
        GitAction::Rebase { .. } => "rebase",
        GitAction::AbortConflicts => "conflicts/abort",
        GitAction::Merge => "merge",
        GitAction::Push { force: false } => "push",
        GitAction::Push { force: true } => "push/force",
    };
    format!("/api/workspaces/{workspace}/git/{segment}")
}

/// `POST`: stop every running process of the workspace except dev servers.
pub(crate) fn execution_stop(workspace: Uuid) -> String {
    format!("/api/workspaces/{workspace}/execution/stop")
}

/// `POST`: stop one execution process (dev servers included).
pub(crate) fn process_stop(process: Uuid) -> String {
    format!("/api/execution-processes/{process}/stop")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_those_recorded() {
        let id = Uuid::nil();
        assert_eq!(
            log_ws(id, Channel::Raw),
            format!("/api/execution-processes/{id}/raw-logs/ws")
        );
        assert_eq!(
            session_processes_ws(id),
            format!("/api/execution-processes/stream/session/ws?session_id={id}")
        );
        assert_eq!(workspace_repos(id), format!("/api/workspaces/{id}/repos"));
        assert_eq!(
            sessions_of_workspace(id),
            format!("/api/sessions?workspace_id={id}")
        );
    }
}
