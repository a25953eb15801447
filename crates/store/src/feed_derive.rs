//! Deriving activity items inside a pending batch. `apply` calls these hooks only after an
//! upsert or removal really changed the cache, with the stored value from before the change,
//! so an item says exactly what this batch did; a re-sent or replayed object derives nothing.
//! A new kind (approval requested/answered, branch merged/pushed) is one hook here and one
//! `ActivityKind` variant.

use serde_json::Value;
use uuid::Uuid;

use super::StoreError;
use super::apply::Pending;
use super::approvals::{ApprovalRecord, ApprovalState};
use super::codec::decode;
use super::feed::{ActivityKind, FeedItem, FeedScope};
use super::keys::{self, table};
use vk_observer_vk::{self as vk, ProcessStatus, RunReason, str_of, uuid_of};

type R<T = ()> = Result<T, StoreError>;

/// Task fields whose change alone is not activity: VK bumps `updated_at` with every write; a
/// fleet node's `host` and `hosts` say which hosts report the task, not what it is.
const QUIET_TASK_FIELDS: &[&str] = &[
    "updated_at",
    super::events::HOST_FIELD,
    super::events::HOSTS_FIELD,
];

fn parse_stored(raw: Option<&[u8]>) -> Option<Value> {
    let (_, json) = decode(raw?)?;
    serde_json::from_slice(&json).ok()
}

fn string_field(v: &Value, field: &str) -> Option<String> {
    str_of(v, field).map(str::to_owned)
}

/// Top-level fields that differ between two objects (added, removed or changed), sorted.
fn changed_fields(old: &Value, new: &Value) -> Vec<String> {
    let (Some(a), Some(b)) = (old.as_object(), new.as_object()) else {
        return Vec::new();
    };
    let mut out: Vec<String> = a
        .keys()
        .chain(b.keys().filter(|k| !a.contains_key(*k)))
        .filter(|k| a.get(*k) != b.get(*k) && !QUIET_TASK_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    out.sort();
    out
}

fn has_ended(status: &str) -> bool {
    let s = ProcessStatus::parse(status);
    !s.is_running() && !matches!(s, ProcessStatus::Other(_))
}

/// Whether `new` shows as running a process stored (`old`) as ended: VK never runs an ended
/// process again, so this is an older version of it, not a difference. VK's process stream
/// sends one after a reconnect: it takes its snapshot (rows read now) after it subscribed, then
/// sends every patch after the subscription, including those the snapshot already holds (an
/// end in the snapshot, then the process's earlier `running` patch, then its end again). Stored,
/// it would be a second `process_started` and a second `process_ended` for one run.
pub(super) fn revives_ended(old: Option<&[u8]>, new: &Value) -> bool {
    ProcessStatus::parse(vk::status(new)).is_running()
        && parse_stored(old).is_some_and(|o| has_ended(vk::status(&o)))
}

impl Pending<'_, '_> {
    /// The task's project, read through the batch.
    fn project_of_task(&self, task: Uuid) -> R<Option<Uuid>> {
        Ok(self
            .stored_value(&keys::id_key(table::TASKS, task))?
            .and_then(|t| uuid_of(&t, "project_id")))
    }

    /// The attempt's task and that task's project, read through the batch.
    fn owners_of_attempt(&self, attempt: Uuid) -> R<Option<(Uuid, Option<Uuid>)>> {
        let task = self
            .stored_value(&keys::id_key(table::ATTEMPTS, attempt))?
            .and_then(|a| uuid_of(&a, "task_id"));
        match task {
            Some(t) => Ok(Some((t, self.project_of_task(t)?))),
            None => Ok(None),
        }
    }

    pub(super) fn feed_task_upserted(
        &mut self,
        id: Uuid,
        project: Uuid,
        old: Option<&[u8]>,
        new: &Value,
    ) -> R {
        let old = parse_stored(old);
        let kind = match old {
            None => ActivityKind::TaskCreated,
            Some(_) => ActivityKind::TaskUpdated,
        };
        let mut item = FeedItem::new(kind, id, Some(project));
        item.title = string_field(new, "title");
        item.status = string_field(new, "status");
        if let Some(old) = &old {
            let fields = changed_fields(old, new);
            if fields.is_empty() {
                return Ok(()); // only a quiet field moved
            }
            if fields.iter().any(|f| f == "status") {
                item.previous_status = string_field(old, "status");
            }
            item.fields = Some(fields);
        }
        self.feed.push(item);
        if kind == ActivityKind::TaskCreated {
            self.adopt_orphans(id, project)?;
        }
        Ok(())
    }

    /// Items of a task derived before the task itself reached the cache (VK's attempts can be
    /// fetched before the tasks stream delivers their task) reach the project feed now, after
    /// `task_created`, under this batch's token: a project follower sees each exactly once.
    fn adopt_orphans(&mut self, task: Uuid, project: Uuid) -> R {
        // This batch's own orphans stay in the task feed where they stand (naming the project
        // now) and reach the project feed after `task_created` and the committed orphans.
        let mut copies = Vec::new();
        for item in self.feed.iter_mut() {
            if item.task == task && item.project.is_none() {
                item.project = Some(project);
                item.task_feed_only = true;
                let mut copy = item.clone();
                copy.task_feed_only = false;
                copy.adopted = true;
                copies.push(copy);
            }
        }
        for k in self.ov.keys_with_prefix(&FeedScope::Task(task).prefix())? {
            let Some(v) = self.ov.get(&k)? else { continue };
            let Ok(mut item) = serde_json::from_slice::<FeedItem>(&v) else {
                continue;
            };
            if item.project.is_none() {
                item.project = Some(project);
                // Adopted once: the task feed's copy now names its project.
                self.ov
                    .insert(&k, serde_json::to_vec(&item).map_err(StoreError::Encode)?);
                item.adopted = true;
                self.feed.push(item);
            }
        }
        // Older (committed) orphans first, then this batch's.
        self.feed.extend(copies);
        Ok(())
    }

    pub(super) fn feed_task_deleted(&mut self, id: Uuid, old: Option<&Value>) {
        let project = old.and_then(|t| uuid_of(t, "project_id"));
        let mut item = FeedItem::new(ActivityKind::TaskDeleted, id, project);
        item.title = old.and_then(|t| string_field(t, "title"));
        item.status = old.and_then(|t| string_field(t, "status"));
        self.feed.push(item);
    }

    pub(super) fn feed_attempt_started(&mut self, task: Uuid, attempt: Uuid) -> R {
        let project = self.project_of_task(task)?;
        let mut item = FeedItem::new(ActivityKind::AttemptStarted, task, project);
        item.attempt = Some(attempt);
        self.feed.push(item);
        // Processes cached before their attempt derived nothing (no task to file them under):
        // they start (and, if over, end) now.
        for pid in self.children(table::IDX_ATTEMPT_PROCESSES, attempt)? {
            if let Some(p) = self.stored_value(&keys::id_key(table::PROCESSES, pid))? {
                self.feed_process_upserted(attempt, pid, None, &p)?;
            }
        }
        Ok(())
    }

    /// `process_started` for a new process (and `follow_up_sent` for a coding agent in a
    /// session that already ran one), `process_ended` when it leaves `running` (or arrives
    /// ended), each exactly once per run of the process: an end is always after a start.
    pub(super) fn feed_process_upserted(
        &mut self,
        attempt: Uuid,
        id: Uuid,
        old: Option<&[u8]>,
        new: &Value,
    ) -> R {
        let Some((task, project)) = self.owners_of_attempt(attempt)? else {
            return Ok(());
        };
        let old = parse_stored(old);
        let status = vk::status(new);
        let base = |kind| {
            let mut item = FeedItem::new(kind, task, project);
            item.attempt = Some(attempt);
            item.process = Some(id);
            item.session = uuid_of(new, "session_id");
            item.run_reason = Some(vk::run_reason(new).to_string());
            item.status = Some(status.to_string());
            item
        };
        if old.is_none() {
            self.feed.push(base(ActivityKind::ProcessStarted));
            if self.is_follow_up(attempt, id, new)? {
                self.feed.push(base(ActivityKind::FollowUpSent));
            }
        }
        let was_running = old.as_ref().is_none_or(|o| !has_ended(vk::status(o)));
        // An ended process is never stored as running again (`revives_ended`); one moved to a
        // status this daemon does not know and back shows a new start rather than a second end
        // without one.
        if !was_running && !has_ended(status) {
            self.feed.push(base(ActivityKind::ProcessStarted));
        }
        if was_running && has_ended(status) {
            let mut item = base(ActivityKind::ProcessEnded);
            item.exit_code = new.get("exit_code").and_then(Value::as_i64);
            self.feed.push(item);
        }
        Ok(())
    }

    /// A coding agent whose session already had an earlier coding agent: a follow-up.
    fn is_follow_up(&self, attempt: Uuid, id: Uuid, p: &Value) -> R<bool> {
        let Some(session) = uuid_of(p, "session_id") else {
            return Ok(false);
        };
        if !RunReason::CodingAgent.is(vk::run_reason(p)) {
            return Ok(false);
        }
        for other in self.children(table::IDX_ATTEMPT_PROCESSES, attempt)? {
            if other == id {
                continue;
            }
            let Some(o) = self.stored_value(&keys::id_key(table::PROCESSES, other))? else {
                continue;
            };
            let earlier = match (vk::ts_of(&o, "created_at"), vk::ts_of(p, "created_at")) {
                (Some(a), Some(b)) => a < b,
                _ => true,
            };
            if earlier
                && uuid_of(&o, "session_id") == Some(session)
                && RunReason::CodingAgent.is(vk::run_reason(&o))
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub(super) fn feed_changes_moved(&mut self, attempt: Uuid, changes: &Value) -> R {
        let Some((task, project)) = self.owners_of_attempt(attempt)? else {
            return Ok(());
        };
        let summary = changes.get("summary");
        let num = |f: &str| summary.and_then(|s| s.get(f)).and_then(Value::as_u64);
        let mut item = FeedItem::new(ActivityKind::ChangeSummaryMoved, task, project);
        item.attempt = Some(attempt);
        item.file_count = num("fileCount");
        item.added = num("added");
        item.deleted = num("deleted");
        self.feed.push(item);
        Ok(())
    }

    /// `approval_requested` when an approval appears pending, `approval_answered` when a
    /// pending one is answered or times out (each state change once: the record is restated
    /// only when it changed).
    pub(super) fn feed_approval(
        &mut self,
        old: Option<&ApprovalRecord>,
        new: &ApprovalRecord,
    ) -> R {
        let kind = match (old.map(|o| o.state), new.state) {
            (Some(ApprovalState::Pending), ApprovalState::Pending) => return Ok(()),
            (_, ApprovalState::Pending) => ActivityKind::ApprovalRequested,
            (Some(ApprovalState::Pending), _) => ActivityKind::ApprovalAnswered,
            _ => return Ok(()),
        };
        let Some((task, project)) = self.owners_of_attempt(new.attempt_id)? else {
            return Ok(());
        };
        let mut item = FeedItem::new(kind, task, project);
        item.attempt = Some(new.attempt_id);
        item.process = Some(new.execution_process_id);
        item.approval_id = Some(new.approval_id.clone());
        item.tool = Some(new.tool_name.clone());
        if kind == ActivityKind::ApprovalAnswered {
            item.status = Some(new.state.as_str().to_string());
        }
        self.feed.push(item);
        Ok(())
    }

    /// `branch_merged` for every merge VK's branch status lists that the stored one did not.
    pub(super) fn feed_merges(&mut self, attempt: Uuid, old: Option<&Value>, new: &[Value]) -> R {
        let merge_ids = |repos: &[Value]| -> Vec<(Option<Uuid>, Value)> {
            repos
                .iter()
                .flat_map(|r| {
                    let repo = uuid_of(r, "repo_id");
                    r.get("merges")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(move |m| (repo, m.clone()))
                })
                .collect()
        };
        let before: Vec<Value> = merge_ids(old.and_then(Value::as_array).map_or(&[], |v| v))
            .into_iter()
            .map(|(_, m)| m.get("id").cloned().unwrap_or(Value::Null))
            .collect();
        let fresh: Vec<(Option<Uuid>, Value)> = merge_ids(new)
            .into_iter()
            .filter(|(_, m)| !before.contains(m.get("id").unwrap_or(&Value::Null)))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let Some((task, project)) = self.owners_of_attempt(attempt)? else {
            return Ok(());
        };
        for (repo, m) in fresh {
            let mut item = FeedItem::new(ActivityKind::BranchMerged, task, project);
            item.attempt = Some(attempt);
            item.repo = repo;
            item.merge_commit = string_field(&m, "merge_commit");
            self.feed.push(item);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changed_fields_ignore_quiet_ones_and_see_removals() {
        let a = json!({"title": "a", "status": "todo", "updated_at": "1", "x": 1});
        let b = json!({"title": "a", "status": "done", "updated_at": "2", "y": 2});
        assert_eq!(changed_fields(&a, &b), vec!["status", "x", "y"]);
        assert!(changed_fields(&a, &a).is_empty());
    }

    #[test]
    fn only_known_end_states_end_a_process() {
        assert!(has_ended("completed") && has_ended("failed") && has_ended("killed"));
        assert!(!has_ended("running") && !has_ended("") && !has_ended("paused"));
    }
}
