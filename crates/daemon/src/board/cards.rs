//! The board's cards: one per attempt shown (`model::Card`), made from the attempt's status
//! (`get_attempt_status`), its newest session's executor (as `list_task_attempts` says it) and
//! its newest log line, and kept per attempt token (`CardMemo`): for a board read (`project_cards`) and for
//! the attempts a change event names (`changed_cards`, which the event carries).
//!
//! Why kept: every change event makes every open page re-read the board, and most attempts did
//! not change: re-making their cards (the listing's session and process rows, the status) was
//! most of a board read (issue 41's cost). Why exact: a card is a function of the attempt's
//! rows, whose every change moves its token (its status, its sessions, its log), and of its
//! task's title, so a kept card is used only for the same store epoch, token and title. The
//! token is read before the rows, so a card may hold rows newer than its token (made again on
//! the next read), never older. A card waiting on an approval is made anew on every read: its
//! age and expiry move with the clock.

use std::collections::HashMap;
use std::sync::Mutex;

use uuid::Uuid;

use super::model::{Card, MAX_ATTEMPTS, MAX_TASKS};
use vk_observer_query::logs::{LogMode, LogRequest};
use vk_observer_query::paging::PageArgs;
use vk_observer_query::rows::{AttemptRow, SessionRow};
use vk_observer_query::status::{AttemptState, AttemptStatus};
use vk_observer_query::tasks::{TaskFilter, TaskSummary};
use vk_observer_query::timeline::AttemptTimes;
use vk_observer_query::{Query, Since};
use vk_observer_store::StoreReader;
use vk_observer_store::token::Epoch;
use vk_observer_tool_error::ToolError;

/// Cards kept before the memo is emptied and refilled (a few MB at most).
const CAPACITY: usize = 4096;

/// One attempt's card as made at a token (module doc).
#[derive(Clone)]
struct Kept {
    epoch: Epoch,
    token: u64,
    title: String,
    card: Card,
    times: AttemptTimes,
}

/// The cards made, by attempt (module doc).
#[derive(Default)]
pub(crate) struct CardMemo(Mutex<HashMap<Uuid, Kept>>);

impl CardMemo {
    fn get(&self, attempt: Uuid, epoch: Epoch, token: u64, title: &str) -> Option<Kept> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(&attempt)
            .filter(|k| k.epoch == epoch && k.token == token && k.title == title)
            .cloned()
    }

    fn put(&self, attempt: Uuid, kept: Kept) {
        if !kept.card.approvals.is_empty() {
            return; // its clock moves (module doc)
        }
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if memo.len() >= CAPACITY && !memo.contains_key(&attempt) {
            memo.clear();
        }
        memo.insert(attempt, kept);
    }
}

/// An attempt the board shows: its id, its token read before its rows, its task's title.
struct Shown {
    attempt: Uuid,
    token: u64,
    title: String,
}

/// Every shown attempt of a project as a card, tasks newest first and each task's attempts
/// newest first (and their times in `times`, for the chart); true when some were left out.
pub(crate) fn project_cards(
    query: &Query,
    memo: &CardMemo,
    project: Uuid,
    times: &mut Vec<AttemptTimes>,
) -> Result<(Vec<Card>, bool), ToolError> {
    let all = PageArgs {
        cursor: None,
        limit: MAX_TASKS,
    };
    let tasks = query.list_tasks_without_usage(project, &TaskFilter::default(), &all)?;
    let (shown, cut) = shown_attempts(query, &tasks.tasks)?;
    let mut cards = Vec::with_capacity(shown.len());
    // None: gone between the reads (the next change event redraws the board).
    for k in kept_or_made(query, memo, &shown)?.into_iter().flatten() {
        times.push(k.times);
        cards.push(k.card);
    }
    Ok((cards, tasks.has_more || cut))
}

/// The cards of `moved` (attempts with the token read before their rows) as a board read would
/// make them now, for a change event to carry: the page patches them in and reads the whole
/// board only for what they cannot say (`events`). An attempt whose row or task is gone has no
/// card.
pub(crate) fn changed_cards(
    query: &Query,
    memo: &CardMemo,
    moved: &[(Uuid, u64)],
) -> Result<Vec<Card>, ToolError> {
    let reader = query.read();
    let mut shown = Vec::with_capacity(moved.len());
    for &(attempt, token) in moved {
        let row: Option<AttemptRow> = reader.attempt_as(attempt).map_err(ToolError::from)?;
        let Some(task_id) = row.and_then(|r| r.task_id) else {
            continue;
        };
        let Some(task) = reader.task(task_id).map_err(ToolError::from)? else {
            continue;
        };
        // As the task listing reads it (`TaskSummary::title`), so kept cards match.
        let title = task.value.get("title").and_then(|t| t.as_str());
        shown.push(Shown {
            attempt,
            token,
            title: title.unwrap_or_default().to_string(),
        });
    }
    let cards = kept_or_made(query, memo, &shown)?.into_iter().flatten();
    Ok(cards.map(|k| k.card).collect())
}

/// Each of `shown`'s cards, in order: the kept one, else made now (and kept); None for an
/// attempt gone meanwhile.
fn kept_or_made(
    query: &Query,
    memo: &CardMemo,
    shown: &[Shown],
) -> Result<Vec<Option<Kept>>, ToolError> {
    let epoch = query.store.epoch();
    let kept: Vec<Option<Kept>> = shown
        .iter()
        .map(|s| memo.get(s.attempt, epoch, s.token, &s.title))
        .collect();
    let missed: Vec<&Shown> = shown
        .iter()
        .zip(&kept)
        .filter_map(|(s, k)| k.is_none().then_some(s))
        .collect();
    let mut made = make_cards(query, &missed)?;
    let cards = shown.iter().zip(kept).map(|(s, k)| {
        k.or_else(|| {
            let k = made.remove(&s.attempt)?;
            memo.put(s.attempt, k.clone());
            Some(k)
        })
    });
    Ok(cards.collect())
}

/// The newest [`MAX_ATTEMPTS`] attempts of each task that has one, from the list index, each
/// with its token; true when a task has more.
fn shown_attempts(query: &Query, tasks: &[TaskSummary]) -> Result<(Vec<Shown>, bool), ToolError> {
    let reader = query.read();
    let mut shown = Vec::new();
    let mut cut = false;
    for task in tasks.iter().filter(|t| t.latest_attempt_id.is_some()) {
        let (ids, more) = reader
            .attempt_ids_newest_first(task.task_id, MAX_ATTEMPTS)
            .map_err(ToolError::from)?;
        cut |= more;
        for attempt in ids {
            let token = reader.attempt_token(attempt).map_err(ToolError::from)?;
            shown.push(Shown {
                attempt,
                token,
                title: task.title.clone(),
            });
        }
    }
    Ok((shown, cut))
}

/// Cards for attempts not kept: one status batch, and each attempt's newest session's executor.
fn make_cards(query: &Query, missed: &[&Shown]) -> Result<HashMap<Uuid, Kept>, ToolError> {
    let ids: Vec<Uuid> = missed.iter().map(|s| s.attempt).collect();
    let statuses = query.attempt_statuses(&ids, Since::None)?;
    let epoch = query.store.epoch();
    let shown: HashMap<Uuid, &Shown> = missed.iter().map(|s| (s.attempt, *s)).collect();
    let reader = query.read();
    let mut made = HashMap::new();
    for item in &statuses.attempts {
        let status = &item.0.status;
        let Some(s) = shown.get(&status.attempt_id) else {
            continue;
        };
        let kept = Kept {
            epoch,
            token: s.token,
            title: s.title.clone(),
            card: card(query, status, executor_of(&reader, status)?, &s.title)?,
            times: AttemptTimes::of(status),
        };
        made.insert(s.attempt, kept);
    }
    Ok(made)
}

/// The executor of the attempt's newest session, as `list_task_attempts` says it (the status's
/// `latest_session_id` is that session).
fn executor_of(reader: &StoreReader, status: &AttemptStatus) -> Result<Option<String>, ToolError> {
    let Some(session) = status.latest_session_id else {
        return Ok(None);
    };
    let row = reader.session(session).map_err(ToolError::from)?;
    let row = row.and_then(|r| serde_json::from_value::<SessionRow>(r.value).ok());
    Ok(row.and_then(|r| r.executor))
}

fn card(
    query: &Query,
    s: &AttemptStatus,
    executor: Option<String>,
    title: &str,
) -> Result<Card, ToolError> {
    let last_line = match s.state {
        AttemptState::Running => last_line(query, s.attempt_id)?,
        _ => None,
    };
    Ok(Card {
        attempt_id: s.attempt_id,
        task_id: s.task_id,
        task_title: title.to_string(),
        host: s.host.clone(),
        executor,
        branch: s.workspace_branch.clone(),
        state: s.state,
        created_at: s.created_at.clone(),
        last_activity_at: s.last_activity_at.clone(),
        summary: s.result.summary.clone(),
        last_error_code: s
            .result
            .last_error_code
            .and_then(|c| serde_json::to_value(c).ok())
            .and_then(|v| v.as_str().map(str::to_string)),
        failure_summary: s.failure_summary.clone(),
        approvals: s.pending_approvals.clone(),
        last_line,
        cost_usd: s.usage.as_ref().and_then(|u| u.cost_usd),
        attempt_token: s.attempt_token.clone(),
    })
}

/// The text of the attempt's newest normalized log entry (clipped as detail 0 clips it).
fn last_line(query: &Query, attempt: Uuid) -> Result<Option<String>, ToolError> {
    let page = query.tail_logs(LogRequest {
        attempt,
        channel: vk_observer_store::keys::Channel::Normalized,
        mode: LogMode::Tail,
        limit: 1,
        since: Since::None,
        process: None,
        detail: vk_observer_query::detail::Detail::Compact,
    })?;
    Ok(page
        .entries
        .last()
        .and_then(|e| e.compact.as_ref())
        .and_then(|c| {
            let tool = c.tool.as_ref().map(|t| {
                let what = t
                    .command
                    .as_deref()
                    .or(t.path.as_deref())
                    .or(t.target.as_deref());
                super::detail::tool_line(&t.name, what, &t.status)
            });
            tool.or_else(|| c.text.clone())
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(token: u64, title: &str) -> Kept {
        Kept {
            epoch: Epoch(1),
            token,
            title: title.into(),
            card: Card {
                attempt_id: Uuid::nil(),
                task_id: None,
                task_title: title.into(),
                host: None,
                executor: None,
                branch: None,
                state: AttemptState::Idle,
                created_at: None,
                last_activity_at: None,
                summary: String::new(),
                last_error_code: None,
                failure_summary: None,
                approvals: vec![],
                last_line: None,
                cost_usd: None,
                attempt_token: token.to_string(),
            },
            times: AttemptTimes {
                started_at: None,
                ended: None,
            },
        }
    }

    #[test]
    fn a_kept_card_serves_only_its_epoch_token_and_title() {
        let memo = CardMemo::default();
        let a = Uuid::from_u128(1);
        memo.put(a, kept(7, "fix it"));
        assert!(memo.get(a, Epoch(1), 7, "fix it").is_some());
        assert!(
            memo.get(a, Epoch(1), 8, "fix it").is_none(),
            "the attempt changed"
        );
        assert!(
            memo.get(a, Epoch(1), 7, "renamed").is_none(),
            "the task was renamed"
        );
        assert!(
            memo.get(a, Epoch(2), 7, "fix it").is_none(),
            "another store epoch"
        );
        assert!(
            memo.get(Uuid::from_u128(2), Epoch(1), 7, "fix it")
                .is_none()
        );
    }

    #[test]
    fn a_card_waiting_on_an_approval_is_never_kept() {
        let memo = CardMemo::default();
        let mut waiting = kept(3, "t");
        waiting
            .card
            .approvals
            .push(vk_observer_query::approvals::PendingApproval {
                approval_id: "ap".into(),
                execution_process_id: Uuid::nil(),
                tool_name: "Bash".into(),
                summary: String::new(),
                requested_at: None,
                timeout_at: None,
                age_ms: Some(1),
                expires_in_ms: Some(2),
            });
        memo.put(Uuid::nil(), waiting);
        assert!(memo.get(Uuid::nil(), Epoch(1), 3, "t").is_none());
    }
}
