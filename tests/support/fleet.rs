//! Fleet test helpers (tests/fleet*.rs): a host daemon publishing to
//! NATS, a fleet node following it, and what a host's store should look like on the fleet.

use std::time::{Duration, Instant};

use serde_json::Value;
use vk_observer_config::{FleetSettings, Settings};
use vk_observer_daemon::Daemon;
use vk_observer_daemon::fleet_node::FleetNode;
use vk_observer_sim::{Sim, Truth};
use vk_observer_store::Store;
use vk_observer_store::keys::Channel;

pub fn host_settings(sim: &Sim, dir: &std::path::Path, url: &str, host: &str) -> Settings {
    let mut s = super::settings(&sim.base_url(), dir, Default::default());
    s.fleet = FleetSettings {
        urls: vec![url.to_owned()],
        host: host.into(),
        ..FleetSettings::default()
    };
    s
}

/// A host daemon on `dir`, retried while a just-stopped one still holds the store's lock.
pub async fn host_daemon(sim: &Sim, dir: &std::path::Path, url: &str, host: &str) -> Daemon {
    host_daemon_with(sim, dir, host_settings(sim, dir, url, host).fleet).await
}

/// A host daemon on `dir` with these `[fleet]` settings (retried as `host_daemon`).
pub async fn host_daemon_with(sim: &Sim, dir: &std::path::Path, fleet: FleetSettings) -> Daemon {
    let start = Instant::now();
    loop {
        let mut s = super::settings(&sim.base_url(), dir, Default::default());
        s.fleet = fleet.clone();
        match Daemon::start(s.validate().unwrap(), None).await {
            Ok(d) => return d,
            // A data dir just released by a stopped daemon may stay locked for a moment.
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("host daemon {} starts: {e:#}", fleet.host),
        }
    }
}

/// A fleet node on `dir` following every host stream at `url`.
pub async fn fleet_node(dir: &std::path::Path, url: &str) -> FleetNode {
    let fleet = FleetSettings {
        urls: vec![url.to_owned()],
        node: true,
        ..FleetSettings::default()
    };
    fleet_node_with(dir, fleet).await
}

/// A fleet node on `dir` with these `[fleet]` settings, retried while the store's lock is held.
pub async fn fleet_node_with(dir: &std::path::Path, fleet: FleetSettings) -> FleetNode {
    let start = Instant::now();
    loop {
        let s = Settings {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.to_path_buf(),
            fleet: fleet.clone(),
            ..Settings::default()
        };
        match FleetNode::start(s.validate().unwrap(), None).await {
            Ok(f) => return f,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("fleet node starts: {e:#}"),
        }
    }
}

/// What a host's store holds, as the fleet should hold it (projects, tasks and attempts name
/// their host), added to `into` in the shape of the simulator's truth.
pub fn host_truth(store: &Store, host: &str, into: &mut Truth) {
    use vk_observer_store::events::{CHANGES_AS_OF, CHANGES_FILE_STATS, HOST_FIELD, HOSTS_FIELD};
    let r = store.read();
    let tagged = |mut v: Value| {
        v[HOST_FIELD] = Value::String(host.to_owned());
        v
    };
    for p in r.projects().unwrap() {
        let repos = r.repos_of_project(p.id).unwrap();
        into.repos
            .insert(p.id, repos.into_iter().map(|s| s.value).collect());
        // The fleet keeps every host that lists a project.
        let mut hosts: std::collections::BTreeSet<String> = into
            .projects
            .get(&p.id)
            .and_then(|seen| seen[HOSTS_FIELD].as_array().cloned())
            .into_iter()
            .flatten()
            .filter_map(|h| h.as_str().map(str::to_owned))
            .collect();
        hosts.insert(host.to_owned());
        let mut project = tagged(p.value);
        project[HOSTS_FIELD] = serde_json::json!(hosts);
        into.projects.insert(p.id, project);
    }
    for t in r.tasks().unwrap() {
        into.tasks.insert(t.id, tagged(t.value));
    }
    for a in r.attempts().unwrap() {
        if let Some(mut c) = r.changes(a.id).unwrap().map(|s| s.value) {
            if let Some(o) = c.as_object_mut() {
                o.remove(CHANGES_AS_OF);
                o.remove(CHANGES_FILE_STATS);
            }
            into.changes.insert(a.id, c);
        }
        into.attempts.insert(a.id, tagged(a.value));
    }
    for s in r.sessions().unwrap() {
        into.sessions.insert(s.id, s.value);
    }
    for p in r.processes().unwrap() {
        for (logs, ch) in [
            (&mut into.normalized_logs, Channel::Normalized),
            (&mut into.raw_logs, Channel::Raw),
        ] {
            let entries = r.log_range(p.id, ch, 0, u64::MAX, usize::MAX).unwrap();
            let values = entries
                .iter()
                .map(|e| serde_json::from_str(e.entry.get()).unwrap())
                .collect();
            logs.insert(p.id, values);
        }
        into.processes.insert(p.id, p.value);
    }
}
