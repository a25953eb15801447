//! Every VK route the daemon calls, REST and WebSocket, built here and nowhere else
//! (docs/vk-contract.md). Each function answers the path with its query string; `VkClient`
//! turns it into an http(s) URL (`url`) or a ws(s) one (`ws_url`). A route VK changes is one
//! edit in this file.

use uuid::Uuid;

use vk_observer_vk::Channel;
use vk_observer_vk::GitAction;

// ---- reads (snapshots, refetches, facts) ----

/// `GET`: VK's run identity (`loaded_at_unix_ms`).
pub(crate) const CONFIG_STATUS: &str = "/api/config/status";
/// `GET`: executors, capabilities and VK's config.
pub(crate) const INFO: &str = "/api/info";
/// `POST`: create a task.
pub(crate) const TASKS: &str = "/api/tasks";
/// `POST`: start an attempt.
pub(crate) const TASK_ATTEMPTS: &str = "/api/task-attempts";

pub(crate) fn project_repositories(project: Uuid) -> String {
    format!("/api/projects/{project}/repositories")
}

/// `GET`: a repository's branches (`is_current` marks the one checked out in its checkout).
pub(crate) fn repo_branches(repo: Uuid) -> String {
    format!("/api/repos/{repo}/branches")
}

/// `GET`, `PUT` and `DELETE` of one task.
pub(crate) fn task(task: Uuid) -> String {
    format!("/api/tasks/{task}")
}

pub(crate) fn attempts_of_task(task: Uuid) -> String {
    format!("/api/task-attempts?task_id={task}")
}

pub(crate) fn sessions_of_attempt(attempt: Uuid) -> String {
    format!("/api/sessions?workspace_id={attempt}")
}

/// `POST`: rename the attempt's branch in every repo (`{new_branch_name}` → `{branch}`).
pub(crate) fn rename_branch(attempt: Uuid) -> String {
    format!("/api/task-attempts/{attempt}/rename-branch")
}

/// The attempt's repositories, each with its `target_branch`.
pub(crate) fn attempt_repos(attempt: Uuid) -> String {
    format!("/api/task-attempts/{attempt}/repos")
}

/// The change summary with VK's diff guard bypassed.
pub(crate) fn changes(attempt: Uuid) -> String {
    format!("/api/task-attempts/{attempt}/changes?force=true")
}

/// One page of log history v2: the latest `limit` entries below `cursor` (exclusive).
pub(crate) fn log_history(
    process: Uuid,
    channel: Channel,
    limit: u32,
    cursor: Option<u64>,
) -> String {
    let segment = log_segment(channel);
    let mut path = format!("/api/execution-processes/{process}/{segment}/v2?limit={limit}");
    if let Some(c) = cursor {
        path.push_str(&format!("&cursor={c}"));
    }
    path
}

/// The SSE hint stream, resuming after `after_seq` when given.
pub(crate) fn events(after_seq: Option<u64>) -> String {
    match after_seq {
        Some(n) => format!("/api/events?after_seq={n}"),
        None => "/api/events".to_string(),
    }
}

// ---- WebSockets ----

/// The projects object stream.
pub const PROJECTS_WS: &str = "/api/projects/stream/ws";

/// A project's tasks object stream.
pub fn tasks_ws(project: Uuid) -> String {
    format!("/api/tasks/stream/ws?project_id={project}")
}

/// An attempt's execution processes object stream.
pub fn processes_ws(attempt: Uuid) -> String {
    format!("/api/execution-processes/stream/ws?workspace_id={attempt}")
}

/// A process's live log stream v2 on `channel`.
pub fn log_ws(process: Uuid, channel: Channel) -> String {
    let segment = log_segment(channel);
    format!("/api/execution-processes/{process}/{segment}/v2/ws")
}

/// The path segment of a process log channel (`/api/execution-processes/{id}/<segment>/v2[/ws]`).
fn log_segment(channel: Channel) -> &'static str {
    match channel {
        Channel::Normalized => "normalized-logs",
        Channel::Raw => "raw-logs",
    }
}

// ---- mutations and artifacts ----

/// `POST`: stop every process of the attempt (`force` kills).
pub(crate) fn stop_attempt(attempt: Uuid, force: bool) -> String {
    format!("/api/task-attempts/{attempt}/stop?force={force}")
}

/// `POST`: stop one process.
pub(crate) fn stop_process(process: Uuid) -> String {
    format!("/api/execution-processes/{process}/stop")
}

pub(crate) fn follow_up(session: Uuid) -> String {
    format!("/api/sessions/{session}/follow-up")
}

/// `POST` queues a message, `DELETE` cancels the queued one.
pub(crate) fn queue(session: Uuid) -> String {
    format!("/api/sessions/{session}/queue")
}

/// `GET`, with `path`, `start` and `max_bytes` as query parameters.
pub(crate) fn attempt_file(attempt: Uuid) -> String {
    format!("/api/task-attempts/{attempt}/file")
}

pub(crate) fn attempt_patch(attempt: Uuid) -> String {
    format!("/api/task-attempts/{attempt}/patch")
}

/// `POST`: answer an approval.
pub(crate) fn approval_respond(approval_id: &str) -> String {
    format!("/api/approvals/{approval_id}/respond")
}

// ---- git ----

pub(crate) fn branch_status(attempt: Uuid) -> String {
    format!("/api/task-attempts/{attempt}/branch-status")
}

/// `POST`: one git action on a repo of the attempt (the repo goes in the body).
pub(crate) fn git_action(attempt: Uuid, action: &GitAction) -> String {
    let segment = match action {
        GitAction::Rebase { .. } => "rebase",
        GitAction::AbortConflicts => "conflicts/abort",
        GitAction::Merge => "merge",
        GitAction::Push { force: false } => "push",
        GitAction::Push { force: true } => "push/force",
    };
    format!("/api/task-attempts/{attempt}/{segment}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_vks() {
        let id = Uuid::nil();
        assert_eq!(
            log_ws(id, Channel::Normalized),
            format!("/api/execution-processes/{id}/normalized-logs/v2/ws")
        );
        assert_eq!(
            log_history(id, Channel::Raw, 50, Some(7)),
            format!("/api/execution-processes/{id}/raw-logs/v2?limit=50&cursor=7")
        );
        assert_eq!(
            processes_ws(id),
            format!("/api/execution-processes/stream/ws?workspace_id={id}")
        );
        assert_eq!(
            git_action(id, &GitAction::Push { force: true }),
            format!("/api/task-attempts/{id}/push/force")
        );
        assert_eq!(repo_branches(id), format!("/api/repos/{id}/branches"));
        assert_eq!(
            rename_branch(id),
            format!("/api/task-attempts/{id}/rename-branch")
        );
        assert_eq!(events(None), "/api/events");
        assert_eq!(events(Some(3)), "/api/events?after_seq=3");
    }
}
