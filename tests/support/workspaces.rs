//! Support for tests against the simulator's second dialect (VK 0.1.x, workspace-first): start
//! it and a daemon beside it, and compare the cache with the simulator's truth the way the
//! daemon maps 0.1.x (docs/vk-contract.md §12.2): each workspace (the truth's attempt) stands
//! as its own task, titled by its name (the truth's task title), in the project of its repo
//! set; sessions, processes and logs keep their ids. Logs are compared as multisets: a log the
//! daemon read as a replay is in VK's replay order, not the live one (wire fact 8).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;
use vk_observer_daemon::Daemon;
use vk_observer_sim::{Sim, SimConfig, SimDialect, Truth};
use vk_observer_store::Store;
use vk_observer_store::keys::Channel;

pub async fn sim() -> Sim {
    Sim::start(SimConfig {
        dialect: SimDialect::Workspaces,
        keepalive: Duration::from_millis(500),
        ws_ping: Duration::from_millis(500),
        step_delay: Duration::from_millis(5),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts")
}

/// A daemon on `dir` that finds the dialect itself (`upstream_dialect = "auto"`).
pub async fn daemon(sim: &Sim, dir: &std::path::Path) -> Daemon {
    let s = super::settings(&sim.base_url(), dir, Default::default());
    Daemon::start(s.validate().expect("valid"), None)
        .await
        .expect("daemon starts")
}

fn str_of<'a>(v: &'a Value, f: &str) -> Option<&'a str> {
    v.get(f).and_then(Value::as_str)
}

fn uuid(v: &Value, f: &str) -> Option<Uuid> {
    str_of(v, f).and_then(|s| s.parse().ok())
}

/// Every difference between the cache and the truth as the daemon maps VK 0.1.x.
pub fn diff(store: &Store, truth: &Truth) -> Vec<String> {
    let r = store.read();
    let mut d = Vec::new();
    // Tasks the daemon keeps (`create_task`) are not VK's.
    let tasks: Vec<_> = r
        .tasks()
        .unwrap()
        .into_iter()
        .filter(|t| t.value.get("daemon_kept") != Some(&Value::Bool(true)))
        .collect();
    if tasks.len() != truth.attempts.len() {
        d.push(format!(
            "{} tasks cached, {} workspaces in VK",
            tasks.len(),
            truth.attempts.len()
        ));
    }
    for (id, attempt) in &truth.attempts {
        let Some(ours) = r.attempt(*id).unwrap() else {
            d.push(format!("workspace {id} missing"));
            continue;
        };
        if uuid(&ours.value, "task_id") != Some(*id) {
            d.push(format!("workspace {id} is not its own task's attempt"));
        }
        let title = uuid(attempt, "task_id")
            .and_then(|t| truth.tasks.get(&t))
            .and_then(|t| str_of(t, "title"));
        let task = r.task(*id).unwrap();
        if task.as_ref().and_then(|t| str_of(&t.value, "title")) != title {
            d.push(format!(
                "task of workspace {id}: title {:?}, VK's name {title:?}",
                task.map(|t| t.value)
            ));
        }
        d.extend(rows_diff(&r, *id, truth));
    }
    d
}

/// Sessions, processes and logs of one workspace.
fn rows_diff(r: &vk_observer_store::StoreReader, id: Uuid, truth: &Truth) -> Vec<String> {
    let mut d = Vec::new();
    let theirs: BTreeSet<Uuid> = truth
        .sessions
        .iter()
        .filter(|(_, s)| uuid(s, "workspace_id") == Some(id))
        .map(|(sid, _)| *sid)
        .collect();
    let ours: BTreeSet<Uuid> = r
        .sessions_of_attempt(id)
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    if ours != theirs {
        d.push(format!(
            "sessions of {id}: {ours:?} cached, {theirs:?} in VK"
        ));
    }
    let status = |p: &Value| {
        (
            str_of(p, "status").map(str::to_owned),
            str_of(p, "run_reason").map(str::to_owned),
        )
    };
    let theirs: BTreeMap<Uuid, _> = truth
        .processes
        .iter()
        .filter(|(_, p)| uuid(p, "session_id").is_some_and(|s| theirs.contains(&s)))
        .filter(|(_, p)| p.get("dropped").and_then(Value::as_bool) != Some(true))
        .map(|(pid, p)| (*pid, status(p)))
        .collect();
    let ours: BTreeMap<Uuid, _> = r
        .processes_of_attempt(id)
        .unwrap()
        .iter()
        .map(|p| (p.id, status(&p.value)))
        .collect();
    if ours != theirs {
        d.push(format!(
            "processes of {id}: {ours:?} cached, {theirs:?} in VK"
        ));
    }
    for (pid, (_, reason)) in &theirs {
        if reason.as_deref() == Some("devserver") {
            continue;
        }
        for (logs, ch) in [
            (&truth.normalized_logs, Channel::Normalized),
            (&truth.raw_logs, Channel::Raw),
        ] {
            let mut want: Vec<String> = logs.get(pid).into_iter().flatten().map(as_sent).collect();
            let stored = r.log_range(*pid, ch, 0, u64::MAX, usize::MAX).unwrap();
            if stored.iter().enumerate().any(|(i, e)| e.index != i as u64) {
                d.push(format!(
                    "{ch:?} log of {pid}: indices not 0..{} without a gap",
                    stored.len()
                ));
            }
            let mut got: Vec<String> = stored
                .iter()
                .map(|e| as_sent(&serde_json::from_str::<Value>(e.entry.get()).unwrap()))
                .collect();
            want.sort();
            got.sort();
            if want != got {
                let first = want.iter().zip(&got).find(|(w, g)| w != g);
                d.push(format!(
                    "{ch:?} log of {pid}: {} cached, {} in VK; first difference {first:?}",
                    got.len(),
                    want.len()
                ));
            }
        }
    }
    d
}

/// An entry as compared: VK 0.1.x sends a normalized entry's `metadata` even when null (the
/// truth, in the fork's shape, leaves it out).
fn as_sent(entry: &Value) -> String {
    let mut e = entry.clone();
    if let Some(c) = e.get_mut("content").and_then(Value::as_object_mut)
        && c.get("metadata") == Some(&Value::Null)
    {
        c.remove("metadata");
    }
    e.to_string()
}

/// Waits until the cache equals the truth; panics with the differences after `timeout`.
pub async fn converge(store: &Store, sim: &Sim, timeout: Duration, context: &str) {
    let start = Instant::now();
    loop {
        let d = diff(store, &sim.truth());
        if d.is_empty() {
            return;
        }
        if start.elapsed() > timeout {
            panic!(
                "{context}: no convergence in {timeout:?}:\n{}",
                d.iter().take(12).cloned().collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What an entry is, as a client tells it apart (its index must keep meaning it): a normalized
/// entry's kind and text (a tool call's status and result change in place, its command does
/// not), a raw chunk's stream and text.
fn identity(entry: &Value) -> String {
    let c = &entry["content"];
    match c.get("entry_type") {
        Some(kind) => format!("{}|{}", kind["type"], c["content"]),
        None => format!("{}|{}", entry["type"], c),
    }
}

/// A log entry's place: its process, its channel (`normalized`, `raw`), its index.
pub type Place = (Uuid, &'static str, u64);

/// Every stored entry's identity by its place.
pub fn identities(store: &Store) -> BTreeMap<Place, String> {
    let r = store.read();
    let mut out = BTreeMap::new();
    for p in r.processes().unwrap() {
        for (ch, name) in [(Channel::Normalized, "normalized"), (Channel::Raw, "raw")] {
            for e in r.log_range(p.id, ch, 0, u64::MAX, usize::MAX).unwrap() {
                let v: Value = serde_json::from_str(e.entry.get()).unwrap();
                out.insert((p.id, name, e.index), identity(&v));
            }
        }
    }
    out
}

/// Indices whose entry is no longer the one first served there.
pub fn moved(first_seen: &BTreeMap<Place, String>, store: &Store) -> Vec<String> {
    let now = identities(store);
    first_seen
        .iter()
        .filter(|(k, v)| now.get(k).is_some_and(|n| n != *v))
        .map(|((pid, ch, i), v)| {
            format!(
                "{ch} log of {pid}: index {i} was {v}, is {:?}",
                now.get(&(*pid, *ch, *i))
            )
        })
        .collect()
}
