//! MCP task handles written (`store::task_handles`): a `start_task_attempt` or `follow_up`
//! answered as a task gets a fresh task id whose handle is durable before the id leaves the
//! daemon; `tasks/cancel` notes when it was asked, so the run's end reads `cancelled`.

use uuid::Uuid;

use super::Proxy;
use crate::query::task_handles::TaskHandle;
use crate::tool_error::ToolError;

impl Proxy {
    /// A new task id for `handle`, stored and flushed.
    pub async fn record_task(&self, handle: &TaskHandle) -> Result<Uuid, ToolError> {
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
}
