//! The board's read model: who is looking and what they may do (`session`), and every attempt
//! the caller may read, by project, grouped by what needs a person (`board`): waiting on an
//! approval (with its age and expiry), failed (with `last_error_code` and the verdict's
//! summary), running (with its last activity and last log line), completed, idle.
//!
//! Built from the same read models the tools answer from — `list_projects` (filtered to the
//! caller's projects as the tool's listing is), `list_tasks`, and per attempt `cards` (from
//! `list_task_attempts` and `get_attempt_status`, each card kept per attempt token) — so the
//! board and an orchestrator's tools never disagree. Bounded: at most [`MAX_TASKS`] tasks per project
//! (newest first) and [`MAX_ATTEMPTS`] attempts per task; `truncated` says when more exist.
//! The chart of attempts started / finished / failed over time (`query::timeline`) counts the
//! attempts shown. Every open page re-reads the board after the same change, so the last answer
//! is kept for the same caller while it covers what the asking page has seen (`BoardMemo`).

use std::time::{Duration, Instant};

use axum::extract::{Query as QueryArgs, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use uuid::Uuid;

use super::cards::CardMemo;
use super::{BoardError, BoardState, auth};
use vk_observer_config::access::Scope;
use vk_observer_mcp::access::Caller;
use vk_observer_query::approvals::PendingApproval;
use vk_observer_query::paging::PageArgs;
use vk_observer_query::status::AttemptState;
use vk_observer_query::timeline::{Timeline, timeline};
use vk_observer_query::{Freshness, Query, Since};
use vk_observer_tool_error::ToolError;

/// Most tasks per project the board shows (the newest).
pub(crate) const MAX_TASKS: usize = 200;
/// Most attempts per task the board shows (the newest).
pub(crate) const MAX_ATTEMPTS: usize = 10;

/// Who is looking and what the page may offer them.
#[derive(Debug, Serialize)]
pub(crate) struct Session {
    /// The token's name (`loopback` with no token in use).
    pub caller: String,
    pub scopes: String,
    /// Approve / deny buttons (scope `approve`).
    pub can_approve: bool,
    /// Stop buttons (scope `write`).
    pub can_stop: bool,
    /// Whether this daemon needs a token (then the page offers "sign out").
    pub login_required: bool,
    /// The projects the token is limited to; absent for every project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projects: Option<Vec<Uuid>>,
}

impl Session {
    pub(crate) fn of(caller: &Caller, state: &BoardState) -> Session {
        Session {
            caller: caller.name.clone(),
            scopes: caller.scopes.names(),
            can_approve: caller.scopes.contains(Scope::Approve),
            can_stop: caller.scopes.contains(Scope::Write),
            login_required: state.tokens.in_use(),
            projects: caller.projects.clone(),
        }
    }
}

/// `GET /board/api/session`.
pub(crate) async fn session(
    State(state): State<BoardState>,
    headers: HeaderMap,
) -> Result<axum::Json<Session>, BoardError> {
    let caller = auth::reader(&state, &headers)?;
    Ok(axum::Json(Session::of(&caller, &state)))
}

/// The whole board.
#[derive(Debug, Serialize)]
pub(crate) struct Board {
    /// Store token this board was read at (the event stream goes on from it).
    pub token: String,
    pub freshness: Freshness,
    pub session: Session,
    pub projects: Vec<ProjectBoard>,
    /// Attempts started, finished and failed over time, of the attempts shown.
    pub chart: Timeline,
    /// True when a project had more tasks, or a task more attempts, than the board shows.
    pub truncated: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct ProjectBoard {
    pub project_id: Uuid,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub approval: Vec<Card>,
    pub failed: Vec<Card>,
    pub running: Vec<Card>,
    pub completed: Vec<Card>,
    pub idle: Vec<Card>,
}

/// One attempt on the board.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Card {
    pub attempt_id: Uuid,
    pub task_id: Option<Uuid>,
    pub task_title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub executor: Option<String>,
    pub branch: Option<String>,
    pub state: AttemptState,
    pub created_at: Option<String>,
    pub last_activity_at: Option<String>,
    /// The verdict's one sentence (`result.summary`).
    pub summary: String,
    pub last_error_code: Option<String>,
    pub failure_summary: Option<String>,
    pub approvals: Vec<PendingApproval>,
    /// Running attempts: the newest log entry's text.
    pub last_line: Option<String>,
    /// USD, where the agent reported it (`query::usage`).
    pub cost_usd: Option<f64>,
    pub attempt_token: String,
}

/// `?seen=`: the newest token the page has seen (the last change event's id).
#[derive(serde::Deserialize)]
pub(crate) struct BoardArgs {
    seen: Option<String>,
}

/// `GET /board/api/board`: from the memo when it is recent and already covers what the page
/// has seen (`BoardMemo`), else read anew.
pub(crate) async fn board(
    State(state): State<BoardState>,
    headers: HeaderMap,
    QueryArgs(args): QueryArgs<BoardArgs>,
) -> Result<Response, BoardError> {
    let caller = auth::reader(&state, &headers)?;
    let session = Session::of(&caller, &state);
    // The token before the read: the memo never holds data older than its key.
    let token = state.query.store.current_token();
    let whose = Whose {
        caller: format!("{}|{}", session.caller, session.scopes),
        within: caller.projects.clone(),
    };
    // A token of this store the page has seen; anything else asks for the current one.
    let at_least = match args.seen.map(|raw| state.query.since(Some(&raw), "seen")) {
        Some(Ok(Since::After(seen))) => seen.floor(),
        _ => token,
    };
    if let Some(body) = state.board_memo.get(&whose, at_least) {
        return Ok(json_body(body));
    }
    let query = state.query.clone();
    let within = caller.projects.clone();
    let memo = state.cards.clone();
    let built =
        tokio::task::spawn_blocking(move || read_board(&query, &memo, within.as_deref(), session))
            .await
            .map_err(|e| BoardError::tool(ToolError::internal(e)))??;
    let body = bytes::Bytes::from(serde_json::to_vec(&built).map_err(ToolError::internal)?);
    state.board_memo.put(whose, token, body.clone());
    Ok(json_body(body))
}

fn json_body(body: bytes::Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Whose board: the caller and the projects its token may read.
#[derive(Debug, Clone, PartialEq)]
struct Whose {
    caller: String,
    within: Option<Vec<Uuid>>,
}

/// The last board answered and the store token it was read at, reused for the same caller
/// while it covers every change the asking page has seen (its `seen` token, else the store's
/// current one) and for at most [`MEMO_FOR`], so the ages it shows stay close: every open page
/// re-reads the board after the same change events, and all but the first of them get it
/// without a read. A change after the memo's token comes to each page as an event with a
/// higher id, whose re-read then misses the memo: no page keeps a board older than what it saw.
#[derive(Default)]
pub(crate) struct BoardMemo(std::sync::Mutex<Option<(Whose, u64, Instant, bytes::Bytes)>>);

/// How long a memoized board is answered at most (the page re-reads at most once a second).
const MEMO_FOR: Duration = Duration::from_millis(1000);

impl BoardMemo {
    fn get(&self, whose: &Whose, at_least: u64) -> Option<bytes::Bytes> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (w, token, at, body) = memo.as_ref()?;
        (w == whose && *token >= at_least && at.elapsed() < MEMO_FOR).then(|| body.clone())
    }

    fn put(&self, whose: Whose, token: u64, body: bytes::Bytes) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((whose, token, Instant::now(), body));
    }
}

/// The board as `within` (None: every project) sees it.
pub(crate) fn read_board(
    query: &Query,
    memo: &CardMemo,
    within: Option<&[Uuid]>,
    session: Session,
) -> Result<Board, ToolError> {
    let all = PageArgs {
        cursor: None,
        limit: vk_observer_query::paging::PAGE_MAX,
    };
    let list = query.list_projects_within(&all, within)?;
    let mut truncated = list.has_more;
    let mut projects = Vec::with_capacity(list.projects.len());
    let mut times = Vec::new();
    for p in list.projects {
        let (cards, cut) = super::cards::project_cards(query, memo, p.project_id, &mut times)?;
        truncated |= cut;
        let mut board = ProjectBoard {
            project_id: p.project_id,
            name: p.project_name,
            host: p.host,
            approval: vec![],
            failed: vec![],
            running: vec![],
            completed: vec![],
            idle: vec![],
        };
        for card in cards {
            let group = match (card.approvals.is_empty(), card.state) {
                (false, _) => &mut board.approval,
                (true, AttemptState::Failed) => &mut board.failed,
                (true, AttemptState::Running) => &mut board.running,
                (true, AttemptState::Completed) => &mut board.completed,
                (true, AttemptState::Idle) => &mut board.idle,
            };
            group.push(card);
        }
        sort_groups(&mut board);
        projects.push(board);
    }
    Ok(Board {
        token: list.token,
        freshness: list.freshness,
        session,
        projects,
        chart: timeline(&times, chrono::Utc::now()),
        truncated,
    })
}

/// The newest first everywhere but approvals, where the one waiting longest leads.
fn sort_groups(b: &mut ProjectBoard) {
    let newest = |a: &Card, c: &Card| c.last_activity_at.cmp(&a.last_activity_at);
    b.failed.sort_by(newest);
    b.running.sort_by(newest);
    b.completed.sort_by(newest);
    b.idle.sort_by(newest);
    let waited = |c: &Card| {
        c.approvals
            .iter()
            .filter_map(|a| a.age_ms)
            .max()
            .unwrap_or(0)
    };
    b.approval.sort_by_key(|c| std::cmp::Reverse(waited(c)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memoized_board_serves_only_pages_it_covers() {
        let memo = BoardMemo::default();
        let whose = Whose {
            caller: "ops|read".into(),
            within: None,
        };
        assert!(memo.get(&whose, 0).is_none(), "nothing memoized yet");
        memo.put(whose.clone(), 10, bytes::Bytes::from_static(b"{}"));
        // A page that saw token 7 or 10 gets the board read at 10; one that saw 11 does not.
        assert!(memo.get(&whose, 7).is_some());
        assert!(memo.get(&whose, 10).is_some());
        assert!(memo.get(&whose, 11).is_none());
        // Another caller, or the same one limited to some projects, never shares it.
        let other = Whose {
            caller: "dev|read".into(),
            within: None,
        };
        let limited = Whose {
            within: Some(vec![Uuid::nil()]),
            ..whose.clone()
        };
        assert!(memo.get(&other, 0).is_none());
        assert!(memo.get(&limited, 0).is_none());
    }
}
