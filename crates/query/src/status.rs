//! `get_attempt_status`: an attempt's state from its cached sessions and processes, with VK's
//! `/status` rules (see docs/vk-contract.md §7.1) and a small `result` telling an agent what to
//! do next. One attempt or a batch; with `since_token`, only attempts changed since then.

use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::approvals::{PendingApproval, WaitingFor, waiting_approvals};
use super::detail::{self, Detail, Rules};
use super::status_memo::StatusItem;
pub use super::verdict::{AttemptResult, NextAction, Outcome, RunState};
use super::verdict::{VerdictInput, verdict};
use super::{Freshness, Query, Since, View};
use vk_observer_store::StoreReader;
use vk_observer_store::events::only_several;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{self as vk, ProcessStatus, RunReason, rfc3339};

/// The state lives beside the verdict that routes on it (so `verdict` needs nothing of this
/// module); callers keep naming it `status::AttemptState`.
pub use super::verdict::AttemptState;

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
    /// Fleet node only: the host that owns it (`[fleet] host`); absent on a single host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Fleet node only, when several hosts report this attempt id (a copied VK database): every
    /// such host, sorted; a mutation on the attempt then needs `host`. Absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
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
    /// Verdict and next step (seed 003): outcome, summary, recommended_next_action, next_tool,
    /// finalized_at, exit_code, last_error_code, last_error (state and the deprecated reason
    /// from detail 1). Detail 0 leaves it out while it only says "wait" (next_tool
    /// `wait_for_attempt_change`, no next action).
    pub result: AttemptResult,
    /// True while a dev server of this attempt runs (it never affects `state`).
    pub dev_server_running: bool,
    /// Tool calls the agent is blocked on, waiting for a decision (oldest first): answer each
    /// with respond_approval. Empty when nothing waits.
    pub pending_approvals: Vec<PendingApproval>,
    /// `approval` while the agent is blocked on `pending_approvals` (the state stays `running`:
    /// the process is alive but does nothing until answered); null otherwise.
    pub waiting_for: Option<WaitingFor>,
    /// Token of the last change to this attempt or anything under it (sessions, processes,
    /// logs, changes). Compare with `since_token` semantics; opaque string.
    pub attempt_token: String,
    /// Token usage and cost of the attempt's coding-agent runs (`query::usage`); absent when
    /// no run reported any (an executor that writes none, or nothing read yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::usage::Usage>,
}

/// The statuses asked for, and the page facts every answer carries. Rendered in one of two
/// shapes (`Shape`); `StatusAnswer` is the schema covering both.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatusPage {
    /// The attempts asked for (in request order); with `since_token`, only those changed since.
    pub attempts: Vec<StatusItem>,
    pub not_found: Vec<Uuid>,
    pub unchanged: usize,
    pub token: String,
    pub token_reset: bool,
    pub freshness: Freshness,
}

/// How `get_attempt_status` answers (seed 002): a single call (`attempt_id`) with the status
/// fields at the top level, a batch (`attempt_ids`) with `attempts: [...]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Single,
    Batch,
}

/// Answer of `get_attempt_status`. Single call (`attempt_id`): the attempt's status fields at
/// the top level (absent only when `since_token` showed it unchanged: then `unchanged` is 1).
/// Batch (`attempt_ids`): `attempts`, one status each. Both: `not_found`, `unchanged`, `token`,
/// `token_reset`, `freshness`.
#[derive(Debug, JsonSchema)]
#[allow(dead_code)] // the schema of what `StatusPage::render` writes; never built
pub struct StatusAnswer {
    /// Single call only: the status fields of the attempt, at the top level.
    #[serde(flatten)]
    status: Option<AttemptStatus>,
    /// Batch call only: the attempts asked for (in request order); with `since_token`, only
    /// those changed since.
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<Vec<AttemptStatus>>,
    /// Requested ids the cache does not know (never created, deleted, or not yet ingested).
    not_found: Vec<Uuid>,
    /// Number of requested attempts left out because nothing changed since `since_token`
    /// (detail 0 leaves out a 0).
    unchanged: usize,
    /// Store token at the time of this read; pass it as `since_token` to later calls.
    token: String,
    /// True when `since_token` was from another store generation or the future: the answer is
    /// complete, as if no token had been given.
    token_reset: bool,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    freshness: Freshness,
}

/// The status fields each detail level shows (`query::detail`): level 0 keeps the fields of
/// seed 002's "SHALL include" list (attempt, task, branch, times, session, latest process,
/// state, activity, failure text: null when that is their value, so a scenario such as "no
/// sessions" reads `latest_session_id: null`), `result`'s routing fields and the approvals;
/// `attempt_token` and `latest_process` are from 1 (the page's `token` is the `since_token`).
/// `result` shows at level 0 once it routes somewhere other than "wait"
/// (`drop_waiting_result`): a poll of a running attempt needs no verdict.
pub const STATUS_RULES: Rules = Rules {
    finish: Some(drop_waiting_result),
    kept: &[
        "attempt_id",
        "task_id",
        "workspace_branch",
        "created_at",
        "updated_at",
        "latest_session_id",
        "latest_execution_process_id",
        "state",
        "last_activity_at",
        "failure_summary",
    ],
    standard: &["attempt_token", "latest_process"],
    verbatim: &[],
    nested: &[("result", &RESULT_RULES)],
};

/// `result` below detail 2: the routing fields (`outcome`, `summary`,
/// `recommended_next_action`, `next_tool`, `finalized_at`, `exit_code`, `last_error_code`,
/// `last_error`) at 0; from 1 the finer `state` (at 0 `outcome` and the status's own `state`
/// say it) and the deprecated `reason` (= `summary`; shown from 1 only, as before, so level 0
/// does not carry the sentence twice).
pub(crate) const RESULT_RULES: Rules = Rules {
    finish: None,
    kept: &[],
    standard: &["reason", "state"],
    verbatim: &[],
    nested: &[],
};

/// How a status answer is shown: its detail level and whether `result` is included.
#[derive(Debug, Clone, Copy)]
pub struct StatusView {
    pub detail: Detail,
    pub include_result: bool,
}

impl StatusView {
    /// The full answer (what the tool answered before detail levels).
    #[cfg(test)]
    pub(crate) const VERBATIM: StatusView = StatusView {
        detail: Detail::Verbatim,
        include_result: true,
    };

    /// One memoized status as this view shows it (the memo's rendering unless `result` goes).
    pub(crate) fn item(
        self,
        item: &StatusItem,
    ) -> (
        std::borrow::Cow<'_, serde_json::Value>,
        std::borrow::Cow<'_, str>,
    ) {
        use std::borrow::Cow;
        let (value, json) = item.0.shown(self.detail);
        if self.include_result {
            return (Cow::Borrowed(value), Cow::Borrowed(json));
        }
        let mut v = value.clone();
        if let serde_json::Value::Object(m) = &mut v {
            m.remove("result");
        }
        let text = v.to_string();
        (Cow::Owned(v), Cow::Owned(text))
    }

    /// A page's own fields (everything but the statuses) as this view shows them.
    pub(crate) fn tail<T: Serialize>(
        self,
        tail: &T,
    ) -> Result<(serde_json::Value, String), ToolError> {
        if self.detail == Detail::Verbatim {
            let text = serde_json::to_string(tail).map_err(ToolError::internal)?;
            let value = serde_json::to_value(tail).map_err(ToolError::internal)?;
            return Ok((value, text));
        }
        let value = serde_json::to_value(tail).map_err(ToolError::internal)?;
        let value = detail::shape(value, &PAGE_RULES, self.detail);
        let text = value.to_string();
        Ok((value, text))
    }
}

/// A status page's own fields below level 2: a zero `unchanged` is left out at level 0 (absent
/// means none was left out).
const PAGE_RULES: Rules = Rules {
    finish: Some(drop_zero_unchanged),
    kept: &[],
    standard: &[],
    verbatim: &[],
    nested: &[],
};

fn drop_zero_unchanged(page: &mut serde_json::Map<String, serde_json::Value>, level: Detail) {
    if level == Detail::Compact
        && page.get("unchanged").and_then(serde_json::Value::as_u64) == Some(0)
    {
        page.remove("unchanged");
    }
}

/// Level 0 leaves a status's `result` out while it only says "wait" (no next action, next tool
/// `wait_for_attempt_change`): `state` already says the attempt is working or being prepared,
/// and `result` appears once there is something to route on (finished, stopped, blocked on an
/// approval).
fn drop_waiting_result(status: &mut serde_json::Map<String, serde_json::Value>, level: Detail) {
    let waiting = status.get("result").is_some_and(|r| {
        r.get("recommended_next_action").is_none()
            && r.get("next_tool").and_then(serde_json::Value::as_str)
                == Some("wait_for_attempt_change")
    });
    if level == Detail::Compact && waiting {
        status.remove("result");
    }
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
    /// The page as (JSON value, compact JSON text) in `shape`, reusing each attempt's memoized
    /// renderings: one serialization of the small page tail instead of two of the whole page.
    /// Both describe the same JSON document (key order aside).
    pub fn render(
        &self,
        shape: Shape,
        view: StatusView,
    ) -> Result<(serde_json::Value, String), ToolError> {
        let tail = PageTail {
            not_found: &self.not_found,
            unchanged: self.unchanged,
            token: &self.token,
            token_reset: self.token_reset,
            freshness: &self.freshness,
        };
        let (value, tail_text) = view.tail(&tail)?;
        Ok(match shape {
            Shape::Batch => self.render_batch(value, &tail_text, view),
            Shape::Single => self.render_single(value, tail_text, view),
        })
    }

    fn render_batch(
        &self,
        mut value: serde_json::Value,
        tail_text: &str,
        view: StatusView,
    ) -> (serde_json::Value, String) {
        let items: Vec<_> = self.attempts.iter().map(|a| view.item(a)).collect();
        let attempts: Vec<serde_json::Value> =
            items.iter().map(|(v, _)| v.as_ref().clone()).collect();
        if let serde_json::Value::Object(m) = &mut value {
            m.insert("attempts".into(), serde_json::Value::Array(attempts));
        }
        let body: usize = items.iter().map(|(_, j)| j.len() + 1).sum();
        let mut text = String::with_capacity(body + tail_text.len() + 16);
        text.push_str("{\"attempts\":[");
        for (i, (_, json)) in items.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(json);
        }
        text.push_str("],");
        // `tail_text` is a non-empty object: drop its opening brace.
        text.push_str(&tail_text[1..]);
        (value, text)
    }

    /// The one status's fields, then the tail's (their keys never collide: the status's token
    /// is `attempt_token`). Just the tail when the attempt was unchanged since `since_token`.
    fn render_single(
        &self,
        mut value: serde_json::Value,
        tail_text: String,
        view: StatusView,
    ) -> (serde_json::Value, String) {
        let Some(item) = self.attempts.first() else {
            return (value, tail_text);
        };
        let (status, json) = view.item(item);
        if let (serde_json::Value::Object(m), serde_json::Value::Object(status)) =
            (&mut value, status.as_ref())
        {
            for (k, v) in status {
                m.insert(k.clone(), v.clone());
            }
        }
        // Both are non-empty objects: the status without its closing brace, a comma, the tail
        // without its opening brace.
        let mut text = String::with_capacity(json.len() + tail_text.len());
        text.push_str(&json[..json.len() - 1]);
        text.push(',');
        text.push_str(&tail_text[1..]);
        (value, text)
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
            ..
        } = self.view_after(&since);
        let epoch = self.store.epoch();
        let mut attempts = Vec::with_capacity(ids.len());
        let mut not_found = Vec::new();
        let mut unchanged = 0;
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        let print = self.token_printer();
        for &id in ids {
            if !seen.insert(id) {
                continue;
            }
            let attempt_token = reader.attempt_token(id)?;
            if since.cut().is_some_and(|cut| cut.saw(attempt_token)) {
                unchanged += 1;
                continue;
            }
            match self
                .status_memo
                .status(&reader, id, attempt_token, epoch, &print)?
            {
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
    epoch: vk_observer_store::token::Epoch,
) -> Result<Option<AttemptStatus>, ToolError> {
    let printed = vk_observer_store::token::Token {
        epoch,
        seq: attempt_token,
    }
    .to_string();
    attempt_status_printed(reader, id, printed)
}

/// [`attempt_status`] with its `attempt_token` already printed (a fleet node prints its hosts'
/// places, `Query::token_at`).
pub(crate) fn attempt_status_printed(
    reader: &StoreReader,
    id: Uuid,
    printed_token: String,
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
    let changes = reader.changes(id)?;
    let pending_approvals = waiting_approvals(reader, id, &processes)?;
    let result = verdict(
        reader,
        VerdictInput {
            state,
            process: process.map(|(pid, p)| (*pid, p)),
            has_session: latest_session.is_some(),
            changes: changes.as_ref().map(|c| &c.value),
            awaiting_approval: !pending_approvals.is_empty(),
        },
    )?;
    Ok(Some(AttemptStatus {
        attempt_id: id,
        task_id: attempt.task_id,
        host: attempt.host,
        hosts: only_several(attempt.hosts.unwrap_or_default()),
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
        waiting_for: (!pending_approvals.is_empty()).then_some(WaitingFor::Approval),
        pending_approvals,
        attempt_token: printed_token,
        usage: super::usage::of_processes(reader, &processes)?,
    }))
}

/// Session summary used by task and attempt listings: (latest session id, its executor).
pub(crate) fn latest_session_of(
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
pub(crate) fn attempt_state(
    reader: &StoreReader,
    attempt: Uuid,
) -> Result<AttemptState, ToolError> {
    let processes = reader.processes_of_attempt_as::<super::rows::ProcessRow>(attempt)?;
    Ok(state_of(vk::status_process(&processes).map(|(_, p)| p)).0)
}
