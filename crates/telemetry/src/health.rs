//! Shared liveness facts: how the upstream connection is doing, whether bootstrap finished, and
//! counters of what ingest survived. Written by ingest with atomics, read by every tool response
//! (freshness) and by `/healthz`, `/readyz` and `/metrics`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};

use crate as telemetry;
use crate::{ResyncCause, ResyncScope, UpstreamStream, label};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamState {
    /// The SSE stream is open and VK answers.
    Connected,
    /// The connection dropped recently; the daemon is reconnecting.
    Reconnecting,
    /// VK has not answered for a while; reads are served from the cache.
    Down,
}

#[derive(Default)]
pub struct Health {
    state: AtomicU8,
    bootstrapped: AtomicBool,
    /// Unix ms of the last byte VK sent on any connection (keep-alives and pings included).
    last_upstream_byte_ms: AtomicI64,
    pub garbage_frames: AtomicU64,
    pub resyncs: AtomicU64,
    pub reconnects: AtomicU64,
    pub log_entries_received: AtomicU64,
    /// Long-polls held in front of the MCP stack (`mcp::transport::park`) so far.
    pub waits_parked: AtomicU64,
    /// Resource subscriptions held now (`mcp::transport::subscriptions`): sessions' and listen streams'.
    pub resource_subscriptions: AtomicU64,
    /// A fleet node's hosts (`fleet::node`), by name; empty on a host daemon.
    fleet_hosts: std::sync::Mutex<std::collections::BTreeMap<String, FleetHostFacts>>,
    /// A fleet node's `[fleet]` heartbeat silence after which a host is stale, in ms.
    fleet_stale_after_ms: AtomicU64,
    /// Which dialect VK speaks, as far as ingest found (`/healthz`, `doctor`).
    dialect: std::sync::Mutex<DialectFacts>,
}

/// What ingest found VK to speak (`upstream::dialect`), as `/healthz` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DialectFacts {
    /// `fork`, `workspaces`, `neither`; `unknown` until VK answered.
    pub dialect: String,
    /// The version VK names (VK 0.1.x only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `detected` (asked VK) or `configured` (`upstream_dialect`).
    pub by: String,
    /// Whether this build follows VK's streams in that dialect.
    pub followed: bool,
    /// What told, in words (or why nothing is followed).
    pub detail: String,
}

/// What a fleet node knows of one host's stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetHostFacts {
    /// Its stream is being followed now.
    pub following: bool,
    /// The stream sequence of the last message applied (or skipped as a duplicate or garbage).
    pub applied_seq: u64,
    /// The stream's last sequence as last learnt: from the stream itself (asked at each
    /// discovery and when a follow opens) or from a message's count of those after it.
    pub stream_last_seq: u64,
    /// Unix ms of the last message applied from it (0: none since start).
    pub last_message_ms: i64,
    /// Unix ms of its last heartbeat (0: none since start).
    pub last_heartbeat_ms: i64,
    /// Unix ms when this node first learnt of the host (its silence counts from there).
    pub known_since_ms: i64,
    /// Committed batches its last heartbeat said were not acknowledged by JetStream yet.
    pub backlog: u64,
}

impl FleetHostFacts {
    /// Messages of its stream not applied yet: the stream's last sequence minus the last one
    /// applied (so messages waiting in the stream count even while none arrives).
    pub fn lag(&self) -> u64 {
        self.stream_last_seq.saturating_sub(self.applied_seq)
    }

    /// No heartbeat for longer than `stale_after_ms` (counted from when the host became known).
    pub fn stale(&self, now_ms: i64, stale_after_ms: u64) -> bool {
        let heard = self.last_heartbeat_ms.max(self.known_since_ms);
        heard > 0 && now_ms.saturating_sub(heard) > stale_after_ms as i64
    }
}

impl Health {
    pub fn new() -> Self {
        let h = Health::default();
        h.state.store(2, Ordering::Relaxed);
        h
    }

    pub fn set_state(&self, s: UpstreamState) {
        let v = match s {
            UpstreamState::Connected => 0,
            UpstreamState::Reconnecting => 1,
            UpstreamState::Down => 2,
        };
        self.state.store(v, Ordering::Relaxed);
        metrics::gauge!(telemetry::UPSTREAM_STATE).set(v as f64);
    }

    pub fn set_dialect(&self, facts: DialectFacts) {
        *self.dialect.lock().unwrap_or_else(|e| e.into_inner()) = facts;
    }

    /// Which dialect VK speaks; `unknown` before ingest asked.
    pub fn dialect(&self) -> DialectFacts {
        let facts = self
            .dialect
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if facts.dialect.is_empty() {
            return DialectFacts {
                dialect: "unknown".into(),
                by: "detected".into(),
                detail: "VK not asked yet".into(),
                ..facts
            };
        }
        facts
    }

    pub fn state(&self) -> UpstreamState {
        match self.state.load(Ordering::Relaxed) {
            0 => UpstreamState::Connected,
            1 => UpstreamState::Reconnecting,
            _ => UpstreamState::Down,
        }
    }

    pub fn set_bootstrapped(&self) {
        self.bootstrapped.store(true, Ordering::Release);
    }

    pub fn bootstrapped(&self) -> bool {
        self.bootstrapped.load(Ordering::Acquire)
    }

    /// Something arrived from VK (any byte on any stream, keep-alives and pings included).
    pub fn touch(&self) {
        self.last_upstream_byte_ms
            .store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
    }

    /// Unix ms of the last byte from VK (0: none yet).
    pub fn last_upstream_byte_ms(&self) -> i64 {
        self.last_upstream_byte_ms.load(Ordering::Relaxed)
    }

    /// A fleet node follows (or stopped following) `host`'s stream.
    pub fn fleet_host_following(&self, host: &str, following: bool) {
        let mut hosts = self.fleet_hosts.lock().unwrap_or_else(|e| e.into_inner());
        Self::known(&mut hosts, host).following = following;
    }

    fn known<'h>(
        hosts: &'h mut std::collections::BTreeMap<String, FleetHostFacts>,
        host: &str,
    ) -> &'h mut FleetHostFacts {
        hosts
            .entry(host.to_owned())
            .or_insert_with(|| FleetHostFacts {
                known_since_ms: chrono::Utc::now().timestamp_millis(),
                ..FleetHostFacts::default()
            })
    }

    /// A fleet node heard `host`'s heartbeat, which says `backlog` batches wait at the host.
    pub fn fleet_host_heartbeat(&self, host: &str, backlog: u64) {
        let mut hosts = self.fleet_hosts.lock().unwrap_or_else(|e| e.into_inner());
        let facts = Self::known(&mut hosts, host);
        facts.last_heartbeat_ms = chrono::Utc::now().timestamp_millis();
        facts.backlog = backlog;
    }

    /// The silence after which a fleet node calls a host stale (`[fleet]`), set at its start.
    pub fn set_fleet_stale_after(&self, after: std::time::Duration) {
        self.fleet_stale_after_ms
            .store(after.as_millis() as u64, Ordering::Relaxed);
    }

    pub fn fleet_stale_after_ms(&self) -> u64 {
        self.fleet_stale_after_ms.load(Ordering::Relaxed)
    }

    /// A fleet node applied `host`'s messages up to stream sequence `seq`, with `after` more
    /// in its stream as the last one said.
    pub fn fleet_host_message(&self, host: &str, seq: u64, after: u64) {
        let mut hosts = self.fleet_hosts.lock().unwrap_or_else(|e| e.into_inner());
        let facts = Self::known(&mut hosts, host);
        facts.applied_seq = seq;
        facts.stream_last_seq = facts.stream_last_seq.max(seq.saturating_add(after));
        facts.last_message_ms = chrono::Utc::now().timestamp_millis();
    }

    /// What a fleet node learnt of `host`'s stream itself: its last sequence, and (when a
    /// follow opens on it) the sequence applied so far.
    pub fn fleet_host_stream(&self, host: &str, last_seq: u64, applied_seq: Option<u64>) {
        let mut hosts = self.fleet_hosts.lock().unwrap_or_else(|e| e.into_inner());
        let facts = Self::known(&mut hosts, host);
        facts.stream_last_seq = last_seq;
        if let Some(applied) = applied_seq {
            facts.applied_seq = applied;
        }
    }

    /// The fleet node's hosts (empty on a host daemon).
    pub fn fleet_hosts(&self) -> Vec<(String, FleetHostFacts)> {
        let hosts = self.fleet_hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts.iter().map(|(h, f)| (h.clone(), *f)).collect()
    }

    /// A stream connection to VK was lost and will be reopened.
    pub fn reconnected(&self, stream: UpstreamStream) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::UPSTREAM_RECONNECTS, label::STREAM => stream.reconnect_label())
            .increment(1);
    }

    /// A resync began: `scope` is everything or one object stream, `cause` says why.
    pub fn resynced(&self, scope: ResyncScope, cause: ResyncCause) {
        self.resyncs.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::RESYNCS, label::SCOPE => scope.as_str(), label::CAUSE => cause.as_str())
            .increment(1);
    }

    /// A frame of `stream` did not parse and was skipped.
    pub fn garbage(&self, stream: UpstreamStream, detail: &str) {
        let stream = stream.garbage_label();
        self.garbage_frames.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(telemetry::GARBAGE_FRAMES, label::STREAM => stream).increment(1);
        tracing::warn!(stream, detail = %detail.chars().take(200).collect::<String>(), "skipped a frame VK sent that does not parse");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_lag_counts_what_waits_in_its_stream() {
        let health = Health::new();
        let lag = |h: &Health| h.fleet_hosts()[0].1.lag();
        // A follow opens at sequence 3 of a stream holding 10: 7 wait before anything arrives.
        health.fleet_host_stream("h", 10, Some(3));
        assert_eq!(lag(&health), 7);
        // A message says how many follow it in the stream.
        health.fleet_host_message("h", 8, 4);
        assert_eq!(lag(&health), 4, "12 in the stream, 8 applied");
        // The stream grows while nothing arrives (a dead consumer): discovery tells.
        health.fleet_host_stream("h", 20, None);
        assert_eq!(lag(&health), 12);
        health.fleet_host_message("h", 20, 0);
        assert_eq!(lag(&health), 0);
        // A recreated stream starts over: the follow tells where it is in the new one.
        health.fleet_host_stream("h", 2, Some(0));
        assert_eq!(lag(&health), 2);
    }
}
