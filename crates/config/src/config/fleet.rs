//! `[fleet]`: a host daemon publishing its cache to NATS JetStream, or (`serve --fleet`) a
//! fleet node reading every host's stream (design-notes §23). Credentials come from a file
//! or the environment (`VK_OBSERVER_FLEET__TOKEN`), never from a flag.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Outbox batches kept while NATS is unreachable before the oldest are dropped (a snapshot
/// replaces them once NATS answers again).
pub const DEFAULT_MAX_BACKLOG_BATCHES: u64 = 100_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetSettings {
    /// NATS server URLs (empty: no fleet).
    pub urls: Vec<String>,
    /// This host's name in the fleet: its stream `VKO_<host>`, its subjects `vko.<host>.…`.
    pub host: String,
    /// A NATS credentials file (JWT and NKey seed).
    pub credentials_file: Option<PathBuf>,
    /// A NATS token; set it from the environment (`VK_OBSERVER_FLEET__TOKEN`).
    pub token: Option<String>,
    /// Outbox batches kept unpublished before the oldest are dropped for a snapshot.
    pub max_backlog_batches: u64,
    /// Serve as a fleet node: no VK, every host's stream (`serve --fleet`).
    pub node: bool,
}

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            urls: Vec::new(),
            host: String::new(),
            credentials_file: None,
            token: None,
            max_backlog_batches: DEFAULT_MAX_BACKLOG_BATCHES,
            node: false,
        }
    }
}

impl FleetSettings {
    /// A host daemon that publishes (NATS configured, not a fleet node).
    pub fn publishes(&self) -> bool {
        !self.urls.is_empty() && !self.node
    }

    /// The checks made once at start.
    pub fn check(&self) -> anyhow::Result<()> {
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
        if self.max_backlog_batches == 0 {
            anyhow::bail!("[fleet] max_backlog_batches must be above 0");
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
