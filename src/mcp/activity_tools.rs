//! Activity tools: `tail_project_activity` and `tail_task_activity`, parse → `query::activity`
//! → respond. The rules (directions, commit-whole pages, resets) live in `query::activity`.

use rmcp::Json;
use rmcp::handler::server::tool::ToolRouter;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};

use super::VkTools;
use super::activity_requests::{ProjectActivityArgs, TaskActivityArgs};
use super::args::{Args, input_schema};
use super::descriptions as d;
use super::respond::respond;
use crate::query::activity::{ActivityPage, ActivityRequest, ActivityScope};

#[tool_router(router = activity_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = d::TAIL_PROJECT_ACTIVITY, input_schema = input_schema::<ProjectActivityArgs>(),
           annotations(title = "Tail project activity", read_only_hint = true, open_world_hint = false))]
    async fn tail_project_activity(
        &self,
        Args(a): Args<ProjectActivityArgs>,
    ) -> Result<Json<ActivityPage>, CallToolResult> {
        respond(a.and_then(|a| {
            let scope = ActivityScope::Project(a.project_id);
            let req = ActivityRequest::new(scope, a.since_token, a.cursor, a.limit, a.detail)?;
            self.query.activity(&req)
        }))
    }

    #[tool(description = d::TAIL_TASK_ACTIVITY, input_schema = input_schema::<TaskActivityArgs>(),
           annotations(title = "Tail task activity", read_only_hint = true, open_world_hint = false))]
    async fn tail_task_activity(
        &self,
        Args(a): Args<TaskActivityArgs>,
    ) -> Result<Json<ActivityPage>, CallToolResult> {
        respond(a.and_then(|a| {
            let scope = ActivityScope::Task(a.task_id);
            let req = ActivityRequest::new(scope, a.since_token, a.cursor, a.limit, a.detail)?;
            self.query.activity(&req)
        }))
    }
}

pub(crate) fn router() -> ToolRouter<VkTools> {
    VkTools::activity_router()
}
