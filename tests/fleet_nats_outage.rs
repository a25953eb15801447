//! A fleet node through NATS outages of 2 s and 20 s (issue 40, design-notes §23), on a real
//! `nats-server` restarted on its store dir while a host works: while NATS is down the node's
//! freshness says no host is connected; once NATS is back the node creates its consumers again
//! at once (an ordered consumer dies with the server and, left alone, finds out only after two
//! missed 15 s heartbeats: before this test the node applied nothing for ~15–18 s); what the
//! host published meanwhile is applied, the fleet converges to the host, and a change made after
//! that reaches the fleet as soon as it is in the stream. `lag` is checked against the stream's
//! own last sequence whenever freshness says the node is connected and caught up.

mod support;

use std::time::{Duration, Instant};

use support::fleet::{converge_to_host, fleet_node, host_daemon, play_one};
use support::nats::NatsServer;
use vk_observer_daemon::fleet_node::FleetNode;
use vk_observer_fleet::wire;
use vk_observer_query::Query;
use vk_observer_store::Store;

const HOST: &str = "h0";
/// How long the node may take to create its consumer again once NATS is back. What the issue
/// asks is 2 s; the bound leaves room for a loaded CI machine and still fails the old way (15 s).
const RESUBSCRIBE_BOUND: Duration = Duration::from_secs(5);
const CONVERGE: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2s_nats_outage_is_caught_up_at_once() {
    outage(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20s_nats_outage_is_caught_up_at_once() {
    outage(Duration::from_secs(20)).await;
}

async fn outage(down: Duration) {
    let Some(mut nats) = NatsServer::start("fleet NATS outage") else {
        return;
    };
    let sim = support::sim().await;
    let project = sim.add_project("outage project", &["repo"]);
    let host_dir = tempfile::tempdir().unwrap();
    let host = host_daemon(&sim, host_dir.path(), &nats.url, HOST).await;
    let fleet_dir = tempfile::tempdir().unwrap();
    let fleet = fleet_node(fleet_dir.path(), &nats.url).await;
    let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());

    play_one(&sim, project, "before").await;
    support::converge(&host.store, &sim, CONVERGE, "host before the outage").await;
    converge_to_host(
        &fleet.store,
        &host.store,
        HOST,
        CONVERGE,
        "before the outage",
    )
    .await;
    check_lag(&fleet, &js).await;

    nats.stop();
    let stopped = Instant::now();
    play_one(&sim, project, "during").await;
    wait_for(
        "freshness says h0 is not connected",
        Duration::from_secs(5),
        || host_connected(&fleet) == Some(false),
    )
    .await;
    let left = down.saturating_sub(stopped.elapsed());
    tokio::time::sleep(left).await;
    nats.start_again();
    let back = Instant::now();

    let resubscribed = consumer_again(&js, back).await;
    eprintln!("NATS down {down:?}: the node's consumer was created again {resubscribed:?} after");
    assert!(
        resubscribed <= RESUBSCRIBE_BOUND,
        "the node created its consumer {resubscribed:?} after NATS was back (bound {RESUBSCRIBE_BOUND:?})"
    );
    support::converge(&host.store, &sim, CONVERGE, "host after the outage").await;
    converge_to_host(
        &fleet.store,
        &host.store,
        HOST,
        CONVERGE,
        "after the outage",
    )
    .await;
    eprintln!("NATS down {down:?}: converged {:?} after", back.elapsed());
    check_lag(&fleet, &js).await;
    assert_eq!(host_connected(&fleet), Some(true), "connected again");

    // A change made now reaches the fleet as soon as the host has it: nothing is left dead.
    play_one(&sim, project, "after").await;
    support::converge(&host.store, &sim, CONVERGE, "host after").await;
    converge_to_host(
        &fleet.store,
        &host.store,
        HOST,
        CONVERGE,
        "a change after the outage",
    )
    .await;
    check_lag(&fleet, &js).await;

    fleet.shutdown().await;
    host.shutdown().await;
}

/// `freshness.hosts.h0.connected` as the fleet node's tools answer it.
fn host_connected(fleet: &FleetNode) -> Option<bool> {
    let freshness = Query::new(fleet.store.clone(), fleet.health.clone()).freshness();
    Some(freshness.hosts?.get(HOST)?.connected)
}

/// How long after `back` the stream has a consumer again (every consumer died with the server).
async fn consumer_again(js: &async_nats::jetstream::Context, back: Instant) -> Duration {
    let name = wire::stream_name(HOST);
    loop {
        if let Ok(mut stream) = js.get_stream(&name).await
            && let Ok(info) = stream.info().await
            && info.state.consumer_count > 0
        {
            return back.elapsed();
        }
        if back.elapsed() > CONVERGE {
            panic!("no consumer on {name} {CONVERGE:?} after NATS was back");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Once the fleet has converged (nothing is published any more): the node's position is the
/// stream's own last sequence, and freshness says connected with `lag` 0.
async fn check_lag(fleet: &FleetNode, js: &async_nats::jetstream::Context) {
    let mut stream = js.get_stream(wire::stream_name(HOST)).await.unwrap();
    let last = stream.info().await.unwrap().state.last_sequence;
    let applied = wait_applied(&fleet.store, last).await;
    assert_eq!(applied, last, "the node applied the stream to its end");
    // The node tells its health just after the commit the store shows: a moment later at most.
    let start = Instant::now();
    loop {
        let freshness = Query::new(fleet.store.clone(), fleet.health.clone()).freshness();
        let h0 = freshness.hosts.expect("a fleet node names its hosts")[HOST].clone();
        if h0.connected && h0.lag == 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "the stream is applied to its end ({last}) yet freshness says {h0:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The node's position in the host's stream once it reached `last` (or what it is after 10 s).
async fn wait_applied(store: &Store, last: u64) -> u64 {
    let start = Instant::now();
    loop {
        let applied = store
            .read()
            .fleet_positions()
            .unwrap()
            .into_iter()
            .find(|(h, _)| h == HOST)
            .map_or(0, |(_, p)| p.stream_seq);
        if applied >= last || start.elapsed() > Duration::from_secs(10) {
            return applied;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_for(what: &str, bound: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
