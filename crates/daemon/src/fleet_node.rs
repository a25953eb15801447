//! Wiring of a fleet node (`serve --fleet`, design-notes §23): its own store and one writer,
//! the fleet follower of every host stream in place of ingest, every tool over HTTP (mutations
//! forwarded to the owning host: `fleet_rpc`), and ordered shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::http::{AppState, router};
use vk_observer_config::ValidSettings;
use vk_observer_fleet::node::{Node, NodeEvents};
use vk_observer_store::{Store, StoreOwner};
use vk_observer_telemetry::health::{Health, UpstreamState};

/// The node's progress as the daemon's health: NATS is its upstream.
struct HealthEvents(Arc<Health>);

impl NodeEvents for HealthEvents {
    fn connected(&self, up: bool) {
        let state = if up {
            UpstreamState::Connected
        } else {
            UpstreamState::Reconnecting
        };
        self.0.set_state(state);
    }
    fn caught_up(&self) {
        self.0.set_bootstrapped();
    }
    fn following(&self, host: &str, following: bool) {
        self.0.fleet_host_following(host, following);
    }
    fn message(&self, host: &str, seq: u64, after: u64) {
        self.0.touch();
        self.0.fleet_host_message(host, seq, after);
    }
    fn stream(&self, host: &str, last_seq: u64, applied_seq: Option<u64>) {
        self.0.fleet_host_stream(host, last_seq, applied_seq);
    }
    fn heartbeat(&self, host: &str, beat: &vk_observer_fleet::heartbeat::Heartbeat) {
        self.0.touch();
        self.0.fleet_host_heartbeat(host, beat.backlog);
    }
}

pub struct FleetNode {
    /// A read handle on the node's store.
    pub store: Store,
    owner: StoreOwner,
    pub health: Arc<Health>,
    pub addr: SocketAddr,
    cancel: CancellationToken,
    server: tokio::task::JoinHandle<()>,
    node: tokio::task::JoinHandle<()>,
    writer_task: tokio::task::JoinHandle<()>,
}

impl FleetNode {
    /// Start a fleet node with validated settings (`[fleet] node` set).
    pub async fn start(
        settings: ValidSettings,
        metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    ) -> anyhow::Result<FleetNode> {
        let s = settings.into_inner();
        let mut owner = StoreOwner::open_with(&s.data_dir, s.retention, s.store)?;
        let store = owner.store();
        let (writer, writer_task) = owner
            .spawn_writer()
            .expect("a freshly opened store has its writer");
        let health = Arc::new(Health::new());
        health.set_fleet_stale_after(s.fleet.stale_after());
        let cancel = CancellationToken::new();
        let events = Arc::new(HealthEvents(health.clone()));
        let node =
            Node::new(s.fleet.clone(), store.clone(), writer, events).spawn(cancel.child_token());
        let listener = tokio::net::TcpListener::bind(s.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", s.listen))?;
        let addr = listener.local_addr()?;
        // Tokens every node of the fleet reads alike (`query::fleet_token`); a node that never
        // applied a host answers reads only once it has caught up.
        let new_node = store.read().fleet_positions()?.is_empty();
        let mut query = vk_observer_query::Query::new(store.clone(), health.clone())
            .with_max_waiters(s.mcp.max_waiters)
            .with_fleet_tokens();
        if new_node {
            query = query.new_node_until_caught_up();
        }
        // Mutations go to the owning host over NATS (`fleet_rpc`).
        let forward = crate::fleet_rpc::NatsForward::new(s.fleet.clone(), store.clone());
        let fleet = vk_observer_mcp::FleetRole::Node(Arc::new(forward));
        let mcp = vk_observer_mcp::service(
            query,
            None,
            None,
            s.mcp.clone(),
            fleet,
            cancel.child_token(),
        );
        let state = AppState {
            store: store.clone(),
            health: health.clone(),
            metrics,
        };
        let server = crate::spawn_server(
            listener,
            router(state, mcp),
            s.mcp.http2_max_streams,
            cancel.clone(),
        );
        tracing::info!(%addr, epoch = %store.epoch(), "vk-observer fleet node is serving");
        Ok(FleetNode {
            store,
            owner,
            health,
            addr,
            cancel,
            server,
            node,
            writer_task,
        })
    }

    /// Stop following and serving, let the writer drain, flush sled.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        let _ = self.server.await;
        // The writer ends once the node's handles are gone.
        let _ = self.node.await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.writer_task).await;
        if let Err(e) = self.owner.flush_async().await {
            tracing::error!(error = %e, "final flush failed");
        }
    }

    /// Stop as a crash would (fault tests): the follower and the writer aborted where they
    /// stand, no drain and no final flush; the store is dropped as is.
    pub async fn crash(self) {
        self.cancel.cancel();
        self.server.abort();
        self.node.abort();
        self.writer_task.abort();
        let _ = self.node.await;
        let _ = self.writer_task.await;
        drop(self.owner);
    }
}
