//! One attempt opened on the board (`GET /board/api/attempts/{id}`: its status, the tail of its
//! log — or the entries after `?after=N`, so the page follows it live — its changes, and its
//! branch status as cached: `query::branch`, what get_attempt_branch_status answers from, never
//! read from VK here), and the activity feed of the projects the caller may read
//! (`GET /board/api/activity`).
//!
//! An attempt is read only after the caller's grant admits it with the same check the read
//! tools make (`Grant::check_read`, as `get_attempt_status`): a project-limited token gets 403
//! for another project's attempt, exactly as the tool answers `forbidden`.

use axum::extract::{Path, Query as QueryArgs, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::{BoardError, BoardState, auth};
use vk_observer_mcp::access::{Caller, Grant};
use vk_observer_query::activity::{ActivityItem, ActivityRequest, ActivityScope};
use vk_observer_query::branch::{self, RepoBranchStatus};
use vk_observer_query::changes::ChangeSummary;
use vk_observer_query::detail::Detail;
use vk_observer_query::logs::{LogMode, LogRequest};
use vk_observer_query::paging::{PAGE_MAX, PageArgs};
use vk_observer_query::status::AttemptStatus;
use vk_observer_query::{Query, Since};
use vk_observer_tool_error::ToolError;

/// Most log entries one answer carries (the newest, or the next after `after`).
const LOG_LIMIT: usize = 200;
/// Most changed file names one answer lists.
const FILES_LIMIT: usize = 200;
/// Most activity items one answer carries.
const ACTIVITY_LIMIT: usize = 100;

#[derive(Deserialize)]
pub(crate) struct AttemptArgs {
    /// The last entry index the page holds: answer the entries after it (checked here, so a
    /// bad value gets the board's own JSON refusal).
    after: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct AttemptView {
    pub task_title: Option<String>,
    pub status: AttemptStatus,
    pub log: LogView,
    pub changes: ChangesView,
    /// Null until VK's branch status was read (get_attempt_branch_status, a git action, or a
    /// process that ended after one of those: ingest then keeps it current).
    pub branch: Option<BranchView>,
    pub token: String,
}

#[derive(Serialize)]
pub(crate) struct BranchView {
    /// When VK answered it (RFC 3339).
    pub as_of: String,
    /// One per repository of the attempt, in VK's order.
    pub repos: Vec<RepoBranchStatus>,
}

#[derive(Serialize)]
pub(crate) struct LogView {
    pub execution_process_id: Option<Uuid>,
    pub run_reason: Option<String>,
    pub process_status: Option<String>,
    pub entries: Vec<LineView>,
    pub latest_entry_index: Option<u64>,
    /// True when older entries exist than the first shown (tail) or newer than the last (after).
    pub has_more: bool,
}

#[derive(Serialize)]
pub(crate) struct LineView {
    pub entry_index: u64,
    pub kind: String,
    pub text: Option<String>,
    pub tool: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct ChangesView {
    pub ready: bool,
    pub summary: ChangeSummary,
    pub blocked_reason: Option<String>,
    pub files: Vec<String>,
    pub more_files: usize,
}

/// The attempt id of a URL, or a message a person can act on.
fn attempt_id(raw: &str) -> Result<Uuid, BoardError> {
    Uuid::parse_str(raw.trim()).map_err(|_| {
        BoardError::new(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            format!(
                "`{}` is not an attempt id: attempt ids are UUIDs. Open an attempt from the board.",
                clip(raw, 80)
            ),
        )
    })
}

fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// 403 unless `caller` may read `attempt` (the read tools' own check).
pub(crate) fn may_read(query: &Query, caller: &Caller, attempt: Uuid) -> Result<(), BoardError> {
    let mut args = Map::new();
    args.insert("attempt_id".into(), Value::String(attempt.to_string()));
    Grant::of_caller(caller)
        .check_read("get_attempt_status", Some(&args), query)
        .map_err(BoardError::tool)
}

/// `GET /board/api/attempts/{id}?after=N`.
pub(crate) async fn attempt(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    QueryArgs(args): QueryArgs<AttemptArgs>,
) -> Result<axum::Json<AttemptView>, BoardError> {
    let caller = auth::reader(&state, &headers)?;
    let id = attempt_id(&raw)?;
    let after = match args.after.as_deref().map(str::parse::<u64>) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return Err(BoardError::new(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                "`after` must be a log entry index (a whole number).",
            ));
        }
    };
    let query = state.query.clone();
    tokio::task::spawn_blocking(move || {
        may_read(&query, &caller, id)?;
        read_attempt(&query, id, after)
    })
    .await
    .map_err(|e| BoardError::tool(ToolError::internal(e)))?
    .map(axum::Json)
}

fn read_attempt(query: &Query, id: Uuid, after: Option<u64>) -> Result<AttemptView, BoardError> {
    let page = query.attempt_statuses(&[id], Since::None)?;
    let Some(item) = page.attempts.first() else {
        return Err(BoardError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "No attempt {id} in this daemon's cache: it does not exist, was deleted, or VK has not reported it yet."
            ),
        ));
    };
    let status = item.0.status.clone();
    let task_title = status
        .task_id
        .and_then(|t| query.read().task(t).ok().flatten())
        .and_then(|t| {
            t.value
                .get("title")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
    Ok(AttemptView {
        task_title,
        log: read_log(query, id, after)?,
        changes: read_changes(query, id)?,
        branch: branch::cached(&query.read(), id)?.map(|b| BranchView {
            as_of: b.as_of_text(),
            repos: b.repos,
        }),
        status,
        token: page.token,
    })
}

fn read_log(query: &Query, attempt: Uuid, after: Option<u64>) -> Result<LogView, ToolError> {
    let page = query.tail_logs(LogRequest {
        attempt,
        channel: vk_observer_store::keys::Channel::Normalized,
        mode: after.map_or(LogMode::Tail, LogMode::After),
        limit: LOG_LIMIT,
        since: Since::None,
        process: None,
        detail: Detail::Compact,
    })?;
    let entries = page
        .entries
        .into_iter()
        .map(|e| match e.compact {
            Some(c) => LineView {
                entry_index: e.entry_index,
                kind: c.kind,
                text: c.text,
                tool: c.tool.map(|t| {
                    let what = t
                        .command
                        .as_deref()
                        .or(t.path.as_deref())
                        .or(t.target.as_deref());
                    tool_line(&t.name, what, &t.status)
                }),
            },
            // Detail 0 always shows an entry in brief; VK's own form is never sent here.
            None => LineView {
                entry_index: e.entry_index,
                kind: "entry".into(),
                text: None,
                tool: None,
            },
        })
        .collect();
    Ok(LogView {
        execution_process_id: page.execution_process_id,
        run_reason: page.run_reason,
        process_status: page.process_status,
        entries,
        latest_entry_index: page.latest_entry_index,
        has_more: page.has_more,
    })
}

fn read_changes(query: &Query, attempt: Uuid) -> Result<ChangesView, ToolError> {
    let c = query.attempt_changes(attempt, false)?;
    let more_files = c.files.len().saturating_sub(FILES_LIMIT);
    Ok(ChangesView {
        ready: c.ready,
        summary: c.summary,
        blocked_reason: c.blocked_reason,
        files: c.files.into_iter().take(FILES_LIMIT).collect(),
        more_files,
    })
}

#[derive(Serialize)]
pub(crate) struct ActivityView {
    /// Newest first, across the caller's projects.
    pub items: Vec<ActivityItem>,
    pub token: String,
}

/// `GET /board/api/activity`: the newest items of every project the caller may read.
pub(crate) async fn activity(
    State(state): State<BoardState>,
    headers: HeaderMap,
) -> Result<axum::Json<ActivityView>, BoardError> {
    let caller = auth::reader(&state, &headers)?;
    let query = state.query.clone();
    tokio::task::spawn_blocking(move || newest_activity(&query, caller.projects.as_deref()))
        .await
        .map_err(|e| BoardError::tool(ToolError::internal(e)))?
        .map(axum::Json)
        .map_err(BoardError::tool)
}

fn newest_activity(query: &Query, within: Option<&[Uuid]>) -> Result<ActivityView, ToolError> {
    let token = query.token();
    let all = PageArgs {
        cursor: None,
        limit: PAGE_MAX,
    };
    let mut items = Vec::new();
    for p in query.list_projects_within(&all, within)?.projects {
        let scope = ActivityScope::Project(p.project_id);
        let limit = Some(ACTIVITY_LIMIT as u32);
        let req = ActivityRequest::new(scope, None, None, limit, Some(Detail::Standard))?;
        items.extend(query.activity(&req)?.items);
    }
    items.sort_by_key(|i| std::cmp::Reverse(token_seq(&i.token)));
    items.truncate(ACTIVITY_LIMIT);
    Ok(ActivityView { items, token })
}

/// A tool call on one line: `Bash: cargo build (success)`.
pub(crate) fn tool_line(name: &str, what: Option<&str>, status: &str) -> String {
    let mut line = name.to_string();
    if let Some(w) = what.filter(|w| !w.is_empty()) {
        line.push_str(": ");
        line.push_str(w);
    }
    if !status.is_empty() {
        line.push_str(&format!(" ({})", status.replace('_', " ")));
    }
    line
}

/// A wire token's sequence number (`<epoch>.<n>`), for ordering items of several feeds.
pub(crate) fn token_seq(token: &str) -> u64 {
    token
        .rsplit('.')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
