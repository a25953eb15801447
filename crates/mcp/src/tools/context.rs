//! The context tool: `get_context`, the project, task and attempt of the workspace the client
//! runs in (`query::context`). Listed only to clients inside an attempt workspace (the
//! `x-vk-workspace` header, or the daemon's own directory): see `VkTools::list_tools`.

use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use super::answer::{detail_output_schema, level_of, shaped};
use super::args::{Args, input_schema};
use super::{Family, Scope, VkTools};
use vk_observer_query::context::{CONTEXT_RULES, WorkspaceContext};
use vk_observer_query::detail::Detail;
use vk_observer_tool_error::ToolError;

pub(crate) const GET_CONTEXT: &str = "get_context";

pub(crate) const FAMILY: Family = Family {
    name: "context",
    tools: &[(GET_CONTEXT, Scope::Read)],
    router: VkTools::context_router,
};

#[tool_router(router = context_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::GET_CONTEXT, input_schema = input_schema::<ContextArgs>(),
           output_schema = detail_output_schema::<WorkspaceContext>(),
           annotations(title = "Get workspace context", read_only_hint = true, open_world_hint = false))]
    async fn get_context(
        &self,
        ctx: RequestContext<RoleServer>,
        Args(a): Args<ContextArgs>,
    ) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        let answer = a.and_then(|_| {
            let dir = self.workspace_of(&ctx).ok_or_else(|| {
                ToolError::new(
                    vk_observer_tool_error::ErrorCode::NoWorkspaceContext,
                    false,
                    "This client is not running inside a VK attempt workspace. Use list_projects → list_tasks → list_task_attempts instead.",
                )
            })?;
            self.query.context_for(&dir)
        });
        shaped(answer, &CONTEXT_RULES, level)
    }
}

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContextArgs {
    /// Detail level: 0 (default) the fields needed to decide the next call (nulls and empty
    /// lists left out, except the fields the seeds name); 1 adds timestamps, metadata and per-item stats; 2 answers every field
    /// with VK's objects verbatim.
    #[serde(default)]
    pub detail: Option<Detail>,
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const GET_CONTEXT: &str = "Get the project, task and attempt of the workspace this client runs in, with its repositories and target branches.
Use when: you are an agent working inside a VK attempt workspace and need your own ids.
Required: nothing.
Optional: detail (0|1|2, default 0).
Next: get_attempt_status or tail_session_messages with the returned attempt_id.
Avoid: calling it outside an attempt workspace; use list_projects there.";
}
