//! Approval tools: `list_approvals` (a read from the approvals index, `query::approvals`) and
//! `respond_approval` (forwarded to VK through `proxy::approvals`, read-your-writes). Mode
//! rules are in the schema as root `if/then/else` and enforced again at run time. Without an
//! upstream client (schema tests) `respond_approval` answers `not_configured`.

use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

use super::answer::{plain, plain_output_schema};
use super::args::{Args, input_schema};
use super::paging::page_args;
use super::{Family, Scope, VkTools};
use vk_observer_proxy::approvals::{ApprovalAnswered, Decision};
pub use vk_observer_query::approvals::StatusFilter;
use vk_observer_query::approvals::{ApprovalList, ApprovalScope};
use vk_observer_query::detail::Detail;
use vk_observer_tool_error::ToolError;

pub(crate) const LIST_APPROVALS: &str = "list_approvals";
pub(crate) const RESPOND_APPROVAL: &str = "respond_approval";

pub(crate) const FAMILY: Family = Family {
    name: "approvals",
    tools: &[
        (LIST_APPROVALS, Scope::Read),
        (RESPOND_APPROVAL, Scope::Approve),
    ],
    router: VkTools::approvals_router,
};

/// Most attempts one list_approvals call names.
const MAX_ATTEMPTS: usize = 100;

#[tool_router(router = approvals_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::LIST_APPROVALS, input_schema = input_schema::<ListApprovalsArgs>(),
           output_schema = plain_output_schema::<ApprovalList>(),
           annotations(title = "List approvals", read_only_hint = true, open_world_hint = false))]
    async fn list_approvals(&self, Args(a): Args<ListApprovalsArgs>) -> CallToolResult {
        plain(a.and_then(|a| {
            let scope = match (a.attempt_ids, a.project_id) {
                (Some(ids), None) if !ids.is_empty() && ids.len() <= MAX_ATTEMPTS => {
                    ApprovalScope::Attempts(ids)
                }
                (Some(ids), None) => {
                    return Err(ToolError::invalid_field(
                        "attempt_ids",
                        format!("attempt_ids must hold 1 to {MAX_ATTEMPTS} ids (got {}); use project_id for a whole project.", ids.len()),
                    ));
                }
                (None, Some(p)) => ApprovalScope::Project(p),
                _ => return Err(ToolError::ambiguous_target(&["attempt_ids", "project_id"])),
            };
            let page = page_args(a.cursor, a.limit, "limit")?;
            self.query
                .list_approvals(scope, a.status.unwrap_or_default(), &page)
        }))
    }

    #[tool(description = describe::RESPOND_APPROVAL, input_schema = input_schema::<RespondApprovalArgs>(),
           output_schema = plain_output_schema::<ApprovalAnswered>(),
           annotations(title = "Respond to approval", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false))]
    pub async fn respond_approval(&self, Args(a): Args<RespondApprovalArgs>) -> CallToolResult {
        let r = async {
            let a = a.map_err(decision_hint)?;
            crate::forward::check_host_arg(&self.fleet, a.host.as_deref())?;
            let reason = a
                .reason
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty());
            let decision = match (a.decision, reason) {
                (DecisionArg::Approve, Some(_)) => {
                    return Err(ToolError::invalid_field(
                        "reason",
                        "reason goes with decision `deny` only (VK records no reason for an approval); drop it, or deny.",
                    ));
                }
                (DecisionArg::Approve, None) => Decision::Approve,
                (DecisionArg::Deny, reason) => Decision::Deny(reason),
            };
            self.proxy()?
                .respond_approval(&a.approval_id, decision, a.request_id.as_deref())
                .await
        };
        plain(r.await)
    }
}

/// `decision: yes|allow|reject…` is a common guess: name the field and its two words.
fn decision_hint(mut e: ToolError) -> ToolError {
    if e.details
        .to_string()
        .contains("expected `approve` or `deny`")
    {
        e.hint = "decision must be `approve` or `deny` (with `reason` for deny only).".into();
    }
    e
}

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["attempt_ids"]},
    "then" = {"not": {"required": ["project_id"]}},
    "else" = {"required": ["project_id"]}
))]
pub(crate) struct ListApprovalsArgs {
    /// Attempts whose approvals to list (1–100 UUID strings). Give exactly one of
    /// `attempt_ids` or `project_id`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 100))]
    pub attempt_ids: Option<Vec<Uuid>>,
    /// List the approvals of every attempt of this project (UUID string). Give exactly one of
    /// `attempt_ids` or `project_id`.
    #[serde(default)]
    pub project_id: Option<Uuid>,
    /// Which approvals: `pending` (default: not answered yet), `approved`, `denied`,
    /// `timed_out`, `answered` (any of the three) or `all`.
    #[serde(default)]
    pub status: Option<StatusFilter>,
    /// Opaque `next_cursor` of the previous page of the same call (same ids, project and
    /// status); omit for the first page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Page size, 1–200 (default 50); larger values are capped at 200.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
}

/// What to answer.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub(crate) enum DecisionArg {
    // Let the tool run; the agent goes on with it.
    Approve,
    // Refuse the tool; the agent reads `reason` and goes on without it.
    Deny,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RespondApprovalArgs {
    /// Approval id (UUID string) from get_attempt_status `pending_approvals` or list_approvals.
    pub approval_id: String,
    /// `approve` (the tool runs and the agent goes on) or `deny` (the agent is told `reason`
    /// and goes on without the tool).
    pub decision: DecisionArg,
    /// Only with `deny`: what the agent is told instead of running the tool (VK says "Denied
    /// by user" without one). Refused with `approve` (VK records no reason for an approval).
    #[serde(default)]
    pub reason: Option<String>,
    /// Idempotency key (e.g. a fresh UUID per decision): a retry with the same key and the same
    /// arguments returns the first answer (`replayed: true`) instead of `approval_already_answered`;
    /// the same key with other arguments fails with `idempotency_conflict`.
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

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const LIST_APPROVALS: &str = "List tool approvals a coding agent asked VK for, oldest first, in pages.
Use when: finding what blocks an agent (status waiting_for: approval) or reviewing decisions.
Required: exactly one of attempt_ids (1-100) or project_id.
Optional: status (pending default | approved | denied | timed_out | answered | all), cursor (next_cursor of the same call), limit (1-200, default 50).
Next: respond_approval with the approval_id of items with agent_waiting true.
Avoid: both attempt_ids and project_id; answering items whose agent_waiting is false (nothing waits).";

    pub(crate) const RESPOND_APPROVAL: &str = "Approve or deny a tool call an agent is blocked on; VK unblocks it and the answer is cached on return.
Use when: get_attempt_status says waiting_for: approval, or list_approvals shows agent_waiting.
Required: approval_id (from pending_approvals or list_approvals), decision (approve | deny).
Optional: reason (deny only: told to the agent), request_id (a retry replays the first answer), host (fleet node).
Next: wait_for_attempt_change with the returned token.
Avoid: an attempt or process id as approval_id; reason with approve; answering twice or after timeout_at.";
}
