//! The board's REST reads of VK 0.1.x, each run as its own task that hands its answer back as
//! a message (the board never waits on VK): a workspace's details, the registered repos, one
//! process as the database holds it. A read that fails for a reason other than "unknown" is
//! tried again with backoff, [`TRIES`] times.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::super::Context;
use super::super::backoff::Reconnect;
use super::super::error::IngestResult;
use super::board::Msg;
use super::space::Details;
use vk_observer_store::events::DomainEvent;
use vk_observer_upstream::UpstreamError;

/// Reads run at once (a board of thousands of workspaces is read a few at a time).
pub(crate) const READS_AT_ONCE: usize = 8;

/// Failed tries after which a read gives up (about 6 s of backoff); the board asks again at
/// the next change or snapshot (a workspace's details), the next minute (registered repos), or
/// when a stream closes (a process).
const TRIES: u32 = 5;

/// How a read ended.
enum Read<T> {
    Answered(T),
    /// VK does not know the object (404 with an empty body).
    Unknown,
    /// VK kept failing (or the ingest stopped).
    Failing,
}

/// What the reads share.
#[derive(Clone)]
pub(crate) struct Reader {
    pub ctx: Context,
    pub board: UnboundedSender<Msg>,
    pub cancel: CancellationToken,
    pub permits: Arc<Semaphore>,
}

impl Reader {
    /// A workspace's repos and sessions → `Msg::Details` (`Msg::WorkspaceGone` when VK no
    /// longer knows it).
    pub(crate) fn details(&self, workspace: Uuid) {
        let me = self.clone();
        tokio::spawn(async move {
            let read = me.retrying(|| async {
                let client = &me.ctx.client;
                let repos = client.workspace_repos(workspace).await?;
                let sessions = client.sessions_of_workspace(workspace).await?;
                Ok(Details { repos, sessions })
            });
            let msg = match read.await {
                Read::Answered(details) => Msg::Details { workspace, details },
                Read::Unknown => Msg::WorkspaceGone(workspace),
                Read::Failing => Msg::DetailsFailed(workspace),
            };
            let _ = me.board.send(msg);
        });
    }

    /// The registered repos → `Msg::Registered`.
    pub(crate) fn registered(&self) {
        let me = self.clone();
        tokio::spawn(async move {
            let read = me.retrying(|| me.ctx.client.registered_repos());
            if let Read::Answered(repos) = read.await {
                let _ = me.board.send(Msg::Registered(repos));
            }
        });
    }

    /// One process as the database holds it → `Msg::ProcessRead` (a stale delta corrected).
    pub(crate) fn process(&self, workspace: Uuid, process: Uuid) {
        let me = self.clone();
        tokio::spawn(async move {
            let read = me.retrying(|| me.ctx.client.process_v01(process));
            if let Read::Answered(process) = read.await {
                let _ = me.board.send(Msg::ProcessRead { workspace, process });
            }
        });
    }

    /// VK's branch status of a workspace (`GET /api/workspaces/{id}/git/status`, read by
    /// `VkClient::branch_status` in this dialect), stored as on the fork; `done` hears the
    /// outcome. Read once: the tool that asked answers its caller either way.
    pub(crate) fn branch_status(
        &self,
        workspace: Uuid,
        done: Option<tokio::sync::oneshot::Sender<IngestResult<()>>>,
    ) {
        let me = self.clone();
        tokio::spawn(async move {
            let outcome = async {
                let repos = me.ctx.client.branch_status(workspace).await?;
                let read_at_ms = chrono::Utc::now().timestamp_millis();
                let read = DomainEvent::BranchStatusRead {
                    attempt_id: workspace,
                    repos,
                    read_at_ms,
                };
                me.ctx.writer.write(vec![read]).await?;
                Ok(())
            }
            .await;
            if let Err(e) = &outcome {
                tracing::warn!(%workspace, error = %e, "VK 0.1.x branch status read failed");
            }
            if let Some(done) = done {
                let _ = done.send(outcome);
            }
        });
    }

    /// Runs `read` until it answers, VK says the object is unknown, or [`TRIES`] failed.
    async fn retrying<T, F, Fut>(&self, read: F) -> Read<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, UpstreamError>>,
    {
        let mut delays = Reconnect::new(Duration::from_millis(200), Duration::from_secs(10));
        for _ in 0..TRIES {
            let answer = {
                let permit = tokio::select! {
                    _ = self.cancel.cancelled() => return Read::Failing,
                    p = self.permits.acquire() => p,
                };
                let Ok(_permit) = permit else {
                    return Read::Failing;
                };
                read().await
            };
            match answer {
                Ok(v) => return Read::Answered(v),
                Err(UpstreamError::NotFound { .. }) => return Read::Unknown,
                Err(e) => tracing::debug!(error = %e, "VK 0.1.x read failed; trying again"),
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return Read::Failing,
                _ = tokio::time::sleep(delays.next_delay()) => {}
            }
        }
        Read::Failing
    }
}
