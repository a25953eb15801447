//! The MCP task handles (`store::task_handles`) as reads see them: which attempt and run a task
//! follows. Its state is not stored: `mcp::tasks` computes it from the attempt's status on
//! every `tasks/get`, so it is always the cache's.

use uuid::Uuid;

use super::Query;
use vk_observer_tool_error::ToolError;

pub use vk_observer_store::task_handles::TaskHandle;

impl Query {
    /// The handle of `task_id`; None for an id no call handed out (or a handle whose bytes
    /// do not parse).
    pub fn task_handle(&self, task_id: Uuid) -> Result<Option<TaskHandle>, ToolError> {
        Ok(self.store.task_handles().get(task_id)?)
    }
}

impl Query {
    /// The cached status word of one process (`running`, `completed`, `failed`, `killed`), or
    /// None while the cache does not have it: a `follow_up` task whose run is no longer the
    /// attempt's latest ends as its own process ended.
    pub fn process_status(&self, process: Uuid) -> Result<Option<String>, ToolError> {
        let row = self.store.read().process(process)?;
        Ok(row.and_then(|p| {
            p.value
                .get("status")
                .and_then(|s| s.as_str())
                .map(str::to_string)
        }))
    }
}
