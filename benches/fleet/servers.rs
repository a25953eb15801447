//! The NATS a fleet bench phase runs on (`VK_BENCH_FLEET_TOPOLOGIES`): one plain server,
//! one server over mutual TLS, or three servers in one JetStream cluster with every host
//! stream at three replicas. Each gives the `FleetSettings` its hosts and nodes connect with
//! (URLs, replicas, TLS files), so every phase runs unchanged on each.

use vk_observer_config::FleetSettings;

use super::{nats, nats_cluster, nats_tls};

/// A topology's name as `VK_BENCH_FLEET_TOPOLOGIES` spells it.
pub const TOPOLOGIES: [&str; 3] = ["single", "tls", "cluster3"];

/// Running NATS servers of one topology (stopped on drop).
pub enum Servers {
    Single(nats::NatsServer),
    Tls(nats_tls::TlsNats),
    Cluster(nats_cluster::Cluster),
}

impl Servers {
    /// Start `topology` (one of [`TOPOLOGIES`]) on fresh ports and stores.
    pub async fn start(topology: &str) -> Servers {
        let what = "fleet bench";
        match topology {
            "single" => Servers::Single(nats::NatsServer::start(what).expect("nats-server")),
            "tls" => Servers::Tls(nats_tls::TlsNats::start(what).expect("nats-server")),
            "cluster3" => {
                let binary = nats::binary_or_skip(what).expect("nats-server");
                let cluster = nats_cluster::Cluster::start(&binary);
                cluster.ready().await;
                Servers::Cluster(cluster)
            }
            other => panic!("VK_BENCH_FLEET_TOPOLOGIES: {other}? (one of {TOPOLOGIES:?})"),
        }
    }

    /// The fleet settings of a host or node on these servers (`host` and `node` set by the
    /// caller).
    pub fn fleet(&self) -> FleetSettings {
        let base = FleetSettings::default();
        match self {
            Servers::Single(nats) => FleetSettings {
                urls: vec![nats.url.clone()],
                ..base
            },
            Servers::Tls(nats) => FleetSettings {
                urls: vec![nats.url.clone()],
                tls_ca_file: Some(nats.ca_file.clone()),
                tls_cert_file: Some(nats.client_cert_file.clone()),
                tls_key_file: Some(nats.client_key_file.clone()),
                tls_required: true,
                ..base
            },
            Servers::Cluster(cluster) => FleetSettings {
                urls: cluster.urls.clone(),
                replicas: 3,
                ..base
            },
        }
    }

    /// A plain client of these servers (the bench's own probes), connected as the daemons are.
    pub async fn client(&self) -> async_nats::Client {
        vk_observer_fleet::connect(&self.fleet(), "fleet bench probe")
            .await
            .expect("the bench's probe connects")
    }
}
