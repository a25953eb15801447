//! The fleet's mutations, heartbeats and meta-only batches against a real `nats-server`
//! (design-notes §23), driven by a real MCP client on the fleet node: a mutation reaches the
//! host that owns its target (that host's simulated VK shows it, the other's does not) and is
//! readable on the fleet when it answers; the same request_id twice is one VK mutation; a
//! project on two hosts needs `host`; a host that is not listening is an honest retryable
//! refusal; a silent host goes stale and comes back; a `LogsComplete` alone reaches the fleet.
//! Skipped with a printed line when no nats-server is installed, failed under `CI`.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::Mcp;
use support::nats::NatsServer;
use uuid::Uuid;
use vk_observer_config::FleetSettings;
use vk_observer_daemon::Daemon;
use vk_observer_daemon::fleet_node::FleetNode;
use vk_observer_sim::{AttemptScript, Channel, ProcessStatus, RunReason, Sim};

const CONVERGE: Duration = Duration::from_secs(40);
const BEAT: Duration = Duration::from_millis(200);

fn fleet_settings(nats: &NatsServer, host: &str, node: bool) -> FleetSettings {
    FleetSettings {
        urls: vec![nats.url.clone()],
        host: host.into(),
        node,
        heartbeat_every: BEAT,
        stale_after_heartbeats: 3,
        ..FleetSettings::default()
    }
}

async fn host_daemon(sim: &Sim, dir: &std::path::Path, nats: &NatsServer, host: &str) -> Daemon {
    support::fleet::host_daemon_with(sim, dir, fleet_settings(nats, host, false)).await
}

async fn fleet_node(dir: &std::path::Path, nats: &NatsServer) -> FleetNode {
    support::fleet::fleet_node_with(dir, fleet_settings(nats, "", true)).await
}

/// Call `tool` until `done` holds for its answer (bounded).
async fn until(mcp: &Mcp, tool: &str, args: Value, what: &str, done: impl Fn(&Value) -> bool) {
    let start = Instant::now();
    loop {
        // An error (an id not replicated yet) is not done either.
        let answer = match mcp.call(tool, args.clone()).await {
            support::mcp::Reply::Ok(v) | support::mcp::Reply::Err(v) => v,
        };
        if done(&answer) {
            return;
        }
        assert!(
            start.elapsed() < CONVERGE,
            "{what}: never seen on the fleet; last {tool}: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn titled(sim: &Sim, title: &str) -> Vec<Uuid> {
    let truth = sim.truth();
    let found = truth.tasks.iter().filter(|(_, t)| t["title"] == title);
    found.map(|(id, _)| *id).collect()
}

/// Two hosts with a project each (and a todo task), their daemons, and a fleet node that has
/// read both.
struct Fleet {
    sims: [Sim; 2],
    projects: [Uuid; 2],
    todo: [Uuid; 2],
    hosts: Vec<Daemon>,
    node: FleetNode,
    mcp: Mcp,
    _dirs: Vec<tempfile::TempDir>,
    nats: NatsServer,
}

async fn two_hosts(nats: NatsServer) -> Fleet {
    let sims = [support::sim().await, support::sim().await];
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut hosts = Vec::new();
    let (mut projects, mut todo) = ([Uuid::nil(); 2], [Uuid::nil(); 2]);
    for (i, name) in ["alpha", "beta"].into_iter().enumerate() {
        hosts.push(host_daemon(&sims[i], dirs[i].path(), &nats, name).await);
        projects[i] = sims[i].add_project(&format!("{name} project"), &["repo"]);
        todo[i] = sims[i].add_task(projects[i], &format!("{name}: todo"), None);
        support::converge(&hosts[i].store, &sims[i], CONVERGE, name).await;
    }
    let node = fleet_node(dirs[2].path(), &nats).await;
    let mcp = Mcp::connect(node.addr).await;
    for task in todo {
        let args = json!({"task_id": task});
        until(&mcp, "list_projects", json!({}), "both hosts", |r| {
            r["projects"].as_array().is_some_and(|p| p.len() == 2)
        })
        .await;
        let start = Instant::now();
        while mcp.call("get_task", args.clone()).await.code_or_ok() != "ok" {
            assert!(start.elapsed() < CONVERGE, "task {task} never on the fleet");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Fleet {
        sims,
        projects,
        todo,
        hosts,
        node,
        mcp,
        _dirs: dirs,
        nats,
    }
}

trait CodeOrOk {
    fn code_or_ok(self) -> String;
}

impl CodeOrOk for support::mcp::Reply {
    fn code_or_ok(self) -> String {
        match self {
            support::mcp::Reply::Ok(_) => "ok".into(),
            other => other.code(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_on_the_fleet_runs_on_its_host_once_and_reads_back_at_once() {
    let Some(nats) = NatsServer::start("fleet rpc mutations") else {
        return;
    };
    let f = two_hosts(nats).await;
    let (alpha, beta) = (&f.sims[0], &f.sims[1]);

    // create_task on alpha's project: alpha's VK has it, beta's does not, and the fleet reads
    // it back at once with the fleet's own token.
    let args = json!({"project_id": f.projects[0], "title": "made on the fleet",
                      "request_id": "fleet-create-1"});
    let made = f.mcp.call("create_task", args.clone()).await.ok();
    let task = made["task_id"].as_str().unwrap().to_owned();
    assert_eq!(titled(alpha, "made on the fleet").len(), 1, "{made}");
    assert!(titled(beta, "made on the fleet").is_empty());
    let read = f.mcp.call("get_task", json!({"task_id": task})).await.ok();
    assert_eq!(read["task"]["host"], "alpha", "{read}");
    assert_eq!(made["task"]["host"], "alpha", "{made}");
    let fleet_token = f.mcp.call("list_projects", json!({})).await.ok()["token"].clone();
    let epoch = |t: &Value| t.as_str().unwrap().split('.').next().unwrap().to_owned();
    assert_eq!(epoch(&made["token"]), epoch(&fleet_token), "a fleet token");

    // The same request_id again: the host replays its record, VK is asked once.
    let again = f.mcp.call("create_task", args).await.ok();
    assert_eq!(again["task_id"], made["task_id"]);
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(titled(alpha, "made on the fleet").len(), 1);

    // A task of beta's is changed on beta.
    let edit = json!({"task_id": f.todo[1], "title": "beta: renamed on the fleet"});
    let changed = f.mcp.call("update_task", edit).await.ok();
    assert_eq!(changed["task"]["title"], "beta: renamed on the fleet");
    assert_eq!(titled(beta, "beta: renamed on the fleet"), [f.todo[1]]);

    // An id the fleet does not hold; a host that is not listening.
    let ghost = json!({"task_id": Uuid::new_v4(), "title": "x"});
    assert_eq!(f.mcp.call("update_task", ghost).await.code(), "not_found");
    let Fleet { mut hosts, mcp, .. } = f;
    hosts.pop().unwrap().shutdown().await;
    let edit = json!({"task_id": f.todo[1], "title": "while beta is down"});
    let refused = mcp.call("update_task", edit).await.err();
    assert_eq!(refused["code"], "upstream_unavailable", "{refused}");
    assert_eq!(refused["retryable"], true);
    assert_eq!(refused["details"]["reason"], "host_not_listening");
    assert!(refused["hint"].as_str().unwrap().contains("beta"));
    f.node.shutdown().await;
    hosts.pop().unwrap().shutdown().await;
    drop(f.nats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_on_two_hosts_needs_a_host_to_create_on() {
    let Some(nats) = NatsServer::start("fleet rpc host argument") else {
        return;
    };
    let f = two_hosts(nats).await;
    let shared = Uuid::new_v4();
    for (i, sim) in f.sims.iter().enumerate() {
        sim.add_project_with_id(shared, "shared project", &["repo"]);
        sim.add_task(shared, &format!("shared task {i}"), None);
    }
    until(
        &f.mcp,
        "list_tasks",
        json!({"project_id": shared}),
        "both hosts' tasks",
        |r| r["total"] == 2,
    )
    .await;

    let args = json!({"project_id": shared, "title": "where?"});
    let refused = f.mcp.call("create_task", args).await.err();
    assert_eq!(refused["code"], "invalid_argument", "{refused}");
    assert_eq!(refused["details"]["reason"], "host_required");
    assert_eq!(refused["details"]["hosts"], json!(["alpha", "beta"]));
    assert!(refused["hint"].as_str().unwrap().contains("host"));

    // A project both hosts list is shared before either has a task in it.
    let empty = Uuid::new_v4();
    for sim in &f.sims {
        sim.add_project_with_id(empty, "shared, no tasks", &["repo"]);
    }
    let listed = |r: &Value| {
        r["projects"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["project_id"] == json!(empty) && p["hosts"] == json!(["alpha", "beta"]))
        })
    };
    until(
        &f.mcp,
        "list_projects",
        json!({}),
        "both hosts list it",
        listed,
    )
    .await;
    let args = json!({"project_id": empty, "title": "where?"});
    let refused = f.mcp.call("create_task", args).await.err();
    assert_eq!(refused["details"]["reason"], "host_required", "{refused}");
    assert_eq!(refused["details"]["hosts"], json!(["alpha", "beta"]));

    let unknown = json!({"project_id": shared, "title": "where?", "host": "gamma"});
    let refused = f.mcp.call("create_task", unknown).await.err();
    assert_eq!(refused["details"]["reason"], "unknown_word", "{refused}");

    let on_beta = json!({"project_id": shared, "title": "on beta", "host": "beta"});
    let made = f.mcp.call("create_task", on_beta).await.ok();
    assert_eq!(made["task"]["host"], "beta", "{made}");
    assert_eq!(titled(&f.sims[1], "on beta").len(), 1);
    assert!(titled(&f.sims[0], "on beta").is_empty());
    // A project on one host needs none; a `host` that does not report the task is refused.
    let plain = json!({"project_id": f.projects[1], "title": "plain"});
    assert_eq!(
        f.mcp.call("create_task", plain).await.ok()["task"]["host"],
        "beta"
    );
    let wrong = json!({"task_id": f.todo[0], "title": "t", "host": "beta"});
    let refused = f.mcp.call("update_task", wrong).await.err();
    assert_eq!(refused["details"]["reason"], "unknown_word", "{refused}");
    assert_eq!(refused["details"]["valid"], json!(["alpha"]));
    f.node.shutdown().await;
    for h in f.hosts {
        h.shutdown().await;
    }
}

/// freshness.hosts of the fleet at detail 1.
async fn host_state(mcp: &Mcp, host: &str) -> Value {
    let r = mcp.call("list_projects", json!({"detail": 1})).await.ok();
    r["freshness"]["hosts"][host].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_host_goes_stale_and_comes_back() {
    let Some(nats) = NatsServer::start("fleet rpc heartbeats") else {
        return;
    };
    let sim = support::sim().await;
    let (dir_h, dir_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = host_daemon(&sim, dir_h.path(), &nats, "alpha").await;
    let project = sim.add_project("alpha project", &["repo"]);
    sim.add_task(project, "alpha: one", None);
    support::converge(&host.store, &sim, CONVERGE, "alpha").await;
    let node = fleet_node(dir_f.path(), &nats).await;
    let mcp = Mcp::connect(node.addr).await;
    let wait_state = |stale: bool| {
        let mcp = &mcp;
        async move {
            let start = Instant::now();
            loop {
                let state = host_state(mcp, "alpha").await;
                if state["stale"] == stale && state["last_heartbeat_age_ms"].is_u64() {
                    return state;
                }
                assert!(start.elapsed() < CONVERGE, "never stale={stale}: {state}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let live = wait_state(false).await;
    assert_eq!(live["connected"], true, "{live}");

    host.shutdown().await;
    let silent = wait_state(true).await;
    assert!(
        silent["last_heartbeat_age_ms"].as_u64().unwrap() >= 600,
        "{silent}"
    );
    // Its data is still served.
    let tasks = mcp.call("list_tasks", json!({"project_id": project})).await;
    assert_eq!(tasks.ok()["total"], 1);

    let host = host_daemon(&sim, dir_h.path(), &nats, "alpha").await;
    let back = wait_state(false).await;
    assert!(
        back["last_heartbeat_age_ms"].as_u64().unwrap() < 600,
        "{back}"
    );
    node.shutdown().await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logs_complete_alone_reaches_the_fleet() {
    let Some(nats) = NatsServer::start("fleet rpc meta batches") else {
        return;
    };
    let sim = support::sim().await;
    let (dir_h, dir_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = host_daemon(&sim, dir_h.path(), &nats, "alpha").await;
    let project = sim.add_project("alpha project", &["repo"]);
    let task = sim.add_task(project, "alpha: logs", None);
    let script = AttemptScript {
        normalized_entries: 3,
        ..AttemptScript::default()
    };
    let attempt = sim.run_attempt_script(task, script).await.attempt_id;
    let session = sim.add_session(attempt, "CLAUDE_CODE");
    let pid = sim.start_process(session, RunReason::CodingAgent);
    let entry = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": "working"}});
    sim.append_log(pid, Channel::Normalized, entry);
    support::converge(&host.store, &sim, CONVERGE, "alpha").await;
    let node = fleet_node(dir_f.path(), &nats).await;
    let (mcp_h, mcp_f) = (Mcp::connect(host.addr).await, Mcp::connect(node.addr).await);
    let logs = json!({"attempt_id": attempt, "detail": 2});
    until(
        &mcp_f,
        "tail_attempt_logs",
        logs.clone(),
        "the running log",
        |r| r["execution_process_id"] == pid.to_string() && r["log_complete"] == false,
    )
    .await;

    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    // On the host the log is complete once its follower ends: a batch of its own that moves
    // no token, replicated as a meta-only batch.
    until(
        &mcp_h,
        "tail_attempt_logs",
        logs.clone(),
        "complete on the host",
        |r| r["log_complete"] == true,
    )
    .await;
    until(
        &mcp_f,
        "tail_attempt_logs",
        logs,
        "complete on the fleet",
        |r| r["log_complete"] == true,
    )
    .await;
    node.shutdown().await;
    host.shutdown().await;
}
