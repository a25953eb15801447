//! `get_attempt_status`: an attempt's state from its cached sessions and processes, with VK's
//! `/status` rules (see docs/vk-contract.md §7.1) and a small `result` telling an agent what to
//! do next. One attempt or a batch; with `since_token`, only attempts changed since then.

use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::status_memo::StatusItem;
use super::{Freshness, Query, Since, View};
use crate::store::StoreReader;
use crate::tool_error::ToolError;
use crate::vk::{self, ProcessStatus, RunReason, rfc3339};

/// Coarse state of an attempt.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AttemptState {
    /// No relevant execution process yet (dev servers do not count).
    Idle,
    /// The latest relevant process is running.
    Running,
    /// The latest relevant process completed.
    Completed,
    /// The latest relevant process failed or was killed.
    Failed,
}

/// What the latest relevant process came to.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing has run yet.
    NotStarted,
    /// Still running.
    InProgress,
    /// Completed successfully.
    Succeeded,
    /// Failed (non-zero exit or error).
    Failed,
    /// Stopped or killed before it finished.
    Killed,
}

/// A compact verdict and the recommended next tool call.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct AttemptResult {
    /// `not_started`, `in_progress`, `succeeded`, `failed` or `killed`.
    pub outcome: Outcome,
    /// The tool to call next: `wait_for_attempt_change` while running, `get_attempt_changes`
    /// after success, `tail_attempt_logs` after a failure, `follow_up` when idle with a session,
    /// `wait_for_attempt_change` when idle without one.
    pub recommended_next_action: String,
    /// One sentence saying why.
    pub reason: String,
}

/// The latest relevant execution process of an attempt.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ProcessSummary {
    /// Execution process id (UUID).
    pub execution_process_id: Uuid,
    /// Session the process belongs to (UUID).
    pub session_id: Option<Uuid>,
    /// `codingagent`, `setupscript` or `cleanupscript`.
    pub run_reason: String,
    /// `running`, `completed`, `failed` or `killed`.
    pub status: String,
    /// Exit code when the process exited on its own; null while running or when killed.
    pub exit_code: Option<i64>,
    /// When it started (RFC 3339).
    pub started_at: Option<String>,
    /// When it ended (RFC 3339); null while running.
    pub completed_at: Option<String>,
}

/// Status of one attempt (a VK workspace).
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct AttemptStatus {
    /// Attempt id (UUID); use it with every attempt tool.
    pub attempt_id: Uuid,
    /// Task the attempt belongs to (UUID).
    pub task_id: Option<Uuid>,
    /// Git branch of the attempt's worktrees.
    pub workspace_branch: Option<String>,
    /// When the attempt was created (RFC 3339).
    pub created_at: Option<String>,
    /// When the attempt record last changed (RFC 3339).
    pub updated_at: Option<String>,
    /// Newest session of the attempt (UUID); null before the first session exists.
    pub latest_session_id: Option<Uuid>,
    /// Newest relevant execution process (UUID; dev servers excluded); null if none.
    pub latest_execution_process_id: Option<Uuid>,
    /// `idle`, `running`, `completed` or `failed`.
    pub state: AttemptState,
    /// Last activity of the latest relevant process, else of the latest session (RFC 3339).
    pub last_activity_at: Option<String>,
    /// Short failure text (`failed (exit_code=N)`, `failed`, `killed`); null unless failed.
    pub failure_summary: Option<String>,
    /// The latest relevant process in brief; null if none.
    pub latest_process: Option<ProcessSummary>,
    /// Verdict and next step.
    pub result: AttemptResult,
    /// True while a dev server of this attempt runs (it never affects `state`).
    pub dev_server_running: bool,
    /// Token of the last change to this attempt or anything under it (sessions, processes,
    /// logs, changes). Compare with `since_token` semantics; opaque string.
    pub attempt_token: String,
}

/// Answer of `get_attempt_status`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct StatusPage {
    /// The attempts asked for (in request order); with `since_token`, only those changed since.
    #[schemars(with = "Vec<AttemptStatus>")]
    pub attempts: Vec<StatusItem>,
    /// Requested ids the cache does not know (never created, deleted, or not yet ingested).
    pub not_found: Vec<Uuid>,
    /// Number of requested attempts left out because nothing changed since `since_token`.
    pub unchanged: usize,
    /// Store token at the time of this read; pass it as `since_token` to later calls.
    pub token: String,
    /// True when `since_token` was from another store generation or the future: the answer is
    /// complete, as if no token had been given.
    pub token_reset: bool,
    /// How current the cache is.
    pub freshness: Freshness,
}

/// `StatusPage` without its attempts: the part rendered per request.
#[derive(Serialize)]
struct PageTail<'a> {
    not_found: &'a [Uuid],
    unchanged: usize,
    token: &'a str,
    token_reset: bool,
    freshness: &'a Freshness,
}

impl StatusPage {
    /// The page as (JSON value, compact JSON text), reusing each attempt's memoized
    /// renderings: one serialization of the small page tail instead of two of the whole page.
    /// Both describe the same JSON document (key order aside).
    pub fn render(&self) -> Result<(serde_json::Value, String), ToolError> {
        let tail = PageTail {
            not_found: &self.not_found,
            unchanged: self.unchanged,
            token: &self.token,
            token_reset: self.token_reset,
            freshness: &self.freshness,
        };
        let tail_text = serde_json::to_string(&tail).map_err(ToolError::internal)?;
        let mut value = serde_json::to_value(&tail).map_err(ToolError::internal)?;
        let attempts: Vec<serde_json::Value> =
            self.attempts.iter().map(|a| a.0.value.clone()).collect();
        if let serde_json::Value::Object(m) = &mut value {
            m.insert("attempts".into(), serde_json::Value::Array(attempts));
        }
        let body: usize = self.attempts.iter().map(|a| a.0.json.len() + 1).sum();
        let mut text = String::with_capacity(body + tail_text.len() + 16);
        text.push_str("{\"attempts\":[");
        for (i, a) in self.attempts.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&a.0.json);
        }
        text.push_str("],");
        // `tail_text` is a non-empty object: drop its opening brace.
        text.push_str(&tail_text[1..]);
        Ok((value, text))
    }
}

impl Query {
    /// Status of the attempts in `ids` (request order, duplicates answered once).
    pub fn attempt_statuses(&self, ids: &[Uuid], since: Since) -> Result<StatusPage, ToolError> {
        // Read the token before the data: a change landing in between is reported again later
        // rather than missed.
        let View {
            token,
            reader,
            freshness,
        } = self.view();
        let epoch = self.store.epoch();
        let mut attempts = Vec::with_capacity(ids.len());
        let mut not_found = Vec::new();
        let mut unchanged = 0;
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        for &id in ids {
            if !seen.insert(id) {
                continue;
            }
            let attempt_token = reader.attempt_token(id)?;
            if let Since::After(t) = since {
                if attempt_token <= t {
                    unchanged += 1;
                    continue;
                }
            }
            match self.status_memo.status(&reader, id, attempt_token, epoch)? {
                Some(s) => attempts.push(s),
                None => not_found.push(id),
            }
        }
        Ok(StatusPage {
            attempts,
            not_found,
            unchanged,
            token,
            token_reset: since.token_reset(),
            freshness,
        })
    }
}

/// The status of one cached attempt; None when it is not in the cache.
pub fn attempt_status(
    reader: &StoreReader,
    id: Uuid,
    attempt_token: u64,
    epoch: crate::store::token::Epoch,
) -> Result<Option<AttemptStatus>, ToolError> {
    use super::rows::{AttemptRow, ProcessRow, SessionRow};
    let Some(attempt) = reader.attempt_as::<AttemptRow>(id)? else {
        return Ok(None);
    };
    let sessions = reader.sessions_of_attempt_as::<SessionRow>(id)?;
    let processes = reader.processes_of_attempt_as::<ProcessRow>(id)?;
    let latest_session = vk::latest(&sessions);
    let process = vk::status_process(&processes);
    let (state, failure_summary) = state_of(process.map(|(_, p)| p));
    let last_activity_at = match process {
        Some((_, p)) => p.updated_at.max(p.completed_at).map(rfc3339),
        None => latest_session.and_then(|(_, s)| s.updated_at).map(rfc3339),
    };
    let latest_process = process.map(|(pid, p)| ProcessSummary {
        execution_process_id: *pid,
        session_id: p.session_id,
        run_reason: p.reason().to_string(),
        status: p.status().to_string(),
        exit_code: p.exit_code,
        started_at: p.started_at.map(rfc3339),
        completed_at: p.completed_at.map(rfc3339),
    });
    let dev_server_running = processes
        .iter()
        .any(|(_, p)| RunReason::DevServer.is(p.reason()) && ProcessStatus::Running.is(p.status()));
    let result = verdict(
        state,
        process.map(|(_, p)| p.status()),
        latest_session.is_some(),
    );
    Ok(Some(AttemptStatus {
        attempt_id: id,
        task_id: attempt.task_id,
        workspace_branch: attempt.branch,
        created_at: attempt.created_at.map(rfc3339),
        updated_at: attempt.updated_at.map(rfc3339),
        latest_session_id: latest_session.map(|(sid, _)| *sid),
        latest_execution_process_id: process.map(|(pid, _)| *pid),
        state,
        last_activity_at,
        failure_summary,
        latest_process,
        result,
        dev_server_running,
        attempt_token: crate::store::token::Token {
            epoch,
            seq: attempt_token,
        }
        .to_string(),
    }))
}

fn verdict(state: AttemptState, status: Option<&str>, has_session: bool) -> AttemptResult {
    let (outcome, next, reason) = match state {
        AttemptState::Idle if has_session => (
            Outcome::NotStarted,
            "follow_up",
            "A session exists but nothing has run yet; send it a prompt with follow_up.",
        ),
        AttemptState::Idle => (
            Outcome::NotStarted,
            "wait_for_attempt_change",
            "The attempt is being prepared; wait for its first process.",
        ),
        AttemptState::Running => (
            Outcome::InProgress,
            "wait_for_attempt_change",
            "A process is running; wait for a change instead of polling.",
        ),
        AttemptState::Completed => (
            Outcome::Succeeded,
            "get_attempt_changes",
            "The run completed; review what it changed.",
        ),
        AttemptState::Failed if status.is_some_and(|s| ProcessStatus::Killed.is(s)) => (
            Outcome::Killed,
            "tail_attempt_logs",
            "The run was stopped; read the last log entries before deciding to follow up.",
        ),
        AttemptState::Failed => (
            Outcome::Failed,
            "tail_attempt_logs",
            "The run failed; read the last log entries to see why.",
        ),
    };
    AttemptResult {
        outcome,
        recommended_next_action: next.to_string(),
        reason: reason.to_string(),
    }
}

/// Session summary used by task and attempt listings: (latest session id, its executor).
pub fn latest_session_of(
    reader: &StoreReader,
    attempt: Uuid,
) -> Result<(Option<Uuid>, Option<String>), ToolError> {
    let sessions = reader.sessions_of_attempt_as::<super::rows::SessionRow>(attempt)?;
    Ok(match vk::latest(&sessions) {
        Some((id, s)) => (Some(*id), s.executor.clone()),
        None => (None, None),
    })
}

/// The state of an attempt (and its failure text) from its latest relevant process.
fn state_of(process: Option<&super::rows::ProcessRow>) -> (AttemptState, Option<String>) {
    match process.map(|p| ProcessStatus::parse(p.status())) {
        None => (AttemptState::Idle, None),
        Some(ProcessStatus::Running) => (AttemptState::Running, None),
        Some(ProcessStatus::Completed) => (AttemptState::Completed, None),
        Some(s @ ProcessStatus::Killed) => (AttemptState::Failed, Some(s.to_string())),
        Some(_) => {
            let text = match process.and_then(|p| p.exit_code) {
                Some(c) => format!("failed (exit_code={c})"),
                None => "failed".to_string(),
            };
            (AttemptState::Failed, Some(text))
        }
    }
}

/// Just the state of an attempt: reads its processes only (listings need no full status).
pub fn attempt_state(reader: &StoreReader, attempt: Uuid) -> Result<AttemptState, ToolError> {
    let processes = reader.processes_of_attempt_as::<super::rows::ProcessRow>(attempt)?;
    Ok(state_of(vk::status_process(&processes).map(|(_, p)| p)).0)
}
