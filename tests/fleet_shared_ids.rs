//! One task id on two hosts (a VK database copied to another machine; docs/fleet.md) against a
//! real `nats-server`, two simulated VK hosts with their daemons and a fleet node, driven by a
//! real MCP client: the fleet lists the task once with both hosts in `hosts`; a mutation on it
//! without `host` is refused `host_required` naming both, and with `host` reaches that host
//! only; a task one host reports keeps its one-host answer (`host`, no `hosts`); a host that
//! deletes the shared task takes only itself off, and the task goes once neither reports it. An
//! attempt id two hosts report names both in `hosts` in its status and in its task's listing.
//! Skipped with a printed line when no nats-server is installed, failed under `CI`.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::{Mcp, Reply};
use support::nats::NatsServer;
use uuid::Uuid;
use vk_observer_config::FleetSettings;
use vk_observer_sim::Sim;

const CONVERGE: Duration = Duration::from_secs(40);

fn fleet_settings(nats: &NatsServer, host: &str, node: bool) -> FleetSettings {
    FleetSettings {
        urls: vec![nats.url.clone()],
        host: host.into(),
        node,
        heartbeat_every: Duration::from_millis(200),
        ..FleetSettings::default()
    }
}

/// The list `field` of the fleet's answer to `tool` once `done` holds for it (bounded).
async fn listed_until(
    mcp: &Mcp,
    (tool, args, field): (&str, Value, &str),
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) {
    let start = Instant::now();
    loop {
        let answer = match mcp.call_as_is(tool, args.clone()).await {
            Reply::Ok(v) | Reply::Err(v) => v,
        };
        let listed = answer[field].as_array().cloned().unwrap_or_default();
        if done(&listed) {
            return;
        }
        assert!(
            start.elapsed() < CONVERGE,
            "{what}: never seen; last {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The shared project's task list on the fleet once `done` holds for it (bounded).
async fn tasks_until(mcp: &Mcp, project: Uuid, what: &str, done: impl Fn(&[Value]) -> bool) {
    let args = json!({"project_id": project, "detail": 1});
    listed_until(mcp, ("list_tasks", args, "tasks"), what, done).await
}

fn find(tasks: &[Value], id: Uuid) -> Option<&Value> {
    tasks.iter().find(|t| t["task_id"] == json!(id))
}

fn title_on(sim: &Sim, id: Uuid) -> Value {
    sim.truth()
        .tasks
        .get(&id)
        .map(|t| t["title"].clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_two_hosts_report_is_listed_once_needs_a_host_and_goes_with_its_last_host() {
    let Some(nats) = NatsServer::start("fleet shared task id") else {
        return;
    };
    let sims = [support::sim().await, support::sim().await];
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (project, shared) = (Uuid::new_v4(), Uuid::new_v4());
    let mut hosts = Vec::new();
    for (i, name) in ["alpha", "beta"].into_iter().enumerate() {
        let settings = fleet_settings(&nats, name, false);
        hosts.push(support::fleet::host_daemon_with(&sims[i], dirs[i].path(), settings).await);
        sims[i].add_project_with_id(project, "copied board", &["repo"]);
        sims[i].add_task_with_id(shared, project, "copied task", None);
    }
    let alone = sims[0].add_task(project, "alpha only", None);
    let node =
        support::fleet::fleet_node_with(dirs[2].path(), fleet_settings(&nats, "", true)).await;
    let mcp = Mcp::connect(node.addr).await;

    tasks_until(&mcp, project, "the shared task with both hosts", |tasks| {
        tasks.len() == 2
            && find(tasks, shared).is_some_and(|t| t["hosts"] == json!(["alpha", "beta"]))
            && find(tasks, alone).is_some()
    })
    .await;
    let listed = mcp
        .call("list_tasks", json!({"project_id": project}))
        .await
        .ok();
    let one_host = find(listed["tasks"].as_array().unwrap(), alone)
        .unwrap()
        .clone();
    assert_eq!(one_host["host"], "alpha", "{one_host}");
    assert!(
        one_host.get("hosts").is_none(),
        "one host: no hosts: {one_host}"
    );

    // Without `host`: refused, naming both; nothing reaches either VK.
    for (tool, args) in [
        ("update_task", json!({"task_id": shared, "title": "where?"})),
        ("delete_task", json!({"task_id": shared})),
        (
            "start_task_attempt",
            json!({"task_id": shared, "executor": "CLAUDE_CODE", "repos": [{"repo_id": Uuid::new_v4()}]}),
        ),
    ] {
        let refused = mcp.call(tool, args).await.err();
        assert_eq!(refused["code"], "invalid_argument", "{tool}: {refused}");
        assert_eq!(refused["retryable"], false);
        assert_eq!(refused["details"]["reason"], "host_required", "{refused}");
        assert_eq!(refused["details"]["hosts"], json!(["alpha", "beta"]));
        assert!(
            refused["hint"].as_str().unwrap().contains("alpha, beta"),
            "{refused}"
        );
    }
    assert_eq!(title_on(&sims[0], shared), "copied task");
    assert_eq!(title_on(&sims[1], shared), "copied task");

    // With `host`: that host only.
    let on_beta =
        json!({"task_id": shared, "title": "renamed on beta", "host": "beta", "request_id": "r1"});
    let changed = mcp.call("update_task", on_beta).await.ok();
    assert_eq!(changed["task"]["host"], "beta", "{changed}");
    assert_eq!(title_on(&sims[1], shared), "renamed on beta");
    assert_eq!(title_on(&sims[0], shared), "copied task");
    // A task one host reports needs no `host`.
    let plain = json!({"task_id": alone, "title": "alpha only, renamed"});
    assert_eq!(
        mcp.call("update_task", plain).await.ok()["task"]["host"],
        "alpha"
    );

    // beta deletes it: still listed, with alpha alone.
    assert!(sims[1].delete_task(shared));
    tasks_until(&mcp, project, "the shared task on alpha only", |tasks| {
        find(tasks, shared).is_some_and(|t| t["host"] == "alpha" && t.get("hosts").is_none())
    })
    .await;
    let plain = json!({"task_id": shared, "title": "alpha's now"});
    assert_eq!(
        mcp.call("update_task", plain).await.ok()["task"]["host"],
        "alpha"
    );
    // alpha deletes it too: gone.
    assert!(sims[0].delete_task(shared));
    tasks_until(&mcp, project, "the shared task gone", |tasks| {
        find(tasks, shared).is_none() && find(tasks, alone).is_some()
    })
    .await;
    node.shutdown().await;
    for h in hosts {
        h.shutdown().await;
    }
    drop(nats);
}

/// The fleet's status of each of `attempts` once `done` holds for them (bounded).
async fn statuses_until(mcp: &Mcp, attempts: &[Uuid], what: &str, done: impl Fn(&[Value]) -> bool) {
    let args = json!({"attempt_ids": attempts});
    listed_until(mcp, ("get_attempt_status", args, "attempts"), what, done).await
}

fn status_of(statuses: &[Value], id: Uuid) -> Option<&Value> {
    statuses.iter().find(|s| s["attempt_id"] == json!(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_two_hosts_report_names_both_in_its_status_and_its_listing() {
    let Some(nats) = NatsServer::start("fleet shared attempt id") else {
        return;
    };
    let sims = [support::sim().await, support::sim().await];
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (project, task, shared) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut hosts = Vec::new();
    for (i, name) in ["alpha", "beta"].into_iter().enumerate() {
        let settings = fleet_settings(&nats, name, false);
        hosts.push(support::fleet::host_daemon_with(&sims[i], dirs[i].path(), settings).await);
        sims[i].add_project_with_id(project, "copied board", &["repo"]);
        sims[i].add_task_with_id(task, project, "copied task", None);
        assert_eq!(sims[i].create_bare_attempt_with_id(shared, task), shared);
    }
    let alone = sims[1].create_bare_attempt(task);
    let node =
        support::fleet::fleet_node_with(dirs[2].path(), fleet_settings(&nats, "", true)).await;
    let mcp = Mcp::connect(node.addr).await;

    // Detail 0 (the default) shows `hosts` too: it is how a caller learns to pass `host`.
    statuses_until(
        &mcp,
        &[shared, alone],
        "both attempts with their hosts",
        |st| {
            status_of(st, shared).is_some_and(|s| s["hosts"] == json!(["alpha", "beta"]))
                && status_of(st, alone)
                    .is_some_and(|s| s["host"] == "beta" && s.get("hosts").is_none())
        },
    )
    .await;
    let listed = mcp
        .call("list_task_attempts", json!({"task_id": task}))
        .await
        .ok();
    let attempts = listed["attempts"].as_array().unwrap();
    let listed_shared = attempts.iter().find(|a| a["attempt_id"] == json!(shared));
    assert_eq!(
        listed_shared.map(|a| a["hosts"].clone()),
        Some(json!(["alpha", "beta"])),
        "{listed}"
    );

    // A mutation on it without `host` is refused, naming both.
    let refused = mcp
        .call("stop_attempt", json!({"attempt_id": shared}))
        .await
        .err();
    assert_eq!(refused["details"]["reason"], "host_required", "{refused}");
    assert_eq!(refused["details"]["hosts"], json!(["alpha", "beta"]));
    node.shutdown().await;
    for h in hosts {
        h.shutdown().await;
    }
    drop(nats);
}
