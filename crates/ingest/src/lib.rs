//! Ingest: turns VK's streams into domain events for the store writer. The SSE follower gives
//! hints and resume; object followers materialise projects, tasks and processes; log followers
//! stream entries and backfill history; the coordinator decides what runs. See coordinator.rs.

pub(crate) mod backoff;
pub(crate) mod coordinator;
pub(crate) mod dialect_probe;
pub(crate) mod driver;
pub mod error;
pub(crate) mod file_stats;
pub(crate) mod follow;
pub(crate) mod fresh_changes;
pub(crate) mod histories;
pub(crate) mod jobs;
pub(crate) mod logs;
pub(crate) mod materialize;
pub(crate) mod objects;
pub(crate) mod process_streams;
pub(crate) mod pulse;
pub(crate) mod refreshes;
mod renumber;
pub mod signal;
pub mod sse;
pub(crate) mod usage;
mod workspace_model;
mod workspaces;

use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

pub use signal::Signal;
use vk_observer_config::DialectSetting;
use vk_observer_store::Store;
use vk_observer_store::writer::WriterHandle;
use vk_observer_telemetry::health::Health;
use vk_observer_upstream::VkClient;

/// Ingest tuning, declared with the settings (only `raw_logs` is one); tests shorten it.
pub use vk_observer_config::IngestConfig;

/// What every ingest task shares: the VK client, the store (to read), the writer (to write),
/// the coordinator's signal queue, health counters and tuning. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Context {
    pub client: VkClient,
    pub store: Store,
    pub writer: WriterHandle,
    pub signals: UnboundedSender<Signal>,
    pub health: Arc<Health>,
    pub cfg: IngestConfig,
    /// Log histories read at once (`IngestConfig::log_backfills`): a daemon starting on a big
    /// board has thousands of ended processes to read, and reading them all at once only
    /// multiplies memory and contention (issue 27).
    pub backfills: Arc<tokio::sync::Semaphore>,
}

/// A running ingest: cancel to stop every stream.
pub struct Ingest {
    pub signals: UnboundedSender<Signal>,
    pub cancel: CancellationToken,
}

impl Ingest {
    /// Starts following VK while it speaks the fork's dialect (`follow`): the SSE follower and
    /// the coordinator; on another, nothing (named in `/healthz` and the log).
    pub fn start(
        client: VkClient,
        store: Store,
        writer: WriterHandle,
        health: Arc<Health>,
        cfg: IngestConfig,
        dialect: DialectSetting,
        cancel: CancellationToken,
    ) -> Ingest {
        let (tx, rx) = unbounded_channel();
        let ctx = Context {
            client,
            store,
            writer,
            signals: tx.clone(),
            health,
            backfills: Arc::new(tokio::sync::Semaphore::new(cfg.log_backfills.max(1))),
            cfg,
        };
        tokio::spawn(follow::supervise(ctx, rx, dialect, cancel.clone()));
        Ingest {
            signals: tx,
            cancel,
        }
    }
}

/// The fork's followers: the coordinator, a first resync, the SSE follower, until `cancel`.
fn follow_fork(ctx: Context, rx: UnboundedReceiver<Signal>, cancel: CancellationToken) {
    let tx = ctx.signals.clone();
    tokio::spawn(coordinator::Coordinator::new(ctx.clone(), cancel.clone()).run(rx));
    // Start loading VK's state at once: an idle VK sends the SSE response headers only with
    // its first keep-alive (up to 15 s), and the object streams and REST do not need them.
    // The SSE connect then resyncs again (only real differences move tokens).
    let _ = tx.send(signal::Signal::ResyncAll {
        reason: vk_observer_telemetry::ResyncCause::Startup.as_str().into(),
        watermark: None,
    });
    tokio::spawn(driver::drive(sse::SseFollower { ctx }, cancel));
}
