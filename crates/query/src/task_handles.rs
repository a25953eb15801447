//! The MCP task handles (`store::task_handles`) as reads see them: which attempt and run a task
//! follows. Its state is not stored: `mcp::tasks` computes it from the attempt's status on
//! every `tasks/get`, so it is always the cache's.

use uuid::Uuid;

use super::Query;
use super::rows::ProcessRow;
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

    /// The first execution process VK started for the attempt (its setup script, else its
    /// coding agent; never a dev server), as the cache has it: the one a new attempt's task
    /// names. None while the cache shows none.
    pub fn first_process(&self, attempt: Uuid) -> Result<Option<Uuid>, ToolError> {
        let rows = self
            .store
            .read()
            .processes_of_attempt_as::<ProcessRow>(attempt)?;
        Ok(rows
            .into_iter()
            .filter(|(_, p)| p.reason() != "devserver")
            .min_by_key(|(id, p)| (p.created_at.is_none(), p.created_at, *id))
            .map(|(id, _)| id))
    }
}
