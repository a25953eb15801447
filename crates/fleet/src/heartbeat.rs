//! Heartbeats (design-notes §23): a host daemon says every `[fleet] heartbeat_every` that it is
//! alive, with its store's epoch and token (core NATS on `vko.<host>.heartbeat`, never stored);
//! a fleet node hears every host's and marks a host stale after `stale_after_heartbeats`
//! periods of silence (`Health`, `freshness.hosts`), while still serving its data.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::node::NodeEvents;
use super::wire;
use vk_observer_config::is_subject_token;
use vk_observer_store::Store;

/// What one heartbeat says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The host store's epoch and current token.
    pub epoch: u64,
    pub token: u64,
    /// Unix ms at the host when it was sent.
    pub at_ms: i64,
    /// Committed batches in its outbox not acknowledged by JetStream yet.
    pub backlog: u64,
}

/// Publish `host`'s heartbeat every `every` until `cancel` (a failed publish is retried at the
/// next beat: the client reconnects by itself).
pub(crate) async fn beat(
    client: async_nats::Client,
    host: &str,
    store: Store,
    every: Duration,
    cancel: CancellationToken,
) {
    let subject = wire::heartbeat_subject(host);
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let acked = store.fleet_acked().map_or((0, 0), |c| (c.token, c.meta));
        let beat = Heartbeat {
            epoch: store.epoch().0,
            token: store.current_token(),
            at_ms: chrono::Utc::now().timestamp_millis(),
            backlog: store.read().outbox_len_after(acked) as u64,
        };
        let payload = Bytes::from(serde_json::to_vec(&beat).unwrap_or_default());
        if let Err(e) = client.publish(subject.clone(), payload).await {
            tracing::debug!(host, error = %e, "heartbeat not sent");
        }
    }
}

/// Hear every host's heartbeats on a fleet node until the subscription or `cancel` ends.
pub(crate) async fn listen(
    client: &async_nats::Client,
    events: Arc<dyn NodeEvents>,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let mut beats = client.subscribe(wire::ALL_HEARTBEATS).await?;
    loop {
        let message = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            m = beats.next() => match m {
                Some(m) => m,
                None => return Ok(()),
            },
        };
        let host = message.subject.split('.').nth(1).unwrap_or_default();
        match serde_json::from_slice::<Heartbeat>(&message.payload) {
            Ok(beat) if is_subject_token(host) => events.heartbeat(host, &beat),
            _ => {
                metrics::counter!(vk_observer_telemetry::fleet_metrics::FLEET_GARBAGE).increment(1);
                tracing::warn!(subject = %message.subject, "a heartbeat that does not decode was skipped");
            }
        }
    }
}
