//! Where a catch-up's time goes (issue 27): how many upstream reads of each kind the daemon made
//! and the time spent fetching and decoding them, and the store writer's batches, groups and
//! flushes with their time. Counters of microseconds (summed over concurrent work, so a kind's
//! total can exceed the wall time); the load driver's `--scale` phase prints them per run.

use metrics::{Unit, describe_counter};

/// Upstream REST requests, label `kind` ([`FetchKind`]).
pub const UPSTREAM_REQUESTS: &str = "vk_observer_upstream_requests_total";
/// Microseconds from sending an upstream request until its body was in memory, label `kind`.
pub const UPSTREAM_FETCH_US: &str = "vk_observer_upstream_fetch_microseconds_total";
/// Microseconds decoding upstream bodies (JSON into the daemon's types), label `kind`.
pub const UPSTREAM_DECODE_US: &str = "vk_observer_upstream_decode_microseconds_total";
/// Batches the store writer applied (each its own token).
pub const STORE_BATCHES: &str = "vk_observer_store_batches_total";
/// Groups of batches the writer took from its queue at once (group commit).
pub const STORE_GROUPS: &str = "vk_observer_store_groups_total";
/// Microseconds the writer spent applying batches (reads, encoding, sled batch), flush excluded.
pub const STORE_APPLY_US: &str = "vk_observer_store_apply_microseconds_total";
/// Flushes (fsync) the writer made before publishing a group's tokens.
pub const STORE_FLUSHES: &str = "vk_observer_store_flushes_total";
/// Microseconds the writer spent in those flushes.
pub const STORE_FLUSH_US: &str = "vk_observer_store_flush_microseconds_total";

/// What an upstream request was, the `kind` label of the upstream counters above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchKind {
    /// A page of a process's log history.
    History,
    /// Any other REST request (attempts, sessions, repositories, change summaries, ...).
    Rest,
}

impl FetchKind {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            FetchKind::History => "history",
            FetchKind::Rest => "rest",
        }
    }
}

/// Every `kind` label value, exported at zero.
pub const FETCH_KINDS: &[&str] = &[FetchKind::History.as_str(), FetchKind::Rest.as_str()];

/// Count one upstream request: its fetch and decode time.
pub fn upstream_request(kind: FetchKind, fetch: std::time::Duration, decode: std::time::Duration) {
    let k = kind.as_str();
    metrics::counter!(UPSTREAM_REQUESTS, "kind" => k).increment(1);
    metrics::counter!(UPSTREAM_FETCH_US, "kind" => k).increment(fetch.as_micros() as u64);
    metrics::counter!(UPSTREAM_DECODE_US, "kind" => k).increment(decode.as_micros() as u64);
}

/// Describe the catch-up counters and export them at zero (called by `telemetry::register`).
pub(crate) fn register_catchup() {
    let per_kind = [
        (
            UPSTREAM_REQUESTS,
            Unit::Count,
            "Upstream REST requests, by kind.",
        ),
        (
            UPSTREAM_FETCH_US,
            Unit::Microseconds,
            "Time from sending an upstream request until its body was read, summed, by kind.",
        ),
        (
            UPSTREAM_DECODE_US,
            Unit::Microseconds,
            "Time decoding upstream bodies, summed, by kind.",
        ),
    ];
    for (name, unit, help) in per_kind {
        describe_counter!(name, unit, help);
        for &k in FETCH_KINDS {
            metrics::counter!(name, "kind" => k).increment(0);
        }
    }
    let store = [
        (
            STORE_BATCHES,
            Unit::Count,
            "Batches the store writer applied.",
        ),
        (
            STORE_GROUPS,
            Unit::Count,
            "Groups of queued batches the writer applied together (group commit).",
        ),
        (
            STORE_APPLY_US,
            Unit::Microseconds,
            "Time the writer spent applying batches, flushes excluded.",
        ),
        (
            STORE_FLUSHES,
            Unit::Count,
            "Flushes the writer made before publishing tokens.",
        ),
        (
            STORE_FLUSH_US,
            Unit::Microseconds,
            "Time the writer spent flushing.",
        ),
    ];
    for (name, unit, help) in store {
        describe_counter!(name, unit, help);
        metrics::counter!(name).increment(0);
    }
}
