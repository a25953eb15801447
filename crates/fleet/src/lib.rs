//! The fleet (design-notes §23): a host daemon replicates its committed batches to a JetStream
//! stream of its own (`publisher`, fed by the store's outbox), and a fleet node (`serve
//! --fleet`) follows every host's stream into its own store through its one writer (`node`),
//! tagging projects, tasks and attempts with their `host` (`tag`). `wire` is what a message
//! looks like (`pack`: several outbox batches in one), `identity` which stream (generation) a message is of; `snapshot` is what a host
//! sends when its stream cannot be resumed. `rpc` carries the fleet's mutations to the owning host and `heartbeat` says which hosts are alive.

pub mod certs;
pub(crate) mod discovery;
mod follower;
pub mod heartbeat;
pub(crate) mod identity;
pub mod node;
pub mod pack;
pub mod publisher;
pub mod rpc;
pub(crate) mod snapshot;
pub(crate) mod tag;
pub mod wire;

use std::time::Duration;

use vk_observer_config::{FleetSettings, NatsCredentials};

/// How the fleet pipelines its two hops. [`Pipelining::default`] (= [`Pipelining::pipelined`])
/// is what daemons run; [`Pipelining::serial`] is the way before (one host message per writer batch, each commit
/// awaited before the next message is read; the publisher awaiting every group's
/// acknowledgements, then flushing its cursor to disk), kept so `benches/fleet/main.rs` measures
/// both side by side in one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pipelining {
    /// Host messages already received that one fleet writer batch takes at most.
    pub group_messages: usize,
    /// Fleet writer batches a follower queues before it waits for the oldest to commit.
    pub in_flight: usize,
    /// Publish new outbox batches while earlier acknowledgements are outstanding (else each
    /// group's acknowledgements are awaited before the next group is read).
    pub publish_window: bool,
    /// Flush the publisher's cursor to disk at each step (else sled's periodic flush).
    pub flush_cursor: bool,
    /// A follower's group of messages as ONE writer batch (the way before tokens every node
    /// reads alike, which need a token per host message): kept only so `benches/fleet`
    /// measures what a batch per message costs, side by side. Daemons never set it.
    pub batch_per_group: bool,
    /// A host's outbox batches waiting together go out as one message (`pack`), else one
    /// message a batch (the way before; `unpacked` in `benches/fleet`).
    pub pack_batches: bool,
}

impl Pipelining {
    /// The pipelined way (issue 24's throughput work), the default. Safe because a follower's
    /// batches in flight form one `store::writer::Chain` (none commits behind a failed one) and
    /// the publisher chains each publish to the one before (`wire::chain_after`): JetStream
    /// stores none behind one it did not store, so a batch is never republished after a later
    /// one (where the node would skip it as already applied: fault seed 6). A session ended by a
    /// refused publish keeps the acknowledgements before it, so the next one goes on after them
    /// (`publisher`; before, it could refuse the same chained publish forever: fault seed 40).
    pub fn pipelined() -> Self {
        Pipelining {
            group_messages: 64,
            in_flight: 2,
            publish_window: true,
            flush_cursor: false,
            batch_per_group: false,
            pack_batches: true,
        }
    }

    /// [`Pipelining::pipelined`] with one host message a batch (no `pack`): for the bench.
    pub fn unpacked() -> Self {
        Pipelining {
            pack_batches: false,
            ..Pipelining::pipelined()
        }
    }

    /// [`Pipelining::pipelined`] with each group of messages one writer batch (see
    /// `batch_per_group`): for the bench only.
    pub fn grouped() -> Self {
        Pipelining {
            batch_per_group: true,
            pack_batches: false,
            ..Pipelining::pipelined()
        }
    }
}

impl Default for Pipelining {
    /// The pipelined way. (It was the serial way for one stop: the pipelined one stalled on fleet
    /// fault seed 40 in 2 of 4 CI runs, the publisher's session refused the same chained publish
    /// forever; fixed in `publisher::Publisher::follow_outbox`. `VK_OBSERVER_FLEET_PIPELINING=0`
    /// selects the serial way in the fault schedules and the bench.)
    fn default() -> Self {
        Pipelining::pipelined()
    }
}

/// Set by [`Pipelining::set_process_default`].
static PROCESS_DEFAULT: std::sync::Mutex<Option<Pipelining>> = std::sync::Mutex::new(None);

impl Pipelining {
    /// What `Node::new` and `Publisher::new` start with: [`Pipelining::default`], or the way
    /// `set_process_default` chose.
    pub fn process_default() -> Self {
        PROCESS_DEFAULT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_default()
    }

    /// Choose the way every host daemon and fleet node started later in this process runs
    /// (`None`: the default again): for `benches/fleet/main.rs` and tests/fleet_faults.rs, which
    /// start whole daemons and fleet nodes. Daemons never call it.
    pub fn set_process_default(way: Option<Pipelining>) {
        *PROCESS_DEFAULT.lock().unwrap_or_else(|e| e.into_inner()) = way;
    }

    /// The way named `pipelined`, `serial` or (the bench's) `grouped` or `unpacked` (`VK_BENCH_FLEET_WAYS`,
    /// `VK_OBSERVER_FLEET_PIPELINING`), also as `1`/`0`.
    pub fn named(name: &str) -> Option<Self> {
        match name.trim() {
            "pipelined" | "1" => Some(Pipelining::pipelined()),
            "grouped" => Some(Pipelining::grouped()),
            "unpacked" => Some(Pipelining::unpacked()),
            "serial" | "0" => Some(Pipelining::serial()),
            _ => None,
        }
    }

    /// The way before the pipelining (see the type's doc).
    pub fn serial() -> Self {
        Pipelining {
            group_messages: 1,
            in_flight: 1,
            publish_window: false,
            flush_cursor: true,
            batch_per_group: false,
            pack_batches: false,
        }
    }
}

/// How long one connection attempt to NATS may take before it is retried.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest pause between retries when NATS is unreachable.
pub(crate) const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);

/// Connect to NATS with the configured credential (`config::NatsCredentials`) and TLS files.
/// A host's requests get replies under its own inbox prefix (`wire::inbox_prefix`), the only
/// inboxes its NATS user may subscribe to (deploy/nats-server.conf).
pub async fn connect(settings: &FleetSettings, name: &str) -> anyhow::Result<async_nats::Client> {
    Ok(connect_watched(settings, name).await?.0)
}

/// Whether a client's connection is up, as its events tell (a wake-up for whoever must act
/// when NATS comes back: the count of connections is the client's `statistics().connects`).
pub(crate) type LinkUp = tokio::sync::watch::Receiver<bool>;

/// [`connect`], and a watch of the connection going down and coming back.
pub(crate) async fn connect_watched(
    settings: &FleetSettings,
    name: &str,
) -> anyhow::Result<(async_nats::Client, LinkUp)> {
    certs::check_client_certificate(settings)?;
    let (up_tx, up_rx) = tokio::sync::watch::channel(false);
    let up_tx = std::sync::Arc::new(up_tx);
    let options = options(settings, name).await?.event_callback(move |event| {
        let up_tx = up_tx.clone();
        async move {
            match event {
                async_nats::Event::Connected => up_tx.send_replace(true),
                async_nats::Event::Disconnected => up_tx.send_replace(false),
                _ => return,
            };
        }
    });
    let urls: Vec<async_nats::ServerAddr> = settings
        .urls
        .iter()
        .map(|u| u.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("[fleet] urls: {e}"))?;
    let client = options.connect(urls).await.map_err(|e| {
        let cause = certs::explain(&e);
        let e = anyhow::Error::from(e);
        match cause {
            Some(cause) => e.context(cause),
            None => e,
        }
    })?;
    Ok((client, up_rx))
}

/// The JetStream API of `client`: in the configured `[fleet] domain` (a site behind a leaf
/// server reaching the hub's JetStream), else the servers' own.
pub(crate) fn jetstream(
    client: async_nats::Client,
    settings: &FleetSettings,
) -> async_nats::jetstream::Context {
    match &settings.domain {
        Some(domain) => async_nats::jetstream::with_domain(client, domain),
        None => async_nats::jetstream::new(client),
    }
}

/// The pause before the client's next reconnection attempt: at once, then growing to
/// [`MAX_RECONNECT_PAUSE`] (async-nats' own grows to 4 s: a node would then resubscribe up
/// to 4 s after NATS is back).
fn reconnect_pause(attempts: usize) -> Duration {
    let grown = Duration::from_millis(50).saturating_mul(attempts.saturating_sub(1) as u32);
    grown.min(MAX_RECONNECT_PAUSE)
}

/// The longest pause between a client's reconnection attempts.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// The client's options: name, timeouts, credential, TLS, inbox prefix.
async fn options(
    settings: &FleetSettings,
    name: &str,
) -> anyhow::Result<async_nats::ConnectOptions> {
    let mut options = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(CONNECT_TIMEOUT)
        .max_reconnects(None)
        .reconnect_delay_callback(reconnect_pause);
    options = match NatsCredentials::from_settings(settings)? {
        NatsCredentials::None => options,
        NatsCredentials::CredsFile(path) => options.credentials_file(&path).await.map_err(|e| {
            anyhow::anyhow!("cannot read NATS credentials file {}: {e}", path.display())
        })?,
        NatsCredentials::NkeySeed { seed, .. } => options.nkey(seed),
        NatsCredentials::UserPassword { user, password, .. } => {
            options.user_and_password(user, password)
        }
        NatsCredentials::Token(token) => options.token(token),
    };
    if let Some(ca) = &settings.tls_ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&settings.tls_cert_file, &settings.tls_key_file) {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    if settings.tls_required {
        options = options.require_tls(true);
    }
    if settings.publishes() {
        options = options.custom_inbox_prefix(wire::inbox_prefix(&settings.host));
    }
    Ok(options)
}

/// The next pause of a retry loop: doubled, at most [`MAX_RETRY_PAUSE`].
pub(crate) fn next_pause(pause: Duration) -> Duration {
    (pause * 2).clamp(Duration::from_millis(200), MAX_RETRY_PAUSE)
}

/// How long a session must have lived to count as good: the retry pause after it starts over
/// from its first step instead of going on growing from the outages before it.
pub(crate) const GOOD_SESSION: Duration = Duration::from_secs(30);

/// The pause before the next session, given the last pause and how long the session lived.
pub(crate) fn pause_after(pause: Duration, session_lived: Duration) -> Duration {
    if session_lived >= GOOD_SESSION {
        next_pause(Duration::ZERO)
    } else {
        next_pause(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_session_starts_the_retry_pause_over() {
        let mut pause = Duration::ZERO;
        for _ in 0..10 {
            pause = pause_after(pause, Duration::from_millis(5));
        }
        assert_eq!(
            pause, MAX_RETRY_PAUSE,
            "short sessions grow the pause to its bound"
        );
        assert_eq!(
            pause_after(pause, GOOD_SESSION),
            Duration::from_millis(200),
            "after a session that lived, the pause is the first step again"
        );
        assert_eq!(pause_after(pause, GOOD_SESSION / 2), MAX_RETRY_PAUSE);
    }
}
