//! `create_task`, `update_task`, `delete_task`: forwarded to VK, answered once ingest shows the
//! change (or with `pending_ingest: true` after the settle timeout). All three take a
//! `request_id` through [`super::idempotency`]. VK honours `Idempotency-Key` only on creations
//! (docs/vk-contract.md §9.1), so for update and delete the daemon's record is the only guard: a
//! replay is answered from it without calling VK, which is what lets a retried delete of a task
//! that is already gone answer the same `deleted_task_id` instead of `not_found`.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Proxy, upstream_error};
use vk_observer_query::Freshness;
use vk_observer_query::target;
use vk_observer_query::tasks::{TaskStatus, TaskSummary, task_summary};
use vk_observer_tool_error::{ErrorCode, InvalidReason, ToolError};
use vk_observer_vk as vk;

/// Answer of `create_task` and `update_task`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskChange {
    /// The task (UUID).
    pub task_id: Uuid,
    /// The task as the cache now holds it; null while `pending_ingest` is true.
    pub task: Option<TaskSummary>,
    /// True when this answer was stored by an earlier call with the same `request_id`.
    pub replayed: bool,
    /// Store token at which the change is visible (opaque).
    pub token: String,
    /// True when VK accepted the change but the cache had not applied it within 5 s; reads
    /// may still show the old state for a moment.
    pub pending_ingest: bool,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// Answer of `delete_task`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskDeleted {
    /// The deleted task (UUID).
    pub task_id: Uuid,
    /// The deleted task (UUID), the same as `task_id`; a replay with the same `request_id`
    /// answers it again even though the task is gone.
    pub deleted_task_id: Uuid,
    /// True when this answer was stored by an earlier call with the same `request_id` (VK was
    /// not called again).
    pub replayed: bool,
    /// Store token at which the task is gone from the cache (opaque).
    pub token: String,
    /// True when VK deleted it but the cache still listed it after 5 s.
    pub pending_ingest: bool,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

pub struct NewTask {
    pub project_id: Uuid,
    pub title: String,
    pub description: Option<String>,
    pub status: Option<TaskStatus>,
}

pub struct TaskEdit {
    pub task_id: Uuid,
    pub title: Option<String>,
    pub description: Option<String>,
    pub status: Option<TaskStatus>,
}

impl Proxy {
    pub async fn create_task(
        &self,
        t: NewTask,
        request_id: Option<&str>,
    ) -> Result<TaskChange, ToolError> {
        check_title(&t.title)?;
        check_description(t.description.as_deref())?;
        if self.on_vk_01() {
            return self.create_task_v01(t, request_id).await;
        }
        target::project(&self.query.read(), t.project_id)?;
        let body = json!({
            "project_id": t.project_id,
            "title": t.title,
            "description": t.description,
            "status": t.status.map(|s| s.as_str()),
            "created_by_kind": "mcp",
        });
        let outcome = self
            .idem
            .run("create_task", request_id, &body, || async {
                self.client
                    .create_task(&body, request_id)
                    .await
                    .map_err(upstream_error)
            })
            .await?;
        let task_id = vk::uuid_of(&outcome.result, "id").ok_or_else(|| {
            ToolError::new(ErrorCode::UpstreamError, true, "VK's reply has no task id")
                .with_details(outcome.result.clone())
        })?;
        self.nudge(Some(task_id), None);
        let settled = self
            .settle(|r| r.task(task_id).ok().flatten().is_some())
            .await;
        self.task_change(task_id, outcome.replayed, settled)
    }

    pub async fn update_task(
        &self,
        e: TaskEdit,
        request_id: Option<&str>,
    ) -> Result<TaskChange, ToolError> {
        check_edit(&e)?;
        if self.on_vk_01() {
            return self.update_task_v01(e, request_id).await;
        }
        // The key covers what the caller asked, not the body derived from the cache, so a
        // retry after the first update landed still matches its record.
        let key_payload = json!({
            "task_id": e.task_id,
            "title": e.title,
            "description": e.description,
            "status": e.status.map(|s| s.as_str()),
        });
        let outcome = self
            .idem
            .run("update_task", request_id, &key_payload, || async {
                let current = target::task(&self.query.read(), e.task_id)?;
                // VK's update requires `continuation_turns_override` present and clears it on
                // null: send back what the task has so it is kept.
                let body = json!({
                    "title": e.title,
                    "description": e.description,
                    "status": e.status.map(|s| s.as_str()),
                    "continuation_turns_override": current.value.get("continuation_turns_override").cloned().unwrap_or(Value::Null),
                });
                self.client
                    .update_task(e.task_id, &body)
                    .await
                    .map_err(upstream_error)
            })
            .await?;
        let want_updated = vk::ts_of(&outcome.result, "updated_at");
        self.nudge(Some(e.task_id), None);
        let settled = self
            .settle(|r| {
                r.task(e.task_id)
                    .ok()
                    .flatten()
                    .is_some_and(|t| vk::ts_of(&t.value, "updated_at") >= want_updated)
            })
            .await;
        self.task_change(e.task_id, outcome.replayed, settled)
    }

    pub async fn delete_task(
        &self,
        task_id: Uuid,
        request_id: Option<&str>,
    ) -> Result<TaskDeleted, ToolError> {
        if self.on_vk_01() {
            return self.delete_task_v01(task_id, request_id).await;
        }
        let key_payload = json!({ "task_id": task_id });
        let outcome = self
            .idem
            .run("delete_task", request_id, &key_payload, || async {
                target::task(&self.query.read(), task_id)?;
                self.client.delete_task(task_id).await.map_err(|e| {
                    let mut err = upstream_error(e);
                    if err.code == ErrorCode::Conflict {
                        err.hint = "VK refuses to delete a task while one of its processes runs: stop_attempt first, then retry.".into();
                    }
                    err
                })?;
                Ok(json!({ "deleted_task_id": task_id }))
            })
            .await?;
        self.nudge(Some(task_id), None);
        let settled = self
            .settle(|r| r.task(task_id).ok().flatten().is_none())
            .await;
        Ok(TaskDeleted {
            task_id,
            deleted_task_id: task_id,
            replayed: outcome.replayed,
            token: settled.token,
            pending_ingest: settled.pending_ingest,
            freshness: self.query.freshness(),
        })
    }

    pub(crate) fn task_change(
        &self,
        task_id: Uuid,
        replayed: bool,
        s: super::Settled,
    ) -> Result<TaskChange, ToolError> {
        let reader = self.query.read();
        let task = match reader.task(task_id)? {
            Some(t) => Some(task_summary(&reader, &t)?),
            None => None,
        };
        Ok(TaskChange {
            task_id,
            task,
            replayed,
            token: s.token,
            pending_ingest: s.pending_ingest,
            freshness: self.query.freshness(),
        })
    }
}

/// Argument checks of `update_task` that need no cache: a bad edit fails before its key is kept.
fn check_edit(e: &TaskEdit) -> Result<(), ToolError> {
    if e.title.is_none() && e.description.is_none() && e.status.is_none() {
        return Err(ToolError::invalid_argument(
            "Nothing to change: pass at least one of title, description, status.",
        ));
    }
    if let Some(title) = &e.title {
        check_title(title)?;
    }
    check_description(e.description.as_deref())
}

/// Most characters of a task title (seed 004's bound; VK's column has none of its own).
pub(crate) const TITLE_MAX_CHARS: usize = 255;

/// Most characters of a task description. VK has no bound of its own (a TEXT column) except
/// its JSON body limit, axum's default of 2 MiB; at most 6 bytes per character once
/// JSON-escaped, 300,000 characters always fit with the rest of the body
/// (docs/vk-contract.md §9.2).
pub(crate) const DESCRIPTION_MAX_CHARS: usize = 300_000;

/// A title of 1–255 characters, not blank: refused before VK is called.
fn check_title(title: &str) -> Result<(), ToolError> {
    let length = title.chars().count();
    if title.trim().is_empty() || length > TITLE_MAX_CHARS {
        return Err(ToolError::invalid_because(
            InvalidReason::TitleLength,
            format!(
                "title must be 1 to {TITLE_MAX_CHARS} characters and not blank; put longer text in description."
            ),
            json!({"field": "title", "length": length, "min": 1, "max": TITLE_MAX_CHARS}),
        ));
    }
    Ok(())
}

/// A description VK's request body always holds: refused before VK is called.
fn check_description(description: Option<&str>) -> Result<(), ToolError> {
    let length = description.map_or(0, |d| d.chars().count());
    if length > DESCRIPTION_MAX_CHARS {
        return Err(ToolError::invalid_because(
            InvalidReason::DescriptionLength,
            format!(
                "description must be at most {DESCRIPTION_MAX_CHARS} characters; shorten it, or point the agent at a file instead."
            ),
            json!({"field": "description", "length": length, "max": DESCRIPTION_MAX_CHARS}),
        ));
    }
    Ok(())
}
