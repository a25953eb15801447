//! `[fleet] replicas` on a host stream that already exists (issue 24, docs/fleet.md "A 3-node
//! NATS cluster"): on a real 3-server JetStream cluster a host daemon restarted with
//! `replicas = 3` brings its 1-replica stream to 3 replicas, keeping the limits set on it, and
//! goes on publishing; on a single server, where JetStream refuses 3 replicas, the daemon keeps
//! its stream as it is and goes on publishing. Skipped with a printed line when no nats-server
//! is installed, failed under `CI`.

mod support;

use std::time::{Duration, Instant};

use support::nats::NatsServer;
use support::nats_cluster::Cluster;
use vk_observer_config::FleetSettings;
use vk_observer_daemon::Daemon;
use vk_observer_sim::Sim;

const CONVERGE: Duration = Duration::from_secs(40);

async fn host(sim: &Sim, dir: &std::path::Path, urls: &[String], replicas: usize) -> Daemon {
    let fleet = FleetSettings {
        urls: urls.to_vec(),
        host: "alpha".into(),
        replicas,
        ..FleetSettings::default()
    };
    support::fleet::host_daemon_with(sim, dir, fleet).await
}

/// The host stream's replicas and message count once `done` holds for them (bounded).
async fn stream_until(
    url: &str,
    what: &str,
    done: impl Fn(usize, u64, i64) -> bool,
) -> (usize, u64) {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
    let start = Instant::now();
    loop {
        if let Ok(mut stream) = js.get_stream("VKO_alpha").await
            && let Ok(info) = stream.info().await
        {
            let (replicas, messages) = (info.config.num_replicas, info.state.messages);
            if done(replicas, messages, info.config.max_messages) {
                return (replicas, messages);
            }
        }
        assert!(start.elapsed() < CONVERGE, "the host stream never {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A limit an operator set on the stream (kept by the daemon's update).
async fn set_max_messages(url: &str, max: i64) {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
    let mut stream = js.get_stream("VKO_alpha").await.unwrap();
    let mut config = stream.info().await.unwrap().config.clone();
    config.max_messages = max;
    js.update_stream(&config).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_applied_to_an_existing_stream_on_a_cluster() {
    let Some(binary) = support::nats::binary_or_skip("fleet replicas on a cluster") else {
        return;
    };
    let cluster = Cluster::start(&binary);
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let project = sim.add_project("alpha project", &["repo"]);
    sim.add_task(project, "before", None);
    // A cluster elects its JetStream leader first: the publisher retries until it can create.
    let one = host(&sim, dir.path(), &cluster.urls, 1).await;
    stream_until(
        &cluster.urls[0],
        "held the host's first batches",
        |r, m, _| r == 1 && m > 0,
    )
    .await;
    set_max_messages(&cluster.urls[0], 1_000_000).await;
    one.shutdown().await;

    let three = host(&sim, dir.path(), &cluster.urls, 3).await;
    let (_, before) = stream_until(&cluster.urls[1], "got 3 replicas", |r, _, max| {
        r == 3 && max == 1_000_000
    })
    .await;
    sim.add_task(project, "after", None);
    stream_until(&cluster.urls[2], "took the next batch", |_, m, _| {
        m > before
    })
    .await;
    three.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_a_single_server_refuses_leave_the_stream_as_it_is() {
    let Some(nats) = NatsServer::start("fleet replicas on one server") else {
        return;
    };
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let project = sim.add_project("alpha project", &["repo"]);
    sim.add_task(project, "before", None);
    let urls = vec![nats.url.clone()];
    let one = host(&sim, dir.path(), &urls, 1).await;
    stream_until(&nats.url, "held the host's first batches", |_, m, _| m > 0).await;
    one.shutdown().await;

    let three = host(&sim, dir.path(), &urls, 3).await;
    let (_, before) = stream_until(&nats.url, "was there", |_, _, _| true).await;
    sim.add_task(project, "after", None);
    let (replicas, _) = stream_until(&nats.url, "took the next batch", |_, m, _| m > before).await;
    assert_eq!(replicas, 1, "a single server keeps 1 replica");
    three.shutdown().await;
}
