//! The seed-002 summary of a task in a listing (`list_tasks`, `get_task`): the task's own fields
//! and what its attempts say (latest attempt, its branch and newest session, any attempt running,
//! the newest relevant process failed).
//!
//! [`task_summary`] reads the attempts, sessions and processes as the typed rows of
//! `query::rows` (only the fields the summary names; a process's executor action with its prompt
//! is skipped, not built): this is what made `list_tasks` at 10,000 tasks cost its page, not its
//! rows' JSON (issue 27). [`task_summary_from_values`] is the same summary from full JSON rows,
//! the previous code, kept as the reference the property test (`task_summary_tests`) compares
//! against and as the baseline `benches/scale_reads.rs` times beside it.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::rows::{AttemptRow, ProcessRow};
use super::status::latest_session_of;
use super::tasks::TaskSummary;
use crate::store::StoreReader;
use crate::store::events::HOST_FIELD;
use crate::store::reader::Stored;
use crate::tool_error::ToolError;
use crate::vk::{self, ProcessStatus, is_relevant_reason, newest_first, string_of, ts_string};

/// How a task is summarized in a page (`Query::list_tasks_summarized_by`).
pub type SummaryFn = fn(&StoreReader, &Stored) -> Result<TaskSummary, ToolError>;

/// What a task's attempts add to its summary.
#[derive(Debug, Default)]
struct AttemptFacts {
    latest_attempt_id: Option<Uuid>,
    latest_workspace_branch: Option<String>,
    latest_session_id: Option<Uuid>,
    latest_session_executor: Option<String>,
    has_in_progress_attempt: bool,
    last_attempt_failed: bool,
}

/// The newest relevant process seen so far: its `created_at` and status.
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

/// A task with the seed-002 attempt summary, its attempts and processes read as typed rows.
pub fn task_summary(reader: &StoreReader, t: &Stored) -> Result<TaskSummary, ToolError> {
    let mut attempts = reader.attempts_of_task_as::<AttemptRow>(t.id)?;
    attempts.sort_by(newest_first);
    let mut facts = AttemptFacts::default();
    if let Some((id, latest)) = attempts.first() {
        (facts.latest_session_id, facts.latest_session_executor) = latest_session_of(reader, *id)?;
        facts.latest_attempt_id = Some(*id);
        facts.latest_workspace_branch = latest.branch.clone();
    }
    let mut processes = NewestProcess::default();
    for (attempt, _) in &attempts {
        for (_, p) in reader.processes_of_attempt_as::<ProcessRow>(*attempt)? {
            if is_relevant_reason(p.reason()) && !p.is_dropped() {
                processes.see(p.created_at, ProcessStatus::parse(p.status()));
            }
        }
    }
    facts.has_in_progress_attempt = processes.any_running;
    facts.last_attempt_failed = processes.failed();
    Ok(with_task_fields(t, facts))
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
        host: string_of(&t.value, HOST_FIELD),
    }
}
