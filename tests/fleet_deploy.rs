//! deploy/nats-server.conf does what its comments say, against a real nats-server started from
//! that file (port and store dir swapped): host `workstation`'s daemon (credentials from a
//! `user:password` file) and host `build-box`'s (user and password settings) publish their
//! caches end to end and the fleet node's user reads both; `workstation`'s user is refused
//! when it publishes under `vko.build-box.`, reads or creates `build-box`'s stream, or
//! subscribes to another host's subjects or the fleet's inboxes.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::json;
use support::mcp::Mcp;
use support::nats_deploy::DeployedNats;
use vk_observer_config::{FleetSettings, Settings};
use vk_observer_daemon::Daemon;
use vk_observer_daemon::fleet_node::FleetNode;
use vk_observer_sim::Sim;

const CONVERGE: Duration = Duration::from_secs(40);

async fn host_daemon(sim: &Sim, dir: &std::path::Path, fleet: FleetSettings) -> Daemon {
    let mut s = support::settings(&sim.base_url(), dir, Default::default());
    s.fleet = fleet;
    Daemon::start(s.validate().unwrap(), None)
        .await
        .expect("host daemon starts")
}

/// A raw client of `user` that records the server's errors (permission violations).
async fn raw_client(
    nats: &DeployedNats,
    user: &str,
    inbox: &str,
) -> (async_nats::Client, Arc<Mutex<Vec<String>>>) {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = errors.clone();
    let password = support::nats_deploy::USERS
        .iter()
        .find(|(u, ..)| *u == user)
        .unwrap()
        .2;
    let client = async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
        .custom_inbox_prefix(inbox)
        .event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    seen.lock().unwrap().push(e.to_string());
                }
            }
        })
        .connect(nats.url.as_str())
        .await
        .expect("a user of the deploy config connects");
    (client, errors)
}

/// Wait until the server has refused something naming `subject`.
async fn refused(errors: &Mutex<Vec<String>>, subject: &str) {
    let start = Instant::now();
    loop {
        let seen = errors.lock().unwrap().clone();
        if seen
            .iter()
            .any(|e| e.to_lowercase().contains("permissions violation") && e.contains(subject))
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no permissions violation for {subject}; server errors: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_deploy_config_lets_each_host_publish_its_own_stream_only() {
    let Some(nats) = DeployedNats::start("fleet_deploy") else {
        return;
    };
    let (sim_a, sim_b) = (support::sim().await, support::sim().await);
    sim_a.add_project("workstation project", &["repo"]);
    sim_b.add_project("build-box project", &["repo"]);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let fleet_settings = |host: &str| FleetSettings {
        urls: vec![nats.url.clone()],
        host: host.into(),
        ..FleetSettings::default()
    };
    let host_a = host_daemon(
        &sim_a,
        dirs[0].path(),
        FleetSettings {
            credentials_file: Some(nats.credentials_file("workstation")),
            ..fleet_settings("workstation")
        },
    )
    .await;
    let host_b = host_daemon(
        &sim_b,
        dirs[1].path(),
        FleetSettings {
            user: Some("build-box".into()),
            password: Some("bb-secret".into()),
            ..fleet_settings("build-box")
        },
    )
    .await;
    let node_settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dirs[2].path().to_path_buf(),
        fleet: FleetSettings {
            credentials_file: Some(nats.credentials_file("fleet")),
            node: true,
            ..fleet_settings("")
        },
        ..Settings::default()
    };
    let node = FleetNode::start(node_settings.validate().unwrap(), None)
        .await
        .expect("fleet node starts");

    // Both hosts' daemons publish end to end; the fleet node's user reads both streams.
    let fleet = Mcp::connect(node.addr).await;
    let start = Instant::now();
    loop {
        // A new node answers `not_ready` until its first catch-up: asked again.
        let r = match fleet.call("list_projects", json!({})).await {
            support::mcp::Reply::Ok(r) => r,
            support::mcp::Reply::Err(e) if e["retryable"] == true => json!({"projects": []}),
            support::mcp::Reply::Err(e) => panic!("list_projects on the fleet node: {e}"),
        };
        let mut hosts: Vec<String> = r["projects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| format!("{} {}", p["host"].as_str().unwrap_or("?"), p["name"]))
            .collect();
        hosts.sort();
        if hosts
            == [
                "build-box \"build-box project\"",
                "workstation \"workstation project\"",
            ]
        {
            break;
        }
        assert!(start.elapsed() < CONVERGE, "fleet shows {hosts:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The workstation user is refused everything of build-box's.
    let (ws, errors) = raw_client(&nats, "workstation", "_INBOX_workstation").await;
    let mut js = jetstream::new(ws.clone());
    js.set_timeout(Duration::from_secs(2));
    let publish = async {
        js.publish("vko.build-box.batch", "[]".into())
            .await?
            .await
            .map_err(anyhow::Error::from)
    };
    assert!(publish.await.is_err(), "publishing under vko.build-box.");
    refused(&errors, "vko.build-box.batch").await;
    assert!(
        js.get_stream("VKO_build-box").await.is_err(),
        "reading build-box's stream"
    );
    refused(&errors, "$JS.API.STREAM.INFO.VKO_build-box").await;
    let evil = jetstream::stream::Config {
        name: "VKO_build-box".into(),
        subjects: vec!["vko.workstation.evil".into()],
        ..Default::default()
    };
    assert!(
        js.create_stream(evil).await.is_err(),
        "creating build-box's stream"
    );
    let _sub = ws.subscribe("vko.build-box.>").await.unwrap();
    refused(&errors, "vko.build-box.>").await;
    let _sub = ws.subscribe("_INBOX.>").await.unwrap();
    refused(&errors, "_INBOX.>").await;
    // Its own stream is its own.
    assert!(js.get_stream("VKO_workstation").await.is_ok());

    // The fleet user reads both streams.
    let (fleet_client, _) = raw_client(&nats, "fleet", "_INBOX").await;
    let fleet_js = jetstream::new(fleet_client);
    for host in ["workstation", "build-box"] {
        let mut stream = fleet_js
            .get_stream(format!("VKO_{host}"))
            .await
            .expect("the fleet user reads every stream");
        let info = stream.info().await.unwrap();
        assert!(info.state.messages > 0, "{host} published");
    }

    drop(fleet);
    node.shutdown().await;
    host_a.shutdown().await;
    host_b.shutdown().await;
    sim_a.shutdown().await;
    sim_b.shutdown().await;
}
