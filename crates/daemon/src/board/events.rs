//! `GET /board/api/events`: the board's change feed as Server-Sent Events, driven by the
//! store's change tokens — the same token order every tool answers in.
//!
//! Each event is `change`, its `id` the store token it covers, its data what changed after the
//! previous one: the attempts whose token moved (`attempts`, among those the caller may read)
//! with their cards as a board read makes them (`cards`; none when more than [`MAX_CARDS`]
//! moved), the projects with new activity (`projects`), those activity items oldest first, and
//! the board's `freshness`. The page patches the cards into the board it holds and re-reads the
//! board only when a project has new activity (a task or attempt added, a process started or
//! ended, an approval: what moves the chart and the groups' membership) or an event names an
//! attempt it does not show; a log line, the commonest change, costs no request.
//!
//! Why there is no gap: the stream starts after a token the page holds — `Last-Event-ID` (the
//! browser sends the last `id` it received when it reconnects) or `?since=` (the token of the
//! board the page just read), else the current one, announced by a `hello` event. Each round
//! reads the store's token *before* the data (`query`'s rule), reports every attempt whose
//! token is above the last reported token and every activity item up to the new token, then
//! moves on to that token: a change committed meanwhile is above it and comes in the next
//! round (at worst twice, never lost). Tokens survive a daemon restart (same data dir), so a
//! page left open across one resumes where it stopped; a token of another store epoch or
//! older than the activity's retention is answered with `reset` (the page reloads whole).
//!
//! Cost: a round runs only when the store's token moved (the hub's watch, no polling), at most
//! every [`COALESCE`], and once for all the streams that ask the same question (`RoundMemo`);
//! it reads each visible project's feed after the token and each visible
//! attempt's token (the attempt list is re-read only for projects with new activity: a new
//! task or attempt always makes an item). A comment every [`HEARTBEAT`] keeps proxies from
//! closing a quiet stream; a revoked token ends the stream with an `auth` event.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query as QueryArgs, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::cards::{CardMemo, changed_cards};
use super::detail::token_seq;
use super::model::Card;
use super::{BoardError, BoardState, auth};
use vk_observer_query::activity::{ActivityItem, ActivityRequest, ActivityScope};
use vk_observer_query::detail::Detail;
use vk_observer_query::{Freshness, Query, Since};
use vk_observer_tool_error::ToolError;

/// Commits closer together than this are reported in one event.
const COALESCE: Duration = Duration::from_millis(100);
/// A comment line this often on a quiet stream.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How soon a browser reconnects after the stream dropped.
const RETRY: Duration = Duration::from_millis(1000);
/// Activity pages read per project per round (200 items each) before `reset` is sent instead.
const MAX_PAGES: usize = 5;
/// Most cards an event carries; a round that moved more attempts sends none (the page reads the
/// board).
const MAX_CARDS: usize = 64;

#[derive(Deserialize)]
pub(crate) struct EventArgs {
    since: Option<String>,
}

/// What changed after the previous event (module doc).
#[derive(Debug, Default, Serialize)]
pub(crate) struct Change {
    pub token: String,
    /// True when the page must reload everything (a gap could not be told).
    pub reset: bool,
    pub attempts: Vec<Uuid>,
    /// The cards of `attempts` (module doc); fewer when an attempt is gone, none past [`MAX_CARDS`].
    pub cards: Vec<Card>,
    pub projects: Vec<Uuid>,
    pub activity: Vec<ActivityItem>,
    /// The board's hosts line, as of this round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freshness: Option<Freshness>,
}

/// One stream's position and what it knows of the visible attempts.
struct Follow {
    state: BoardState,
    headers: HeaderMap,
    since: u64,
    first: Option<Event>,
    wake: tokio::sync::watch::Receiver<u64>,
    /// Visible attempts by project, re-read for projects with new activity.
    known: BTreeMap<Uuid, Vec<Uuid>>,
    ended: bool,
}

pub(crate) async fn stream(
    State(state): State<BoardState>,
    headers: HeaderMap,
    QueryArgs(args): QueryArgs<EventArgs>,
) -> Result<impl IntoResponse, BoardError> {
    auth::reader(&state, &headers)?;
    // Subscribe before the token is read: a commit in between still wakes the stream.
    let wake = state.query.store.hub().subscribe_global();
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(args.since);
    let current = state.query.store.current_token();
    let (since, first) = match resume.map(|raw| state.query.since(Some(&raw), "Last-Event-ID")) {
        Some(Ok(Since::After(cut))) => (cut.floor(), None),
        None | Some(Ok(Since::None)) => (current, Some(hello(&state.query))),
        // Another epoch, the future, or not a token: the page reloads from now.
        Some(Ok(Since::Reset)) | Some(Err(_)) => (current, Some(reset(&state.query))),
    };
    let follow = Follow {
        state,
        headers,
        since,
        first,
        wake,
        known: BTreeMap::new(),
        ended: false,
    };
    let events = futures::stream::unfold(follow, |mut f| async move {
        let event = f.next().await?;
        Some((Ok::<Event, Infallible>(event), f))
    });
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(HEARTBEAT).text("keep-alive"));
    // nginx and its kin buffer responses unless told not to: events must go out as they come.
    Ok(([("x-accel-buffering", "no")], sse))
}

fn hello(query: &Query) -> Event {
    let token = query.token();
    Event::default()
        .event("hello")
        .id(token.clone())
        .retry(RETRY)
        .data(serde_json::json!({ "token": token }).to_string())
}

fn reset(query: &Query) -> Event {
    let change = Change {
        token: query.token(),
        reset: true,
        ..Change::default()
    };
    Shared::of(&change).event().retry(RETRY)
}

impl Follow {
    /// The next event, once there is one; None ends the stream.
    async fn next(&mut self) -> Option<Event> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        if self.ended {
            return None;
        }
        loop {
            if self.state.query.store.current_token() > self.since {
                return Some(self.round().await);
            }
            tokio::select! {
                changed = self.wake.changed() => {
                    changed.ok()?;
                    // Let a burst of commits land: one event for them all.
                    tokio::time::sleep(COALESCE).await;
                }
                _ = self.state.shutdown.cancelled() => return None,
            }
        }
    }

    /// One round (module doc): the caller checked again, then what changed.
    async fn round(&mut self) -> Event {
        let caller = match auth::reader(&self.state, &self.headers) {
            Ok(c) => c,
            Err(e) => {
                self.ended = true;
                let body = serde_json::json!({"code": e.code, "message": e.message});
                return Event::default().event("auth").data(body.to_string());
            }
        };
        let key = (self.since, caller.projects.clone());
        let (cell, first) = self.state.rounds.slot(&key);
        let shared = cell
            .get_or_init(|| self.read_round(caller.projects.clone()))
            .await
            .clone();
        if !first {
            // Another stream asked this very question first: its projects with new activity
            // are re-listed here on the next own round (`known` must not miss a new attempt).
            for p in &shared.projects {
                self.known.remove(p);
            }
        }
        if shared.reset {
            self.state.rounds.forget(&key);
        }
        self.since = shared.seq.max(self.since);
        shared.event()
    }

    /// This stream's round read from the store (module doc), for every stream that asks it.
    async fn read_round(&mut self, within: Option<Vec<Uuid>>) -> Arc<Shared> {
        let query = self.state.query.clone();
        let cards = self.state.cards.clone();
        let since = self.since;
        let mut known = std::mem::take(&mut self.known);
        let read = tokio::task::spawn_blocking(move || {
            let c = changes(&query, &cards, within.as_deref(), since, &mut known);
            (c, known)
        })
        .await;
        let change = match read {
            Ok((Ok(c), known)) => {
                self.known = known;
                c
            }
            Ok((Err(e), _)) => failed(&self.state.query, &e.to_string()),
            Err(e) => failed(&self.state.query, &e.to_string()),
        };
        Shared::of(&change)
    }
}

/// A round as every stream sends it: its token and the event's data, serialized once.
pub(crate) struct Shared {
    seq: u64,
    token: String,
    /// A round that asks the page to reload: never kept for later askers.
    reset: bool,
    projects: Vec<Uuid>,
    data: String,
}

impl Shared {
    fn of(change: &Change) -> Arc<Shared> {
        Arc::new(Shared {
            seq: token_seq(&change.token),
            token: change.token.clone(),
            reset: change.reset,
            projects: change.projects.clone(),
            data: serde_json::to_string(change).unwrap_or_else(|_| "{}".into()),
        })
    }

    fn event(&self) -> Event {
        Event::default()
            .event("change")
            .id(self.token.clone())
            .data(self.data.clone())
    }
}

type RoundKey = (u64, Option<Vec<Uuid>>);

/// One round's answer, read once by the stream that asked first and awaited by the rest.
type RoundCell = Arc<tokio::sync::OnceCell<Arc<Shared>>>;

/// The last round asked, by (the token it starts after, the caller's projects): every open
/// page wakes on the same commit and asks from the same token at the same moment, so the first
/// reads and the others wait for its answer and send it (single flight: before, each stream
/// that asked while the first was still reading read the same round again). Kept
/// [`ROUND_FOR`] at most; the answer stays exact (it covers exactly the tokens after the key's
/// up to its own, and a stream goes on from there).
#[derive(Default)]
pub(crate) struct RoundMemo(Mutex<Option<(RoundKey, Instant, RoundCell)>>);

const ROUND_FOR: Duration = Duration::from_secs(1);

impl RoundMemo {
    /// The round for `key`, and true when the caller is the first to ask it (it reads it).
    fn slot(&self, key: &RoundKey) -> (RoundCell, bool) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, at, cell)) = memo.as_ref()
            && k == key
            && at.elapsed() < ROUND_FOR
        {
            return (cell.clone(), false);
        }
        let cell = RoundCell::default();
        *memo = Some((key.clone(), Instant::now(), cell.clone()));
        (cell, true)
    }

    /// Drops `key`'s round (a reset: later askers read their own).
    fn forget(&self, key: &RoundKey) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if memo.as_ref().is_some_and(|(k, _, _)| k == key) {
            *memo = None;
        }
    }
}

/// A round that could not be read: the page reloads whole (nothing is skipped silently).
fn failed(query: &Query, why: &str) -> Change {
    tracing::warn!(
        error = why,
        "board event round failed; asking the page to reload"
    );
    Change {
        token: query.token(),
        reset: true,
        ..Change::default()
    }
}

/// What changed after `since` for a caller limited to `within` (module doc).
fn changes(
    query: &Query,
    cards: &CardMemo,
    within: Option<&[Uuid]>,
    since: u64,
    known: &mut BTreeMap<Uuid, Vec<Uuid>>,
) -> Result<Change, ToolError> {
    let cap = query.store.token();
    let reader = query.read();
    let visible: Vec<Uuid> = reader
        .projects()
        .map_err(ToolError::from)?
        .into_iter()
        .map(|p| p.id)
        .filter(|p| within.is_none_or(|w| w.contains(p)))
        .collect();
    known.retain(|p, _| visible.contains(p));
    let after = query.token_at(since);
    let mut change = Change {
        token: query.token_at(cap.seq),
        ..Change::default()
    };
    for &project in &visible {
        let (items, reset) = project_activity(query, project, &after, cap.seq)?;
        change.reset |= reset;
        if !items.is_empty() || !known.contains_key(&project) {
            known.insert(project, attempts_of_project(&reader, project)?);
        }
        if !items.is_empty() {
            change.projects.push(project);
        }
        change.activity.extend(items);
    }
    change.activity.sort_by_key(|i| token_seq(&i.token));
    let mut moved = Vec::new();
    for &attempt in known.values().flatten() {
        let token = reader.attempt_token(attempt).map_err(ToolError::from)?;
        if token > since {
            moved.push((attempt, token));
        }
    }
    change.attempts = moved.iter().map(|(a, _)| *a).collect();
    if moved.len() <= MAX_CARDS {
        change.cards = changed_cards(query, cards, &moved)?;
    }
    change.freshness = Some(query.freshness());
    Ok(change)
}

/// A project's activity items after `after` up to `cap`, oldest first; true when the feed
/// cannot say what happened after it (retention passed it, or too much to send).
fn project_activity(
    query: &Query,
    project: Uuid,
    after: &str,
    cap: u64,
) -> Result<(Vec<ActivityItem>, bool), ToolError> {
    let mut items = Vec::new();
    let mut from = after.to_string();
    for _ in 0..MAX_PAGES {
        let scope = ActivityScope::Project(project);
        let req = ActivityRequest::new(scope, Some(from), None, Some(200), Some(Detail::Standard))?;
        let page = query.activity(&req)?;
        if page.token_reset {
            return Ok((Vec::new(), true));
        }
        let more = page.has_more;
        items.extend(
            page.items
                .into_iter()
                .filter(|i| token_seq(&i.token) <= cap),
        );
        if !more {
            return Ok((items, false));
        }
        from = page.next_since_token;
    }
    Ok((Vec::new(), true))
}

/// Every attempt of a project (tasks, then their attempts), from the list indexes alone.
fn attempts_of_project(
    reader: &vk_observer_store::StoreReader,
    project: Uuid,
) -> Result<Vec<Uuid>, ToolError> {
    let mut ids = Vec::new();
    let (tasks, _) = reader
        .task_ids_newest_first(project, usize::MAX)
        .map_err(ToolError::from)?;
    for task in tasks {
        let (attempts, _) = reader
            .attempt_ids_newest_first(task, usize::MAX)
            .map_err(ToolError::from)?;
        ids.extend(attempts);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(seq: u64) -> Arc<Shared> {
        Shared::of(&Change {
            token: format!("e.{seq}"),
            ..Change::default()
        })
    }

    #[tokio::test]
    async fn a_round_is_read_once_for_every_stream_that_asks_it() {
        let memo = RoundMemo::default();
        let key: RoundKey = (5, None);
        let (first, ours) = memo.slot(&key);
        assert!(ours, "the first to ask reads");
        let (second, ours) = memo.slot(&key);
        assert!(!ours, "the next waits for that read");
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let read = || async {
            reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            shared(9)
        };
        let (a, b) = tokio::join!(first.get_or_init(read), second.get_or_init(read));
        assert_eq!((a.seq, b.seq), (9, 9));
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Another token or another caller's projects is another question.
        assert!(memo.slot(&(9, None)).1);
        assert!(memo.slot(&(9, Some(vec![Uuid::nil()]))).1);
        // A forgotten round (a reset) is read again by the next to ask.
        let again: RoundKey = (9, Some(vec![Uuid::nil()]));
        memo.forget(&again);
        assert!(memo.slot(&again).1);
    }
}
