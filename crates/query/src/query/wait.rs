//! `wait_for_attempt_change`: the long-poll. Subscribe to the watched attempts' (or the
//! project's) notify channels first, then compare their tokens with `since_token`; if nothing
//! changed, park on the channels — no polling, no upstream traffic — until the writer commits a
//! change to one of them or the (jittered) timeout passes. Channels are released when the wait
//! ends, however it ends (answer, timeout, or the client going away).

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
use super::{Freshness, Query, Since};
use crate::store::Store;
use crate::store::feed::FeedScope;
use crate::tool_error::{ErrorCode, ToolError};

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
pub const WAIT_ACTIVITY_LIMIT: usize = 50;

/// Answer of `wait_for_attempt_change`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WaitResult {
    /// True when a watched attempt changed after `since_token` (or the token was reset), or,
    /// with `include_activity`, the project has new activity items.
    pub changed: bool,
    /// Status of each watched attempt that changed (all watched attempts on a reset).
    #[schemars(with = "Vec<AttemptStatus>")]
    pub attempts: Vec<StatusItem>,
    /// Watched attempts that were deleted after `since_token` (UUIDs).
    pub removed: Vec<Uuid>,
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
/// them, the time waited from 1.
pub const WAIT_RULES: Rules = Rules {
    finish: None,
    standard: &["waited_ms"],
    verbatim: &[],
    nested: &[("attempts", &STATUS_RULES)],
};

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
    /// Until any of the subscribed channels fires.
    async fn next_change(&mut self) {
        let _ =
            futures::future::select_all(self.receivers.iter_mut().map(|r| Box::pin(r.changed())))
                .await;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.waiters
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        metrics::gauge!(crate::telemetry::WAITERS).decrement(1.0);
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
    fn changed_since(&self, ids: &[Uuid], since: Option<u64>) -> Result<Changes, ToolError> {
        let reader = self.read();
        let epoch = self.store.epoch();
        let mut out = Changes::default();
        for &id in ids {
            let t = reader.attempt_token(id)?;
            if since.is_some_and(|s| t <= s) {
                continue;
            }
            match self.status_memo.status(&reader, id, t, epoch)? {
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
        metrics::gauge!(crate::telemetry::WAITERS).increment(1.0);
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
    fn any_changed(&self, scope: &WaitScope, since: u64) -> Result<bool, ToolError> {
        let reader = self.read();
        if let WaitScope::ProjectActivity(p) = scope
            && reader.activity_since(FeedScope::Project(*p), since)?
        {
            return Ok(true);
        }
        for id in self.watched(scope)? {
            if reader.attempt_token(id)? > since {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The parking half of a wait, without building any answer: returns `Ok(true)` as soon as
    /// a watched attempt changed after `since`, `Ok(false)` at `deadline`. Holds a waiter slot
    /// and the scope's channels meanwhile, like a wait. Used by `mcp::transport::park` to hold long-polls
    /// in front of the MCP stack; the tool then answers from the same store.
    pub async fn park_until_changed(
        &self,
        scope: &WaitScope,
        since: u64,
        deadline: tokio::time::Instant,
    ) -> Result<bool, ToolError> {
        self.check_scope(scope)?;
        let mut reg = self.register(scope)?;
        loop {
            if self.any_changed(scope, since)? {
                return Ok(true);
            }
            tokio::select! {
                _ = reg.next_change() => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(false),
            }
        }
    }

    pub async fn wait_for_change(
        &self,
        scope: WaitScope,
        since: Since,
        clock: WaitClock,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<WaitResult, ToolError> {
        let started = clock.started;
        self.check_scope(&scope)?;
        let mut reg = self.register(&scope)?;
        let since_n = match since {
            Since::Reset => {
                let token = self.token();
                let attempts = self.changed_since(&self.watched(&scope)?, None)?;
                let activity = self.wait_activity(&scope, Since::None)?;
                return Ok(self
                    .wait_result(true, attempts, token, true, started)
                    .with(activity));
            }
            Since::After(n) => n,
            Since::None => self.store.current_token(),
        };
        let deadline = clock.deadline;
        tokio::pin!(cancelled);
        loop {
            let token = self.token();
            let changed = self.changed_since(&self.watched(&scope)?, Some(since_n))?;
            let activity = self.wait_activity(&scope, Since::After(since_n))?;
            let fed = activity.as_ref().is_some_and(|a| !a.items.is_empty());
            if !changed.is_empty() || fed {
                return Ok(self
                    .wait_result(true, changed, token, false, started)
                    .with(activity));
            }
            tokio::select! {
                _ = reg.next_change() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    let token = self.token();
                    let activity = self.wait_activity(&scope, Since::After(since_n))?;
                    let fed = activity.as_ref().is_some_and(|a| !a.items.is_empty());
                    return Ok(self.wait_result(fed, Changes::default(), token, false, started).with(activity));
                }
                _ = &mut cancelled => {
                    return Err(ToolError::new(ErrorCode::Cancelled, true, "The wait was cancelled by the client."));
                }
            }
        }
    }

    fn wait_result(
        &self,
        changed: bool,
        c: Changes,
        token: String,
        token_reset: bool,
        started: Instant,
    ) -> WaitResult {
        WaitResult {
            changed,
            attempts: c.attempts,
            removed: c.removed,
            token,
            token_reset,
            waited_ms: started.elapsed().as_millis() as u64,
            freshness: self.freshness(),
            activity: None,
        }
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

impl WaitResult {
    fn with(mut self, activity: Option<ActivityPage>) -> Self {
        self.activity = activity;
        self
    }
}
