//! Applying a fleet node's host-scoped events (design-notes §23): a host's project list
//! removes only the projects that host owns, a host's task list of a project only that host's
//! tasks (one project may live on several hosts).

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::codec::decode;
use super::super::events::{HOST_FIELD, HOSTS_FIELD};
use super::super::keys::{self, table};
use super::{Pending, R};
use crate::vk::object_id;
use uuid::Uuid;

impl Pending<'_, '_> {
    /// One host's projects on a fleet node: like `projects_snapshot`, but a project keeps in
    /// `hosts` every host that lists it, and is removed only once no host does (a host's list
    /// that omits it takes only that host off).
    pub(super) fn host_projects_snapshot(&mut self, host: &str, projects: Vec<Value>) -> R {
        let mut keep = BTreeSet::new();
        for mut p in projects {
            let Some(id) = object_id(&p) else { continue };
            keep.insert(id);
            let key = keys::id_key(table::PROJECTS, id);
            let mut hosts = self.stored(&key)?.map(|v| hosts_of(&v)).unwrap_or_default();
            hosts.insert(host.to_owned());
            set_hosts(&mut p, &hosts);
            if self.upsert(&key, &p)? {
                self.note(format!("project:{id}"));
            }
        }
        for k in self.ov.keys_with_prefix(&[table::PROJECTS])? {
            let Some(id) = keys::uuid_at(&k, 1).filter(|id| !keep.contains(id)) else {
                continue;
            };
            let Some(mut stored) = self.stored(&k)? else {
                continue;
            };
            let mut hosts = hosts_of(&stored);
            if !hosts.remove(host) {
                continue;
            }
            let Some(remaining) = hosts.first().cloned() else {
                self.remove_project(id)?;
                continue;
            };
            // Still listed by another host: it stays, named after one that lists it.
            if stored.get(HOST_FIELD).and_then(Value::as_str) == Some(host) {
                stored[HOST_FIELD] = Value::String(remaining);
            }
            set_hosts(&mut stored, &hosts);
            if self.upsert(&k, &stored)? {
                self.note(format!("project:{id}"));
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
            let stored = self.stored(&keys::id_key(table::TASKS, id))?;
            if stored.as_ref().and_then(|v| v.get(HOST_FIELD)?.as_str()) == Some(host) {
                self.remove_task(id)?;
            }
        }
        Ok(())
    }

    /// One host's `/api/info` facts, under its own key.
    pub(super) fn host_server_info(&mut self, host: &str, info: &Value) -> R {
        if self.upsert(&keys::host_server_info_key(host), info)? {
            self.note(format!("server_info:{host}"));
        }
        Ok(())
    }

    /// The JSON stored under `key`, if any.
    fn stored(&mut self, key: &[u8]) -> R<Option<Value>> {
        Ok(self.ov.get(key)?.and_then(|v| {
            let (_, json) = decode(&v)?;
            serde_json::from_slice::<Value>(&json).ok()
        }))
    }
}

/// The hosts a stored project names: its `hosts`, or its one `host` (a row written before
/// `hosts` was kept).
fn hosts_of(project: &Value) -> BTreeSet<String> {
    let listed = project.get(HOSTS_FIELD).and_then(Value::as_array);
    let mut hosts: BTreeSet<String> = listed
        .into_iter()
        .flatten()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect();
    if listed.is_none() {
        hosts.extend(
            project
                .get(HOST_FIELD)
                .and_then(Value::as_str)
                .map(str::to_owned),
        );
    }
    hosts
}

fn set_hosts(project: &mut Value, hosts: &BTreeSet<String>) {
    if let Some(object) = project.as_object_mut() {
        object.insert(HOSTS_FIELD.to_owned(), hosts.iter().cloned().collect());
    }
}
