//! Read models over the store: every read tool's answer is computed here from the cache, never
//! from VK. Pure functions of a `StoreReader` snapshot plus the health facts, so the MCP layer
//! stays a thin parse → query → respond adapter and the rules (latest attempt, relevant process,
//! guard, pagination) are testable without a transport.

pub mod activity;
pub mod approvals;
pub mod branch;
pub mod catalog;
pub mod changes;
pub(crate) mod compact_log;
pub mod context;
pub mod conversation;
pub mod detail;
pub(crate) mod fleet_token;
pub(crate) mod hosts;
pub(crate) mod last_error;
pub mod logs;
pub mod owner;
pub mod paging;
pub mod rows;
pub mod status;
pub(crate) mod status_memo;
pub mod target;
pub(crate) mod task_digests;
#[cfg(test)]
mod task_digests_tests;
pub mod task_handles;
pub mod task_summary;
#[cfg(test)]
mod task_summary_tests;
pub mod tasks;
#[cfg(test)]
mod tasks_tests;
pub mod timeline;
pub(crate) mod tokens;
pub mod transcript;
pub mod until;
pub mod usage;
pub(crate) mod verdict;
pub mod wait;
#[cfg(test)]
mod wait_tests;
pub(crate) mod workspaces;

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

pub use fleet_token::Cut;
use vk_observer_store::{Store, StoreReader};
use vk_observer_telemetry::health::{Health, UpstreamState};
use vk_observer_tool_error::ToolError;

/// Shared handle for the read side: cheap to clone.
#[derive(Clone)]
pub struct Query {
    pub store: Store,
    pub health: Arc<Health>,
    /// Long-polls parked right now, and how many may be.
    pub waiters: Arc<std::sync::atomic::AtomicUsize>,
    pub max_waiters: usize,
    /// Statuses already computed, per attempt token (see `status_memo`).
    pub status_memo: Arc<status_memo::StatusMemo>,
    /// Workspace directories of tokenless clients and their attempts (`workspaces`).
    pub workspaces: Arc<workspaces::WorkspaceMemo>,
    /// A fleet node: tokens are printed as places in the hosts' streams (`fleet_token`).
    pub fleet_tokens: bool,
    /// A fleet node that had applied nothing of any host when it started: reads answer
    /// `not_ready` until its first catch-up (`Query::first_catch_up`), never an empty board.
    pub new_node: bool,
}

/// How current the cache is; part of every tool response at detail 1 and 2, and at detail 0
/// only when the cache is not current (upstream not `connected`, or not bootstrapped yet).
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Freshness {
    /// State of the daemon's connection to Vibe Kanban: `connected`, `reconnecting` or `down`.
    /// Reads keep answering from the cache in every state.
    pub upstream: UpstreamState,
    /// Milliseconds since the cache last applied a change from VK (null: nothing applied yet
    /// since the store was created).
    pub last_event_age_ms: Option<u64>,
    /// Milliseconds since VK last sent the daemon anything on any stream, keep-alives and pings
    /// included (null: nothing since the daemon started). Small while VK is up, even when idle
    /// (VK sends a keep-alive every 15 s); it grows only while VK is unreachable.
    pub upstream_age_ms: Option<u64>,
    /// True once the daemon has loaded VK's full state at least once since it started.
    pub bootstrapped: bool,
    /// Which dialect of VK's API the daemon follows: `fork` (local projects and tasks) or
    /// `workspaces` (VK 0.1.x; docs/agent-guide.md "Which VK"); `neither` when VK speaks
    /// neither and nothing is followed. Absent before VK answered, and on a fleet node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    /// Fleet node only: each host's stream by host name (absent on a single host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts: Option<BTreeMap<String, HostFreshness>>,
}

/// How current a fleet node is about one host.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct HostFreshness {
    /// True while the node follows the host's stream and NATS answers.
    pub connected: bool,
    /// Messages of the host's stream not applied yet (its last sequence minus the last applied).
    pub lag: u64,
    /// Milliseconds since the node last applied a message of this host (null: none since it
    /// started). Hosts publish on change only, so a quiet host grows it too.
    pub last_message_age_ms: Option<u64>,
    /// Milliseconds since the host daemon's last heartbeat (null: none since the node started).
    pub last_heartbeat_age_ms: Option<u64>,
    /// True when the host daemon has been silent (no heartbeat) for `[fleet]
    /// stale_after_heartbeats` periods: its data is still served, but may be old, and
    /// mutations sent to it will likely fail.
    pub stale: bool,
    /// Committed batches the host's last heartbeat said were not yet in its stream.
    pub backlog: u64,
}

/// One read of the cache, taken in the order that keeps answers safe: the token first (a change
/// that lands after it is reported again on the next call rather than missed), then the
/// snapshot reader the answer is computed from, then how fresh the cache is. Every read tool
/// starts from `Query::view()`.
pub(crate) struct View {
    pub token: String,
    /// The local token `token` prints.
    pub at: u64,
    pub reader: StoreReader,
    pub freshness: Freshness,
}

/// Where a client-supplied `since_token` stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Since {
    /// No token given: answer in full.
    None,
    /// Changes after this cut are well defined (`Cut::saw`).
    After(Cut),
    /// The token is from another store epoch or from the future: answer in full, flag a reset.
    Reset,
}

impl Since {
    pub(crate) fn token_reset(&self) -> bool {
        *self == Since::Reset
    }

    /// The cut, when the token was judged well defined.
    pub(crate) fn cut(&self) -> Option<&Cut> {
        match self {
            Since::After(cut) => Some(cut),
            _ => None,
        }
    }
}

impl Query {
    pub fn new(store: Store, health: Arc<Health>) -> Self {
        Query {
            store,
            health,
            waiters: Arc::default(),
            max_waiters: vk_observer_config::DEFAULT_MAX_WAITERS,
            status_memo: Arc::default(),
            workspaces: Arc::default(),
            fleet_tokens: false,
            new_node: false,
        }
    }

    /// A fleet node's query: tokens every node of the fleet understands (`fleet_token`).
    pub fn with_fleet_tokens(mut self) -> Self {
        self.fleet_tokens = true;
        self
    }

    /// A fleet node that starts on a store holding no host yet (see `new_node`).
    pub fn new_node_until_caught_up(mut self) -> Self {
        self.new_node = true;
        self
    }

    /// A new fleet node still reading its hosts' streams for the first time: a read answers
    /// `not_ready` (retryable) rather than a board that looks empty.
    pub fn first_catch_up(&self) -> Result<(), ToolError> {
        if !self.new_node || self.health.bootstrapped() {
            return Ok(());
        }
        Err(ToolError::new(
            vk_observer_tool_error::ErrorCode::NotReady,
            true,
            "This fleet node is reading its hosts' streams for the first time and would answer from a partial cache. Retry in a few seconds (its /readyz answers 200 once it has caught up).",
        )
        .with_details(serde_json::json!({"reason": "fleet_catching_up"})))
    }

    pub fn with_max_waiters(mut self, max: usize) -> Self {
        self.max_waiters = max.max(1);
        self
    }

    pub fn read(&self) -> StoreReader {
        self.store.read()
    }

    /// Token, then reader, then freshness: the start of every read tool (see [`View`]).
    pub(crate) fn view(&self) -> View {
        let at = self.store.current_token();
        let token = self.token_at(at);
        let reader = self.read();
        View {
            token,
            at,
            reader,
            freshness: self.freshness(),
        }
    }

    /// [`Query::view`] for an answer read after `since`: on a fleet node its token also keeps
    /// every place the client had seen (`Query::token_after`).
    pub(crate) fn view_after(&self, since: &Since) -> View {
        let mut view = self.view();
        if self.fleet_tokens && since.cut().is_some() {
            view.token = self.token_after(since, view.at);
        }
        view
    }

    pub fn freshness(&self) -> Freshness {
        let last = self.store.last_commit_ms();
        let byte = self.health.last_upstream_byte_ms();
        let now = chrono::Utc::now().timestamp_millis();
        let age = |t: i64| (t > 0).then(|| now.saturating_sub(t).max(0) as u64);
        Freshness {
            upstream: self.health.state(),
            last_event_age_ms: age(last),
            upstream_age_ms: age(byte),
            bootstrapped: self.health.bootstrapped(),
            dialect: Some(self.health.dialect().dialect)
                .filter(|d| !d.is_empty() && d != "unknown"),
            hosts: self.host_freshness(now),
        }
    }

    /// A fleet node's hosts, or `None` on a single host.
    fn host_freshness(&self, now: i64) -> Option<BTreeMap<String, HostFreshness>> {
        let hosts = self.health.fleet_hosts();
        let stale_after = self.health.fleet_stale_after_ms();
        let nats_up = self.health.state() == UpstreamState::Connected;
        let age = |t: i64| (t > 0).then(|| now.saturating_sub(t).max(0) as u64);
        (!hosts.is_empty()).then(|| {
            hosts
                .into_iter()
                .map(|(host, f)| {
                    let fresh = HostFreshness {
                        connected: f.following && nats_up,
                        lag: f.lag(),
                        last_message_age_ms: age(f.last_message_ms),
                        last_heartbeat_age_ms: age(f.last_heartbeat_ms),
                        stale: f.stale(now, stale_after),
                        backlog: f.backlog,
                    };
                    (host, fresh)
                })
                .collect()
        })
    }
}
