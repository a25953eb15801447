//! Tasks in the projections: an upsert (a version older than the stored one is ignored), a
//! project's whole task list, and a removal that cascades to the task's attempts.

use std::collections::BTreeSet;

use serde_json::Value;
use uuid::Uuid;

use super::super::StoreError;
use super::super::keys::{self, table};
use super::{Pending, R, stored_json};
use vk_observer_vk::{object_id, ts_of, uuid_of};

impl Pending<'_, '_> {
    /// Store one version of a task; its id. A version older than the stored one (see
    /// [`older_than`]) changes nothing: a tasks snapshot read before a later update and applied
    /// after it would otherwise bring the task back to its earlier state for a moment.
    pub(super) fn task_upsert(&mut self, task: &Value) -> R<Option<Uuid>> {
        let (Some(id), Some(project)) = (object_id(task), uuid_of(task, "project_id")) else {
            return Err(StoreError::Invalid("task without id or project_id"));
        };
        let key = keys::id_key(table::TASKS, id);
        let old = self.ov.get(&key)?;
        if stored_json(old.as_deref()).is_some_and(|stored| older_than(task, &stored)) {
            return Ok(Some(id));
        }
        self.task_write(id, project, old.as_deref(), task)
    }

    /// Store `task` over the stored bytes `old` (already judged not older): the row, its project
    /// index entry and its feed items when it changed; its id.
    pub(super) fn task_write(
        &mut self,
        id: Uuid,
        project: Uuid,
        old: Option<&[u8]>,
        task: &Value,
    ) -> R<Option<Uuid>> {
        let key = keys::id_key(table::TASKS, id);
        let moved_from = stored_json(old)
            .and_then(|stored| uuid_of(&stored, "project_id"))
            .filter(|was| *was != project);
        if self.upsert(&key, task)? {
            if let Some(was) = moved_from {
                // A task moved to another project (VK 0.1.x: a workspace whose repo set
                // changed): it leaves the old project's list.
                self.ov
                    .remove(&keys::pair_key(table::IDX_PROJECT_TASKS, was, id));
            }
            self.set_index(table::IDX_PROJECT_TASKS, project, id);
            self.note(format!("task:{id}"));
            self.feed_task_upserted(id, project, old, task)?;
        }
        Ok(Some(id))
    }

    pub(super) fn tasks_snapshot(&mut self, project: Uuid, tasks: Vec<Value>) -> R {
        let mut keep = BTreeSet::new();
        for t in &tasks {
            if let Some(id) = self.task_upsert(t)? {
                keep.insert(id);
            }
        }
        for id in self.children(table::IDX_PROJECT_TASKS, project)? {
            if !keep.contains(&id) {
                self.remove_task(id)?;
            }
        }
        Ok(())
    }

    pub(super) fn remove_task(&mut self, id: Uuid) -> R {
        let key = keys::id_key(table::TASKS, id);
        let old = self.stored_value(&key)?;
        if let Some(project) = old.as_ref().and_then(|t| uuid_of(t, "project_id")) {
            self.ov
                .remove(&keys::pair_key(table::IDX_PROJECT_TASKS, project, id));
        }
        if self.remove_entity(&key)? {
            self.note(format!("task_removed:{id}"));
            self.feed_task_deleted(id, old.as_ref());
        }
        for attempt in self.children(table::IDX_TASK_ATTEMPTS, id)? {
            self.remove_attempt(id, attempt)?;
        }
        Ok(())
    }
}

/// Whether `task` is a version VK replaced before `stored`: its `updated_at` is strictly older.
/// VK sets a task's `updated_at` to the time of every edit of its own fields (`Task::update`,
/// `update_status`, `update_parent_workspace_id`, `set_shared_task_id`); a few changes keep it
/// (a parent workspace or shared task cleared in bulk, the attempt-status fields a task frame
/// carries: the recorded `ws_tasks.jsonl` sends one task several times with one `updated_at`),
/// so an equal time is a version like any other, and a version without a time is never older.
pub(super) fn older_than(task: &Value, stored: &Value) -> bool {
    match (ts_of(task, "updated_at"), ts_of(stored, "updated_at")) {
        (Some(new), Some(old)) => new < old,
        _ => false,
    }
}
