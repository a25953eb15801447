//! Applying a fleet node's host-scoped events (design-notes §23): a host's project list
//! takes only that host off the projects it omits (one project may live on several hosts), and
//! off their tasks; a host's VK facts are kept per host. Tasks and attempts: `fleet_tasks`.

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::codec::decode;
use super::super::events::{HOST_FIELD, HOSTS_FIELD};
use super::super::keys::{self, table};
use super::fleet_tasks::{Dropped, drop_host};
use super::{Pending, R};
use vk_observer_vk::object_id;

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
            let Some(stored) = self.stored(&k)? else {
                continue;
            };
            match drop_host(stored, host, true) {
                Dropped::NotReported => {}
                Dropped::Gone => self.remove_project(id)?,
                // Still listed by another host: it stays, without this host's tasks.
                Dropped::Stays(row) => {
                    if self.upsert(&k, &row)? {
                        self.note(format!("project:{id}"));
                    }
                    for task in self.children(table::IDX_PROJECT_TASKS, id)? {
                        self.drop_host_from_task(host, task)?;
                    }
                }
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

/// The hosts a stored project, task or attempt names: its `hosts`, or its one `host` (a row
/// written before `hosts` was kept).
pub(super) fn hosts_of(project: &Value) -> BTreeSet<String> {
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

pub(super) fn set_hosts(project: &mut Value, hosts: &BTreeSet<String>) {
    if let Some(object) = project.as_object_mut() {
        object.insert(HOSTS_FIELD.to_owned(), hosts.iter().cloned().collect());
    }
}
