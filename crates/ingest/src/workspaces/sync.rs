//! What the board writes: the whole board once its snapshot is known, then what each change
//! touched, in one batch per round, in an order the store can take: a task before its
//! attempts; upserts before removals (a workspace moved to another task, a task moved to
//! another project, leaves the old one's index first, so a removal takes nothing along);
//! the project list last. After the write the board opens and closes followers (`plans.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::super::Context;
use super::super::backoff::Reconnect;
use super::super::workspace_model::{self as model, Project};
use super::board::Board;
use super::space::Space;
use super::tasks::{TaskView, task_views};
use vk_observer_store::events::DomainEvent;

impl Board {
    /// Writes what changed (or the whole board when it is first known), then plans the
    /// followers of what was written.
    pub(crate) async fn write_and_plan(&mut self) {
        let events = if self.synced {
            self.changed_events()
        } else if self.whole_board_known() {
            self.synced = true;
            self.whole_board_events()
        } else {
            return;
        };
        let touched: Vec<Uuid> = std::mem::take(&mut self.dirty).into_iter().collect();
        if !events.is_empty()
            && let Err(e) = self.ctx.writer.write(events).await
        {
            tracing::error!(error = %e, "cannot store VK 0.1.x's board: writing it whole again");
            self.synced = false;
            self.projects.clear();
            self.dirty.extend(touched);
            return;
        }
        if !self.ctx.health.bootstrapped() {
            self.ctx.health.set_bootstrapped();
        }
        for id in touched {
            self.plan_streams(id);
            self.plan_logs(id);
        }
    }

    /// Every workspace of the snapshot has its details (or VK kept failing them: left out),
    /// and the registered repos are read.
    fn whole_board_known(&self) -> bool {
        let known = |s: &Space| s.details.is_some() || s.unreadable;
        self.registered.is_some() && self.spaces.values().all(known)
    }

    /// Each project's whole task list, each task's rows, then the project list (which removes
    /// what vanished, with its tasks).
    fn whole_board_events(&mut self) -> Vec<DomainEvent> {
        let projects = self.derived_projects();
        let views = task_views(&self.spaces, &self.links);
        let mut lists: BTreeMap<Uuid, Vec<Value>> =
            projects.iter().map(|p| (p.id, Vec::new())).collect();
        for view in views.values() {
            lists
                .entry(view.project)
                .or_default()
                .push(view.json.clone());
        }
        let mut events: Vec<DomainEvent> = lists
            .into_iter()
            .map(|(project_id, tasks)| DomainEvent::TasksSnapshot { project_id, tasks })
            .collect();
        for (id, view) in &views {
            events.extend(self.task_events(*id, view));
        }
        self.dirty.extend(self.spaces.keys().copied());
        events.extend(project_events(&projects));
        self.projects = projects;
        self.written = views.into_keys().collect();
        self.dirty_tasks.clear();
        events
    }

    /// The touched tasks' rows, the tasks that are no more, and the project list if it
    /// changed.
    fn changed_events(&mut self) -> Vec<DomainEvent> {
        let views = task_views(&self.spaces, &self.links);
        let mut events = Vec::new();
        for (id, view) in &views {
            let touched = self.dirty_tasks.contains(id)
                || !self.written.contains(id)
                || view.attempts.iter().any(|a| self.dirty.contains(a));
            if touched {
                events.extend(self.task_events(*id, view));
            }
        }
        // After the upserts: a workspace moved to another task has left this one already.
        for gone in self.written.iter().filter(|t| !views.contains_key(t)) {
            events.push(DomainEvent::TaskRemoved { task_id: *gone });
        }
        let projects = self.derived_projects();
        if projects != self.projects {
            events.extend(project_events(&projects));
            self.projects = projects;
        }
        self.written = views.into_keys().collect();
        self.dirty_tasks.clear();
        events
    }

    /// A task, its attempts (all of them: the list replaces the stored one) and each
    /// attempt's rows.
    fn task_events(&self, id: Uuid, view: &TaskView) -> Vec<DomainEvent> {
        let spaces: Vec<&Space> = view
            .attempts
            .iter()
            .filter_map(|a| self.spaces.get(a))
            .collect();
        let attempts = spaces
            .iter()
            .filter_map(|s| s.mapped(Some(id)).map(|m| m.attempt))
            .collect();
        let mut events = vec![
            DomainEvent::TaskUpserted {
                task: view.json.clone(),
            },
            DomainEvent::AttemptsSnapshot {
                task_id: id,
                attempts,
            },
        ];
        for s in spaces {
            events.extend(s.attempt_events());
        }
        events
    }

    /// One project per registered repo and per workspace repo set.
    fn derived_projects(&self) -> Vec<Project> {
        let registered = self.registered.as_deref().unwrap_or_default();
        model::projects(registered, self.spaces.values().map(|s| s.repos()))
    }
}

/// The project list and each project's repos.
fn project_events(projects: &[Project]) -> Vec<DomainEvent> {
    let mut events: Vec<DomainEvent> = projects
        .iter()
        .map(|p| DomainEvent::ReposSnapshot {
            project_id: p.id,
            repos: p.repos.clone(),
        })
        .collect();
    events.push(DomainEvent::ProjectsSnapshot {
        projects: projects.iter().map(|p| p.json.clone()).collect(),
    });
    events
}

/// Reads VK's executors and capabilities (`/api/info`, the same fields on both dialects) and
/// stores them, trying again until it answers.
pub(crate) async fn write_server_info(ctx: Context, cancel: CancellationToken) {
    let mut delays = Reconnect::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        match ctx.client.server_facts().await {
            Ok(info) => {
                let _ = ctx
                    .writer
                    .write(vec![DomainEvent::ServerInfo { info }])
                    .await;
                return;
            }
            Err(e) => tracing::debug!(error = %e, "VK 0.1.x's /api/info: not answered"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delays.next_delay()) => {}
        }
    }
}
