//! Ingest: turns VK's streams into domain events for the store writer. The SSE follower gives
//! hints and resume; object followers materialise projects, tasks and processes; log followers
//! stream entries and backfill history; the coordinator decides what runs. See coordinator.rs.

pub mod backoff;
pub mod coordinator;
pub mod driver;
pub mod error;
pub mod file_stats;
pub mod fresh_changes;
pub mod jobs;
pub mod logs;
pub mod materialize;
pub mod objects;
pub mod pulse;
pub mod signal;
pub mod sse;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

use crate::health::Health;
use crate::store::Store;
use crate::store::events::Channel;
use crate::store::writer::WriterHandle;
use crate::upstream::VkClient;
pub use signal::Signal;

/// Ingest tuning; defaults suit a real VK, tests shorten them.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Follow raw stdout/stderr logs too (not only normalized entries).
    pub raw_logs: bool,
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// Reconnect the SSE stream if nothing (not even VK's 15 s keep-alive) arrived for this long.
    /// Keep it well above VK's keep-alive period (default 50 s, over three periods).
    pub stall_after: Duration,
    /// Reconnect an object or log WebSocket if nothing (not even VK's 30 s ping) arrived for this
    /// long. Keep it well above VK's ping period (default 75 s, two and a half periods).
    pub ws_stall_after: Duration,
    /// Consecutive failed connects before the upstream is reported `down`.
    pub down_after_failures: u32,
    pub hint_debounce: Duration,
    pub changes_debounce: Duration,
    /// While a coding agent runs, its attempt's change summary is re-read at most this long
    /// after one of its tool calls is logged (see `fresh_changes`).
    pub changes_live_every: Duration,
    pub process_stream_linger: Duration,
    pub rest_concurrency: usize,
    pub log_chunk: usize,
    pub log_flush_interval: Duration,
    /// Minimum spacing of SSE seq writes, and how often bootstrap completion is checked. The
    /// coordinator has no periodic tick once bootstrapped: it wakes on signals and deadlines.
    pub tick: Duration,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            raw_logs: true,
            reconnect_min: Duration::from_millis(200),
            reconnect_max: Duration::from_secs(10),
            stall_after: Duration::from_secs(50),
            ws_stall_after: Duration::from_secs(75),
            down_after_failures: 5,
            hint_debounce: Duration::from_millis(50),
            changes_debounce: Duration::from_millis(300),
            changes_live_every: Duration::from_millis(500),
            process_stream_linger: Duration::from_secs(5),
            rest_concurrency: 8,
            log_chunk: 512,
            // Zero: write as soon as no further frame is already waiting (frames that arrived
            // together still go in one batch), so a waiter wakes within the commit time.
            log_flush_interval: Duration::ZERO,
            tick: Duration::from_millis(25),
        }
    }
}

impl IngestConfig {
    pub fn channels(&self) -> Vec<Channel> {
        if self.raw_logs {
            vec![Channel::Normalized, Channel::Raw]
        } else {
            vec![Channel::Normalized]
        }
    }
}

/// What every ingest task shares: the VK client, the store (to read), the writer (to write),
/// the coordinator's signal queue, health counters and tuning. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub client: VkClient,
    pub store: Store,
    pub writer: WriterHandle,
    pub signals: UnboundedSender<Signal>,
    pub health: Arc<Health>,
    pub cfg: IngestConfig,
}

/// A running ingest: cancel to stop every stream.
pub struct Ingest {
    pub signals: UnboundedSender<Signal>,
    pub cancel: CancellationToken,
}

impl Ingest {
    pub fn start(
        client: VkClient,
        store: Store,
        writer: WriterHandle,
        health: Arc<Health>,
        cfg: IngestConfig,
        cancel: CancellationToken,
    ) -> Ingest {
        let (tx, rx) = unbounded_channel();
        let ctx = Context {
            client,
            store,
            writer,
            signals: tx.clone(),
            health,
            cfg,
        };
        tokio::spawn(coordinator::Coordinator::new(ctx.clone(), cancel.clone()).run(rx));
        // Start loading VK's state at once: an idle VK sends the SSE response headers only with
        // its first keep-alive (up to 15 s), and the object streams and REST do not need them.
        // The SSE connect then resyncs again (only real differences move tokens).
        let _ = tx.send(signal::Signal::ResyncAll {
            reason: crate::telemetry::ResyncCause::Startup.as_str().into(),
            watermark: None,
        });
        tokio::spawn(driver::drive(sse::SseFollower { ctx }, cancel.clone()));
        Ingest {
            signals: tx,
            cancel,
        }
    }
}
