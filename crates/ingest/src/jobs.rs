//! Targeted REST refetches, each a short job run under a shared concurrency limit: a task's
//! attempts (VK has no stream of workspaces), an attempt's sessions, an attempt's change summary,
//! an attempt's branch status (VK streams no git state).
//! Jobs write through the writer and report back to the coordinator with a signal.

use std::sync::Arc;

use futures::StreamExt;

use tokio::sync::Semaphore;
use uuid::Uuid;

use super::Context;
use super::error::{IngestError, IngestResult};
use super::file_stats;
use super::signal::Signal;
use vk_observer_store::events::DomainEvent;
use vk_observer_upstream::UpstreamError;

/// Attempts of one task whose reads overlap in a task refresh (each makes up to three).
const ATTEMPTS_AT_ONCE: usize = 4;

/// What a task refresh reads for one attempt (`Jobs::reads_needed`).
struct AttemptReads {
    attempt: Uuid,
    sessions: bool,
    repos: bool,
    changes: bool,
}

#[derive(Clone)]
pub(crate) struct Jobs {
    pub ctx: Context,
    pub limit: Arc<Semaphore>,
}

impl Jobs {
    /// Refetch a task's attempts; for attempts that changed (or all, when `deep`) also their
    /// sessions. Always answers with `TaskRefreshed` naming the attempts to look at more closely.
    pub(crate) fn refresh_task(&self, task_id: Uuid, deep: bool) {
        let j = self.clone();
        tokio::spawn(async move {
            let attempts = j
                .refresh_task_inner(task_id, deep)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(%task_id, error = %e, "task refresh failed");
                    Vec::new()
                });
            let _ = j
                .ctx
                .signals
                .send(Signal::TaskRefreshed { task_id, attempts });
        });
    }

    async fn refresh_task_inner(&self, task_id: Uuid, deep: bool) -> IngestResult<Vec<Uuid>> {
        // The semaphore is closed only when ingest stops: nothing left to refresh.
        let Ok(_permit) = self.limit.acquire().await else {
            return Ok(Vec::new());
        };
        let attempts = match self.ctx.client.attempts_of_task(task_id).await {
            Ok(a) => a,
            // VK answers 404/500 for a task that no longer exists; the task stream removes it.
            Err(UpstreamError::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let ids: Vec<Uuid> = attempts
            .iter()
            .filter_map(vk_observer_vk::object_id)
            .collect();
        let applied = self
            .ctx
            .writer
            .write(vec![DomainEvent::AttemptsSnapshot { task_id, attempts }])
            .await?;
        let mut plans = Vec::with_capacity(ids.len());
        for a in ids {
            plans.push(self.reads_needed(a, deep, applied.attempts.contains(&a))?);
        }
        let look = plans
            .iter()
            .filter(|p| p.sessions)
            .map(|p| p.attempt)
            .collect();
        // The attempts' reads overlap (a few attempts at a time, their three reads at once) and
        // land in one batch: one commit per task instead of up to three per attempt (issue 27).
        let read: Vec<IngestResult<Vec<DomainEvent>>> = futures::stream::iter(plans)
            .map(|p| self.read_attempt(p))
            .buffered(ATTEMPTS_AT_ONCE)
            .collect()
            .await;
        let mut events = Vec::new();
        let mut failed = None;
        for r in read {
            match r {
                Ok(e) => events.extend(e),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        // What was read is kept even when another read failed.
        if !events.is_empty() {
            self.ctx.writer.write(events).await?;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(look),
        }
    }

    /// Which of an attempt's sessions, repositories and change summary a task refresh reads:
    /// sessions when `deep`, the attempt `changed` or none are stored; repositories when
    /// `deep` or none are stored; the change summary when none is stored (so
    /// get_attempt_changes answers before the attempt's first process finishes).
    fn reads_needed(&self, attempt: Uuid, deep: bool, changed: bool) -> IngestResult<AttemptReads> {
        let reader = self.ctx.store.read();
        Ok(AttemptReads {
            attempt,
            sessions: deep || changed || reader.sessions_of_attempt(attempt)?.is_empty(),
            repos: deep || reader.attempt_repos(attempt)?.is_empty(),
            changes: reader.changes(attempt)?.is_none(),
        })
    }

    /// An attempt's planned reads, at once: the events to store. A change summary that cannot
    /// be read is logged and skipped; a failed sessions or repositories read fails the attempt.
    async fn read_attempt(&self, p: AttemptReads) -> IngestResult<Vec<DomainEvent>> {
        let attempt_id = p.attempt;
        let sessions = async {
            if !p.sessions {
                return Ok(None);
            }
            let sessions = self.ctx.client.sessions_of_attempt(attempt_id).await?;
            Ok::<_, IngestError>(Some(DomainEvent::SessionsSnapshot {
                attempt_id,
                sessions,
            }))
        };
        let repos = async {
            if !p.repos {
                return Ok(None);
            }
            match self.ctx.client.attempt_repos(attempt_id).await {
                Ok(repos) => Ok(Some(DomainEvent::AttemptReposSnapshot {
                    attempt_id,
                    repos,
                })),
                Err(UpstreamError::NotFound { .. }) => Ok(None),
                Err(e) => Err(IngestError::from(e)),
            }
        };
        let changes = async {
            if p.changes {
                self.changes_event(attempt_id).await
            } else {
                None
            }
        };
        let (sessions, repos, changes) = tokio::join!(sessions, repos, changes);
        Ok(sessions?.into_iter().chain(repos?).chain(changes).collect())
    }

    async fn sessions_inner(&self, attempt_id: Uuid) -> IngestResult<()> {
        let sessions = self.ctx.client.sessions_of_attempt(attempt_id).await?;
        self.ctx
            .writer
            .write(vec![DomainEvent::SessionsSnapshot {
                attempt_id,
                sessions,
            }])
            .await?;
        Ok(())
    }

    /// Refetch VK's executors and diff guard (`/api/info`), at bootstrap and on every resync.
    pub(crate) fn refresh_server_info(&self) {
        let j = self.clone();
        tokio::spawn(async move {
            let Ok(_permit) = j.limit.acquire().await else {
                return;
            };
            match j.ctx.client.server_facts().await {
                Ok(info) => {
                    let _ = j
                        .ctx
                        .writer
                        .write(vec![DomainEvent::ServerInfo { info }])
                        .await;
                }
                Err(e) => tracing::warn!(error = %e, "server info refresh failed"),
            }
        });
    }

    /// Refetch an attempt's sessions (a process named a session we do not know yet).
    pub(crate) fn refresh_sessions(&self, attempt_id: Uuid) {
        let j = self.clone();
        tokio::spawn(async move {
            let Ok(_permit) = j.limit.acquire().await else {
                return;
            };
            if let Err(e) = j.sessions_inner(attempt_id).await {
                tracing::warn!(%attempt_id, error = %e, "session refresh failed");
            }
        });
    }

    /// Refetch VK's change summary of an attempt; reports `ChangesRefreshed` when done (the
    /// coordinator keeps one re-read per attempt in flight, see `fresh_changes`).
    pub(crate) fn refresh_changes(&self, attempt_id: Uuid) {
        let j = self.clone();
        tokio::spawn(async move {
            let ok = match j.limit.acquire().await {
                Ok(_permit) => j.changes_inner(attempt_id).await,
                Err(_) => false,
            };
            let _ = j
                .ctx
                .signals
                .send(Signal::ChangesRefreshed { attempt_id, ok });
        });
    }

    /// Read and store VK's change summary (`changes_event`). True when stored.
    async fn changes_inner(&self, attempt_id: Uuid) -> bool {
        let Some(event) = self.changes_event(attempt_id).await else {
            return false;
        };
        self.ctx.writer.write(vec![event]).await.is_ok()
    }

    /// Read VK's change summary, stamped with the read time (`CHANGES_AS_OF`; the store keeps
    /// the stamp of the first read of an unchanged summary). None (logged) when unreadable.
    async fn changes_event(&self, attempt_id: Uuid) -> Option<DomainEvent> {
        let mut changes = match self.ctx.client.changes(attempt_id).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%attempt_id, error = %e, "change summary refresh failed");
                return None;
            }
        };
        let Some(obj) = changes.as_object_mut() else {
            tracing::warn!(%attempt_id, "VK's change summary is not an object; skipped");
            return None;
        };
        if let Some(stats) = self.file_stats(attempt_id, obj).await {
            obj.insert(vk_observer_store::events::CHANGES_FILE_STATS.into(), stats);
        }
        obj.insert(
            vk_observer_store::events::CHANGES_AS_OF.into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                .into(),
        );
        Some(DomainEvent::ChangesUpdated {
            attempt_id,
            changes,
        })
    }

    /// The per-file counts to store with `changes`: the cached ones when VK's summary is the
    /// one cached, else read from VK's `/patch` when `file_stats::eligible` (None otherwise, or
    /// when VK does not give them).
    async fn file_stats(
        &self,
        attempt_id: Uuid,
        changes: &serde_json::Map<String, serde_json::Value>,
    ) -> Option<serde_json::Value> {
        let key = vk_observer_store::events::CHANGES_FILE_STATS;
        let cached = self.ctx.store.read().changes(attempt_id).ok().flatten();
        if let Some(c) = cached
            && ["summary", "files", "blocked", "blockedReason"]
                .iter()
                .all(|k| c.value.get(*k) == changes.get(*k))
            && let Some(stats) = c.value.get(key)
        {
            return Some(stats.clone());
        }
        let files = file_stats::eligible(changes)?;
        let body = file_stats::patch_request(&files);
        match self.ctx.client.attempt_patch(attempt_id, &body).await {
            Ok(answer) => file_stats::from_patch_answer(&answer),
            Err(e) => {
                tracing::debug!(%attempt_id, error = %e, "per-file change counts not read");
                None
            }
        }
    }

    /// Read an attempt's branch status from VK and store it with its read time; `done` (if any)
    /// hears the outcome once the batch is committed.
    pub(crate) fn refresh_branch_status(
        &self,
        attempt_id: Uuid,
        done: Option<tokio::sync::oneshot::Sender<IngestResult<()>>>,
    ) {
        let j = self.clone();
        tokio::spawn(async move {
            let Ok(_permit) = j.limit.acquire().await else {
                return;
            };
            let outcome = j.branch_status_inner(attempt_id).await;
            if let Err(e) = &outcome {
                tracing::warn!(%attempt_id, error = %e, "branch status refresh failed");
            }
            if let Some(done) = done {
                let _ = done.send(outcome);
            }
        });
    }

    async fn branch_status_inner(&self, attempt_id: Uuid) -> IngestResult<()> {
        let repos = self.ctx.client.branch_status(attempt_id).await?;
        let read_at_ms = chrono::Utc::now().timestamp_millis();
        self.ctx
            .writer
            .write(vec![DomainEvent::BranchStatusRead {
                attempt_id,
                repos,
                read_at_ms,
            }])
            .await?;
        Ok(())
    }
}
