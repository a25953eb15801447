//! The tasks of a VK 0.1.x board, as the daemon shows them (docs/agent-guide.md "Which VK").
//!
//! VK 0.1.x has no tasks. A workspace stands as its own task (id = the workspace's) unless a
//! task **links** it: `start_task_attempt` made it for that task. A task is then either
//! - a workspace's own task, with that workspace as its first attempt and every workspace
//!   linked to it after; or
//! - a **daemon-kept task** (`create_task` on VK 0.1.x): kept in the store with
//!   `"daemon_kept": true`, its attempts the workspaces linked to it.
//!
//! A task's status is its attempts' (`workspace_model::task_status` of each): `inprogress`
//! while one is, else the newest attempt's; a daemon-kept task without attempts keeps its own.
//! Its `updated_at` is the newest of its own and its attempts' tasks' times.
//!
//! Links live in the attempt rows (`task_id`) and, for daemon-kept tasks, also in the task's
//! `linked_workspaces`: the board reads both back from the store when it starts.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use uuid::Uuid;

use super::super::workspace_model::TaskStatus;
use super::space::Space;
use vk_observer_store::StoreReader;
use vk_observer_vk::{self as vk, ts_of};

/// The field that marks a daemon-kept task.
pub(crate) const DAEMON_KEPT: &str = "daemon_kept";
/// A daemon-kept task's linked workspaces.
const LINKED: &str = "linked_workspaces";

/// Daemon-kept tasks and every link.
#[derive(Debug, Default)]
pub(crate) struct Links {
    /// Daemon-kept tasks, as stored (their status and time as created or edited).
    pub kept: BTreeMap<Uuid, Value>,
    /// Workspace → the task it stands under.
    pub links: HashMap<Uuid, Uuid>,
}

impl Links {
    /// What the store says: daemon-kept tasks with their links, and attempts stored under a
    /// task other than their own.
    pub(crate) fn load(reader: &StoreReader) -> Links {
        let mut me = Links::default();
        for t in reader.tasks().unwrap_or_default() {
            if t.value.get(DAEMON_KEPT).and_then(Value::as_bool) != Some(true) {
                continue;
            }
            for w in t
                .value
                .get(LINKED)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(w) = w.as_str().and_then(|s| s.parse().ok()) {
                    me.links.insert(w, t.id);
                }
            }
            me.kept.insert(t.id, t.value);
        }
        for a in reader.attempts().unwrap_or_default() {
            match vk::uuid_of(&a.value, "task_id") {
                Some(task) if task != a.id => {
                    me.links.insert(a.id, task);
                }
                _ => {}
            }
        }
        me
    }

    /// Links `workspace` to `task`; a daemon-kept task records it too.
    pub(crate) fn link(&mut self, task: Uuid, workspace: Uuid) {
        self.links.insert(workspace, task);
        if let Some(t) = self.kept.get_mut(&task) {
            let list = t
                .as_object_mut()
                .map(|o| o.entry(LINKED).or_insert(json!([])));
            if let Some(Value::Array(list)) = list
                && !list
                    .iter()
                    .any(|w| w.as_str() == Some(&workspace.to_string()))
            {
                list.push(json!(workspace));
            }
        }
    }
}

/// One task as shown: its project, its JSON, its attempts (workspace ids, oldest first).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskView {
    pub project: Uuid,
    pub json: Value,
    pub attempts: Vec<Uuid>,
}

/// Every task of the board, by id.
pub(crate) fn task_views(spaces: &HashMap<Uuid, Space>, links: &Links) -> BTreeMap<Uuid, TaskView> {
    let mut views: BTreeMap<Uuid, TaskView> = BTreeMap::new();
    for (id, t) in &links.kept {
        let project = vk::uuid_of(t, "project_id").unwrap_or_default();
        let view = TaskView {
            project,
            json: t.clone(),
            attempts: Vec::new(),
        };
        views.insert(*id, view);
    }
    // Oldest first: a workspace's own task exists before any workspace linked to it.
    let mut by_age: Vec<(&Uuid, &Space)> =
        spaces.iter().filter(|(_, s)| s.details.is_some()).collect();
    by_age.sort_by_key(|(id, s)| (ts_of(&s.json, "created_at"), **id));
    for (id, space) in by_age {
        let linked = links.links.get(id).filter(|t| *t != id);
        if let Some(view) = linked.and_then(|t| views.get_mut(t)) {
            view.attempts.push(*id);
        } else if let Some(own) = space.mapped(None).and_then(|m| m.own) {
            // Its own task (also when the task linking it is gone).
            let view = TaskView {
                project: own.project.id,
                json: own.task,
                attempts: vec![*id],
            };
            views.insert(*id, view);
        }
    }
    for view in views.values_mut() {
        aggregate(view, spaces);
    }
    views
}

/// A task's status and time from its attempts (see the module doc).
fn aggregate(view: &mut TaskView, spaces: &HashMap<Uuid, Space>) {
    let attempts: Vec<&Space> = view.attempts.iter().filter_map(|a| spaces.get(a)).collect();
    let Some(newest) = attempts.last() else {
        return;
    };
    let running = attempts
        .iter()
        .any(|s| s.task_status() == TaskStatus::InProgress);
    let status = if running {
        TaskStatus::InProgress
    } else {
        newest.task_status()
    };
    let mut updated = view.json.get("updated_at").cloned().unwrap_or(Value::Null);
    for s in &attempts {
        let Some(own) = s.mapped(None).and_then(|m| m.own) else {
            continue;
        };
        let newer =
            ts_of(&own.task, "updated_at") > ts_of(&json!({ "updated_at": updated }), "updated_at");
        if newer {
            updated = own.task["updated_at"].clone();
        }
    }
    if let Some(o) = view.json.as_object_mut() {
        o.insert("status".into(), json!(status.as_str()));
        o.insert("updated_at".into(), updated);
    }
}

#[cfg(test)]
#[path = "tasks_tests.rs"]
mod tests;
