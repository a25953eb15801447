//! Applying a fleet node's host-scoped events (design-notes §23): a host's project list
//! removes only the projects that host owns, a host's task list of a project only that host's
//! tasks (one project may live on several hosts).

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::codec::decode;
use super::super::events::HOST_FIELD;
use super::super::keys::{self, table};
use super::{Pending, R};
use crate::vk::object_id;
use uuid::Uuid;

impl Pending<'_, '_> {
    /// One host's projects on a fleet node: like `projects_snapshot`, but only projects whose
    /// `host` is this one are removed when missing.
    pub(super) fn host_projects_snapshot(&mut self, host: &str, projects: Vec<Value>) -> R {
        let mut keep = BTreeSet::new();
        for p in &projects {
            let Some(id) = object_id(p) else { continue };
            keep.insert(id);
            if self.upsert(&keys::id_key(table::PROJECTS, id), p)? {
                self.note(format!("project:{id}"));
            }
        }
        for k in self.ov.keys_with_prefix(&[table::PROJECTS])? {
            let Some(id) = keys::uuid_at(&k, 1) else {
                continue;
            };
            if keep.contains(&id) {
                continue;
            }
            let owner = self.ov.get(&k)?.and_then(|v| {
                let (_, json) = decode(&v)?;
                serde_json::from_slice::<Value>(json).ok()
            });
            if owner.as_ref().and_then(|v| v.get(HOST_FIELD)?.as_str()) == Some(host) {
                self.remove_project(id)?;
            }
        }
        Ok(())
    }

    /// One host's tasks of `project` on a fleet node: like `tasks_snapshot`, but only tasks
    /// whose `host` is this one are removed when missing.
    pub(super) fn host_tasks_snapshot(
        &mut self,
        host: &str,
        project: Uuid,
        tasks: Vec<Value>,
    ) -> R {
        let mut keep = BTreeSet::new();
        for t in &tasks {
            if let Some(id) = self.task_upsert(t)? {
                keep.insert(id);
            }
        }
        for id in self.children(table::IDX_PROJECT_TASKS, project)? {
            if keep.contains(&id) {
                continue;
            }
            let stored = self.ov.get(&keys::id_key(table::TASKS, id))?.and_then(|v| {
                let (_, json) = decode(&v)?;
                serde_json::from_slice::<Value>(json).ok()
            });
            if stored.as_ref().and_then(|v| v.get(HOST_FIELD)?.as_str()) == Some(host) {
                self.remove_task(id)?;
            }
        }
        Ok(())
    }
}
