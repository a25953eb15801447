//! Every Prometheus metric the daemon exports, in one place: its name (a constant the call sites
//! use), its `# HELP` text and unit, and the label values it can take.
//!
//! [`register`] runs once, right after the recorder is installed, so that `/metrics` lists every
//! metric before the first event: a counter that has never moved is exported at 0 (otherwise
//! `rate()` and `increase()` have no first sample and dashboards show "no data" instead of 0), and
//! each gauge at the value it has before anything happens. A labelled counter is registered for
//! each label value known at build time; labels whose values come from the caller (tool names,
//! error codes) are only described, and appear with their first use.
//!
//! Names follow Prometheus conventions: counters end in `_total`, quantities are in base units
//! (`_seconds`, `_bytes`), and the exporter is not asked to add unit suffixes of its own.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

// ---- counters ----

/// Domain events the store writer applied (changed or not).
pub const EVENTS_APPLIED: &str = "vk_observer_events_applied_total";
/// Log entries received in writer batches (new, replaced or re-sent).
pub const LOG_ENTRIES_RECEIVED: &str = "vk_observer_log_entries_received_total";
/// Writer batches that failed and wrote nothing.
pub const STORE_BATCH_ERRORS: &str = "vk_observer_store_batch_errors_total";
/// Frames from VK that did not parse and were skipped; label `stream` ([`GARBAGE_STREAMS`]).
pub const GARBAGE_FRAMES: &str = "vk_observer_garbage_frames_total";
/// Reconnects to VK; label `stream` ([`UPSTREAM_STREAMS`]).
pub const UPSTREAM_RECONNECTS: &str = "vk_observer_upstream_reconnects_total";
/// Fresh snapshots taken from VK; labels `scope` ([`RESYNC_SCOPES`]) and `cause`
/// ([`RESYNC_CAUSES`]).
pub const RESYNCS: &str = "vk_observer_resyncs_total";
/// MCP tool calls; labels `tool` (the tool's name) and `outcome` ([`TOOL_OUTCOMES`]).
pub const TOOL_CALLS: &str = "vk_observer_tool_calls_total";
/// Tool calls answered with an error envelope; label `code` (the envelope's stable code).
pub const TOOL_ERRORS: &str = "vk_observer_tool_errors_total";
/// Wait calls parked before rmcp until something changes or their time is up.
pub const WAITS_PARKED: &str = "vk_observer_waits_parked_total";
/// Mutating calls answered from a stored request_id record instead of asking VK again.
pub const IDEMPOTENT_REPLAYS: &str = "vk_observer_idempotent_replays_total";
/// Artifact reads refused; label `reason` ([`ARTIFACT_BLOCK_REASONS`]).
pub const ARTIFACT_BLOCKED: &str = "vk_observer_artifact_blocked_total";
/// HTTP requests to `/mcp` refused; label `reason` ([`HTTP_REFUSAL_REASONS`]).
pub const HTTP_REFUSED: &str = "vk_observer_http_refused_total";

// ---- gauges ----

/// 0 connected, 1 reconnecting, 2 down (the state before the first connection).
pub const UPSTREAM_STATE: &str = "vk_observer_upstream_state";
/// Wait calls currently parked.
pub const WAITERS: &str = "vk_observer_waiters";
/// The store's current global change token (set at each scrape).
pub const STORE_TOKEN: &str = "vk_observer_store_token";
/// Bytes sled uses on disk (set at each scrape).
pub const STORE_DISK_BYTES: &str = "vk_observer_store_disk_bytes";
/// Seconds since the last batch that changed something (set at each scrape once one has
/// committed: before that there is no age to report, and 0 would read as "just now").
pub const LAST_COMMIT_AGE: &str = "vk_observer_last_commit_age_seconds";
/// 1 once the first full load from VK is in the store (set at each scrape).
pub const BOOTSTRAPPED: &str = "vk_observer_bootstrapped";

// ---- histograms ----

/// Duration of MCP tool calls; label `tool`.
pub const TOOL_CALL_SECONDS: &str = "vk_observer_tool_call_seconds";

// ---- label values known at build time ----

/// Streams that reconnect to VK: the SSE hint stream and the WS streams.
pub const UPSTREAM_STREAMS: &[&str] =
    &["sse", "projects_ws", "tasks_ws", "processes_ws", "logs_ws"];
/// Streams whose unparsable frames are counted (the log follower reports as `log_ws`).
pub const GARBAGE_STREAMS: &[&str] = &["sse", "projects_ws", "tasks_ws", "processes_ws", "log_ws"];
/// What a resync refreshes: everything, or one object stream.
pub const RESYNC_SCOPES: &[&str] = &["all", "projects_ws", "tasks_ws", "processes_ws"];
/// Why a resync happened.
pub const RESYNC_CAUSES: &[&str] = &[
    "startup",
    "bootstrap",
    "resume",
    "vk_restarted",
    "no_resume_point",
    "ids_restarted",
    "resume_unavailable",
    "lagged",
    "patch_failed",
    "store_error",
    "other",
];
/// How a tool call ended.
pub const TOOL_OUTCOMES: &[&str] = &["ok", "tool_error", "protocol_error"];
pub const ARTIFACT_BLOCK_REASONS: &[&str] = &["path_outside_workspace"];
pub const HTTP_REFUSAL_REASONS: &[&str] = &["unauthorized", "too_many_sessions"];

/// Label names, so call sites and registration agree.
pub mod label {
    pub const STREAM: &str = "stream";
    pub const SCOPE: &str = "scope";
    pub const CAUSE: &str = "cause";
    pub const TOOL: &str = "tool";
    pub const OUTCOME: &str = "outcome";
    pub const CODE: &str = "code";
    pub const REASON: &str = "reason";
}

/// Describe every metric and export each one at its starting value. Call once, right after the
/// recorder is installed; calling it again changes nothing (counters are incremented by 0).
pub fn register() {
    describe_counters();
    describe_gauges();
    for name in [
        EVENTS_APPLIED,
        LOG_ENTRIES_RECEIVED,
        STORE_BATCH_ERRORS,
        WAITS_PARKED,
        IDEMPOTENT_REPLAYS,
    ] {
        metrics::counter!(name).increment(0);
    }
    for &stream in GARBAGE_STREAMS {
        metrics::counter!(GARBAGE_FRAMES, label::STREAM => stream).increment(0);
    }
    for &stream in UPSTREAM_STREAMS {
        metrics::counter!(UPSTREAM_RECONNECTS, label::STREAM => stream).increment(0);
    }
    // Every (scope, cause) pair: which causes reach which scope is the ingest layer's business,
    // and a zero series costs less than a dashboard that cannot tell "none" from "unknown".
    for &scope in RESYNC_SCOPES {
        for &cause in RESYNC_CAUSES {
            metrics::counter!(RESYNCS, label::SCOPE => scope, label::CAUSE => cause).increment(0);
        }
    }
    for &reason in ARTIFACT_BLOCK_REASONS {
        metrics::counter!(ARTIFACT_BLOCKED, label::REASON => reason).increment(0);
    }
    for &reason in HTTP_REFUSAL_REASONS {
        metrics::counter!(HTTP_REFUSED, label::REASON => reason).increment(0);
    }
    // Gauges at the value they hold before anything happens (see `health::Health::new`).
    metrics::gauge!(UPSTREAM_STATE).set(2.0);
    for name in [WAITERS, STORE_TOKEN, STORE_DISK_BYTES, BOOTSTRAPPED] {
        metrics::gauge!(name).set(0.0);
    }
    register_subscriptions();
}

/// The `# HELP` text and unit of every counter.
fn describe_counters() {
    describe_counter!(
        EVENTS_APPLIED,
        Unit::Count,
        "Domain events the store writer applied, changed or not."
    );
    describe_counter!(
        LOG_ENTRIES_RECEIVED,
        Unit::Count,
        "Log entries received in writer batches: new, replaced or re-sent."
    );
    describe_counter!(
        STORE_BATCH_ERRORS,
        Unit::Count,
        "Store batches that failed; nothing of them was written."
    );
    describe_counter!(
        GARBAGE_FRAMES,
        Unit::Count,
        "Frames from VK that did not parse and were skipped, by stream."
    );
    describe_counter!(
        UPSTREAM_RECONNECTS,
        Unit::Count,
        "Reconnects to VK, by stream."
    );
    describe_counter!(
        RESYNCS,
        Unit::Count,
        "Fresh snapshots taken from VK, by scope and cause."
    );
    describe_counter!(
        TOOL_CALLS,
        Unit::Count,
        "MCP tool calls, by tool and outcome."
    );
    describe_counter!(
        TOOL_ERRORS,
        Unit::Count,
        "Tool calls answered with an error envelope, by code."
    );
    describe_counter!(
        WAITS_PARKED,
        Unit::Count,
        "Wait calls parked until something changed or their time was up."
    );
    describe_counter!(
        IDEMPOTENT_REPLAYS,
        Unit::Count,
        "Mutating calls answered from a stored request_id record instead of asking VK again."
    );
    describe_counter!(
        ARTIFACT_BLOCKED,
        Unit::Count,
        "Artifact reads refused, by reason."
    );
    describe_counter!(
        HTTP_REFUSED,
        Unit::Count,
        "HTTP requests to /mcp refused, by reason."
    );
}

/// The `# HELP` text and unit of every gauge and histogram.
fn describe_gauges() {
    describe_gauge!(
        UPSTREAM_STATE,
        "Connection to VK: 0 connected, 1 reconnecting, 2 down."
    );
    describe_gauge!(WAITERS, Unit::Count, "Wait calls currently parked.");
    describe_gauge!(STORE_TOKEN, "The store's current global change token.");
    describe_gauge!(
        STORE_DISK_BYTES,
        Unit::Bytes,
        "Bytes the store uses on disk."
    );
    describe_gauge!(
        LAST_COMMIT_AGE,
        Unit::Seconds,
        "Seconds since the last store batch that changed something."
    );
    describe_gauge!(
        BOOTSTRAPPED,
        "1 once the first full load from VK is in the store, else 0."
    );
    describe_histogram!(
        TOOL_CALL_SECONDS,
        Unit::Seconds,
        "Duration of MCP tool calls, by tool."
    );
}

// ---- resource subscriptions (`mcp::subscriptions`) ----

/// Resource subscriptions held right now, over all sessions and `subscriptions/listen` streams
/// (set at each scrape from `health::Health::resource_subscriptions`).
pub const RESOURCE_SUBSCRIPTIONS: &str = "vk_observer_resource_subscriptions";
/// `notifications/resources/updated` sent to subscribers.
pub const RESOURCE_UPDATES: &str = "vk_observer_resource_updates_total";

/// Describe and export the subscription metrics at their starting values; called by
/// [`register`].
fn register_subscriptions() {
    describe_gauge!(
        RESOURCE_SUBSCRIPTIONS,
        Unit::Count,
        "Resource subscriptions held now, over all MCP sessions and subscriptions/listen streams."
    );
    describe_counter!(
        RESOURCE_UPDATES,
        Unit::Count,
        "notifications/resources/updated sent to subscribers."
    );
    metrics::gauge!(RESOURCE_SUBSCRIPTIONS).set(0.0);
    metrics::counter!(RESOURCE_UPDATES).increment(0);
}
