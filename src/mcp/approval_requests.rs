//! Typed arguments of the approval tools (`list_approvals`, `respond_approval`). Mode rules are
//! in the schema as root `if/then/else` and enforced again at run time.

use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

pub use crate::query::approvals::StatusFilter;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["attempt_ids"]},
    "then" = {"not": {"required": ["project_id"]}},
    "else" = {"required": ["project_id"]}
))]
pub struct ListApprovalsArgs {
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
}

/// What to answer.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum DecisionArg {
    // Let the tool run; the agent goes on with it.
    Approve,
    // Refuse the tool; the agent reads `reason` and goes on without it.
    Deny,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RespondApprovalArgs {
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
}
