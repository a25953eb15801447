//! `wait_for_attempt_change`: the long-poll. Subscribe to the watched attempts' (or the
//! project's) notify channels first, then compare their tokens with `since_token`; if nothing
//! changed, park on the channels — no polling, no upstream traffic — until the writer commits a
//! change to one of them or the (jittered) timeout passes. Channels are released when the wait
//! ends, however it ends (answer, timeout, or the client going away).
//!
//! With `until` (`query::until`) the wait returns only once a watched attempt is in one of the
//! target states: at once when one already is (without `since_token`: any watched attempt;
//! with it: one that changed after it), else at the first change that gets one there; changes
//! that do not re-park, within the same deadline. Every answer says why it ended (`outcome`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::watch;
use uuid::Uuid;

use super::activity::{ActivityPage, ActivityScope};
use super::detail::Rules;
use super::status::{AttemptStatus, STATUS_RULES};
use super::status_memo::StatusItem;
use super::until::{
    FINAL_MESSAGES_MAX, FinalMessage, Until, final_message, finished, log_settles_at,
};
use super::{Cut, Freshness, Query, Since};
use vk_observer_store::Store;
use vk_observer_store::feed::FeedScope;
use vk_observer_tool_error::{ErrorCode, ToolError};

pub const WAIT_DEFAULT_MS: u64 = 25_000;
/// Below the 60 s default request timeout of the common MCP clients.
pub const WAIT_MAX_MS: u64 = 50_000;
/// For waits kept alive by progress notifications (`mcp::transport::progress`): a client that resets its
/// timeout on progress may wait this long; bounded so an abandoned-but-open stream ends.
pub const WAIT_MAX_PROGRESS_MS: u64 = 600_000;

/// When a wait started and when it gives up (the requested timeout minus jitter).
#[derive(Debug, Clone, Copy)]
pub struct WaitClock {
    pub started: Instant,
    pub deadline: tokio::time::Instant,
}

impl WaitClock {
    /// A wait starting now: it fires somewhere in the last 10% of `timeout`, never past it, so
    /// many clients with the same timeout do not wake in lockstep.
    pub fn start(timeout: Duration) -> Self {
        let jitter = rand::rng().random_range(0.0..0.1);
        let started = Instant::now();
        WaitClock {
            started,
            deadline: tokio::time::Instant::from_std(started) + timeout.mul_f64(1.0 - jitter),
        }
    }
}

/// What to watch.
#[derive(Debug, Clone)]
pub enum WaitScope {
    Attempts(Vec<Uuid>),
    Project(Uuid),
    /// Every attempt of the project, and its activity feed (`include_activity`): a new item
    /// also ends the wait, and the answer carries the items after the baseline.
    ProjectActivity(Uuid),
}

impl WaitScope {
    fn project(&self) -> Option<Uuid> {
        match self {
            WaitScope::Project(p) | WaitScope::ProjectActivity(p) => Some(*p),
            WaitScope::Attempts(_) => None,
        }
    }
}

/// Activity items a wait answers at most; more are read with `tail_project_activity`.
pub(crate) const WAIT_ACTIVITY_LIMIT: usize = 50;

/// Why a wait answered. `changed` keeps answering true for `reached`, `changed`,
/// `token_reset` and `deleted`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WaitOutcome {
    /// With `until`: watched attempts are in a target state (`attempts` lists them, and
    /// `final_messages` the last agent message of each that finished).
    Reached,
    /// Without `until`: watched attempts changed (`attempts`), or with `include_activity` the
    /// project has new activity.
    Changed,
    /// The time was up first (`changed` false unless activity came in with `include_activity`).
    Timeout,
    /// `since_token` was from another store generation or the future: every watched attempt is
    /// listed; start over from `token`.
    TokenReset,
    /// A watched attempt was deleted from VK (its task deleted, or the attempt itself; listed in
    /// `removed`) and, with `until`, none reached a target state: it never will.
    Deleted,
}

/// Answer of `wait_for_attempt_change`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WaitResult {
    /// Why the wait answered: `reached`, `changed`, `timeout`, `token_reset` or `deleted`.
    pub outcome: WaitOutcome,
    /// True when a watched attempt changed after `since_token` (or the token was reset), or,
    /// with `include_activity`, the project has new activity items.
    pub changed: bool,
    /// Status of each watched attempt that changed (all watched attempts on a reset); with
    /// `until`, only those in a target state.
    #[schemars(with = "Vec<AttemptStatus>")]
    pub attempts: Vec<StatusItem>,
    /// Watched attempts deleted after `since_token` (UUIDs; for `project_id`, the attempts
    /// deleted while the call waited).
    pub removed: Vec<Uuid>,
    /// With outcome `reached`: for each listed attempt that finished (state `completed` or
    /// `failed`; the first 10 of them), the last agent message of its latest coding-agent run,
    /// clipped at 2000 characters (`truncated`). Absent when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub final_messages: Vec<FinalMessage>,
    /// Store token now; pass it as `since_token` to the next wait.
    pub token: String,
    /// True when `since_token` was from another store generation or the future: the answer is
    /// immediate and lists every watched attempt; start over from `token`.
    pub token_reset: bool,
    /// How long the call waited, in milliseconds.
    pub waited_ms: u64,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
    /// With `include_activity`: the project's activity after `since_token` (or after the
    /// wait's start), oldest first, at most 50 items; continue with tail_project_activity and
    /// its `next_since_token` while `has_more`. Absent without `include_activity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activity: Option<ActivityPage>,
}

/// What each detail level shows of a wait's answer: the statuses as get_attempt_status shows
/// them, the time waited from 1, a final message's process id from 1 (at 0 the attempt and
/// `entry_index` say where it is: `tail_attempt_logs` reads the latest coding agent's log).
pub const WAIT_RULES: Rules = Rules {
    finish: None,
    kept: &[],
    standard: &["waited_ms"],
    verbatim: &[],
    nested: &[
        ("attempts", &STATUS_RULES),
        ("final_messages", &FINAL_MESSAGE_RULES),
    ],
};

const FINAL_MESSAGE_RULES: Rules = Rules {
    finish: None,
    kept: &[],
    standard: &["execution_process_id"],
    verbatim: &[],
    nested: &[],
};

/// What one look at the watched attempts found.
enum Looked {
    /// The wait answers this now.
    Answer(WaitOutcome, Changes),
    /// Nothing to answer yet: park. `Some`: an answer is held until a finished attempt's log is
    /// read to its end (the store wakes the wait then), at the latest until this moment.
    Park(Option<tokio::time::Instant>),
}

/// Whether a look may hold a reached answer for a finished run's log (`Looked::Park`): not when
/// the wait's own time is up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hold {
    ForWholeLogs,
    Never,
}

#[derive(Default)]
struct Changes {
    attempts: Vec<StatusItem>,
    removed: Vec<Uuid>,
}

impl Changes {
    fn is_empty(&self) -> bool {
        self.attempts.is_empty() && self.removed.is_empty()
    }
}

/// Releases the notify channels of a wait when it ends, and its slot in the waiter count.
struct Registration {
    waiters: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    store: Store,
    attempts: Vec<Uuid>,
    projects: Vec<Uuid>,
    receivers: Vec<watch::Receiver<u64>>,
}

impl Registration {
    /// Until any of the subscribed channels fires. One channel (a wait on one attempt or a
    /// project, the usual case) is awaited in place: no boxed future per channel and round.
    async fn next_change(&mut self) {
        match self.receivers.as_mut_slice() {
            [one] => {
                let _ = one.changed().await;
            }
            many => {
                let _ = futures::future::select_all(many.iter_mut().map(|r| Box::pin(r.changed())))
                    .await;
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.waiters
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        metrics::gauge!(vk_observer_telemetry::WAITERS).decrement(1.0);
        self.receivers.clear();
        self.store.hub().release(&self.attempts, &self.projects);
    }
}

impl Query {
    /// Attempt ids watched by the scope right now.
    fn watched(&self, scope: &WaitScope) -> Result<Vec<Uuid>, ToolError> {
        match scope {
            WaitScope::Attempts(ids) => Ok(ids.clone()),
            WaitScope::Project(p) | WaitScope::ProjectActivity(p) => {
                let reader = self.read();
                let mut out = Vec::new();
                for t in reader.tasks_of_project(*p)? {
                    out.extend(reader.attempts_of_task(t.id)?.into_iter().map(|a| a.id));
                }
                Ok(out)
            }
        }
    }

    /// Statuses of the watched attempts whose token is above `since` (None: all of them).
    fn changed_since(&self, ids: &[Uuid], since: Option<&Cut>) -> Result<Changes, ToolError> {
        let reader = self.read();
        let epoch = self.store.epoch();
        let print = self.token_printer();
        let mut out = Changes::default();
        for &id in ids {
            let t = reader.attempt_token(id)?;
            if since.is_some_and(|cut| cut.saw(t)) {
                continue;
            }
            match self.status_memo.status(&reader, id, t, epoch, &print)? {
                Some(st) => out.attempts.push(st),
                // Its token moved but it is gone: deleted after `since`.
                None if t > 0 => out.removed.push(id),
                None => {}
            }
        }
        Ok(out)
    }

    fn check_scope(&self, scope: &WaitScope) -> Result<(), ToolError> {
        if let Some(p) = scope.project() {
            super::target::project(&self.read(), p)?;
        }
        Ok(())
    }

    /// Take a waiter slot and subscribe to the scope's channels (before any token is read, so a
    /// commit in between still wakes the wait).
    fn register(&self, scope: &WaitScope) -> Result<Registration, ToolError> {
        let hub = self.store.hub();
        let held = self
            .waiters
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        metrics::gauge!(vk_observer_telemetry::WAITERS).increment(1.0);
        let mut reg = Registration {
            waiters: self.waiters.clone(),
            store: self.store.clone(),
            attempts: Vec::new(),
            projects: Vec::new(),
            receivers: Vec::new(),
        };
        if held >= self.max_waiters {
            return Err(ToolError::new(
                ErrorCode::TooManyWaiters,
                true,
                "The daemon already holds its maximum of parked waits. Retry shortly, or watch many attempts in one wait_for_attempt_change call (attempt_ids or project_id).",
            )
            .with_details(serde_json::json!({ "max_waiters": self.max_waiters })));
        }
        match scope {
            WaitScope::Attempts(ids) => {
                for id in ids {
                    reg.receivers.push(hub.subscribe_attempt(*id));
                    reg.attempts.push(*id);
                }
            }
            WaitScope::Project(p) | WaitScope::ProjectActivity(p) => {
                reg.receivers.push(hub.subscribe_project(*p));
                reg.projects.push(*p);
            }
        }
        Ok(reg)
    }

    /// True when a watched attempt's token is above `since` (changed, created or deleted).
    fn any_changed(
        &self,
        scope: &WaitScope,
        since: &Cut,
        initial: &[Uuid],
    ) -> Result<bool, ToolError> {
        let reader = self.read();
        if let WaitScope::ProjectActivity(p) = scope
            && reader
                .activity_since_where(FeedScope::Project(*p), since.floor(), |t| !since.saw(t))?
        {
            return Ok(true);
        }
        for id in self.watched_since_start(scope, initial)? {
            if !since.saw(reader.attempt_token(id)?) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The watched attempts: those of `initial` (watched when the wait started, so attempts a
    /// project loses while the wait is parked are seen as deleted) and those watched now.
    fn watched_since_start(
        &self,
        scope: &WaitScope,
        initial: &[Uuid],
    ) -> Result<Vec<Uuid>, ToolError> {
        let mut ids = initial.to_vec();
        let mut seen: std::collections::HashSet<Uuid> = initial.iter().copied().collect();
        ids.extend(
            self.watched(scope)?
                .into_iter()
                .filter(|id| seen.insert(*id)),
        );
        Ok(ids)
    }

    /// One look at the watched attempts changed after `since` (None: all of them): what the
    /// wait answers now, or to park. With `until`, an answer listing a finished attempt whose
    /// run's log is still being read is held (`Hold`), so its final message is the run's last.
    fn look(
        &self,
        scope: &WaitScope,
        until: Option<&Until>,
        since: Option<&Cut>,
        initial: &[Uuid],
        hold: Hold,
    ) -> Result<Looked, ToolError> {
        let mut c = self.changed_since(&self.watched_since_start(scope, initial)?, since)?;
        let Some(until) = until else {
            return Ok(match (c.is_empty(), c.removed.is_empty()) {
                (true, _) => Looked::Park(None),
                (false, true) => Looked::Answer(WaitOutcome::Changed, c),
                (false, false) => Looked::Answer(WaitOutcome::Deleted, c),
            });
        };
        c.attempts.retain(|s| until.reached_by(s));
        if !c.attempts.is_empty() {
            let held = match hold {
                Hold::ForWholeLogs => self.logs_settle_at(&c.attempts)?,
                Hold::Never => None,
            };
            return Ok(match held {
                Some(at) => Looked::Park(Some(at)),
                None => Looked::Answer(WaitOutcome::Reached, c),
            });
        }
        Ok(if !c.removed.is_empty() {
            Looked::Answer(WaitOutcome::Deleted, c)
        } else {
            Looked::Park(None)
        })
    }

    /// The latest moment a finished attempt's log among `attempts` may still be read to its end
    /// (`until::log_settles_at`); None when every one is whole.
    fn logs_settle_at(
        &self,
        attempts: &[StatusItem],
    ) -> Result<Option<tokio::time::Instant>, ToolError> {
        let reader = self.read();
        let mut latest = None;
        for s in attempts.iter().filter(|s| finished(s)) {
            latest = latest.max(log_settles_at(&reader, s.attempt_id)?);
        }
        Ok(latest)
    }

    /// The parking half of a wait, without building any answer: returns as soon as the wait
    /// would answer (a watched attempt changed after `since`; with `until`, one is in a target
    /// state or was deleted), or at `deadline`, with the attempts watched when it began (the
    /// tool's `started_with`, so a project's attempt deleted meanwhile is still seen). `since`
    /// None (only with `until`): every watched attempt counts. Holds a waiter slot and the
    /// scope's channels meanwhile, like a wait. Used by `mcp::transport::park` to hold
    /// long-polls in front of the MCP stack; the tool then answers from the same store.
    pub async fn park_until_changed(
        &self,
        scope: &WaitScope,
        until: Option<&Until>,
        since: Option<&Cut>,
        deadline: tokio::time::Instant,
    ) -> Result<Arc<[Uuid]>, ToolError> {
        self.check_scope(scope)?;
        let mut reg = self.register(scope)?;
        let initial = self.watched(scope)?;
        loop {
            let (ready, held) = match until {
                None => (
                    self.any_changed(scope, since.unwrap_or(&Cut::local(0)), &initial)?,
                    None,
                ),
                Some(_) => match self.look(scope, until, since, &initial, Hold::ForWholeLogs)? {
                    Looked::Answer(..) => (true, None),
                    Looked::Park(held) => (false, held),
                },
            };
            if ready {
                return Ok(initial.into());
            }
            let wake = held.map_or(deadline, |h| h.min(deadline));
            tokio::select! {
                _ = reg.next_change() => {}
                // The deadline, or a held answer's (the tool answers it without holding).
                _ = tokio::time::sleep_until(wake) => return Ok(initial.into()),
            }
        }
    }

    /// Wait until a watched attempt changes (with `until`: reaches a target state) after
    /// `since`, the deadline passes, or `cancelled` fires. Subscribes before it looks.
    /// `started_with`: the attempts watched when the wait began, if it was parked first
    /// (`park_until_changed`); else those watched now.
    pub async fn wait_for_change(
        &self,
        scope: WaitScope,
        until: Option<Until>,
        since: Since,
        clock: WaitClock,
        started_with: Option<Arc<[Uuid]>>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<WaitResult, ToolError> {
        let started = clock.started;
        self.check_scope(&scope)?;
        let mut reg = self.register(&scope)?;
        let initial = match started_with {
            Some(ids) => ids.to_vec(),
            None => self.watched(&scope)?,
        };
        let since_n = match &since {
            Since::Reset => {
                let token = self.token();
                let attempts = self.changed_since(&initial, None)?;
                let activity = self.wait_activity(&scope, Since::None)?;
                let outcome = WaitOutcome::TokenReset;
                return self.wait_result(outcome, true, attempts, token, started, activity);
            }
            Since::After(cut) => Some(cut.clone()),
            // With `until`, an attempt already in a target state answers at once.
            Since::None if until.is_some() => None,
            Since::None => Some(Cut::local(self.store.current_token())),
        };
        let fed_since = Since::After(
            since_n
                .clone()
                .unwrap_or_else(|| Cut::local(self.store.current_token())),
        );
        let since_n = since_n.as_ref();
        let mut hold = Hold::ForWholeLogs;
        tokio::pin!(cancelled);
        loop {
            let token = self.token_after(&since, self.store.current_token());
            let looked = self.look(&scope, until.as_ref(), since_n, &initial, hold)?;
            let activity = self.wait_activity(&scope, fed_since.clone())?;
            let fed = activity.as_ref().is_some_and(|a| !a.items.is_empty());
            let held = match looked {
                Looked::Answer(outcome, changes) => {
                    return self.wait_result(outcome, true, changes, token, started, activity);
                }
                Looked::Park(held) => held,
            };
            if fed && until.is_none() {
                let changed = WaitOutcome::Changed;
                return self.wait_result(
                    changed,
                    true,
                    Changes::default(),
                    token,
                    started,
                    activity,
                );
            }
            tokio::select! {
                _ = reg.next_change() => {}
                // A held answer is answered as it stands once its hold ends.
                _ = tokio::time::sleep_until(held.unwrap_or(clock.deadline)), if held.is_some() => hold = Hold::Never,
                _ = tokio::time::sleep_until(clock.deadline) => {
                    return self.answer_at_deadline(&scope, until.as_ref(), since_n, &initial, &since, fed_since, started);
                }
                _ = &mut cancelled => {
                    return Err(ToolError::new(ErrorCode::Cancelled, true, "The wait was cancelled by the client."));
                }
            }
        }
    }

    /// The wait's time is up: one last look without holding (an answer held for a run's log is
    /// answered as it stands: its attempts changed before the token a timeout would name), else
    /// a timeout (or, without `until`, the activity that came in).
    fn answer_at_deadline(
        &self,
        scope: &WaitScope,
        until: Option<&Until>,
        since: Option<&Cut>,
        initial: &[Uuid],
        asked: &Since,
        fed_since: Since,
        started: Instant,
    ) -> Result<WaitResult, ToolError> {
        let token = self.token_after(asked, self.store.current_token());
        let activity = self.wait_activity(scope, fed_since)?;
        if let Looked::Answer(outcome, changes) =
            self.look(scope, until, since, initial, Hold::Never)?
        {
            return self.wait_result(outcome, true, changes, token, started, activity);
        }
        let fed = activity.as_ref().is_some_and(|a| !a.items.is_empty());
        let outcome = match (fed, until) {
            (true, None) => WaitOutcome::Changed,
            _ => WaitOutcome::Timeout,
        };
        self.wait_result(outcome, fed, Changes::default(), token, started, activity)
    }

    fn wait_result(
        &self,
        outcome: WaitOutcome,
        changed: bool,
        c: Changes,
        token: String,
        started: Instant,
        activity: Option<ActivityPage>,
    ) -> Result<WaitResult, ToolError> {
        let mut final_messages = Vec::new();
        if outcome == WaitOutcome::Reached {
            let reader = self.read();
            for s in c
                .attempts
                .iter()
                .filter(|s| finished(s))
                .take(FINAL_MESSAGES_MAX)
            {
                final_messages.extend(final_message(&reader, s.attempt_id)?);
            }
        }
        Ok(WaitResult {
            outcome,
            changed,
            attempts: c.attempts,
            removed: c.removed,
            final_messages,
            token,
            token_reset: outcome == WaitOutcome::TokenReset,
            waited_ms: started.elapsed().as_millis() as u64,
            freshness: self.freshness(),
            activity,
        })
    }

    /// The project's activity after `since`, when the wait asked for it.
    fn wait_activity(
        &self,
        scope: &WaitScope,
        since: Since,
    ) -> Result<Option<ActivityPage>, ToolError> {
        match scope {
            WaitScope::ProjectActivity(p) => self
                .activity_after(ActivityScope::Project(*p), since, WAIT_ACTIVITY_LIMIT)
                .map(Some),
            _ => Ok(None),
        }
    }
}
