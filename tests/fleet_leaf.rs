//! A site behind a leaf node (issue 40, docs/fleet.md "A leaf node per remote site"), run as the
//! docs write it on real `nats-server`s: a hub with JetStream accepting leaf connections, a
//! site's leaf server without JetStream of its own (it forwards the JetStream API to the hub),
//! a host daemon connected to the leaf, the fleet node to the hub. The link between leaf and hub
//! goes through a TCP relay the test cuts and restores while the host works: the site keeps
//! working (the host's cache follows its VK), and once the link is back the fleet converges to
//! the host, its token never going back.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::fleet::{
    converge_to_host, fleet_node_with, host_daemon_with, host_truth, play_one, watch_token,
};
use support::nats_cluster::free_port;
use vk_observer_config::FleetSettings;
use vk_observer_sim::Truth;

const HOST: &str = "site1";
const CONVERGE: Duration = Duration::from_secs(40);

/// A nats-server from a config written into `dir`.
fn server(binary: &Path, dir: &Path, name: &str, conf: &str) -> Child {
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(&path, conf).unwrap();
    Command::new(binary)
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server starts")
}

/// A TCP relay from a local port to `target` that can be cut (every connection closed, new
/// ones closed at once) and restored: the site's link to the hub.
struct Link {
    port: u16,
    up: Arc<AtomicBool>,
    /// Bumped at each cut: a relayed connection ends when it sees a newer cut.
    cuts: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Link {
    async fn start(target: u16) -> Link {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let cuts = Arc::new(tokio::sync::watch::channel(0u64).0);
        let (up2, cuts2) = (up.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: the link is down
                }
                let mut cut = cuts2.subscribe();
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    else {
                        return;
                    };
                    let (mut a, mut b) = (inbound, outbound);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Link { port, up, cuts }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_behind_a_leaf_node_keeps_working_through_a_cut_link() {
    let Some(binary) = support::nats::binary_or_skip("fleet behind a leaf node") else {
        return;
    };
    if std::env::var("VK_FAULT_TRACE").is_ok() {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "vk_observer_fleet=debug,vk_observer_daemon=info".into());
        let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    }
    let dir = tempfile::tempdir().unwrap();
    let (hub_port, hub_leaf_port, site_port) = (free_port(), free_port(), free_port());
    let store_dir = dir.path().join("hub-js");
    // As docs/fleet.md writes it: the VKO account on both, JetStream only in the hub's, the
    // leaf's remote bound to VKO with the hub's leaf user.
    let hub_conf = format!(
        "server_name: hub\nlisten: 127.0.0.1:{hub_port}\njetstream {{ store_dir: {store_dir:?}, domain: hub }}\n\
         accounts {{ VKO {{ jetstream: enabled, users: [ {{ user: fleet, password: fleet-pw }}, \
         {{ user: site1-leaf, password: leaf-pw }} ] }} }}\n\
         leafnodes {{ listen: 127.0.0.1:{hub_leaf_port} }}\n"
    );
    let mut hub = server(&binary, dir.path(), "hub", &hub_conf);
    let link = Link::start(hub_leaf_port).await;
    let site_conf = format!(
        "server_name: site1\nlisten: 127.0.0.1:{site_port}\n\
         accounts {{ VKO {{ users: [ {{ user: site1, password: site1-pw }} ] }} }}\n\
         leafnodes {{ reconnect: \"1s\", remotes: [ {{ url: \"nats-leaf://site1-leaf:leaf-pw@127.0.0.1:{}\", \
         account: VKO }} ] }}\n",
        link.port
    );
    let mut site = server(&binary, dir.path(), "site1", &site_conf);
    let (hub_url, site_url) = (
        format!("nats://127.0.0.1:{hub_port}"),
        format!("nats://127.0.0.1:{site_port}"),
    );
    let as_user = |url: &str, user: &str, password: &str, node: bool| FleetSettings {
        urls: vec![url.to_owned()],
        host: if node { String::new() } else { HOST.into() },
        node,
        user: Some(user.into()),
        // The site's leaf has no JetStream: the hub's is reached in its domain.
        domain: (!node).then(|| "hub".to_owned()),
        password: Some(password.into()),
        ..FleetSettings::default()
    };

    let sim = support::sim().await;
    let project = sim.add_project("site project", &["repo"]);
    let host_dir = tempfile::tempdir().unwrap();
    let host_settings = as_user(&site_url, "site1", "site1-pw", false);
    let host = host_daemon_with(&sim, host_dir.path(), host_settings).await;
    let fleet_dir = tempfile::tempdir().unwrap();
    let node_settings = as_user(&hub_url, "fleet", "fleet-pw", true);
    let fleet = fleet_node_with(fleet_dir.path(), node_settings).await;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_token(fleet.store.clone(), stop.clone());

    play_one(&sim, project, "before the cut").await;
    support::converge(&host.store, &sim, CONVERGE, "host before the cut").await;
    converge_to_host(&fleet.store, &host.store, HOST, CONVERGE, "before the cut").await;

    link.cut();
    play_one(&sim, project, "while the link is down").await;
    support::converge(
        &host.store,
        &sim,
        CONVERGE,
        "the site while its link is down",
    )
    .await;
    let mut truth = Truth::default();
    host_truth(&host.store, HOST, &mut truth);
    assert!(
        !support::cache_diff(&fleet.store, &truth).is_empty(),
        "the hub cannot have the site's new work while the link is down"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    link.restore();
    let restored = Instant::now();
    converge_to_host(
        &fleet.store,
        &host.store,
        HOST,
        CONVERGE,
        "after the link came back",
    )
    .await;
    eprintln!(
        "leaf link restored: the fleet converged {:?} after",
        restored.elapsed()
    );

    play_one(&sim, project, "after the link came back").await;
    support::converge(&host.store, &sim, CONVERGE, "host after").await;
    converge_to_host(
        &fleet.store,
        &host.store,
        HOST,
        CONVERGE,
        "a change after the link came back",
    )
    .await;

    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    fleet.shutdown().await;
    host.shutdown().await;
    for child in [&mut site, &mut hub] {
        let _ = child.kill();
        let _ = child.wait();
    }
}
