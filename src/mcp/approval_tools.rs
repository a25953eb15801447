//! Approval tools: `list_approvals` (a read from the approvals index) and `respond_approval`
//! (forwarded to VK through `proxy::approvals`, read-your-writes). Without an upstream client
//! (schema tests) `respond_approval` answers `not_configured`.

use rmcp::Json;
use rmcp::handler::server::tool::ToolRouter;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

use super::VkTools;
use super::approval_requests::*;
use super::args::{Args, input_schema};
use super::descriptions as d;
use super::respond::respond;
use crate::proxy::approvals::{ApprovalAnswered, Decision};
use crate::query::approvals::{ApprovalList, ApprovalScope};
use crate::query::paging::{PAGE_DEFAULT, PAGE_MAX, PageArgs};
use crate::tool_error::ToolError;

/// Most attempts one list_approvals call names.
const MAX_ATTEMPTS: usize = 100;

#[tool_router(router = approval_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = d::LIST_APPROVALS, input_schema = input_schema::<ListApprovalsArgs>(),
           annotations(title = "List approvals", read_only_hint = true, open_world_hint = false))]
    async fn list_approvals(
        &self,
        Args(a): Args<ListApprovalsArgs>,
    ) -> Result<Json<ApprovalList>, CallToolResult> {
        respond(a.and_then(|a| {
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
            let limit = match a.limit {
                None => PAGE_DEFAULT,
                Some(0) => {
                    return Err(ToolError::invalid_field(
                        "limit",
                        format!("limit must be between 1 and {PAGE_MAX}."),
                    ));
                }
                Some(n) => (n as usize).min(PAGE_MAX),
            };
            let page = PageArgs {
                cursor: a.cursor,
                limit,
            };
            self.query
                .list_approvals(scope, a.status.unwrap_or_default(), &page)
        }))
    }

    #[tool(description = d::RESPOND_APPROVAL, input_schema = input_schema::<RespondApprovalArgs>(),
           annotations(title = "Respond to approval", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false))]
    async fn respond_approval(
        &self,
        Args(a): Args<RespondApprovalArgs>,
    ) -> Result<Json<ApprovalAnswered>, CallToolResult> {
        let r = async {
            let a = a.map_err(decision_hint)?;
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
            let proxy = self.proxy.as_ref().ok_or_else(|| {
                ToolError::new(
                    crate::tool_error::ErrorCode::NotConfigured,
                    false,
                    "This server has no VK connection for mutations.",
                )
            })?;
            proxy
                .respond_approval(&a.approval_id, decision, a.request_id.as_deref())
                .await
        };
        respond(r.await)
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

pub(crate) fn router() -> ToolRouter<VkTools> {
    VkTools::approval_router()
}
