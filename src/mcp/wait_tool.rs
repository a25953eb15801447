//! The long-poll tool: parse → `Query::wait_for_change` → respond, ending early if the client
//! cancels the request.

use std::time::Duration;

use rmcp::Json;
use rmcp::handler::server::tool::ToolRouter;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};

use super::VkTools;
use super::args::{Args, input_schema};
use super::descriptions as d;
use super::read_tools::MAX_BATCH;
use super::requests::WaitArgs;
use super::respond::respond;
use crate::query::wait::{WAIT_DEFAULT_MS, WAIT_MAX_MS, WaitResult, WaitScope};
use crate::tool_error::ToolError;

#[tool_router(router = wait_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = d::WAIT_FOR_ATTEMPT_CHANGE, input_schema = input_schema::<WaitArgs>(),
           annotations(title = "Wait for attempt change", read_only_hint = true, open_world_hint = false))]
    async fn wait_for_attempt_change(
        &self,
        ctx: RequestContext<RoleServer>,
        Args(a): Args<WaitArgs>,
    ) -> Result<Json<WaitResult>, CallToolResult> {
        let a = match a {
            Ok(a) => a,
            Err(e) => return respond(Err(e)),
        };
        let scope = match (a.attempt_ids, a.project_id) {
            (Some(ids), None) if !ids.is_empty() && ids.len() <= MAX_BATCH => {
                WaitScope::Attempts(ids)
            }
            (Some(ids), None) => {
                return respond(Err(ToolError::invalid_field(
                    "attempt_ids",
                    format!(
                        "attempt_ids must hold 1 to {MAX_BATCH} ids (got {}); or watch the whole project with project_id.",
                        ids.len()
                    ),
                )));
            }
            (None, Some(p)) => WaitScope::Project(p),
            _ => {
                return respond(Err(ToolError::ambiguous_target(&[
                    "attempt_ids",
                    "project_id",
                ])));
            }
        };
        let timeout = match a.timeout_ms {
            Some(0) => {
                return respond(Err(ToolError::invalid_field(
                    "timeout_ms",
                    "timeout_ms must be at least 1.",
                )));
            }
            Some(ms) => ms.min(WAIT_MAX_MS),
            None => WAIT_DEFAULT_MS,
        };
        let since = match self.query.since(a.since_token.as_deref(), "since_token") {
            Ok(s) => s,
            Err(e) => return respond(Err(e)),
        };
        let ct = ctx.ct.clone();
        respond(
            self.query
                .wait_for_change(
                    scope,
                    since,
                    Duration::from_millis(timeout),
                    ct.cancelled_owned(),
                )
                .await,
        )
    }
}

pub(crate) fn router() -> ToolRouter<VkTools> {
    VkTools::wait_router()
}
