//! MCP task handles written (`store::task_handles`): a `start_task_attempt` or `follow_up`
//! answered as a task gets a fresh task id whose handle is durable before the id leaves the
//! daemon (a call that answers a run it did not start — a `request_id` replay, a reused running
//! attempt — gets the task id that run already has); `tasks/cancel` notes when it was asked, so the run's end reads `cancelled`
//! (and takes the note back when VK refused the stop: the run was not cancelled).

use uuid::Uuid;

use super::Proxy;
use vk_observer_query::task_handles::TaskHandle;
use vk_observer_tool_error::ToolError;

impl Proxy {
    /// A new task id for `handle`, stored and flushed.
    pub async fn record_task(&self, handle: &TaskHandle) -> Result<Uuid, ToolError> {
        let id = Uuid::new_v4();
        self.query.store.task_handles().put(id, handle).await?;
        Ok(id)
    }

    /// The task id the run of `handle` already has (a `request_id` replay answers the first
    /// call's run, a reused attempt the run going on), else a new one as `record_task`.
    pub async fn task_of_run(&self, handle: &TaskHandle) -> Result<Uuid, ToolError> {
        let handles = self.query.store.task_handles();
        let found =
            handles.find_run(&handle.tool, handle.attempt_id, handle.execution_process_id)?;
        if let Some(id) = found {
            return Ok(id);
        }
        let id = Uuid::new_v4();
        self.query.store.task_handles().put(id, handle).await?;
        Ok(id)
    }

    /// Note a `tasks/cancel` on `task_id` (flushed); the first one's time is kept.
    pub async fn note_task_cancel(
        &self,
        task_id: Uuid,
        mut handle: TaskHandle,
    ) -> Result<(), ToolError> {
        if handle.cancel_requested_ms.is_none() {
            handle.cancel_requested_ms = Some(chrono::Utc::now().timestamp_millis());
            self.query
                .store
                .task_handles()
                .put(task_id, &handle)
                .await?;
        }
        Ok(())
    }

    /// Take back the `tasks/cancel` noted on `task_id` (flushed): VK refused the stop, so the
    /// run's end is its own (a failed run reads `failed`, not `cancelled`).
    pub async fn forget_task_cancel(&self, task_id: Uuid) -> Result<(), ToolError> {
        let handles = self.query.store.task_handles();
        if let Some(mut handle) = handles.get(task_id)?
            && handle.cancel_requested_ms.take().is_some()
        {
            handles.put(task_id, &handle).await?;
        }
        Ok(())
    }
}
