//! The agent mistakes catalogue (docs/agent-guide.md), continued from `mistakes.rs`: the
//! mis-calls of the delivery tools (rebase / merge / push), the activity feeds, detail levels
//! and approvals, in the order tests/agent_mistakes.rs makes them after those of `mistakes.rs`.

use serde_json::json;

use super::mistakes::{Case, World};

/// The catalogue's delivery, activity, detail and approval entries.
pub fn cases(w: &World) -> Vec<Case> {
    let World {
        project,
        done_task,
        a,
        bare,
        busy,
        ghost,
        tasks_cursor,
        ..
    } = *w;
    vec![
        // ---- delivery (rebase / merge / push) ----
        (
            "merge while the agent runs",
            "merge_attempt",
            json!({"attempt_id": busy.attempt_id}),
            "process_running",
            true,
            &["wait_for_attempt_change", "stop_attempt"],
        ),
        (
            "push with a repo_id of another attempt",
            "push_attempt",
            json!({"attempt_id": a, "repo_id": ghost}),
            "not_found",
            false,
            &["get_attempt_branch_status", "repo_id"],
        ),
        (
            "rebase onto a branch that does not exist",
            "rebase_attempt",
            json!({"attempt_id": a, "new_base_branch": "no-such-branch"}),
            "unknown_branch",
            false,
            &["new_base_branch"],
        ),
        (
            "merge an attempt that committed nothing",
            "merge_attempt",
            json!({"attempt_id": bare}),
            "nothing_to_merge",
            false,
            &["follow_up"],
        ),
        (
            "branch status of a project id",
            "get_attempt_branch_status",
            json!({"attempt_id": project}),
            "not_found",
            false,
            &["list_task_attempts"],
        ),
        (
            "force as a string",
            "push_attempt",
            json!({"attempt_id": a, "force": "yes"}),
            "invalid_argument",
            false,
            &["schema", "boolean"],
        ),
        (
            "activity with since_token and cursor",
            "tail_project_activity",
            json!({"project_id": project, "since_token": "a.1", "cursor": "ab"}),
            "invalid_argument/mixed_pagination",
            false,
            &["since_token", "cursor"],
        ),
        (
            "activity of a project id passed as a task",
            "tail_task_activity",
            json!({"task_id": project}),
            "not_found",
            false,
            &["list_tasks"],
        ),
        (
            "activity paged with another list's cursor",
            "tail_project_activity",
            json!({"project_id": project, "cursor": tasks_cursor}),
            "invalid_argument",
            false,
            &["belongs to list_tasks", "next_cursor"],
        ),
        (
            "include_activity on an attempt wait",
            "wait_for_attempt_change",
            json!({"attempt_ids": [a], "include_activity": true}),
            "invalid_argument",
            false,
            &["include_activity", "project_id", "tail_task_activity"],
        ),
        (
            "activity detail out of range",
            "tail_task_activity",
            json!({"task_id": done_task, "detail": 3}),
            "invalid_argument",
            false,
            &["detail"],
        ),
        (
            "detail level out of range",
            "get_attempt_status",
            json!({"attempt_id": a, "detail": 3}),
            "invalid_argument",
            false,
            &["detail must be 0, 1 or 2"],
        ),
        // Approvals (issue 16): ids, decisions, reasons and scopes.
        (
            "attempt id passed as an approval id",
            "respond_approval",
            json!({"approval_id": a, "decision": "approve"}),
            "unknown_approval",
            false,
            &["list_approvals", "pending_approvals"],
        ),
        (
            "approval id that is not a UUID",
            "respond_approval",
            json!({"approval_id": "approve-the-bash-call", "decision": "approve"}),
            "invalid_argument",
            false,
            &["approval_id", "UUID", "list_approvals"],
        ),
        (
            "a reason with approve",
            "respond_approval",
            json!({"approval_id": ghost, "decision": "approve", "reason": "looks fine"}),
            "invalid_argument",
            false,
            &["reason", "deny"],
        ),
        (
            "decision yes instead of approve",
            "respond_approval",
            json!({"approval_id": ghost, "decision": "yes"}),
            "invalid_argument",
            false,
            &["decision", "approve"],
        ),
        (
            "list_approvals with both scopes",
            "list_approvals",
            json!({"attempt_ids": [a], "project_id": project}),
            "invalid_argument/ambiguous_target",
            false,
            &["attempt_ids", "project_id"],
        ),
        (
            "list_approvals with no scope",
            "list_approvals",
            json!({"status": "pending"}),
            "invalid_argument/ambiguous_target",
            false,
            &["attempt_ids", "project_id"],
        ),
        (
            "list_approvals with a list_tasks cursor",
            "list_approvals",
            json!({"project_id": project, "cursor": tasks_cursor}),
            "invalid_argument",
            false,
            &["belongs to list_tasks", "next_cursor"],
        ),
    ]
}
