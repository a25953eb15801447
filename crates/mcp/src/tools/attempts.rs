//! Attempt tools: `start_task_attempt`, `follow_up` (send / queue / cancel) and `stop_attempt`
//! (an attempt or one process). Parse → `proxy` (VK REST, idempotency, read-your-writes) →
//! answer. Without an upstream client (schema tests) they answer `not_configured`.

use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use super::answer::{detail_output_schema, level_of, plain, plain_output_schema, shaped};
use super::args::{Args, input_schema};
use super::{Family, Scope, VkTools};
use vk_observer_proxy::attempts::{
    AttemptStarted, FollowUp, FollowUpAction, FollowUpDone, StartAttempt,
};
use vk_observer_proxy::stop::{AttemptStopped, StopTarget};
use vk_observer_query::detail::{Detail, Rules};
use vk_observer_query::status::STATUS_RULES;
use vk_observer_tool_error::ToolError;

pub(crate) const START_TASK_ATTEMPT: &str = "start_task_attempt";
pub(crate) const FOLLOW_UP: &str = "follow_up";
pub(crate) const STOP_ATTEMPT: &str = "stop_attempt";

pub(crate) const FAMILY: Family = Family {
    name: "attempts",
    tools: &[
        (START_TASK_ATTEMPT, Scope::Write),
        (FOLLOW_UP, Scope::Write),
        (STOP_ATTEMPT, Scope::Write),
    ],
    router: VkTools::attempts_router,
};

/// start_task_attempt: seed 003's attempt, task and branch (null when unknown) at every
/// level; the new attempt's status as get_attempt_status shows it.
const ATTEMPT_STARTED_RULES: Rules = Rules {
    finish: None,
    kept: &["attempt_id", "task_id", "workspace_branch"],
    standard: &[],
    verbatim: &[],
    nested: &[("status", &STATUS_RULES)],
};

/// stop_attempt: the status after the stop as get_attempt_status shows it; VK's answer time
/// from 1.
const ATTEMPT_STOPPED_RULES: Rules = Rules {
    finish: None,
    kept: &[],
    standard: &["vk_ms"],
    verbatim: &[],
    nested: &[("status", &STATUS_RULES)],
};

#[tool_router(router = attempts_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::START_TASK_ATTEMPT, input_schema = input_schema::<StartAttemptArgs>(),
           output_schema = detail_output_schema::<AttemptStarted>(),
           annotations(title = "Start task attempt", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    pub(crate) async fn start_task_attempt(
        &self,
        Args(a): Args<StartAttemptArgs>,
    ) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let r = async {
            let a = a?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            let s = StartAttempt {
                task_id: a.task_id,
                executor: a.executor,
                variant: a.variant.filter(|v| !v.trim().is_empty()),
                repos: a
                    .repos
                    .into_iter()
                    .map(|r| (r.repo_id, r.target_branch))
                    .collect(),
                reuse_running_attempt: a.reuse_running_attempt.unwrap_or(false),
                branch_prefix: a.branch_prefix,
            };
            self.proxy()?
                .start_attempt(s, a.request_id.as_deref())
                .await
        };
        shaped(r.await, &ATTEMPT_STARTED_RULES, level)
    }

    #[tool(description = describe::FOLLOW_UP, input_schema = input_schema::<FollowUpArgs>(),
           output_schema = plain_output_schema::<FollowUpDone>(),
           annotations(title = "Follow up", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false))]
    pub async fn follow_up(&self, Args(a): Args<FollowUpArgs>) -> CallToolResult {
        let r = async {
            let a = a.map_err(stop_verb_hint)?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            let f = FollowUp {
                action: match a.action {
                    FollowUpActionArg::Send => FollowUpAction::Send,
                    FollowUpActionArg::Queue => FollowUpAction::Queue,
                    FollowUpActionArg::Cancel => FollowUpAction::Cancel,
                },
                prompt: a.prompt,
                variant: a.variant.filter(|v| !v.trim().is_empty()),
                attempt_id: a.attempt_id,
                session_id: a.session_id,
            };
            self.proxy()?.follow_up(f, a.request_id.as_deref()).await
        };
        plain(r.await)
    }

    #[tool(description = describe::STOP_ATTEMPT, input_schema = input_schema::<StopArgs>(),
           output_schema = detail_output_schema::<AttemptStopped>(),
           annotations(title = "Stop attempt", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false))]
    pub(crate) async fn stop_attempt(&self, Args(a): Args<StopArgs>) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let r = async {
            let a = a?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            let target = match (a.attempt_id, a.execution_process_id) {
                (Some(id), None) => StopTarget::Attempt(id),
                (None, Some(id)) => StopTarget::Process(id),
                _ => {
                    return Err(ToolError::ambiguous_target(&[
                        "attempt_id",
                        "execution_process_id",
                    ]));
                }
            };
            self.proxy()?
                .stop(target, a.force.unwrap_or(false), a.request_id.as_deref())
                .await
        };
        shaped(r.await, &ATTEMPT_STOPPED_RULES, level)
    }
}

/// `follow_up` with `action: stop|kill|interrupt` is a common confusion: point at stop_attempt.
fn stop_verb_hint(mut e: ToolError) -> ToolError {
    let text = e.details.to_string();
    if ["`stop`", "`kill`", "`interrupt`", "`abort`"]
        .iter()
        .any(|v| text.contains(v))
    {
        e.hint = "follow_up only sends, queues or cancels a queued message. To stop a running agent call stop_attempt with attempt_id (or execution_process_id for one process).".into();
    }
    e
}

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RepoTarget {
    /// Repository id (UUID string) from list_repos.
    pub repo_id: Uuid,
    /// Branch the attempt's work is based on and targets (e.g. `main`). Omit it to use the
    /// repo's current branch (list_repos `current_branch`); the answer's `repos` says which
    /// branch was used (`target_branch_source: default_current`).
    #[serde(default)]
    pub target_branch: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartAttemptArgs {
    /// Task id (UUID string).
    pub task_id: Uuid,
    /// Executor identifier exactly as list_executors returns it (e.g. `CLAUDE_CODE`).
    pub executor: String,
    /// Executor variant from list_executors `variants`; omit for the default.
    #[serde(default)]
    pub variant: Option<String>,
    /// Repositories to work in, each with its target branch (at least one).
    #[schemars(length(min = 1))]
    pub repos: Vec<RepoTarget>,
    /// When the task already has a running attempt, return it instead of starting another
    /// (default false).
    #[serde(default)]
    pub reuse_running_attempt: Option<bool>,
    /// Prefix of the attempt's branch name (seed 003), e.g. `orchestrator` or `runs/42`: the
    /// branch becomes `<branch_prefix>/<4 hex>-<slug>`. VK names branches with one global
    /// prefix (its `git_branch_prefix`, default `vk`); another prefix is applied by renaming
    /// the branch right after VK created it (answer `branch_prefix.outcome`: `vk_global`,
    /// `renamed`, or `not_applied` with VK's reason; the attempt runs either way). Omit to keep
    /// VK's name.
    #[serde(default)]
    pub branch_prefix: Option<String>,
    /// Idempotency key: a retry with the same key and arguments returns the same attempt.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Fleet node: the host to start it on; default the host the task lives on, needed when
    /// several hosts report the task (a copied VK database; the refusal's `details.hosts` names
    /// them). A host daemon accepts only its own name.
    #[serde(default)]
    pub host: Option<String>,
    /// Detail level of the answer's task or status: 0 (default) the fields needed to decide
    /// the next call; 1 adds timestamps and metadata; 2 every field.
    #[serde(default)]
    pub detail: Option<Detail>,
}

/// What follow_up does.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub(crate) enum FollowUpActionArg {
    // Start a new agent run in the session with `prompt` now.
    Send,
    // Queue `prompt` to run when the current run finishes (replaces a queued one).
    Queue,
    // Remove the queued message.
    Cancel,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"properties": {"action": {"enum": ["send", "queue"]}}, "required": ["action"]},
    "then" = {
        "required": ["prompt"],
        "if": {"required": ["attempt_id"]},
        "then": {"not": {"required": ["session_id"]}},
        "else": {"required": ["session_id"]}
    },
    "else" = {
        "if": {"required": ["attempt_id"]},
        "then": {"not": {"required": ["session_id"]}},
        "else": {"required": ["session_id"]}
    }
))]
pub(crate) struct FollowUpArgs {
    /// `send` (run `prompt` now), `queue` (run `prompt` after the current run) or `cancel`
    /// (drop the queued message). `prompt` is required for send and queue.
    pub action: FollowUpActionArg,
    /// The message for the agent; required when action is `send` or `queue`, not allowed for
    /// `cancel`.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Executor variant for this run (from list_executors); omit to keep the session's.
    #[serde(default)]
    pub variant: Option<String>,
    /// Attempt id (UUID string): acts on its latest session. Give exactly one of `attempt_id`
    /// or `session_id`.
    #[serde(default)]
    pub attempt_id: Option<Uuid>,
    /// Session id (UUID string). Give exactly one of `attempt_id` or `session_id`.
    #[serde(default)]
    pub session_id: Option<Uuid>,
    /// Idempotency key for send, queue and cancel: a retry with the same key and arguments
    /// returns the first answer (`replayed: true`) without acting again (no second run, no
    /// second cancel); the same key with other arguments fails with `idempotency_conflict`.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
    /// Fleet node: the host to run it on, needed when several hosts report its attempt (a copied
    /// VK database; the refusal's `details.hosts` names them). A host daemon accepts only its
    /// own name.
    #[serde(default)]
    pub host: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["attempt_id"]},
    "then" = {"not": {"required": ["execution_process_id"]}},
    "else" = {
        "required": ["execution_process_id"],
        "not": {
            "required": ["force"],
            "properties": {"force": {
                "const": true,
                "description": "force=true is refused with execution_process_id (VK's process stop has no force variant)."
            }}
        }
    }
))]
pub(crate) struct StopArgs {
    /// Attempt id (UUID string): stops its running agent and scripts, never its dev servers.
    /// Give exactly one of `attempt_id` or `execution_process_id`.
    #[serde(default)]
    pub attempt_id: Option<Uuid>,
    /// Execution process id (UUID string): stops that one process, a dev server included.
    /// Give exactly one of `attempt_id` or `execution_process_id`.
    #[serde(default)]
    pub execution_process_id: Option<Uuid>,
    /// Attempt stops only: VK's force path, which also marks processes VK lost the handle of
    /// (e.g. after a VK restart) as killed. Not a harder kill: every stop interrupts, waits
    /// about 5 s, then kills. Not allowed with `execution_process_id` (VK's process stop has no
    /// force variant). Default false.
    #[serde(default)]
    pub force: Option<bool>,
    /// Idempotency key: a retry with the same key and arguments answers the first stop
    /// (`replayed: true`) without calling VK again; the same key with other arguments fails
    /// with `idempotency_conflict`.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Detail level of the answer's task or status: 0 (default) the fields needed to decide
    /// the next call; 1 adds timestamps and metadata; 2 every field.
    #[serde(default)]
    pub detail: Option<Detail>,
    /// Fleet node: the host to run it on, needed when several hosts report its attempt (a copied
    /// VK database; the refusal's `details.hosts` names them). A host daemon accepts only its
    /// own name.
    #[serde(default)]
    pub host: Option<String>,
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const START_TASK_ATTEMPT: &str = "Start an attempt on a task: a branch and worktree per repo, then the coding agent runs the task description.
Use when: a task should be worked on by an agent.
Required: task_id, executor (from list_executors), repos [{repo_id (from list_repos)}].
Optional: repos[].target_branch (default: the repo's current_branch), branch_prefix, variant, reuse_running_attempt, request_id (idempotency key).
Next: wait_for_attempt_change with the returned attempt_id and token, then get_attempt_status.
Avoid: starting a second attempt while one runs (pass reuse_running_attempt: true); inventing executor names.";

    pub(crate) const FOLLOW_UP: &str = "Send the attempt's agent a new message now (send), queue one for after the current run (queue), or drop the queued one (cancel).
Use when: the agent needs more instructions or fixes.
Required: action and exactly one of attempt_id or session_id; prompt for send and queue.
Optional: variant, request_id (idempotency key for send, queue and cancel: same key and arguments replay the first answer).
Next: wait_for_attempt_change, then tail_attempt_logs.
Avoid: calling before the attempt has a session (no_session_yet: check get_attempt_status); using cancel to stop a running agent (use stop_attempt).";

    pub(crate) const STOP_ATTEMPT: &str = "Stop an attempt's agent/scripts (not dev servers) or one process (dev servers too). Returns once VK stopped them (interrupt, ~5 s, kill): what was stopped, final status, vk_ms.
Use when: an agent is stuck or unwanted; a dev server must go.
Required: exactly one of attempt_id or execution_process_id.
Optional: force (attempt only: also marks processes VK lost track of as killed; VK's process stop has none), request_id, detail (0|1|2).
Next: get_attempt_changes, or follow_up to continue differently.
Avoid: both ids; force with execution_process_id; follow_up cancel or delete_task to stop.";
}
