//! `[fleet]`: a host daemon publishing its cache to NATS JetStream, or (`serve --fleet`) a
//! fleet node reading every host's stream (design-notes §23). Credentials come from a file
//! (`credentials_file`, read by `credentials`) or the environment (`VK_OBSERVER_FLEET__TOKEN`,
//! `VK_OBSERVER_FLEET__USER` + `VK_OBSERVER_FLEET__PASSWORD`), never from a flag; TLS from the
//! `tls_*` files.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Outbox batches kept while NATS is unreachable before the oldest are dropped (a snapshot
/// replaces them once NATS answers again).
pub const DEFAULT_MAX_BACKLOG_BATCHES: u64 = 100_000;
/// How often a host daemon says it is alive.
pub(crate) const DEFAULT_HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// Heartbeat periods of silence after which a fleet node calls a host stale.
pub(crate) const DEFAULT_STALE_AFTER_HEARTBEATS: u32 = 3;
/// How long a fleet node waits for a host daemon's answer to a mutation: VK's own work
/// (a merge, starting an attempt) happens inside it.
pub(crate) const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fleet node then waits for its cache to show the change.
pub(crate) const DEFAULT_RPC_SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetSettings {
    /// NATS server URLs (empty: no fleet).
    pub urls: Vec<String>,
    /// This host's name in the fleet: its stream `VKO_<host>`, its subjects `vko.<host>.…`.
    pub host: String,
    /// A NATS credentials file: a `.creds` file (JWT and NKey seed), an NKey seed alone
    /// (`SU…`), or one line `user:password` (`credentials::NatsCredentials`).
    pub credentials_file: Option<PathBuf>,
    /// A NATS token; set it from the environment (`VK_OBSERVER_FLEET__TOKEN`).
    pub token: Option<String>,
    /// A NATS user, with `password` (`VK_OBSERVER_FLEET__USER`).
    pub user: Option<String>,
    /// The NATS user's password; set it from the environment (`VK_OBSERVER_FLEET__PASSWORD`).
    pub password: Option<String>,
    /// PEM file of the CA(s) that signed the NATS servers' certificates (default: the system's).
    pub tls_ca_file: Option<PathBuf>,
    /// PEM client certificate for servers that verify clients (`verify: true`), with its key.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Refuse a connection that is not TLS (set it when the servers require TLS).
    pub tls_required: bool,
    /// The JetStream domain of the servers that hold the streams, when this daemon connects to
    /// a leaf server without JetStream of its own (a site behind a leaf node: the hub's
    /// `jetstream { domain }`); unset: the servers it connects to answer JetStream themselves.
    pub domain: Option<String>,
    /// Copies of each host stream kept by a NATS cluster (1, or 3 on a 3-node cluster; at most 5).
    pub replicas: usize,
    /// Outbox batches kept unpublished before the oldest are dropped for a snapshot.
    pub max_backlog_batches: u64,
    /// Serve as a fleet node: no VK, every host's stream (`serve --fleet`).
    pub node: bool,
    /// A host daemon publishes a heartbeat (`vko.<host>.heartbeat`) this often.
    #[serde(with = "humantime_serde")]
    pub heartbeat_every: Duration,
    /// A fleet node marks a host `stale` after this many heartbeat periods without one.
    pub stale_after_heartbeats: u32,
    /// A fleet node waits this long for a host daemon to answer a mutation (`vko.<host>.rpc`).
    #[serde(with = "humantime_serde")]
    pub rpc_timeout: Duration,
    /// Then this long for its own cache to show the host's change (read-your-writes).
    #[serde(with = "humantime_serde")]
    pub rpc_settle_timeout: Duration,
}

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            urls: Vec::new(),
            host: String::new(),
            credentials_file: None,
            token: None,
            user: None,
            password: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_required: false,
            domain: None,
            replicas: 1,
            max_backlog_batches: DEFAULT_MAX_BACKLOG_BATCHES,
            node: false,
            heartbeat_every: DEFAULT_HEARTBEAT_EVERY,
            stale_after_heartbeats: DEFAULT_STALE_AFTER_HEARTBEATS,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            rpc_settle_timeout: DEFAULT_RPC_SETTLE_TIMEOUT,
        }
    }
}

impl FleetSettings {
    /// A host daemon that publishes (NATS configured, not a fleet node).
    pub fn publishes(&self) -> bool {
        !self.urls.is_empty() && !self.node
    }

    /// The silence after which a fleet node calls a host stale.
    pub fn stale_after(&self) -> Duration {
        self.heartbeat_every * self.stale_after_heartbeats
    }

    /// The checks made once at start.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if self.node && self.urls.is_empty() {
            anyhow::bail!(
                "a fleet node needs NATS: set [fleet] urls (VK_OBSERVER_FLEET__URLS=nats://host:4222)"
            );
        }
        if self.publishes() && !is_subject_token(&self.host) {
            anyhow::bail!(
                "[fleet] host {:?} is not a valid fleet host name: 1 to 64 of A-Z a-z 0-9 _ - \
                 (it becomes the NATS subject token in vko.<host>.… and the stream VKO_<host>)",
                self.host
            );
        }
        if let Some(domain) = &self.domain
            && !is_subject_token(domain)
        {
            anyhow::bail!(
                "[fleet] domain {domain:?} is not a JetStream domain name: 1 to 64 of A-Z a-z 0-9 _ - \
                 (the hub's `jetstream {{ domain: … }}`)"
            );
        }
        if self.max_backlog_batches == 0 {
            anyhow::bail!("[fleet] max_backlog_batches must be above 0");
        }
        if !(1..=5).contains(&self.replicas) {
            anyhow::bail!("[fleet] replicas must be 1 to 5 (JetStream's limit)");
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            anyhow::bail!("[fleet] tls_cert_file and tls_key_file go together");
        }
        let sources = [
            self.credentials_file.is_some(),
            self.token.is_some(),
            self.user.is_some() || self.password.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            anyhow::bail!(
                "[fleet] give one NATS credential: credentials_file, token, or user + password"
            );
        }
        if self.user.is_some() != self.password.is_some() {
            anyhow::bail!("[fleet] user and password go together (VK_OBSERVER_FLEET__PASSWORD)");
        }
        if self.heartbeat_every < Duration::from_millis(100) || self.stale_after_heartbeats == 0 {
            anyhow::bail!(
                "[fleet] heartbeat_every must be at least 100ms and stale_after_heartbeats above 0"
            );
        }
        Ok(())
    }
}

/// A host name usable as one NATS subject token and inside a stream name.
pub fn is_subject_token(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
