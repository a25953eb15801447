//! Builds the ground truth: every entity exactly as VK's REST would return it now.

use super::render;
use super::types::Truth;
use super::world::World;

pub(crate) fn build(w: &World) -> Truth {
    let mut t = Truth::default();
    for p in &w.projects {
        t.projects.insert(p.id, render::project_json(p));
        t.repos
            .insert(p.id, p.repos.iter().map(render::repo_json).collect());
    }
    for task in w.tasks.values() {
        t.tasks.insert(task.id, render::task_json(w, task));
    }
    for id in w.workspaces.keys() {
        if let Some(v) = render::workspace_json(w, *id) {
            t.attempts.insert(*id, v);
        }
        if let Some(v) = render::changes_json(w, *id, true) {
            t.changes.insert(*id, v);
        }
        if let Some(v) = render::attempt_status_json(w, *id) {
            t.attempt_status.insert(*id, v);
        }
    }
    for id in w.sessions.keys() {
        if let Some(v) = render::session_json(w, *id) {
            t.sessions.insert(*id, v);
        }
    }
    for p in w.processes.values() {
        t.processes.insert(p.id, render::process_json(p));
    }
    for (pid, logs) in &w.logs {
        let owned = |l: &[super::world::LogEntry]| l.iter().map(|e| e.as_ref().clone()).collect();
        t.normalized_logs.insert(*pid, owned(&logs.normalized));
        t.raw_logs.insert(*pid, owned(&logs.raw));
    }
    t
}
