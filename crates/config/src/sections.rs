//! The sections of `Settings`, each the one type its consumer receives by value: `[retention]`
//! for the store's writer, `[store]` for how a new data dir's files are written, `[mcp]` for the `/mcp` endpoint, `[idempotency]` for the proxy's
//! `request_id` records, and the ingest tuning (only `raw_logs` of it is a setting). Each field's
//! default is here and nowhere else; the TOML keys are the field names.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `upstream_dialect`: which dialect of VK's API the daemon speaks (`upstream::dialect`). `auto`
/// asks VK (its answers to `/api/info` and `/api/tasks`); the others skip the asking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DialectSetting {
    #[default]
    Auto,
    /// The fork's dialect (StrayDragon/vibe-kanban).
    Fork,
    /// The workspace-first dialect of VK 0.1.x (BloopAI 0.1.15 to 0.1.44 and its forks).
    Workspaces,
}

/// `[retention]`: what the store's retention pass drops, and how often it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retention {
    /// Drop attempts with no running process whose last change is older than this (0 = keep).
    pub finished_attempt_days: u64,
    /// Keep at most this many entries per process log, oldest dropped first (0 = no cap).
    pub max_entries_per_process: u64,
    /// Keep the event records of the last N batches (0 = keep all).
    pub events_kept: u64,
    /// How often the writer runs the retention pass.
    #[serde(with = "humantime_serde")]
    pub prune_every: Duration,
    /// Activity items older than this are dropped by the retention pass (zero = keep all); a
    /// `since_token` from before the dropped items answers `token_reset` (`store::feed`).
    #[serde(with = "humantime_serde")]
    pub activity_horizon: Duration,
    /// Audit entries (`vk-observer audit`, `store::audit`) older than this are dropped by the
    /// retention pass (zero = keep all).
    #[serde(with = "humantime_serde")]
    pub audit_horizon: Duration,
    /// Megabytes of sled's page cache: what the store keeps of the data dir in memory, the
    /// largest part of an idle daemon's RSS after it caught up a big board (issue 27).
    pub cache_mb: u64,
}

/// Ninety days of audit by default: long enough to answer "who merged this" after a release.
pub const DEFAULT_AUDIT_HORIZON: Duration = Duration::from_secs(90 * 24 * 3600);

/// sled's page cache by default (MB). 64 (what every release before this setting used) kept
/// ~61 MB more RSS on an idle daemon after a tenth of the scale board than 8 did, one for one
/// with the setting (docs/performance.md, "Issue 27: idle RSS"); 16 holds the indexes and the
/// rows the tools read most.
pub(crate) const DEFAULT_CACHE_MB: u64 = 16;

/// Seven days of activity by default.
pub const DEFAULT_ACTIVITY_HORIZON: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for Retention {
    fn default() -> Self {
        Retention {
            finished_attempt_days: 30,
            max_entries_per_process: 0,
            events_kept: 100_000,
            prune_every: Duration::from_secs(600),
            activity_horizon: DEFAULT_ACTIVITY_HORIZON,
            audit_horizon: DEFAULT_AUDIT_HORIZON,
            cache_mb: DEFAULT_CACHE_MB,
        }
    }
}

/// `[store]`: how the values and sled files of a *new* data dir are written. A data dir keeps the
/// format it was created with (recorded beside its files, `store::disk_format`): a changed setting
/// applies to a new data dir, or to this one after it is moved aside and rebuilt from VK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// The store compresses each log entry's JSON itself (zstd with one kept context and a
    /// dictionary of VK's entry vocabulary, `store::codec`): less disk for little writer CPU.
    pub compression: bool,
    /// zstd compression of sled's pages (sled's `use_compression`): the least disk, but sled 0.34
    /// builds a zstd context per page it writes, which makes the writer ~5× slower per entry.
    pub page_compression: bool,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            compression: DEFAULT_STORE_COMPRESSION,
            page_compression: DEFAULT_STORE_PAGE_COMPRESSION,
        }
    }
}

/// On, chosen by measurement (docs/performance.md, "Issue 27: log entries compressed by the
/// store"): the writer no slower than plain values, the disk 1.8× the raw JSON on the scale board
/// instead of 3.1× (2.9× instead of 5.1× on recorded real entries; sled's own overhead keeps it
/// above the 1.6× target).
pub const DEFAULT_STORE_COMPRESSION: bool = true;

/// Off, chosen by measurement (docs/performance.md, "Issue 27: what page compression costs the
/// writer"): sled 0.34 builds a new zstd context for every page it writes, which makes the writer
/// 5.2× slower per log entry (catch-up, fleet fan-in); on, the disk is 0.55× the raw JSON instead
/// of 2.7–2.9×. (Named `compression` until the store compressed entries itself.)
pub const DEFAULT_STORE_PAGE_COMPRESSION: bool = false;

/// `[mcp]`: who may call `/mcp` and how much they may hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// Required as `Authorization: Bearer <token>` on `/mcp` when set; mandatory for a
    /// non-loopback listen address.
    pub token: Option<String>,
    /// Browser origins allowed besides loopback ones (`http://localhost:*` etc.).
    pub allowed_origins: Vec<String>,
    /// `Host` values allowed besides loopback ones (needed when listening on another address).
    pub allowed_hosts: Vec<String>,
    pub max_sessions: usize,
    pub max_waiters: usize,
    pub max_body_bytes: usize,
    pub stateless: bool,
    /// How often a parked wait called with a `progressToken` sends `notifications/progress`
    /// (SSE responses only; see `mcp::transport::progress`). At most `MAX_PROGRESS_EVERY`.
    #[serde(with = "humantime_serde")]
    pub progress_every: Duration,
    /// Resources one MCP session may be subscribed to at once (`resources/subscribe`; also the
    /// most URIs one `subscriptions/listen` may name). See `mcp::transport::subscriptions`.
    pub max_subscriptions_per_session: usize,
    /// The scoped tokens (`config::access`), written by `vk-observer token`; default
    /// `<data_dir>/tokens.toml`. Once `[mcp] token` is set or this file holds a token, every
    /// caller must present one.
    pub tokens_file: Option<std::path::PathBuf>,
    /// Requests one HTTP/2 connection may have in flight at once (its `SETTINGS_MAX_CONCURRENT_STREAMS`):
    /// a client that parks many waits over HTTP/2 holds them all on one connection.
    pub http2_max_streams: u32,
}

pub const DEFAULT_MAX_SESSIONS: usize = 256;
pub const DEFAULT_MAX_WAITERS: usize = 16_384;
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Below the 30–60 s idle timeouts of proxies and of clients that reset their request timeout
/// on progress.
pub const DEFAULT_PROGRESS_EVERY: Duration = Duration::from_secs(10);
pub const MAX_PROGRESS_EVERY: Duration = Duration::from_secs(15);
/// Enough for a client watching every attempt of a busy project; each costs ~200 bytes.
pub const DEFAULT_MAX_SUBSCRIPTIONS_PER_SESSION: usize = 1024;
/// As many streams as `DEFAULT_MAX_WAITERS`: one HTTP/2 connection can hold every parked wait.
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 16_384;

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            token: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_waiters: DEFAULT_MAX_WAITERS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            stateless: false,
            progress_every: DEFAULT_PROGRESS_EVERY,
            max_subscriptions_per_session: DEFAULT_MAX_SUBSCRIPTIONS_PER_SESSION,
            tokens_file: None,
            http2_max_streams: DEFAULT_HTTP2_MAX_STREAMS,
        }
    }
}

impl McpSettings {
    /// The progress interval of parked waits: `None` in stateless mode, whose JSON answers have
    /// no stream to carry notifications (`mcp::transport::progress`).
    pub fn progress_interval(&self) -> Option<Duration> {
        (!self.stateless).then_some(self.progress_every)
    }

    /// A non-loopback listen address serves anyone who can reach it: refuse it without a token.
    pub(crate) fn check_exposure(&self, listen: SocketAddr) -> anyhow::Result<()> {
        if !listen.ip().is_loopback() && self.token.as_deref().is_none_or(|t| t.trim().is_empty()) {
            anyhow::bail!(
                "refusing to listen on {listen} (not a loopback address) without a bearer token: \
                 set VK_OBSERVER_MCP_TOKEN (or `[mcp] token` in the config file), or listen on 127.0.0.1"
            );
        }
        if self.max_sessions == 0
            || self.max_waiters == 0
            || self.max_subscriptions_per_session == 0
            || self.http2_max_streams == 0
            || self.max_body_bytes < 1024
        {
            anyhow::bail!("[mcp] limits must be positive (max_body_bytes at least 1024)");
        }
        if self.progress_every.is_zero() || self.progress_every > MAX_PROGRESS_EVERY {
            anyhow::bail!(
                "[mcp] progress_every must be above 0 and at most {}",
                humantime_serde::re::humantime::format_duration(MAX_PROGRESS_EVERY)
            );
        }
        Ok(())
    }
}

/// `[idempotency]`: how long `request_id` records are kept, and how often expired ones go.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdempotencySettings {
    /// Completed records are kept this long (zero = forever).
    #[serde(with = "humantime_serde")]
    pub completed_ttl: Duration,
    /// An in-progress record is stale after this (zero = never).
    #[serde(with = "humantime_serde")]
    pub in_progress_ttl: Duration,
    /// How often expired records are pruned (and once at start).
    #[serde(with = "humantime_serde")]
    pub prune_every: Duration,
}

impl Default for IdempotencySettings {
    fn default() -> Self {
        IdempotencySettings {
            completed_ttl: Duration::from_secs(7 * 24 * 3600),
            in_progress_ttl: Duration::from_secs(3600),
            prune_every: Duration::from_secs(600),
        }
    }
}

/// Ingest tuning; defaults suit a real VK, tests shorten them. Only `raw_logs` is a setting
/// (the top-level `raw_logs` key, see `raw_logs_key`); the rest stays in the process.
#[derive(Debug, Clone, PartialEq)]
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
    /// A task's first SSE hint is refreshed at once; further hints for it within this window
    /// (a burst) cost one more refresh when it closes.
    pub hint_debounce: Duration,
    pub changes_debounce: Duration,
    /// While a coding agent runs, its attempt's change summary is re-read at most this long
    /// after one of its tool calls is logged (see `fresh_changes`).
    pub changes_live_every: Duration,
    pub process_stream_linger: Duration,
    pub rest_concurrency: usize,
    /// Log histories of ended processes read at once (each holds one follower's pages).
    pub log_backfills: usize,
    pub log_chunk: usize,
    pub log_flush_interval: Duration,
    /// Minimum spacing of SSE seq writes, and how often bootstrap completion is checked. The
    /// coordinator has no periodic tick once bootstrapped: it wakes on signals and deadlines.
    pub tick: Duration,
}

impl IngestConfig {
    /// The log channels ingest follows per process: normalized always, raw when `raw_logs`.
    pub fn channels(&self) -> Vec<vk_observer_vk::Channel> {
        use vk_observer_vk::Channel;
        if self.raw_logs {
            vec![Channel::Normalized, Channel::Raw]
        } else {
            vec![Channel::Normalized]
        }
    }
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
            log_backfills: 16,
            log_chunk: 512,
            // Zero: write as soon as no further frame is already waiting (frames that arrived
            // together still go in one batch), so a waiter wakes within the commit time.
            log_flush_interval: Duration::ZERO,
            tick: Duration::from_millis(25),
        }
    }
}

/// The ingest tuning as the top-level `raw_logs` key: written as that one bool; read into the
/// default tuning with that bool.
pub(super) mod raw_logs_key {
    use super::IngestConfig;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(ingest: &IngestConfig, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(ingest.raw_logs)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IngestConfig, D::Error> {
        Ok(IngestConfig {
            raw_logs: bool::deserialize(d)?,
            ..IngestConfig::default()
        })
    }
}
