//! The refusals of least privilege (issue 26; docs/agent-guide.md rows 84–95) as data for
//! tests/agent_mistakes.rs: each mis-call with the caller that makes it, the code, `retryable`
//! and the words its hint or details must carry.

use serde_json::{Value, json};
use uuid::Uuid;

/// Who makes a catalogued call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A token with `read,write`.
    AgentToken,
    /// A token with `read` only.
    ReadToken,
    /// A token with every scope, limited to the world's project.
    ProjectToken,
    /// No token, inside the finished attempt's workspace.
    InWorkspace,
}

/// What the calls name.
pub struct ScopeWorld {
    pub project: Uuid,
    pub other_project: Uuid,
    pub attempt: Uuid,
    pub other_attempt: Uuid,
    pub other_task: Uuid,
}

pub type ScopeCase = (
    &'static str,
    Caller,
    &'static str,
    Value,
    &'static str,
    bool,
    &'static [&'static str],
);

pub fn cases(w: &ScopeWorld) -> Vec<ScopeCase> {
    let approval = json!({"approval_id": Uuid::new_v4(), "decision": "approve"});
    vec![
        (
            "an agent token answering an approval",
            Caller::AgentToken,
            "respond_approval",
            approval.clone(),
            "forbidden",
            false,
            &["`approve`", "orchestrator"],
        ),
        (
            "an agent token merging",
            Caller::AgentToken,
            "merge_attempt",
            json!({"attempt_id": w.attempt}),
            "forbidden",
            false,
            &["`deliver`"],
        ),
        (
            "an agent token pushing",
            Caller::AgentToken,
            "push_attempt",
            json!({"attempt_id": w.attempt}),
            "forbidden",
            false,
            &["`deliver`"],
        ),
        (
            "a read token creating a task",
            Caller::ReadToken,
            "create_task",
            json!({"project_id": w.project, "title": "t"}),
            "forbidden",
            false,
            &["`write`"],
        ),
        (
            "an agent in its workspace answering an approval",
            Caller::InWorkspace,
            "respond_approval",
            approval,
            "forbidden",
            false,
            &["`approve`", "workspace"],
        ),
        (
            "an agent in its workspace merging",
            Caller::InWorkspace,
            "merge_attempt",
            json!({"attempt_id": w.attempt}),
            "forbidden",
            false,
            &["`deliver`"],
        ),
        (
            "an agent in its workspace prompting another attempt",
            Caller::InWorkspace,
            "follow_up",
            json!({"attempt_id": w.other_attempt, "action": "send", "prompt": "x"}),
            "forbidden",
            false,
            &["own attempt", "get_context"],
        ),
        (
            "a project-limited token editing another project's task",
            Caller::ProjectToken,
            "update_task",
            json!({"task_id": w.other_task, "title": "x"}),
            "forbidden",
            false,
            &["project"],
        ),
        (
            "a project-limited token reading another project's attempt",
            Caller::ProjectToken,
            "get_attempt_status",
            json!({"attempt_id": w.other_attempt}),
            "forbidden",
            false,
            &["projects", "refused", "project_ids"],
        ),
        (
            "a project-limited token batching a foreign attempt with its own",
            Caller::ProjectToken,
            "get_attempt_status",
            json!({"attempt_ids": [w.attempt, w.other_attempt]}),
            "forbidden",
            false,
            &["refused", "attempt_ids"],
        ),
        (
            "a project-limited token tailing another project's feed",
            Caller::ProjectToken,
            "tail_project_activity",
            json!({"project_id": w.other_project}),
            "forbidden",
            false,
            &["projects", "list_projects"],
        ),
        (
            "an agent in its workspace tailing another attempt's logs",
            Caller::InWorkspace,
            "tail_attempt_logs",
            json!({"attempt_id": w.other_attempt}),
            "forbidden",
            false,
            &["own attempt", "get_context", "refused"],
        ),
        (
            "an agent in its workspace tailing its whole project's feed",
            Caller::InWorkspace,
            "tail_project_activity",
            json!({"project_id": w.project}),
            "forbidden",
            false,
            &["own attempt", "list_tasks"],
        ),
    ]
}
