//! `create_task`, `update_task`, `delete_task` on a VK 0.1.x (docs/agent-guide.md "Which
//! VK"). VK 0.1.x has no tasks: `create_task` makes a **daemon-kept task** (the ingest's board
//! keeps it in the store, `Signal::DraftTask`), which `start_task_attempt` later starts as a
//! workspace. A task that is a workspace's own (VK's workspace listed as a task) is renamed
//! through the workspace; its description (the workspace's first prompt) and its status (its
//! attempts') cannot be edited, and say so. Deleting deletes the task's workspaces at VK, as
//! deleting a task deletes its attempts on the fork.

use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::tasks::{NewTask, TaskChange, TaskDeleted, TaskEdit};
use super::{Proxy, upstream_error};
use vk_observer_ingest::signal::Signal;
use vk_observer_query::target;
use vk_observer_store::reader::Stored;
use vk_observer_tool_error::{ErrorCode, ToolError};
use vk_observer_vk as vk;

/// The field the board marks its daemon-kept tasks with (ingest's `workspaces::tasks`).
const DAEMON_KEPT: &str = "daemon_kept";

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Whether a stored task is daemon-kept (else: a workspace's own).
pub(crate) fn is_daemon_kept(task: &Stored) -> bool {
    task.value.get(DAEMON_KEPT).and_then(Value::as_bool) == Some(true)
}

impl Proxy {
    pub(crate) async fn create_task_v01(
        &self,
        t: NewTask,
        request_id: Option<&str>,
    ) -> Result<TaskChange, ToolError> {
        target::project(&self.query.read(), t.project_id)?;
        let payload = json!({
            "project_id": t.project_id,
            "title": t.title,
            "description": t.description,
            "status": t.status.map(|s| s.as_str()),
        });
        let outcome = self
            .idem
            .run("create_task", request_id, &payload, || async {
                let at = now();
                let task = json!({
                    "id": Uuid::new_v4(),
                    "project_id": t.project_id,
                    "title": t.title,
                    "description": t.description,
                    "status": t.status.map_or("todo", |s| s.as_str()),
                    "created_at": at,
                    "updated_at": at,
                    DAEMON_KEPT: true,
                });
                let _ = self.signals.send(Signal::DraftTask { task: task.clone() });
                Ok(task)
            })
            .await?;
        let task_id = vk::uuid_of(&outcome.result, "id")
            .ok_or_else(|| ToolError::internal("a daemon-kept task without an id"))?;
        if outcome.replayed && self.query.read().task(task_id)?.is_none() {
            // The record outlived the task (deleted since): nothing to show.
            return Err(ToolError::new(
                ErrorCode::NotFound,
                false,
                "The task this request_id created is gone (deleted since); use a new request_id to create another.",
            ));
        }
        let settled = self
            .settle(|r| r.task(task_id).ok().flatten().is_some())
            .await;
        self.task_change(task_id, outcome.replayed, settled)
    }

    pub(crate) async fn update_task_v01(
        &self,
        e: TaskEdit,
        request_id: Option<&str>,
    ) -> Result<TaskChange, ToolError> {
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
                if is_daemon_kept(&current) {
                    Ok(self.edit_kept(&current, &e))
                } else {
                    self.edit_own(&current, &e).await
                }
            })
            .await?;
        let want = vk::ts_of(&outcome.result, "updated_at");
        let title = outcome.result.get("title").cloned();
        let settled = self
            .settle(|r| {
                r.task(e.task_id).ok().flatten().is_some_and(|t| {
                    vk::ts_of(&t.value, "updated_at") >= want
                        && (title.is_none() || t.value.get("title") == title.as_ref())
                })
            })
            .await;
        self.task_change(e.task_id, outcome.replayed, settled)
    }

    /// A daemon-kept task's new version, handed to the board.
    fn edit_kept(&self, current: &Stored, e: &TaskEdit) -> Value {
        let mut task = current.value.clone();
        if let Some(o) = task.as_object_mut() {
            if let Some(t) = &e.title {
                o.insert("title".into(), json!(t));
            }
            if let Some(d) = &e.description {
                o.insert("description".into(), json!(d));
            }
            if let Some(s) = e.status {
                o.insert("status".into(), json!(s.as_str()));
            }
            o.insert("updated_at".into(), json!(now()));
        }
        let _ = self.signals.send(Signal::DraftTask { task: task.clone() });
        task
    }

    /// A workspace's own task: only its title, as the workspace's name.
    async fn edit_own(&self, current: &Stored, e: &TaskEdit) -> Result<Value, ToolError> {
        if e.description.is_some() || e.status.is_some() {
            return Err(ToolError::invalid_field(
                if e.description.is_some() {
                    "description"
                } else {
                    "status"
                },
                "On VK 0.1.x this task is a workspace: its description is the workspace's first prompt and its status follows its attempts; only its title (the workspace's name) can be changed.",
            ));
        }
        let Some(title) = &e.title else {
            return Ok(json!({"updated_at": current.value.get("updated_at")}));
        };
        let ws = self
            .client
            .update_workspace(current.id, &json!({ "name": title }))
            .await
            .map_err(upstream_error)?;
        Ok(json!({"title": title, "updated_at": ws.get("updated_at")}))
    }

    pub(crate) async fn delete_task_v01(
        &self,
        task_id: Uuid,
        request_id: Option<&str>,
    ) -> Result<TaskDeleted, ToolError> {
        let key_payload = json!({ "task_id": task_id });
        let outcome = self
            .idem
            .run("delete_task", request_id, &key_payload, || async {
                let reader = self.query.read();
                let task = target::task(&reader, task_id)?;
                let attempts = reader.attempts_of_task(task_id)?;
                drop(reader);
                for a in &attempts {
                    self.client.delete_workspace(a.id).await.map_err(|e| {
                        let mut err = upstream_error(e);
                        if err.code == ErrorCode::Conflict {
                            err.hint = "VK refuses to delete a workspace while one of its processes runs: stop_attempt first, then retry.".into();
                        }
                        err
                    })?;
                }
                if is_daemon_kept(&task) {
                    let _ = self.signals.send(Signal::DraftRemoved { task_id });
                }
                Ok(json!({ "deleted_task_id": task_id }))
            })
            .await?;
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
}
