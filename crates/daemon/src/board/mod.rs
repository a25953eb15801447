//! The board (issue 41): one page for the people who run the agents, served on the MCP
//! listener at `GET /board` (`GET /` redirects there). Everything it shows comes from the cache
//! through the `query` layer, the same read models the tools answer from; it changes nothing
//! but through the tools' own handlers (`VkTools::call_as`: grant, audit, proxy).
//!
//! - `assets`: the page (one HTML, two scripts, one CSS, embedded: no build step, nothing fetched
//!   from elsewhere) and the headers every board answer carries (a strict CSP, no caching).
//! - `auth`: who is looking — the tokens of `/mcp` (a login form puts the token in an
//!   HttpOnly, SameSite=Strict cookie; an `Authorization: Bearer` header works too) — and the
//!   Origin check in front of every POST.
//! - `model`: the board's read model: hosts and freshness, attempts by project, grouped by
//!   what needs a person (`cards`: one attempt's card, kept per attempt token). `detail`: one attempt (status, log, changes) and the activity feed.
//! - `events`: Server-Sent Events driven by the store's change tokens, resumable by
//!   `Last-Event-ID` with no gap. `actions`: approve / deny and stop.
//!
//! Why it is safe by the tools' rules: every read starts from the caller of the request (its
//! scopes and project limit: `mcp::access`), an attempt is read only after the grant's own
//! `check_read` admits it, and a mutation goes through `call_as`, which checks the grant again
//! before the handler runs, so the page hiding a button is a courtesy, never the guard.

mod actions;
mod assets;
mod auth;
mod cards;
mod detail;
mod events;
mod model;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use vk_observer_mcp::VkTools;
use vk_observer_mcp::access::TokenBook;
use vk_observer_query::Query;
use vk_observer_tool_error::ToolError;

/// What every board handler reads from.
#[derive(Clone)]
pub(crate) struct BoardState {
    pub query: Query,
    /// The tools' handler, for approve / deny and stop (`VkTools::call_as`).
    pub tools: VkTools,
    /// The tokens `/mcp` takes: the board takes the same.
    pub tokens: Arc<TokenBook>,
    /// `[mcp] allowed_origins`: origins allowed besides the page's own (a proxy in front).
    pub allowed_origins: Arc<Vec<String>>,
    /// The names the daemon answers as: loopback plus `[mcp] allowed_hosts`, as `/mcp`.
    pub allowed_hosts: Arc<Vec<String>>,
    /// Ends the event streams when the daemon stops.
    pub shutdown: CancellationToken,
    /// The last board answered (`model::BoardMemo`).
    pub board_memo: Arc<model::BoardMemo>,
    /// The last event round computed (`events::RoundMemo`).
    pub rounds: Arc<events::RoundMemo>,
    /// The cards made, per attempt token (`cards::CardMemo`).
    pub cards: Arc<cards::CardMemo>,
}

impl BoardState {
    /// From the MCP endpoint the daemon serves (its tokens, handler and settings).
    pub(crate) fn of(mcp: &vk_observer_mcp::McpEndpoint) -> BoardState {
        BoardState {
            // The board's tokens are this daemon's own, also on a fleet node: a page is served
            // by one node (its event ids and `?seen=` compared as local tokens); a page that
            // reconnects to another node is told to reload (another epoch).
            query: vk_observer_query::Query {
                fleet_tokens: false,
                ..mcp.handler.query.clone()
            },
            tools: mcp.handler.clone(),
            tokens: mcp.guard.tokens.clone(),
            allowed_origins: Arc::new(mcp.guard.settings.allowed_origins.clone()),
            allowed_hosts: Arc::new(
                ["localhost", "127.0.0.1", "::1"]
                    .iter()
                    .map(|h| h.to_string())
                    .chain(mcp.guard.settings.allowed_hosts.iter().cloned())
                    .collect(),
            ),
            shutdown: mcp.guard.parking.shutdown.clone(),
            board_memo: Arc::default(),
            rounds: Arc::default(),
            cards: Arc::default(),
        }
    }
}

/// The board's routes, every answer with the board's security headers (`assets::secured`).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(state: BoardState) -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/board") }))
        .route("/board", get(assets::page))
        .route("/board/", get(|| async { Redirect::to("/board") }))
        .route("/board/board.js", get(assets::script))
        .route("/board/board-chart.js", get(assets::chart))
        .route("/board/board.css", get(assets::style))
        .route("/board/login", post(auth::login))
        .route("/board/logout", post(auth::logout))
        .route("/board/api/session", get(model::session))
        .route("/board/api/board", get(model::board))
        .route("/board/api/attempts/{id}", get(detail::attempt))
        .route("/board/api/activity", get(detail::activity))
        .route("/board/api/events", get(events::stream))
        .route("/board/api/approvals/{id}", post(actions::respond))
        .route("/board/api/attempts/{id}/stop", post(actions::stop))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::known_host,
        ))
        .layer(axum::middleware::map_response(assets::secured))
        .with_state(state)
}

/// A refusal or failure as the page shows it: a status, a stable code and one sentence.
#[derive(Debug)]
pub(crate) struct BoardError {
    pub status: StatusCode,
    /// `login_required`, `token_refused`, `origin_missing`, `origin_refused`, or a tool's
    /// error code (`forbidden`, `not_found`, `invalid_argument`, …).
    pub code: String,
    pub message: String,
}

impl BoardError {
    pub(crate) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        BoardError {
            status,
            code: code.to_string(),
            message: message.into(),
        }
    }

    /// A query or tool error: its code and hint, with the HTTP status that fits the code.
    pub(crate) fn tool(e: ToolError) -> Self {
        BoardError::coded(e.code.as_str(), e.hint)
    }

    /// An error envelope's `code` and `hint` (`{code, retryable, hint, details}`).
    pub(crate) fn coded(code: &str, hint: String) -> Self {
        let status = match code {
            c if c == "not_found" || c.starts_with("unknown_") => StatusCode::NOT_FOUND,
            "forbidden" => StatusCode::FORBIDDEN,
            "invalid_argument" => StatusCode::BAD_REQUEST,
            "internal" => StatusCode::INTERNAL_SERVER_ERROR,
            c if c.starts_with("upstream_") => StatusCode::BAD_GATEWAY,
            _ => StatusCode::CONFLICT,
        };
        BoardError::new(status, code, hint)
    }
}

impl From<ToolError> for BoardError {
    fn from(e: ToolError) -> Self {
        BoardError::tool(e)
    }
}

impl IntoResponse for BoardError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.code, "message": self.message});
        (self.status, axum::Json(body)).into_response()
    }
}
