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

/// A fleet node on `dir` with these `[fleet]` settings, retried while the store's lock is held,
/// once it has caught up (waited for 20 s at most).
pub async fn fleet_node_with(dir: &std::path::Path, fleet: FleetSettings) -> FleetNode {
    let node = fleet_node_started(dir, fleet).await;
    caught_up(&node).await;
    node
}

/// [`fleet_node_with`] without waiting for its first catch-up.
pub async fn fleet_node_started(dir: &std::path::Path, fleet: FleetSettings) -> FleetNode {
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

/// Wait (at most 20 s, without failing: NATS may be down on purpose) for a fleet node's first
/// catch-up: a new node answers reads `not_ready` until then.
async fn caught_up(node: &FleetNode) {
    let start = Instant::now();
    while !node.health.bootstrapped() && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// The fleet's token never goes back while `stop` is not set (checked every 2 ms).
pub fn watch_token(
    store: Store,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    use std::sync::atomic::Ordering;
    tokio::spawn(async move {
        let mut last = 0;
        while !stop.load(Ordering::Relaxed) {
            let t = store.current_token();
            assert!(t >= last, "the fleet's token went from {last} to {t}");
            last = t;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

/// Wait until the fleet's store equals one host's (`host` its name), at most `bound`.
pub async fn converge_to_host(
    fleet: &Store,
    host: &Store,
    name: &str,
    bound: Duration,
    when: &str,
) {
    let start = Instant::now();
    loop {
        let mut truth = Truth::default();
        host_truth(host, name, &mut truth);
        let diff = super::cache_diff(fleet, &truth);
        if diff.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < bound,
            "the fleet is not host {name} {bound:?} {when}:\n{}",
            diff.iter().take(8).cloned().collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One task with a short attempt that runs to its end.
pub async fn play_one(sim: &Sim, project: uuid::Uuid, title: &str) {
    let task = sim.add_task(project, title, None);
    let script = vk_observer_sim::AttemptScript {
        normalized_entries: 6,
        raw_entries: 2,
        ..Default::default()
    };
    sim.run_attempt_script(task, script).await;
}

/// Two tasks, each with a seeded attempt script (sizes, replacements, one in five failing),
/// played one after the other in the background.
pub fn play_seeded(
    sim: &Sim,
    project: uuid::Uuid,
    rng: &mut rand::rngs::StdRng,
) -> tokio::task::JoinHandle<()> {
    use rand::Rng;
    use vk_observer_sim::{AgentOutcome, AttemptScript};
    let scripts: Vec<AttemptScript> = (0..2)
        .map(|_| AttemptScript {
            normalized_entries: rng.random_range(3..30),
            raw_entries: rng.random_range(1..10),
            replacements: rng.random_range(0..3),
            agent: if rng.random_bool(0.2) {
                AgentOutcome::Fail
            } else {
                AgentOutcome::Succeed
            },
            ..AttemptScript::default()
        })
        .collect();
    let sim = sim.clone();
    tokio::spawn(async move {
        for (i, s) in scripts.into_iter().enumerate() {
            let t = sim.add_task(project, &format!("task {i}"), None);
            sim.run_attempt_script(t, s).await;
        }
    })
}

/// The panic message of a failed seed's task.
pub fn panic_text(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}
