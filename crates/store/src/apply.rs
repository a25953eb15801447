//! How each domain event changes the projections, inside one pending batch.
//!
//! Every write goes through "is this a real difference?": an upsert of an identical object, or a
//! log entry re-sent with the same content, changes nothing and moves no token. Snapshots remove
//! what their scope no longer holds, cascading to children (task → attempts → sessions,
//! processes → log entries), so a resync converges on exactly VK's state.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use uuid::Uuid;

use super::StoreError;
use super::codec::{EntryPacker, decode, encode, same_json};
use super::events::{Channel, DomainEvent};
use super::keys::{self, table};
use super::overlay::Overlay;
use vk_observer_vk::{object_id, uuid_of};

mod fleet;
mod fleet_tasks;
mod logs;
mod tasks;
mod usage;

pub(crate) use logs::ChunkCache;

/// Highest stored entry index per (process, channel); `None` = no entry. A cache the writer owns.
pub(crate) type MaxIndexCache = HashMap<(Uuid, Channel), Option<u64>>;

pub(crate) struct Pending<'t, 'c> {
    pub ov: Overlay<'t>,
    pub next: u64,
    pub changed: bool,
    pub attempts: BTreeSet<Uuid>,
    /// Attempts whose waits are woken though their token does not move (a log read to its end).
    pub nudged: BTreeSet<Uuid>,
    pub notes: Vec<String>,
    pub max_index: &'c mut MaxIndexCache,
    /// The writer's entry compressor; `None`: entries are stored plain.
    pub packer: Option<&'c mut EntryPacker>,
    pub entry_cap: u64,
    /// Entries per log chunk (`store::chunk::CHUNK`; the writer's, fixed for a data dir).
    pub chunk_entries: u64,
    /// Log chunks changed by this batch, decoded (`apply::logs`): the writer calls
    /// `flush_chunks` once the batch's events are applied.
    pub chunks: ChunkCache,
    /// Activity items this batch derived, in order (`store::feed`, `feed_derive`).
    pub feed: Vec<super::feed::FeedItem>,
    /// Fleet node: the host message this batch applies (its `FleetPosition`), marked in
    /// `store::fleet_clock` when the batch consumes a token.
    pub fleet_mark: Option<(String, super::events::FleetPosition)>,
}

type R<T = ()> = Result<T, StoreError>;

impl<'t, 'c> Pending<'t, 'c> {
    pub(crate) fn apply(&mut self, ev: DomainEvent) -> R {
        match ev {
            DomainEvent::ProjectsSnapshot { projects } => self.projects_snapshot(projects),
            DomainEvent::ReposSnapshot { project_id, repos } => {
                self.repos_snapshot(project_id, repos)
            }
            DomainEvent::TaskUpserted { task } => self.task_upsert(&task).map(|_| ()),
            DomainEvent::TaskRemoved { task_id } => self.remove_task(task_id),
            DomainEvent::TasksSnapshot { project_id, tasks } => {
                self.tasks_snapshot(project_id, tasks)
            }
            DomainEvent::AttemptsSnapshot { task_id, attempts } => {
                self.attempts_snapshot(task_id, attempts)
            }
            DomainEvent::SessionsSnapshot {
                attempt_id,
                sessions,
            } => self.sessions_snapshot(attempt_id, sessions),
            DomainEvent::ProcessUpserted {
                attempt_id,
                process,
            } => self.process_upsert(attempt_id, &process).map(|_| ()),
            DomainEvent::ProcessRemoved {
                attempt_id,
                process_id,
            } => self.remove_process(attempt_id, process_id),
            DomainEvent::ProcessesSnapshot {
                attempt_id,
                processes,
            } => self.processes_snapshot(attempt_id, processes),
            DomainEvent::LogEntriesPut {
                attempt_id,
                process_id,
                channel,
                entries,
            } => self.put_logs(attempt_id, process_id, channel, entries),
            DomainEvent::ProcessUsage {
                attempt_id,
                process_id,
                usage,
            } => self.process_usage(attempt_id, process_id, &usage),
            DomainEvent::ChangesUpdated {
                attempt_id,
                changes,
            } => self.changes_updated(attempt_id, &changes),
            DomainEvent::LogsComplete {
                process_id,
                channel,
                attempt_id,
            } => {
                self.nudged.extend(attempt_id);
                self.logs_complete(process_id, channel)
            }
            DomainEvent::LogHistoryLost {
                attempt_id,
                process_id,
                channel,
                oldest_available,
            } => self.history_lost(attempt_id, process_id, channel, oldest_available),
            DomainEvent::ServerInfo { info } => self.server_info(&info),
            DomainEvent::AttemptReposSnapshot { attempt_id, repos } => {
                self.attempt_repos_snapshot(attempt_id, repos)
            }
            DomainEvent::BranchStatusRead {
                attempt_id,
                repos,
                read_at_ms,
            } => self.branch_status_read(attempt_id, repos, read_at_ms),
            DomainEvent::UpstreamSeq { seq } => {
                self.set_meta(keys::meta::SSE_SEQ, seq.to_be_bytes().to_vec())
            }
            DomainEvent::UpstreamIncarnation { id } => {
                self.set_meta(keys::meta::VK_INCARNATION, id.into_bytes())
            }
            ev @ (DomainEvent::HostServerInfo { .. }
            | DomainEvent::HostProjectsSnapshot { .. }
            | DomainEvent::HostTasksSnapshot { .. }
            | DomainEvent::HostTaskUpserted { .. }
            | DomainEvent::HostTaskRemoved { .. }
            | DomainEvent::HostAttemptsSnapshot { .. }
            | DomainEvent::FleetPosition { .. }) => self.apply_fleet(ev),
        }
    }

    /// A fleet node's events: a host's facts, host-scoped lists, the node's position per host.
    fn apply_fleet(&mut self, ev: DomainEvent) -> R {
        match ev {
            DomainEvent::HostServerInfo { host, info } => self.host_server_info(&host, &info),
            DomainEvent::HostProjectsSnapshot { host, projects } => {
                self.host_projects_snapshot(&host, projects)
            }
            DomainEvent::HostTasksSnapshot {
                host,
                project_id,
                tasks,
            } => self.host_tasks_snapshot(&host, project_id, tasks),
            DomainEvent::HostTaskUpserted { host, task } => {
                self.host_task_upsert(&host, task).map(|_| ())
            }
            DomainEvent::HostTaskRemoved { host, task_id } => {
                self.drop_host_from_task(&host, task_id)
            }
            DomainEvent::HostAttemptsSnapshot {
                host,
                task_id,
                attempts,
            } => self.host_attempts_snapshot(&host, task_id, attempts),
            DomainEvent::FleetPosition { host, position } => {
                let value = serde_json::to_vec(&position).map_err(StoreError::Encode)?;
                self.set_meta(&keys::fleet_position_name(&host), value)?;
                self.fleet_mark = Some((host, position));
                Ok(())
            }
            _ => Err(StoreError::Invalid(
                "a host daemon's event in the fleet's dispatch",
            )),
        }
    }

    /// A log stream read to its end: marked so it is never re-read (`ingest::logs`).
    fn logs_complete(&mut self, process_id: Uuid, channel: Channel) -> R {
        self.ov
            .insert(&keys::complete_key(channel, process_id), Vec::new());
        Ok(())
    }

    fn server_info(&mut self, info: &Value) -> R {
        if self.upsert(keys::SERVER_INFO_KEY, info)? {
            self.note("server_info".into());
        }
        Ok(())
    }

    /// Ingest's own bookkeeping (the SSE seq, VK's run identity), kept beside the projections.
    fn set_meta(&mut self, key: &[u8], value: Vec<u8>) -> R {
        self.ov.insert(&keys::meta_key(key), value);
        Ok(())
    }

    fn note(&mut self, s: String) {
        if self.notes.len() < 32 {
            self.notes.push(s);
        }
    }

    /// Write `value` under `key` unless the stored JSON already means the same. True if changed.
    fn upsert(&mut self, key: &[u8], value: &Value) -> R<bool> {
        let json = serde_json::to_vec(value).map_err(StoreError::Encode)?;
        if let Some(old) = self.ov.get(key)?
            && let Some((_, old_json)) = decode(&old)
            && same_json(&old_json, &json)
        {
            return Ok(false);
        }
        self.ov.insert(key, encode(self.next, &json));
        self.changed = true;
        Ok(true)
    }

    /// VK's branch status: stored when it differs (moving the attempt's token), and its read
    /// time always (meta: a re-read of the same status wakes no one).
    fn branch_status_read(&mut self, attempt: Uuid, repos: Vec<Value>, read_at_ms: i64) -> R {
        let key = keys::id_key(table::BRANCH_STATUS, attempt);
        let old = self.stored_value(key.as_slice())?;
        let new = Value::Array(repos);
        if self.upsert(key.as_slice(), &new)? {
            self.feed_merges(attempt, old.as_ref(), new.as_array().map_or(&[], |v| v))?;
            self.attempts.insert(attempt);
            self.note(format!("branch_status:{attempt}"));
        }
        self.ov.insert(
            &keys::id_key(table::BRANCH_STATUS_READ, attempt),
            read_at_ms.to_be_bytes().to_vec(),
        );
        Ok(())
    }

    fn changes_updated(&mut self, attempt: Uuid, changes: &Value) -> R {
        let key = keys::id_key(table::CHANGES, attempt);
        if self.same_changes_apart_from_read_time(&key, changes)? {
            return Ok(());
        }
        if self.upsert(key.as_slice(), changes)? {
            self.attempts.insert(attempt);
            self.note(format!("changes:{attempt}"));
            self.feed_changes_moved(attempt, changes)?;
        }
        Ok(())
    }

    /// A re-read that found VK's summary as stored is no change: the stored read time stays
    /// ("unchanged since"), so re-reads while an agent works move no token and wake no waiter.
    fn same_changes_apart_from_read_time(&self, key: &[u8], changes: &Value) -> R<bool> {
        let as_of = super::events::CHANGES_AS_OF;
        let Some(old) = self.ov.get(key)? else {
            return Ok(false);
        };
        let Some(mut old) =
            decode(&old).and_then(|(_, j)| serde_json::from_slice::<Value>(&j).ok())
        else {
            return Ok(false);
        };
        let mut new = changes.clone();
        // A summary stored before read times were kept gets one.
        let old_stamped = old.get(as_of).is_some();
        for v in [&mut old, &mut new] {
            if let Some(o) = v.as_object_mut() {
                o.remove(as_of);
            }
        }
        Ok(old_stamped && old == new)
    }

    fn remove_entity(&mut self, key: &[u8]) -> R<bool> {
        if self.ov.contains(key)? {
            self.ov.remove(key);
            self.changed = true;
            return Ok(true);
        }
        Ok(false)
    }

    fn set_index(&mut self, table: u8, a: Uuid, b: Uuid) {
        self.ov.insert(&keys::pair_key(table, a, b), Vec::new());
    }

    /// Second ids of the `table ‖ a ‖ b` index under `a`.
    pub(super) fn children(&self, table: u8, a: Uuid) -> R<Vec<Uuid>> {
        let prefix = keys::id_key(table, a);
        Ok(self
            .ov
            .keys_with_prefix(&prefix)?
            .iter()
            .filter_map(|k| keys::uuid_at(k, 17))
            .collect())
    }

    pub(super) fn stored_value(&self, key: &[u8]) -> R<Option<Value>> {
        Ok(stored_json(self.ov.get(key)?.as_deref()))
    }

    // ---- projects and repos ----

    fn projects_snapshot(&mut self, projects: Vec<Value>) -> R {
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
            if !keep.contains(&id) {
                self.remove_project(id)?;
            }
        }
        Ok(())
    }

    pub(super) fn remove_project(&mut self, id: Uuid) -> R {
        self.remove_entity(&keys::id_key(table::PROJECTS, id))?;
        for repo in self.children(table::REPOS, id)? {
            self.remove_entity(&keys::pair_key(table::REPOS, id, repo))?;
        }
        for task in self.children(table::IDX_PROJECT_TASKS, id)? {
            self.remove_task(task)?;
        }
        self.note(format!("project_removed:{id}"));
        Ok(())
    }

    fn repos_snapshot(&mut self, project: Uuid, repos: Vec<Value>) -> R {
        let mut keep = BTreeSet::new();
        for r in &repos {
            let Some(id) = object_id(r) else { continue };
            keep.insert(id);
            if self.upsert(&keys::pair_key(table::REPOS, project, id), r)? {
                self.note(format!("repo:{id}"));
            }
        }
        for id in self.children(table::REPOS, project)? {
            if !keep.contains(&id) {
                self.remove_entity(&keys::pair_key(table::REPOS, project, id))?;
            }
        }
        Ok(())
    }

    // ---- attempts ----

    fn attempts_snapshot(&mut self, task: Uuid, attempts: Vec<Value>) -> R {
        let mut keep = BTreeSet::new();
        for a in &attempts {
            keep.extend(self.attempt_upsert(task, a)?);
        }
        for id in self.children(table::IDX_TASK_ATTEMPTS, task)? {
            if !keep.contains(&id) {
                self.remove_attempt(task, id)?;
            }
        }
        Ok(())
    }

    /// One attempt of `task` stored (indexed under it); its id, None for one without an id.
    pub(super) fn attempt_upsert(&mut self, task: Uuid, a: &Value) -> R<Option<Uuid>> {
        let Some(id) = object_id(a) else {
            return Ok(None);
        };
        let key = keys::id_key(table::ATTEMPTS, id);
        let old = self.stored_value(&key)?;
        let existed = old.is_some();
        if self.upsert(&key, a)? {
            if let Some(was) = old
                .as_ref()
                .and_then(|o| uuid_of(o, "task_id"))
                .filter(|was| *was != task)
            {
                // An attempt moved to another task (VK 0.1.x: a workspace linked to the task
                // it was started for): it leaves the old task's list, its rows stay.
                self.ov
                    .remove(&keys::pair_key(table::IDX_TASK_ATTEMPTS, was, id));
            }
            self.set_index(table::IDX_TASK_ATTEMPTS, task, id);
            self.attempts.insert(id);
            self.note(format!("attempt:{id}"));
            if !existed {
                self.feed_attempt_started(task, id)?;
            }
        }
        Ok(Some(id))
    }

    pub(super) fn remove_attempt(&mut self, task: Uuid, id: Uuid) -> R {
        self.ov
            .remove(&keys::pair_key(table::IDX_TASK_ATTEMPTS, task, id));
        self.remove_entity(&keys::id_key(table::ATTEMPTS, id))?;
        for s in self.children(table::IDX_ATTEMPT_SESSIONS, id)? {
            self.ov
                .remove(&keys::pair_key(table::IDX_ATTEMPT_SESSIONS, id, s));
            self.remove_entity(&keys::id_key(table::SESSIONS, s))?;
        }
        for p in self.children(table::IDX_ATTEMPT_PROCESSES, id)? {
            self.remove_process(id, p)?;
        }
        self.remove_entity(&keys::id_key(table::CHANGES, id))?;
        self.remove_entity(&keys::id_key(table::BRANCH_STATUS, id))?;
        self.ov.remove(&keys::id_key(table::BRANCH_STATUS_READ, id));
        for r in self.children(table::ATTEMPT_REPOS, id)? {
            self.remove_entity(&keys::pair_key(table::ATTEMPT_REPOS, id, r))?;
        }
        // The attempt's token stays as a tombstone so a waiter on it wakes and sees it gone.
        self.attempts.insert(id);
        self.note(format!("attempt_removed:{id}"));
        Ok(())
    }

    fn attempt_repos_snapshot(&mut self, attempt: Uuid, repos: Vec<Value>) -> R {
        let mut keep = BTreeSet::new();
        let mut changed = false;
        for r in &repos {
            let Some(id) = object_id(r) else { continue };
            keep.insert(id);
            changed |= self.upsert(&keys::pair_key(table::ATTEMPT_REPOS, attempt, id), r)?;
        }
        for id in self.children(table::ATTEMPT_REPOS, attempt)? {
            if !keep.contains(&id) {
                changed |=
                    self.remove_entity(&keys::pair_key(table::ATTEMPT_REPOS, attempt, id))?;
            }
        }
        if changed {
            self.attempts.insert(attempt);
            self.note(format!("attempt_repos:{attempt}"));
        }
        Ok(())
    }

    // ---- sessions ----

    fn sessions_snapshot(&mut self, attempt: Uuid, sessions: Vec<Value>) -> R {
        let mut keep = BTreeSet::new();
        for s in &sessions {
            let Some(id) = object_id(s) else { continue };
            keep.insert(id);
            if self.upsert(&keys::id_key(table::SESSIONS, id), s)? {
                self.set_index(table::IDX_ATTEMPT_SESSIONS, attempt, id);
                self.attempts.insert(attempt);
                self.note(format!("session:{id}"));
            }
        }
        for id in self.children(table::IDX_ATTEMPT_SESSIONS, attempt)? {
            if !keep.contains(&id) {
                self.ov
                    .remove(&keys::pair_key(table::IDX_ATTEMPT_SESSIONS, attempt, id));
                self.remove_entity(&keys::id_key(table::SESSIONS, id))?;
                self.attempts.insert(attempt);
            }
        }
        Ok(())
    }

    // ---- processes and logs ----

    fn process_upsert(&mut self, attempt: Uuid, p: &Value) -> R<Option<Uuid>> {
        let Some(id) = object_id(p) else {
            return Err(StoreError::Invalid("process without id"));
        };
        let key = keys::id_key(table::PROCESSES, id);
        let old = self.ov.get(&key)?;
        // VK never runs an ended process again: a running version of it is an old frame.
        if !super::feed_derive::revives_ended(old.as_deref(), p) && self.upsert(&key, p)? {
            self.feed_process_upserted(attempt, id, old.as_deref(), p)?;
            self.set_index(table::IDX_ATTEMPT_PROCESSES, attempt, id);
            self.ov.insert(
                &keys::id_key(table::PROCESS_ATTEMPT, id),
                attempt.as_bytes().to_vec(),
            );
            self.attempts.insert(attempt);
            self.note(format!("process:{id}"));
        }
        Ok(Some(id))
    }

    fn processes_snapshot(&mut self, attempt: Uuid, processes: Vec<Value>) -> R {
        let mut keep = BTreeSet::new();
        for p in &processes {
            if let Some(id) = self.process_upsert(attempt, p)? {
                keep.insert(id);
            }
        }
        for id in self.children(table::IDX_ATTEMPT_PROCESSES, attempt)? {
            if !keep.contains(&id) {
                self.remove_process(attempt, id)?;
            }
        }
        Ok(())
    }

    fn remove_process(&mut self, attempt: Uuid, id: Uuid) -> R {
        self.ov
            .remove(&keys::pair_key(table::IDX_ATTEMPT_PROCESSES, attempt, id));
        self.ov.remove(&keys::id_key(table::PROCESS_ATTEMPT, id));
        self.remove_entity(&keys::id_key(table::PROCESSES, id))?;
        self.forget_approvals(attempt, id)?;
        self.remove_logs(id)?;
        self.ov.remove(&keys::id_key(table::PROCESS_USAGE, id));
        self.attempts.insert(attempt);
        self.note(format!("process_removed:{id}"));
        Ok(())
    }
}

/// The JSON of a stored row (`token ‖ value`), if it decodes.
fn stored_json(raw: Option<&[u8]>) -> Option<Value> {
    let (_, json) = decode(raw?)?;
    serde_json::from_slice(&json).ok()
}
