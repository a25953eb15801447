//! The seed-002 summary of a task in a listing (`list_tasks`, `get_task`): the task's own fields
//! and what its attempts say (latest attempt, its branch and newest session, any attempt running,
//! the newest relevant process failed).
//!
//! `list_tasks` and `get_task` read the summary the writer keeps per task
//! (`store::task_digest`, [`summary_of_digest`]). [`task_summary`] computes it at read time from
//! the typed rows (`store::task_digest::attempt_facts`, the writer's rules; the code before the
//! digests). [`task_summary_from_values`] is the same summary from full JSON rows, kept as the
//! independent reference the property tests (`task_summary_tests`, `task_digest_tests`) compare
//! against; `benches/scale_reads.rs` times all of them side by side.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::status::latest_session_of;
use super::tasks::TaskSummary;
use vk_observer_store::StoreReader;
use vk_observer_store::events::{HOST_FIELD, several_hosts};
use vk_observer_store::reader::Stored;
use vk_observer_store::task_digest::{AttemptFacts, TaskDigest, attempt_facts};
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{self as vk, ProcessStatus, newest_first, string_of, ts_string};

/// How a task is summarized in a page (`Query::list_tasks_summarized_by`).
pub type SummaryFn = fn(&StoreReader, &Stored) -> Result<TaskSummary, ToolError>;

/// The newest relevant process seen so far: its `created_at` and status (the reference's).
#[derive(Default)]
struct NewestProcess {
    newest: Option<(Option<DateTime<Utc>>, ProcessStatus)>,
    any_running: bool,
}

impl NewestProcess {
    fn see(&mut self, created: Option<DateTime<Utc>>, status: ProcessStatus) {
        self.any_running |= status.is_running();
        if self.newest.as_ref().is_none_or(|(c, _)| created > *c) {
            self.newest = Some((created, status));
        }
    }
    fn failed(&self) -> bool {
        self.newest.as_ref().is_some_and(|(_, s)| s.is_failure())
    }
}

/// A task with the seed-002 attempt summary, its attempts, sessions and processes read as typed
/// rows at read time (`store::task_digest::attempt_facts`, the rules the writer keeps the digests
/// with).
pub fn task_summary(reader: &StoreReader, t: &Stored) -> Result<TaskSummary, ToolError> {
    let facts = attempt_facts(reader, t.id)?;
    Ok(summary_of_digest((t.id, TaskDigest::of(&t.value, facts))))
}

/// A task as the writer's digest row keeps it.
#[cfg(test)]
pub(crate) fn kept_task_summary(
    reader: &StoreReader,
    t: &Stored,
) -> Result<TaskSummary, ToolError> {
    match reader.task_digest(t.id)? {
        Some(d) => Ok(summary_of_digest((t.id, d))),
        None => task_summary(reader, t),
    }
}

/// The listing's shape of a digest.
pub fn summary_of_digest((task_id, d): (Uuid, TaskDigest)) -> TaskSummary {
    TaskSummary {
        task_id,
        project_id: d.project_id,
        title: d.title,
        description: d.description,
        status: d.status,
        created_at: d.created_at,
        updated_at: d.updated_at,
        latest_attempt_id: d.facts.latest_attempt_id,
        latest_workspace_branch: d.facts.latest_workspace_branch,
        latest_session_id: d.facts.latest_session_id,
        latest_session_executor: d.facts.latest_session_executor,
        has_in_progress_attempt: d.facts.has_in_progress_attempt,
        last_attempt_failed: d.facts.last_attempt_failed,
        usage: None,
        host: d.host,
        hosts: d.hosts,
    }
}

/// The same summary from the attempts and processes decoded as full JSON values (the code
/// before issue 27's part 3): the reference [`task_summary`] must always agree with.
pub fn task_summary_from_values(
    reader: &StoreReader,
    t: &Stored,
) -> Result<TaskSummary, ToolError> {
    let mut attempts = reader.attempts_of_task(t.id)?;
    attempts.sort_by(newest_first);
    let mut facts = AttemptFacts::default();
    if let Some(latest) = attempts.first() {
        (facts.latest_session_id, facts.latest_session_executor) =
            latest_session_of(reader, latest.id)?;
        facts.latest_attempt_id = Some(latest.id);
        facts.latest_workspace_branch = string_of(&latest.value, "branch");
    }
    let mut processes = NewestProcess::default();
    for a in &attempts {
        for p in reader.processes_of_attempt(a.id)? {
            if vk::is_relevant(&p.value) {
                processes.see(
                    vk::ts_of(&p.value, "created_at"),
                    ProcessStatus::parse(vk::status(&p.value)),
                );
            }
        }
    }
    facts.has_in_progress_attempt = processes.any_running;
    facts.last_attempt_failed = processes.failed();
    Ok(with_task_fields(t, facts))
}

fn with_task_fields(t: &Stored, facts: AttemptFacts) -> TaskSummary {
    TaskSummary {
        task_id: t.id,
        project_id: vk::uuid_of(&t.value, "project_id"),
        title: string_of(&t.value, "title").unwrap_or_default(),
        description: string_of(&t.value, "description"),
        status: string_of(&t.value, "status").unwrap_or_default(),
        created_at: ts_string(&t.value, "created_at"),
        updated_at: ts_string(&t.value, "updated_at"),
        latest_attempt_id: facts.latest_attempt_id,
        latest_workspace_branch: facts.latest_workspace_branch,
        latest_session_id: facts.latest_session_id,
        latest_session_executor: facts.latest_session_executor,
        has_in_progress_attempt: facts.has_in_progress_attempt,
        last_attempt_failed: facts.last_attempt_failed,
        usage: None,
        host: string_of(&t.value, HOST_FIELD),
        hosts: several_hosts(&t.value),
    }
}
