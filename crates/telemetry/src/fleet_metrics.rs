//! The fleet's Prometheus metrics (design-notes §23): names, help texts and their export at
//! zero. Registered by `fleet` when a daemon starts with `[fleet]` settings or as a fleet node,
//! so a daemon without a fleet exports none of them.

use metrics::{Unit, describe_counter, describe_gauge};

/// Host: committed batches waiting in the outbox for JetStream's acknowledgement.
pub const FLEET_BACKLOG: &str = "vk_observer_fleet_backlog_batches";
/// Host: batches published and acknowledged by JetStream.
pub const FLEET_PUBLISHED: &str = "vk_observer_fleet_published_total";
/// Host: publishes that failed (NATS down, refused, timed out); retried from the outbox.
pub const FLEET_PUBLISH_ERRORS: &str = "vk_observer_fleet_publish_errors_total";
/// Host: outbox batches dropped over `[fleet] max_backlog_batches` (a snapshot replaces them).
pub const FLEET_BACKLOG_DROPPED: &str = "vk_observer_fleet_backlog_dropped_total";
/// Host: snapshots published (first start, stream gone or purged, backlog dropped).
pub const FLEET_SNAPSHOTS: &str = "vk_observer_fleet_snapshots_total";
/// Fleet node: host messages applied.
pub const FLEET_APPLIED: &str = "vk_observer_fleet_messages_applied_total";
/// Fleet node: host messages skipped as already applied (same epoch, token not above), and
/// the batches of a pack skipped so (`fleet::pack`).
pub const FLEET_DUPLICATES: &str = "vk_observer_fleet_duplicates_total";
/// Fleet node: malformed or foreign messages, counted, logged and skipped.
pub const FLEET_GARBAGE: &str = "vk_observer_fleet_garbage_total";
/// Fleet node: writer batches its followers queued, each of one or more host messages (applied
/// ÷ this is the grouping a backlog gets).
pub const FLEET_WRITER_BATCHES: &str = "vk_observer_fleet_writer_batches_total";
/// Fleet node: host streams found recreated under their follower (a message stamped with
/// another stream generation), each followed again from its start.
pub const FLEET_STREAM_CHANGES: &str = "vk_observer_fleet_stream_changes_total";
/// Days until the soonest expiry of each configured TLS certificate file (`role`: client, ca).
pub const FLEET_TLS_DAYS_LEFT: &str = "vk_observer_fleet_tls_cert_days_left";
/// Fleet node: times NATS came back after an outage and every follower started over.
pub const FLEET_RESUBSCRIBES: &str = "vk_observer_fleet_resubscribes_total";
/// Fleet node: followers started over because their stream held more than they had applied
/// and nothing arrived for a while (a consumer left behind by a server that lost the stream).
pub const FLEET_STALLED_RESTARTS: &str = "vk_observer_fleet_stalled_restarts_total";

/// Describe the fleet metrics and export them at zero.
pub fn register_fleet() {
    describe_gauge!(
        FLEET_BACKLOG,
        Unit::Count,
        "Committed batches waiting in the fleet outbox for JetStream's acknowledgement."
    );
    let counters = [
        (
            FLEET_PUBLISHED,
            "Batches published to JetStream and acknowledged.",
        ),
        (
            FLEET_PUBLISH_ERRORS,
            "Publishes to JetStream that failed; retried from the outbox.",
        ),
        (
            FLEET_BACKLOG_DROPPED,
            "Outbox batches dropped over the bound; a snapshot replaces them.",
        ),
        (FLEET_SNAPSHOTS, "Snapshots published to the host's stream."),
        (FLEET_APPLIED, "Host messages applied by this fleet node."),
        (
            FLEET_DUPLICATES,
            "Host messages, and batches of a pack, skipped as already applied.",
        ),
        (
            FLEET_GARBAGE,
            "Malformed or foreign host messages, skipped.",
        ),
        (
            FLEET_WRITER_BATCHES,
            "Writer batches queued by the fleet node's followers (one or more host messages each).",
        ),
        (
            FLEET_STREAM_CHANGES,
            "Host streams found recreated under their follower, followed again from their start.",
        ),
        (
            FLEET_RESUBSCRIBES,
            "Times NATS came back after an outage and every host's consumer was created again.",
        ),
        (
            FLEET_STALLED_RESTARTS,
            "Followers started over: their stream held more than they applied and nothing arrived for a while.",
        ),
    ];
    for (name, help) in counters {
        describe_counter!(name, Unit::Count, help);
        metrics::counter!(name).increment(0);
    }
    metrics::gauge!(FLEET_BACKLOG).set(0.0);
    describe_gauge!(
        FLEET_TLS_DAYS_LEFT,
        "Days until the soonest expiry of each configured fleet TLS certificate file (role: client, ca); negative once expired."
    );
}
