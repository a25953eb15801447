//! The fleet (design-notes §23): a host daemon replicates its committed batches to a JetStream
//! stream of its own (`publisher`, fed by the store's outbox), and a fleet node (`serve
//! --fleet`) follows every host's stream into its own store through its one writer (`node`),
//! tagging projects, tasks and attempts with their `host` (`tag`). `wire` is what a message
//! looks like; `snapshot` is what a host sends when its stream cannot be resumed. `rpc` carries
//! the fleet's mutations to the owning host and `heartbeat` says which hosts are alive.

pub mod heartbeat;
pub mod node;
pub mod publisher;
pub mod rpc;
pub mod snapshot;
pub mod tag;
pub mod wire;

use std::time::Duration;

use crate::config::FleetSettings;

/// How long one connection attempt to NATS may take before it is retried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest pause between retries when NATS is unreachable.
pub const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);

/// Connect to NATS with the configured credentials (a file, or a token from the environment).
pub async fn connect(settings: &FleetSettings, name: &str) -> anyhow::Result<async_nats::Client> {
    let mut options = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(CONNECT_TIMEOUT)
        .max_reconnects(None);
    if let Some(path) = &settings.credentials_file {
        options = options.credentials_file(path).await.map_err(|e| {
            anyhow::anyhow!("cannot read NATS credentials file {}: {e}", path.display())
        })?;
    }
    if let Some(token) = &settings.token {
        options = options.token(token.clone());
    }
    let urls: Vec<async_nats::ServerAddr> = settings
        .urls
        .iter()
        .map(|u| u.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("[fleet] urls: {e}"))?;
    Ok(options.connect(urls).await?)
}

/// The next pause of a retry loop: doubled, at most [`MAX_RETRY_PAUSE`].
pub fn next_pause(pause: Duration) -> Duration {
    (pause * 2).clamp(Duration::from_millis(200), MAX_RETRY_PAUSE)
}
