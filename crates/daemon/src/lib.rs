//! Wiring of one running daemon: open the store, start the writer and ingest, serve HTTP, and
//! shut down in order on a signal (stop ingest, drain the writer, flush sled).

pub(crate) mod board;
pub mod fleet_node;
pub(crate) mod fleet_rpc;
pub(crate) mod http;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::http::{AppState, router};
use vk_observer_config::ValidSettings;
use vk_observer_fleet::publisher::Publisher;
use vk_observer_ingest::Ingest;
use vk_observer_mcp::FleetRole;
use vk_observer_proxy::Proxy;
use vk_observer_proxy::idempotency::Idempotency;
use vk_observer_store::outbox::OutboxConfig;
use vk_observer_store::{Store, StoreOwner};
use vk_observer_telemetry::health::Health;
use vk_observer_upstream::VkClient;

/// The mutation path of a host daemon: VK's client, the cache it settles against, ingest's
/// signals (a nudge to refetch at once) and the request_id records.
fn proxy_of(
    client: VkClient,
    query: &vk_observer_query::Query,
    ingest: &Ingest,
    idem: Idempotency,
) -> Proxy {
    Proxy {
        client,
        query: query.clone(),
        signals: ingest.signals.clone(),
        idem,
        settle_timeout: vk_observer_proxy::SETTLE_TIMEOUT,
        branches: Default::default(),
    }
}

/// Prune expired idempotency records every `every` (`[idempotency] prune_every`, default ten
/// minutes) and once at start.
fn spawn_idempotency_pruning(idem: Idempotency, every: Duration, cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {
                    let i = idem.clone();
                    let removed = tokio::task::spawn_blocking(move || i.prune()).await.unwrap_or(0);
                    if removed > 0 {
                        tracing::info!(removed, "pruned expired idempotency records");
                    }
                }
            }
        }
    });
}

/// A fleet host's role, and its answerer of the fleet's mutations (with these tools) and
/// heartbeats (`fleet::rpc::spawn_host`); outside a fleet, neither.
fn fleet_host(
    settings: &vk_observer_config::FleetSettings,
    query: &vk_observer_query::Query,
    proxy: &Proxy,
    cancel: &CancellationToken,
) -> (FleetRole, Option<tokio::task::JoinHandle<()>>) {
    if !settings.publishes() {
        return (FleetRole::Alone, None);
    }
    let fleet = FleetRole::Host(settings.host.clone());
    let tools = vk_observer_mcp::VkTools::new(query.clone(), Some(proxy.clone()), None)
        .with_fleet(fleet.clone());
    let rpc = vk_observer_fleet::rpc::spawn_host(
        settings.clone(),
        query.store.clone(),
        Arc::new(crate::fleet_rpc::HostTools(tools)),
        cancel.child_token(),
    );
    (fleet, Some(rpc))
}

/// Serve HTTP until `stop` is cancelled; in-flight requests get five seconds to finish.
pub(crate) fn spawn_server(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    http2_max_streams: u32,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        crate::http::serve(
            listener,
            app,
            http2_max_streams,
            async move { stop.cancelled().await },
            Duration::from_secs(5),
        )
        .await;
    })
}

pub struct Daemon {
    /// A read handle on the daemon's store.
    pub store: Store,
    owner: StoreOwner,
    pub health: Arc<Health>,
    pub addr: SocketAddr,
    pub ingest: Ingest,
    cancel: CancellationToken,
    server: tokio::task::JoinHandle<()>,
    writer_task: tokio::task::JoinHandle<()>,
    /// The fleet publisher, when `[fleet]` is set (design-notes §23).
    publisher: Option<tokio::task::JoinHandle<()>>,
    /// The fleet's RPC answerer and heartbeats, when `[fleet]` is set.
    rpc: Option<tokio::task::JoinHandle<()>>,
}

impl Daemon {
    /// Start a daemon with validated settings; `metrics` renders `/metrics` (none: 404).
    pub async fn start(
        settings: ValidSettings,
        metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    ) -> anyhow::Result<Daemon> {
        let s = settings.into_inner();
        let mut owner = StoreOwner::open_with(&s.data_dir, s.retention, s.store)?;
        let store = owner.store();
        if s.fleet.publishes() {
            owner.enable_outbox(OutboxConfig {
                max_backlog: s.fleet.max_backlog_batches,
            });
        }
        let (writer, writer_task) = owner
            .spawn_writer()
            .expect("a freshly opened store has its writer");
        let health = Arc::new(Health::new());
        let client = VkClient::new(&s.upstream, s.upstream_token)?;
        let cancel = CancellationToken::new();
        let publisher = s.fleet.publishes().then(|| {
            Publisher::new(s.fleet.clone(), store.clone(), owner.fleet_cursor())
                .spawn(cancel.child_token())
        });
        let ingest = Ingest::start(
            client.clone(),
            store.clone(),
            writer,
            health.clone(),
            s.ingest,
            s.upstream_dialect,
            cancel.child_token(),
        );
        let listener = tokio::net::TcpListener::bind(s.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", s.listen))?;
        let addr = listener.local_addr()?;
        let query = vk_observer_query::Query::new(store.clone(), health.clone())
            .with_max_waiters(s.mcp.max_waiters);
        let idem = Idempotency::new(owner.idempotency_records(), s.idempotency.into());
        spawn_idempotency_pruning(
            idem.clone(),
            s.idempotency.prune_every,
            cancel.child_token(),
        );
        let proxy = proxy_of(client, &query, &ingest, idem);
        let own_workspace = std::env::current_dir().ok();
        let (fleet, rpc) = fleet_host(&s.fleet, &query, &proxy, &cancel);
        let mcp = vk_observer_mcp::service(
            query,
            Some(proxy),
            own_workspace,
            s.mcp.clone(),
            fleet,
            cancel.child_token(),
        );
        let state = AppState {
            store: store.clone(),
            health: health.clone(),
            metrics,
        };
        let server = spawn_server(
            listener,
            router(state, mcp),
            s.mcp.http2_max_streams,
            cancel.clone(),
        );
        tracing::info!(%addr, epoch = %store.epoch(), token = store.current_token(), "vk-observer is serving");
        Ok(Daemon {
            store,
            owner,
            health,
            addr,
            ingest,
            cancel,
            server,
            writer_task,
            publisher,
            rpc,
        })
    }

    /// Stop streams and the server, let the writer drain, flush sled.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        let _ = self.server.await;
        if let Some(publisher) = self.publisher {
            let _ = publisher.await;
        }
        if let Some(rpc) = self.rpc {
            let _ = rpc.await;
        }
        drop(self.ingest);
        // The writer ends once every handle (held by ingest tasks) is gone.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.writer_task).await;
        if let Err(e) = self.owner.flush_async().await {
            tracing::error!(error = %e, "final flush failed");
        }
    }

    /// Stop as a crash would (fault tests): every task aborted where it stands, batches still
    /// queued for the writer lost, no drain and no final flush; the store is dropped as is.
    pub async fn crash(self) {
        self.cancel.cancel();
        self.server.abort();
        self.writer_task.abort();
        let _ = self.writer_task.await;
        if let Some(publisher) = self.publisher {
            publisher.abort();
            let _ = publisher.await;
        }
        drop(self.ingest);
        drop(self.owner);
    }
}
