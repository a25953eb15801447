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

pub mod catchup_metrics;
pub mod fleet_metrics;
pub mod health;

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
/// Lines of a coding agent's stdout that should have carried token usage and did not read
/// (a truncated or non-JSON line, impossible numbers, an over-long line); that usage stays
/// absent (`ingest::usage`).
pub const USAGE_GARBAGE: &str = "vk_observer_usage_garbage_total";

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
//
// Each closed label set is an enum whose `as_str` is the exported value; call sites pass the
// enum, and the slices below (what `register` exports at 0, and what tests/metrics.rs checks)
// are built from the same `as_str`, so a value is spelled once.

/// A stream the daemon holds open to VK, as the `stream` label of [`UPSTREAM_RECONNECTS`] and
/// [`GARBAGE_FRAMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamStream {
    /// `GET /api/events`.
    Sse,
    /// The projects object WebSocket.
    Projects,
    /// A project's tasks object WebSocket.
    Tasks,
    /// An attempt's execution processes object WebSocket.
    Processes,
    /// A process's log WebSocket (normalized or raw).
    Logs,
    /// VK 0.1.x's workspaces object WebSocket.
    Workspaces,
    /// VK 0.1.x's approvals WebSocket.
    Approvals,
}

impl UpstreamStream {
    /// The `stream` label on [`UPSTREAM_RECONNECTS`]. An object stream is spelled as its resync
    /// scope.
    pub(crate) const fn reconnect_label(self) -> &'static str {
        match self {
            UpstreamStream::Sse => "sse",
            UpstreamStream::Projects => ResyncScope::Projects.as_str(),
            UpstreamStream::Tasks => ResyncScope::Tasks.as_str(),
            UpstreamStream::Processes => ResyncScope::Processes.as_str(),
            UpstreamStream::Logs => "logs_ws",
            UpstreamStream::Workspaces => "workspaces_ws",
            UpstreamStream::Approvals => "approvals_ws",
        }
    }

    /// The `stream` label on [`GARBAGE_FRAMES`]: as [`reconnect_label`](Self::reconnect_label)
    /// except that the log follower has always reported its garbage as `log_ws` (one letter from
    /// `logs_ws`). Both spellings are exported today, each for its own metric, so both are kept
    /// rather than renaming a series under existing dashboards.
    pub(crate) const fn garbage_label(self) -> &'static str {
        match self {
            UpstreamStream::Logs => "log_ws",
            other => other.reconnect_label(),
        }
    }
}

/// What a resync refreshes, the `scope` label of [`RESYNCS`]: everything, or one object stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResyncScope {
    All,
    Projects,
    Tasks,
    Processes,
}

impl ResyncScope {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            ResyncScope::All => "all",
            ResyncScope::Projects => "projects_ws",
            ResyncScope::Tasks => "tasks_ws",
            ResyncScope::Processes => "processes_ws",
        }
    }
}

/// Why a resync happened, the `cause` label of [`RESYNCS`]. Some are VK's words (the `reason` of
/// its `invalidate_all`); [`ResyncCause::of`] folds any other reason into `Other`, so the label
/// set stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResyncCause {
    /// The daemon started.
    Startup,
    /// The first full load from VK.
    Bootstrap,
    /// VK's `invalidate_all {reason: resume}`.
    Resume,
    /// VK's run identity changed: VK restarted (or reloaded its config).
    VkRestarted,
    /// A reconnect with no stored SSE seq to resume from.
    NoResumePoint,
    /// VK's SSE ids went backwards.
    IdsRestarted,
    /// VK's `invalidate_all {reason: resume_unavailable}`.
    ResumeUnavailable,
    /// VK's `invalidate_all {reason: lagged}`.
    Lagged,
    /// A JSON Patch of an object stream did not apply.
    PatchFailed,
    /// The store failed to take an object stream's batch.
    StoreError,
    /// Any other reason.
    Other,
}

impl ResyncCause {
    pub(crate) const ALL: [ResyncCause; 11] = [
        ResyncCause::Startup,
        ResyncCause::Bootstrap,
        ResyncCause::Resume,
        ResyncCause::VkRestarted,
        ResyncCause::NoResumePoint,
        ResyncCause::IdsRestarted,
        ResyncCause::ResumeUnavailable,
        ResyncCause::Lagged,
        ResyncCause::PatchFailed,
        ResyncCause::StoreError,
        ResyncCause::Other,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ResyncCause::Startup => "startup",
            ResyncCause::Bootstrap => "bootstrap",
            ResyncCause::Resume => "resume",
            ResyncCause::VkRestarted => "vk_restarted",
            ResyncCause::NoResumePoint => "no_resume_point",
            ResyncCause::IdsRestarted => "ids_restarted",
            ResyncCause::ResumeUnavailable => "resume_unavailable",
            ResyncCause::Lagged => "lagged",
            ResyncCause::PatchFailed => "patch_failed",
            ResyncCause::StoreError => "store_error",
            ResyncCause::Other => "other",
        }
    }

    /// The cause a resync reason names (the daemon's own or VK's word); unknown ones are `Other`.
    pub fn of(reason: &str) -> ResyncCause {
        ResyncCause::ALL
            .into_iter()
            .find(|c| c.as_str() == reason)
            .unwrap_or(ResyncCause::Other)
    }
}

/// How a tool call ended, the `outcome` label of [`TOOL_CALLS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    Ok,
    /// Answered with an error envelope (`isError: true`).
    ToolError,
    /// Failed at the protocol level (a JSON-RPC error).
    ProtocolError,
}

impl ToolOutcome {
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolOutcome::Ok => "ok",
            ToolOutcome::ToolError => "tool_error",
            ToolOutcome::ProtocolError => "protocol_error",
        }
    }
}

/// Why an artifact read was refused, the `reason` label of [`ARTIFACT_BLOCKED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactBlockReason {
    /// The path leaves the attempt's workspace.
    PathOutsideWorkspace,
}

impl ArtifactBlockReason {
    pub const fn as_str(self) -> &'static str {
        match self {
            ArtifactBlockReason::PathOutsideWorkspace => "path_outside_workspace",
        }
    }
}

/// Why an HTTP request to `/mcp` was refused, the `reason` label of [`HTTP_REFUSED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpRefusal {
    /// No or a wrong bearer token.
    Unauthorized,
    /// The session cap is reached.
    TooManySessions,
}

impl HttpRefusal {
    pub const fn as_str(self) -> &'static str {
        match self {
            HttpRefusal::Unauthorized => "unauthorized",
            HttpRefusal::TooManySessions => "too_many_sessions",
        }
    }
}

/// The `tool` label of a call to a tool the router does not know (arbitrary names must not grow
/// the metric set).
pub const UNKNOWN_TOOL: &str = "unknown";

/// Streams that reconnect to VK: the SSE hint stream and the WS streams.
pub const UPSTREAM_STREAMS: &[&str] = &[
    UpstreamStream::Sse.reconnect_label(),
    UpstreamStream::Projects.reconnect_label(),
    UpstreamStream::Tasks.reconnect_label(),
    UpstreamStream::Processes.reconnect_label(),
    UpstreamStream::Logs.reconnect_label(),
];
/// Streams whose unparsable frames are counted (the log follower reports as `log_ws`).
pub const GARBAGE_STREAMS: &[&str] = &[
    UpstreamStream::Sse.garbage_label(),
    UpstreamStream::Projects.garbage_label(),
    UpstreamStream::Tasks.garbage_label(),
    UpstreamStream::Processes.garbage_label(),
    UpstreamStream::Logs.garbage_label(),
];
/// What a resync refreshes: everything, or one object stream.
pub const RESYNC_SCOPES: &[&str] = &[
    ResyncScope::All.as_str(),
    ResyncScope::Projects.as_str(),
    ResyncScope::Tasks.as_str(),
    ResyncScope::Processes.as_str(),
];
/// Why a resync happened.
pub const RESYNC_CAUSES: &[&str] = &[
    ResyncCause::Startup.as_str(),
    ResyncCause::Bootstrap.as_str(),
    ResyncCause::Resume.as_str(),
    ResyncCause::VkRestarted.as_str(),
    ResyncCause::NoResumePoint.as_str(),
    ResyncCause::IdsRestarted.as_str(),
    ResyncCause::ResumeUnavailable.as_str(),
    ResyncCause::Lagged.as_str(),
    ResyncCause::PatchFailed.as_str(),
    ResyncCause::StoreError.as_str(),
    ResyncCause::Other.as_str(),
];
/// How a tool call ended.
#[cfg(test)]
pub(crate) const TOOL_OUTCOMES: &[&str] = &[
    ToolOutcome::Ok.as_str(),
    ToolOutcome::ToolError.as_str(),
    ToolOutcome::ProtocolError.as_str(),
];
pub const ARTIFACT_BLOCK_REASONS: &[&str] = &[ArtifactBlockReason::PathOutsideWorkspace.as_str()];
pub const HTTP_REFUSAL_REASONS: &[&str] = &[
    HttpRefusal::Unauthorized.as_str(),
    HttpRefusal::TooManySessions.as_str(),
];

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
        USAGE_GARBAGE,
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
    crate::catchup_metrics::register_catchup();
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
    describe_counter!(
        USAGE_GARBAGE,
        Unit::Count,
        "Coding-agent stdout lines that should have carried token usage and did not read; that usage stays absent."
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

// ---- resource subscriptions (`mcp::transport::subscriptions`) ----

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The exported label values, as dashboards know them: unchanged by the enums.
    #[test]
    fn label_values_are_the_exported_ones() {
        assert_eq!(
            UPSTREAM_STREAMS,
            ["sse", "projects_ws", "tasks_ws", "processes_ws", "logs_ws"]
        );
        assert_eq!(
            GARBAGE_STREAMS,
            ["sse", "projects_ws", "tasks_ws", "processes_ws", "log_ws"]
        );
        assert_eq!(
            RESYNC_SCOPES,
            ["all", "projects_ws", "tasks_ws", "processes_ws"]
        );
        let causes: Vec<&str> = ResyncCause::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(RESYNC_CAUSES, causes);
        assert_eq!(
            RESYNC_CAUSES,
            [
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
            ]
        );
        assert_eq!(TOOL_OUTCOMES, ["ok", "tool_error", "protocol_error"]);
        assert_eq!(ARTIFACT_BLOCK_REASONS, ["path_outside_workspace"]);
        assert_eq!(HTTP_REFUSAL_REASONS, ["unauthorized", "too_many_sessions"]);
        assert_eq!(ResyncCause::of("lagged"), ResyncCause::Lagged);
        assert_eq!(ResyncCause::of("something new"), ResyncCause::Other);
    }
}
