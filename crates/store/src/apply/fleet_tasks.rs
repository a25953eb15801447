//! A task or attempt id that several fleet hosts report (a copied VK database; design-notes
//! §23, docs/fleet.md): its row keeps in `hosts` every host that reports it and shows the newest
//! version any of them sent (`host` names the host whose version it is); a host that drops it
//! takes only itself off, and it goes (with what hangs under it) once no host reports it. A
//! task or attempt one host reports has no `hosts` (its `host` says it), so its row is the
//! same as before ids were shared; a project lists `hosts` always.

use std::collections::BTreeSet;

use serde_json::Value;
use uuid::Uuid;

use super::super::StoreError;
use super::super::events::{HOST_FIELD, HOSTS_FIELD};
use super::super::keys::{self, table};
use super::fleet::{hosts_of, set_hosts};
use super::tasks::older_than;
use super::{Pending, R, stored_json};
use vk_observer_vk::{object_id, uuid_of};

impl Pending<'_, '_> {
    /// One host's version of a task (tagged with its `host`): this host joins its `hosts`; the
    /// version replaces the stored one unless it is older or the same apart from its host (the
    /// stored row is read and parsed once, for both).
    pub(super) fn host_task_upsert(&mut self, host: &str, task: Value) -> R<Option<Uuid>> {
        let Some(id) = object_id(&task) else {
            return Err(StoreError::Invalid("task without id or project_id"));
        };
        let old = self.ov.get(&keys::id_key(table::TASKS, id))?;
        let row = merged(stored_json(old.as_deref()), task, host, older_than);
        let Some(project) = uuid_of(&row, "project_id") else {
            return Err(StoreError::Invalid("task without id or project_id"));
        };
        self.task_write(id, project, old.as_deref(), &row)
    }

    /// One host's tasks of a project: each upserted; a task of the project this list omits
    /// loses this host (other hosts' tasks, and tasks other hosts report too, stay).
    pub(super) fn host_tasks_snapshot(
        &mut self,
        host: &str,
        project: Uuid,
        tasks: Vec<Value>,
    ) -> R {
        let mut keep = BTreeSet::new();
        for t in tasks {
            keep.extend(self.host_task_upsert(host, t)?);
        }
        for id in self.children(table::IDX_PROJECT_TASKS, project)? {
            if !keep.contains(&id) {
                self.drop_host_from_task(host, id)?;
            }
        }
        Ok(())
    }

    /// `host` reports task `id` no more (deleted there, or missing from its list): it leaves
    /// the task's `hosts` and those of its attempts; the task goes once no host reports it.
    pub(super) fn drop_host_from_task(&mut self, host: &str, id: Uuid) -> R {
        let Some(stored) = self.stored_value(&keys::id_key(table::TASKS, id))? else {
            return Ok(());
        };
        match drop_host(stored, host, false) {
            Dropped::NotReported => Ok(()),
            Dropped::Gone => self.remove_task(id),
            Dropped::Stays(row) => {
                self.task_upsert(&row)?;
                for attempt in self.children(table::IDX_TASK_ATTEMPTS, id)? {
                    self.drop_host_from_attempt(host, id, attempt)?;
                }
                Ok(())
            }
        }
    }

    /// One host's attempts of a task: each keeps in `hosts` every host that reports it (the
    /// row shows the version last sent that differs apart from its host); an attempt of the
    /// task this list omits loses this host, and goes once no host reports it.
    pub(super) fn host_attempts_snapshot(
        &mut self,
        host: &str,
        task: Uuid,
        attempts: Vec<Value>,
    ) -> R {
        let mut keep = BTreeSet::new();
        for a in attempts {
            let Some(id) = object_id(&a) else { continue };
            let stored = self.stored_value(&keys::id_key(table::ATTEMPTS, id))?;
            keep.extend(self.attempt_upsert(task, &merged(stored, a, host, |_, _| false))?);
        }
        for id in self.children(table::IDX_TASK_ATTEMPTS, task)? {
            if !keep.contains(&id) {
                self.drop_host_from_attempt(host, task, id)?;
            }
        }
        Ok(())
    }

    fn drop_host_from_attempt(&mut self, host: &str, task: Uuid, id: Uuid) -> R {
        let Some(stored) = self.stored_value(&keys::id_key(table::ATTEMPTS, id))? else {
            return Ok(());
        };
        match drop_host(stored, host, false) {
            Dropped::NotReported => Ok(()),
            Dropped::Gone => self.remove_attempt(task, id),
            Dropped::Stays(row) => self.attempt_upsert(task, &row).map(|_| ()),
        }
    }
}

/// The row to store when `host` sends `incoming` over `stored`: `hosts` gains `host`; the
/// content stays the stored one when `incoming` is `older` or the same apart from its host (so
/// two hosts sending one unchanged copy do not move the row's `host` back and forth).
fn merged(
    stored: Option<Value>,
    incoming: Value,
    host: &str,
    older: fn(&Value, &Value) -> bool,
) -> Value {
    let mut hosts = stored.as_ref().map(hosts_of).unwrap_or_default();
    hosts.insert(host.to_owned());
    let mut row = match stored {
        Some(s) if older(&incoming, &s) || same_apart_from_hosts(&s, &incoming) => s,
        _ => incoming,
    };
    set_several_hosts(&mut row, &hosts);
    row
}

/// `hosts` on a task or attempt row while more than one host reports it; none for one.
fn set_several_hosts(row: &mut Value, hosts: &BTreeSet<String>) {
    if hosts.len() > 1 {
        set_hosts(row, hosts);
    } else if let Some(o) = row.as_object_mut() {
        o.remove(HOSTS_FIELD);
    }
}

fn same_apart_from_hosts(a: &Value, b: &Value) -> bool {
    let without = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove(HOST_FIELD);
            o.remove(HOSTS_FIELD);
        }
        v
    };
    without(a) == without(b)
}

/// What is left of a row once `host` no longer reports it.
pub(super) enum Dropped {
    /// `host` was not one of its hosts: nothing changes.
    NotReported,
    /// `host` was its last host: the row goes.
    Gone,
    /// Other hosts still report it: the row without `host` (named after one of them when it
    /// showed `host`'s version).
    Stays(Value),
}

/// `row` without `host` (`always_list`: keep `hosts` even for one host, as projects do).
pub(super) fn drop_host(mut row: Value, host: &str, always_list: bool) -> Dropped {
    let mut hosts = hosts_of(&row);
    if !hosts.remove(host) {
        return Dropped::NotReported;
    }
    let Some(remaining) = hosts.first().cloned() else {
        return Dropped::Gone;
    };
    if row.get(HOST_FIELD).and_then(Value::as_str) == Some(host) {
        row[HOST_FIELD] = Value::String(remaining);
    }
    if always_list {
        set_hosts(&mut row, &hosts);
    } else {
        set_several_hosts(&mut row, &hosts);
    }
    Dropped::Stays(row)
}
