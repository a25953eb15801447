//! Shared test support: start the simulator and a daemon on real sockets, and compare the
//! daemon's cache with the simulator's ground truth field by field.
//!
//! Each test binary (`mod support;`) uses only some of these helpers, so dead-code warnings are
//! silenced for the whole tree here rather than per item.
#![allow(dead_code)]

pub mod approvals;
pub mod feed;
pub mod fleet;
pub mod fleet_feed;
pub mod fleet_tokens;
pub mod mcp;
pub mod mistakes;
pub mod mistakes_scopes;
pub mod mistakes_workflow;
pub mod nats;
pub mod nats_cluster;
pub mod nats_deploy;
pub mod nats_tls;
pub mod recorded_v01;
pub mod seeded;
pub mod sim_common;
pub mod term_on_drop;
pub mod workspaces;
pub mod world;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;
use vk_observer_config::{McpSettings, Settings};
use vk_observer_daemon::Daemon;
use vk_observer_ingest::IngestConfig;
use vk_observer_sim::{Sim, SimConfig, Truth};
use vk_observer_store::Store;
use vk_observer_store::keys::Channel;

pub fn fast_ingest() -> IngestConfig {
    IngestConfig {
        reconnect_min: Duration::from_millis(20),
        reconnect_max: Duration::from_millis(300),
        stall_after: Duration::from_secs(3),
        ws_stall_after: Duration::from_secs(3),
        process_stream_linger: Duration::from_millis(300),
        ..IngestConfig::default()
    }
}

pub async fn sim() -> Sim {
    Sim::start(SimConfig {
        keepalive: Duration::from_millis(500),
        ws_ping: Duration::from_millis(500),
        step_delay: Duration::from_millis(5),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts")
}

pub async fn daemon(sim: &Sim, dir: &std::path::Path) -> Daemon {
    daemon_with(sim, dir, Default::default()).await
}

/// A daemon on a data dir another in-process daemon just released: background tasks of the old
/// one may hold sled's lock for a moment after `shutdown`, so opening is retried briefly.
pub async fn daemon_reopen(sim: &Sim, dir: &std::path::Path) -> Daemon {
    let start = Instant::now();
    loop {
        let url = sim.base_url();
        let r = Daemon::start(valid(settings(&url, dir, Default::default())), None).await;
        match r {
            Ok(d) => return d,
            Err(e)
                if start.elapsed() < Duration::from_secs(10)
                    && matches!(
                        e.downcast_ref::<vk_observer_store::StoreError>(),
                        Some(vk_observer_store::StoreError::Locked { .. })
                    ) =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("daemon restarts: {e:#}"),
        }
    }
}

/// A daemon with its own `/mcp` exposure settings (token, limits).
pub async fn daemon_with(sim: &Sim, dir: &std::path::Path, mcp: McpSettings) -> Daemon {
    let s = settings(&sim.base_url(), dir, mcp);
    Daemon::start(valid(s), None).await.expect("daemon starts")
}

/// Settings of a test daemon: loopback on a free port, fast reconnects, default retention.
pub fn settings(upstream: &str, dir: &std::path::Path, mcp: McpSettings) -> Settings {
    Settings {
        upstream: upstream.to_string(),
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        ingest: fast_ingest(),
        mcp,
        ..Settings::default()
    }
}

fn valid(s: Settings) -> vk_observer_config::ValidSettings {
    s.validate().expect("test settings are valid")
}

fn by_id(items: Vec<vk_observer_store::reader::Stored>) -> BTreeMap<Uuid, Value> {
    items.into_iter().map(|s| (s.id, s.value)).collect()
}

fn is_dev_server(p: &Value) -> bool {
    p.get("run_reason").and_then(Value::as_str) == Some("devserver")
}

/// Every difference between the cache and the truth (empty = identical).
pub fn cache_diff(store: &Store, truth: &Truth) -> Vec<String> {
    let r = store.read();
    let mut d = Vec::new();
    let mut cmp = |what: &str, ours: BTreeMap<Uuid, Value>, theirs: &BTreeMap<Uuid, Value>| {
        for (id, v) in theirs {
            match ours.get(id) {
                None => d.push(format!("{what} {id} missing")),
                Some(o) if o != v => {
                    d.push(format!("{what} {id} differs:\n ours   {o}\n theirs {v}"))
                }
                _ => {}
            }
        }
        for id in ours.keys().filter(|id| !theirs.contains_key(id)) {
            d.push(format!("{what} {id} is cached but not in VK"));
        }
    };
    cmp("project", by_id(r.projects().unwrap()), &truth.projects);
    cmp("task", by_id(r.tasks().unwrap()), &truth.tasks);
    cmp("attempt", by_id(r.attempts().unwrap()), &truth.attempts);
    cmp("session", by_id(r.sessions().unwrap()), &truth.sessions);
    cmp("process", by_id(r.processes().unwrap()), &truth.processes);
    let changes: BTreeMap<Uuid, Value> = truth
        .changes
        .keys()
        .filter_map(|a| r.changes(*a).unwrap().map(|s| (*a, s.value)))
        .map(|(a, mut v)| {
            // The cache stamps its read time and the per-file counts (from VK's patch) on VK's
            // summary; VK's own answer has neither.
            if let Some(o) = v.as_object_mut() {
                o.remove(vk_observer_store::events::CHANGES_AS_OF);
                o.remove(vk_observer_store::events::CHANGES_FILE_STATS);
            }
            (a, v)
        })
        .collect();
    cmp("changes", changes, &truth.changes);
    for (project, repos) in &truth.repos {
        let ours: Vec<Value> = r
            .repos_of_project(*project)
            .unwrap()
            .into_iter()
            .map(|s| s.value)
            .collect();
        let mut theirs = repos.clone();
        let key = |v: &Value| {
            v.get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        theirs.sort_by_key(key);
        let mut ours_sorted = ours;
        ours_sorted.sort_by_key(key);
        if ours_sorted != theirs {
            d.push(format!("repos of {project} differ"));
        }
    }
    for (logs, ch) in [
        (&truth.normalized_logs, Channel::Normalized),
        (&truth.raw_logs, Channel::Raw),
    ] {
        for (pid, entries) in logs {
            if truth.processes.get(pid).is_some_and(is_dev_server) {
                continue; // dev server logs are not followed by design
            }
            let ours = r.log_range(*pid, ch, 0, u64::MAX, usize::MAX).unwrap();
            if ours.len() != entries.len() {
                d.push(format!(
                    "{ch:?} log of {pid}: {} cached, {} in VK",
                    ours.len(),
                    entries.len()
                ));
                continue;
            }
            for (i, (o, t)) in ours.iter().zip(entries).enumerate() {
                let ov: Value = serde_json::from_str(o.entry.get()).unwrap();
                if o.index != i as u64 || &ov != t {
                    d.push(format!("{ch:?} log of {pid} entry {i} differs"));
                    break;
                }
            }
        }
    }
    d
}

/// Wait until the cache equals the truth; panic with the differences after `timeout`.
pub async fn converge(store: &Store, sim: &Sim, timeout: Duration, context: &str) {
    let start = Instant::now();
    loop {
        let diff = cache_diff(store, &sim.truth());
        if diff.is_empty() {
            return;
        }
        if start.elapsed() > timeout {
            panic!(
                "{context}: cache did not converge in {timeout:?}:\n{}",
                diff.iter().take(12).cloned().collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGTERM to a daemon child, then SIGKILL if it has not exited within 10 s.
pub fn terminate(mut child: std::process::Child) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
