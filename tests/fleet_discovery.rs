//! A fleet node finds a new host at once (`fleet::discovery`), on a real `nats-server`: the
//! host's publisher announces its stream when it is ready, and the node looks again then, not
//! at its next periodic discovery. The node here discovers once an hour, so only the
//! announcement can bring the host in within the test.

#[allow(dead_code)]
#[path = "support/nats.rs"]
mod nats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use uuid::Uuid;
use vk_observer_config::FleetSettings;
use vk_observer_fleet::heartbeat::Heartbeat;
use vk_observer_fleet::node::{Node, NodeEvents};
use vk_observer_fleet::publisher::Publisher;
use vk_observer_store::events::DomainEvent;
use vk_observer_store::outbox::OutboxConfig;
use vk_observer_store::{Retention, StoreOwner};

/// Far past the test's length: no periodic discovery happens after the first.
const NEVER_AGAIN: Duration = Duration::from_secs(3600);

/// Tells when the node's first discovery (of no stream at all) is done.
struct FirstDiscovery(tokio::sync::watch::Sender<bool>);

impl NodeEvents for FirstDiscovery {
    fn connected(&self, _: bool) {}
    fn caught_up(&self) {
        self.0.send_replace(true);
    }
    fn following(&self, _: &str, _: bool) {}
    fn message(&self, _: &str, _: u64, _: u64) {}
    fn stream(&self, _: &str, _: u64, _: Option<u64>) {}
    fn heartbeat(&self, _: &str, _: &Heartbeat) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_follows_a_host_that_appears_after_its_last_discovery() {
    let Some(server) = nats::NatsServer::start("fleet_discovery") else {
        return;
    };
    let fleet = FleetSettings {
        urls: vec![server.url.clone()],
        ..FleetSettings::default()
    };
    let cancel = tokio_util::sync::CancellationToken::new();

    let node_dir = tempfile::tempdir().unwrap();
    let mut node_owner = StoreOwner::open(node_dir.path(), Retention::default()).unwrap();
    let (node_writer, _node_writer_task) = node_owner.spawn_writer().unwrap();
    let (discovered, mut first) = tokio::sync::watch::channel(false);
    let node_settings = FleetSettings {
        node: true,
        ..fleet.clone()
    };
    Node::new(
        node_settings,
        node_owner.store(),
        node_writer,
        Arc::new(FirstDiscovery(discovered)),
    )
    .discovering_every(NEVER_AGAIN)
    .spawn(cancel.child_token());
    tokio::time::timeout(Duration::from_secs(30), first.wait_for(|done| *done))
        .await
        .expect("the node's first discovery")
        .unwrap();

    let host_dir = tempfile::tempdir().unwrap();
    let mut host = StoreOwner::open(host_dir.path(), Retention::default()).unwrap();
    host.enable_outbox(OutboxConfig {
        max_backlog: u64::MAX,
    });
    let (writer, _writer_task) = host.spawn_writer().unwrap();
    let project = Uuid::new_v4();
    writer
        .write(vec![DomainEvent::ProjectsSnapshot {
            projects: vec![json!({"id": project, "name": "late"})],
        }])
        .await
        .unwrap();
    let host_settings = FleetSettings {
        host: "late-host".into(),
        ..fleet
    };
    Publisher::new(host_settings, host.store(), host.fleet_cursor()).spawn(cancel.child_token());

    let node = node_owner.store();
    let start = Instant::now();
    loop {
        let positions = node.read().fleet_positions().unwrap_or_default();
        let applied = positions
            .iter()
            .any(|(h, p)| h == "late-host" && p.token >= 1);
        if applied {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the node never followed the host that announced its stream (positions {positions:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
}
