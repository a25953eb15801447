//! MCP task handles (the tasks extension, design-notes §24): a sled tree of its own beside the
//! projections and the `request_id` records, written by the proxy when a `start_task_attempt` or
//! `follow_up` call is answered as a task, read by the query layer on every `tasks/get`.
//!
//! A handle only says which run of the agent a task follows; its state is computed from the
//! cache on every read, so nothing but the handle has to survive a restart. Like the
//! idempotency records, a handle is flushed before its task id is handed out (a client never
//! holds an id a crash could forget), its value is JSON whose field names never change, and
//! bytes that do not parse read as absent.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::StoreError;

/// Name of the sled tree (on disk: never rename).
pub(crate) const TREE: &str = "task_handles";

/// What one task follows. Key: the task id's 16 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskHandle {
    /// The tool whose call became the task (`start_task_attempt` or `follow_up`).
    pub tool: String,
    /// The attempt the run belongs to.
    pub attempt_id: Uuid,
    /// `follow_up`: the coding-agent process VK started for the prompt; None for a new attempt
    /// (the task follows the attempt's first run, setup script included).
    pub execution_process_id: Option<Uuid>,
    /// Unix ms when the task was created.
    pub created_ms: i64,
    /// Unix ms of the last `tasks/cancel` (the run's end then reads `cancelled`); None before.
    pub cancel_requested_ms: Option<i64>,
}

impl TaskHandle {
    fn encode(&self) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(self).map_err(StoreError::Encode)
    }

    fn decode(bytes: &[u8]) -> Option<TaskHandle> {
        serde_json::from_slice(bytes).ok()
    }
}

/// The handles tree. Cheap to clone (a sled tree handle).
#[derive(Clone)]
pub struct TaskHandles {
    tree: sled::Tree,
}

impl TaskHandles {
    pub(super) fn new(tree: sled::Tree) -> Self {
        TaskHandles { tree }
    }

    /// Handles in a throwaway database (unit tests).
    #[cfg(test)]
    pub(crate) fn temporary() -> Result<Self, StoreError> {
        let db = sled::Config::new().temporary(true).open()?;
        Ok(TaskHandles::new(db.open_tree(TREE)?))
    }

    /// The handle of `task_id`; absent, or bytes that do not parse, read as None.
    pub fn get(&self, task_id: Uuid) -> Result<Option<TaskHandle>, StoreError> {
        Ok(self
            .tree
            .get(task_id.as_bytes())?
            .and_then(|raw| TaskHandle::decode(&raw)))
    }

    /// Store `handle` under `task_id` and make it durable before returning.
    pub async fn put(&self, task_id: Uuid, handle: &TaskHandle) -> Result<(), StoreError> {
        self.tree.insert(task_id.as_bytes(), handle.encode()?)?;
        self.tree.flush_async().await?;
        Ok(())
    }

    /// The first task (oldest `created_ms`) already following the run of `tool` on
    /// `attempt_id` (and `execution_process_id` for a follow-up), if any. A scan of the tree:
    /// used only when a call answers a run it did not start (a `request_id` replay, a reused
    /// running attempt), so that call gets the task id the run already has.
    pub fn find_run(
        &self,
        tool: &str,
        attempt_id: Uuid,
        execution_process_id: Option<Uuid>,
    ) -> Result<Option<Uuid>, StoreError> {
        let mut first: Option<(i64, Uuid)> = None;
        for entry in self.tree.iter() {
            let (key, raw) = entry?;
            let (Ok(id), Some(h)) = (Uuid::from_slice(&key), TaskHandle::decode(&raw)) else {
                continue;
            };
            let same_run = h.tool == tool
                && h.attempt_id == attempt_id
                && h.execution_process_id == execution_process_id;
            if same_run && first.is_none_or(|(created, _)| h.created_ms < created) {
                first = Some((h.created_ms, id));
            }
        }
        Ok(first.map(|(_, id)| id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handle_round_trips_and_garbage_reads_as_absent() {
        let handles = TaskHandles::temporary().unwrap();
        let id = Uuid::new_v4();
        let h = TaskHandle {
            tool: "follow_up".into(),
            attempt_id: Uuid::new_v4(),
            execution_process_id: Some(Uuid::new_v4()),
            created_ms: 1,
            cancel_requested_ms: None,
        };
        handles.put(id, &h).await.unwrap();
        assert_eq!(handles.get(id).unwrap(), Some(h));
        assert_eq!(handles.get(Uuid::new_v4()).unwrap(), None);
        handles
            .tree
            .insert(id.as_bytes(), &b"not json"[..])
            .unwrap();
        assert_eq!(handles.get(id).unwrap(), None);
    }

    #[tokio::test]
    async fn find_run_answers_the_oldest_task_of_that_run_only() {
        let handles = TaskHandles::temporary().unwrap();
        let (attempt, process) = (Uuid::new_v4(), Uuid::new_v4());
        let handle = |tool: &str, process: Option<Uuid>, created_ms| TaskHandle {
            tool: tool.into(),
            attempt_id: attempt,
            execution_process_id: process,
            created_ms,
            cancel_requested_ms: None,
        };
        let (older, newer, follow) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        handles
            .put(newer, &handle("start_task_attempt", None, 9))
            .await
            .unwrap();
        handles
            .put(older, &handle("start_task_attempt", None, 3))
            .await
            .unwrap();
        handles
            .put(follow, &handle("follow_up", Some(process), 5))
            .await
            .unwrap();
        let find = |tool, p| handles.find_run(tool, attempt, p).unwrap();
        assert_eq!(find("start_task_attempt", None), Some(older));
        assert_eq!(find("follow_up", Some(process)), Some(follow));
        assert_eq!(find("follow_up", Some(Uuid::new_v4())), None);
        assert_eq!(
            handles
                .find_run("start_task_attempt", Uuid::new_v4(), None)
                .unwrap(),
            None
        );
    }

    /// The bytes a handle is stored as: field names are part of the data dir's format.
    #[test]
    fn the_stored_json_keeps_its_field_names() {
        let raw = br#"{"tool":"start_task_attempt","attempt_id":"00000000-0000-0000-0000-000000000001","execution_process_id":null,"created_ms":5,"cancel_requested_ms":7}"#;
        let h = TaskHandle::decode(raw).unwrap();
        assert_eq!(h.tool, "start_task_attempt");
        assert_eq!(h.cancel_requested_ms, Some(7));
        assert_eq!(h.encode().unwrap(), raw.to_vec());
    }
}
