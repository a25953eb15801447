//! The fleet against a real `nats-server` (design-notes §23): simulated VK hosts, their host
//! daemons publishing to JetStream, and one fleet node (`serve --fleet`, in process) serving
//! them all through a real MCP client. Its answers equal the union of the hosts' answers; a
//! wait on attempts of two hosts wakes on either; a restarted host daemon resumes without
//! duplicates; a recreated stream gets a snapshot; garbage on a host subject is skipped; NATS
//! down leaves the host serving and its backlog is published once NATS is back; the real binary
//! serves `serve --fleet` from `VK_OBSERVER_FLEET__URLS`.
//! Skipped with a printed line when no nats-server is installed, failed under `CI`.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::fleet::{fleet_node, host_daemon};
use support::mcp::{Mcp, Reply};
use support::nats::NatsServer;
use uuid::Uuid;
use vk_observer_daemon::fleet_node::FleetNode;
use vk_observer_sim::{AttemptScript, Channel, RunReason, Sim};

const CONVERGE: Duration = Duration::from_secs(40);

/// A small world on one simulated host: a project, a finished attempt with logs, a todo task.
async fn small_world(sim: &Sim, name: &str) -> (Uuid, Uuid) {
    let project = sim.add_project(&format!("{name} project"), &["repo"]);
    let task = sim.add_task(project, &format!("{name}: write a file"), None);
    let ids = sim
        .run_attempt_script(
            task,
            AttemptScript {
                normalized_entries: 20,
                raw_entries: 5,
                replacements: 1,
                ..AttemptScript::default()
            },
        )
        .await;
    sim.add_task(project, &format!("{name}: todo"), None);
    (project, ids.attempt_id)
}

/// `v` without the keys that differ between daemons by design (their own tokens, commit
/// times, the freshness of their own upstream, the fleet's `host` and `hosts`).
fn comparable(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    ![
                        "token",
                        "at",
                        "freshness",
                        "host",
                        "hosts",
                        "next_since_token",
                        "waited_ms",
                    ]
                    .contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), comparable(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(comparable).collect()),
        other => other.clone(),
    }
}

async fn projects(mcp: &Mcp) -> BTreeMap<String, Value> {
    let r = mcp.call("list_projects", json!({"limit": 100})).await.ok();
    r["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["project_id"].as_str().unwrap().to_owned(), p.clone()))
        .collect()
}

/// Every read this test compares, by (tool, scope), as one host or the fleet answers it.
async fn answers(mcp: &Mcp, projects: &[String]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for p in projects {
        let tasks = mcp
            .call("list_tasks", json!({"project_id": p, "limit": 100}))
            .await
            .ok();
        for t in tasks["tasks"].as_array().unwrap() {
            let id = t["task_id"].as_str().unwrap();
            // A task listed a moment ago may be gone by now (a snapshot applied in between):
            // its error is an answer that differs, and the caller reads again.
            let task = match mcp.call("get_task", json!({"task_id": id})).await {
                Reply::Ok(task) => task,
                Reply::Err(error) => error,
            };
            out.insert(format!("get_task {id}"), comparable(&task));
        }
        out.insert(format!("list_tasks {p}"), comparable(&tasks));
        let feed = mcp
            .call(
                "tail_project_activity",
                json!({"project_id": p, "limit": 200}),
            )
            .await
            .ok();
        out.insert(
            format!("tail_project_activity {p}"),
            comparable(&feed["items"]),
        );
    }
    out
}

/// Wait until the fleet answers every read of every host as that host does.
async fn converge_fleet(fleet: &Mcp, hosts: &[(&str, &Mcp)]) {
    let start = Instant::now();
    loop {
        let mut want = BTreeMap::new();
        let mut owner = BTreeMap::new();
        for (name, mcp) in hosts {
            let ps: Vec<String> = projects(mcp).await.into_keys().collect();
            for p in &ps {
                owner.insert(p.clone(), name.to_string());
            }
            want.extend(answers(mcp, &ps).await);
        }
        let fleet_projects = projects(fleet).await;
        let ids: Vec<String> = fleet_projects.keys().cloned().collect();
        let got = answers(fleet, &ids).await;
        let same_projects = ids == owner.keys().cloned().collect::<Vec<_>>();
        if same_projects && got == want {
            return;
        }
        if start.elapsed() > CONVERGE {
            let differ: Vec<&String> = want
                .keys()
                .filter(|k| got.get(*k) != want.get(*k))
                .collect();
            let brief = |v: Option<&Value>| -> Vec<String> {
                v.and_then(Value::as_array).map_or(vec![], |items| {
                    items
                        .iter()
                        .map(|i| format!("{}{}", i["kind"], i["fields"]))
                        .collect()
                })
            };
            let first = differ
                .first()
                .map(|k| (brief(want.get(*k)), brief(got.get(*k))));
            panic!(
                "the fleet is not the union of its hosts after {CONVERGE:?}; differing: {differ:?}; first (host, fleet): {first:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn note(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}})
}

/// A token after which the attempts stayed unchanged for a while (hosts may still be settling
/// background re-reads right after a change).
async fn quiet_token(mcp: &Mcp, ids: &[Uuid]) -> Value {
    for _ in 0..50 {
        let args = json!({"attempt_ids": ids});
        let t = mcp.call("get_attempt_status", args).await.ok()["token"].clone();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let args = json!({"attempt_ids": ids, "since_token": t});
        let r = mcp.call("get_attempt_status", args).await.ok();
        if r["attempts"].as_array().unwrap().is_empty() {
            return t;
        }
    }
    panic!("the attempts never went quiet");
}

/// A wait on `attempts` from the fleet's current token wakes when `poke` changes one of them.
async fn wait_wakes_on(fleet: &FleetNode, attempts: &[Uuid], expect: Uuid, poke: impl FnOnce()) {
    let mcp = Mcp::connect(fleet.addr).await;
    let token = quiet_token(&mcp, attempts).await;
    let args = json!({"attempt_ids": attempts, "since_token": token, "timeout_ms": 20000});
    let waiter = tokio::spawn(async move { mcp.call("wait_for_attempt_change", args).await.ok() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    poke();
    let woke = waiter.await.unwrap();
    assert_eq!(woke["changed"], true, "{woke}");
    let changed: Vec<&str> = woke["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["attempt_id"].as_str().unwrap())
        .collect();
    assert!(
        changed.contains(&expect.to_string().as_str()),
        "woke for {changed:?}, not {expect}: {woke}"
    );
}

/// The fleet's `list_executors`: every host's executors as that host lists them, each naming its
/// host, sorted by executor then host.
async fn fleet_lists_each_hosts_executors(fleet: &Mcp, hosts: &[(&str, &Mcp)]) {
    let mut want = Vec::new();
    for (name, mcp) in hosts {
        let r = mcp.call("list_executors", json!({})).await.ok();
        for mut e in r["executors"].as_array().unwrap().clone() {
            assert!(
                e.get("host").is_none(),
                "a host daemon's answer names no host: {e}"
            );
            e["host"] = json!(name);
            want.push(e);
        }
    }
    want.sort_by_key(|e| (e["executor"].to_string(), e["host"].to_string()));
    assert!(!want.is_empty());
    let start = Instant::now();
    loop {
        let got = fleet.call("list_executors", json!({})).await;
        if let support::mcp::Reply::Ok(r) = &got
            && r["executors"].as_array() == Some(&want)
        {
            return;
        }
        assert!(
            start.elapsed() < CONVERGE,
            "the fleet's executors are not its hosts': {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_serves_the_union_of_its_hosts_and_wakes_on_either() {
    let Some(nats) = NatsServer::start("fleet union") else {
        return;
    };
    let (sim_a, sim_b) = (support::sim().await, support::sim().await);
    let (dir_a, dir_b, dir_f) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let host_a = host_daemon(&sim_a, dir_a.path(), &nats.url, "alpha").await;
    let host_b = host_daemon(&sim_b, dir_b.path(), &nats.url, "beta").await;
    let (project_a, attempt_a) = small_world(&sim_a, "alpha").await;
    let (_, attempt_b) = small_world(&sim_b, "beta").await;
    support::converge(&host_a.store, &sim_a, CONVERGE, "alpha").await;
    support::converge(&host_b.store, &sim_b, CONVERGE, "beta").await;
    let fleet = fleet_node(dir_f.path(), &nats.url).await;
    let (mcp_a, mcp_b, mcp_f) = (
        Mcp::connect(host_a.addr).await,
        Mcp::connect(host_b.addr).await,
        Mcp::connect(fleet.addr).await,
    );
    converge_fleet(&mcp_f, &[("alpha", &mcp_a), ("beta", &mcp_b)]).await;
    let on_fleet = projects(&mcp_f).await;
    assert_eq!(on_fleet.len(), 2);
    assert_eq!(
        on_fleet[&project_a.to_string()]["host"],
        "alpha",
        "{on_fleet:?}"
    );
    fleet_lists_each_hosts_executors(&mcp_f, &[("alpha", &mcp_a), ("beta", &mcp_b)]).await;
    // Usage travels with the host's batches: the fleet sums the same runs, by host.
    let scope = json!({"project_id": project_a});
    let on_host = mcp_a.call("get_usage", scope.clone()).await.ok();
    let summed = mcp_f.call("get_usage", scope).await.ok();
    assert!(
        on_host["usage"]["output_tokens"].as_u64() > Some(0),
        "{on_host}"
    );
    assert_eq!(summed["usage"], on_host["usage"], "{summed}");
    assert_eq!(summed["by_host"][0]["key"], "alpha", "{summed}");

    // Live changes on either host reach the fleet, and a wait on both hosts' attempts wakes on each.
    let both = [attempt_a, attempt_b];
    let (pa, pb) = (
        running_process(&sim_a, attempt_a),
        running_process(&sim_b, attempt_b),
    );
    wait_wakes_on(&fleet, &both, attempt_b, || {
        sim_b.append_log(pb, Channel::Normalized, note("beta moves"));
    })
    .await;
    wait_wakes_on(&fleet, &both, attempt_a, || {
        sim_a.append_log(pa, Channel::Normalized, note("alpha moves"));
    })
    .await;
    sim_b.add_task(
        sim_b.truth().projects.keys().next().copied().unwrap(),
        "beta: later",
        None,
    );
    support::converge(&host_b.store, &sim_b, CONVERGE, "beta later").await;
    converge_fleet(&mcp_f, &[("alpha", &mcp_a), ("beta", &mcp_b)]).await;
    fleet.shutdown().await;
    host_a.shutdown().await;
    host_b.shutdown().await;
}

/// A new process on the attempt (a follow-up), so logs can still be appended to it.
fn running_process(sim: &Sim, attempt: Uuid) -> Uuid {
    let session = sim.add_session(attempt, "CLAUDE_CODE");
    sim.start_process(session, RunReason::CodingAgent)
}

/// What a host's stream holds: (subject, token header, message id) in stream order.
async fn stream_messages(nats: &NatsServer, host: &str) -> Vec<(String, u64, String)> {
    let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    let stream = js.get_stream(format!("VKO_{host}")).await.unwrap();
    let last = stream.get_info().await.unwrap().state.last_sequence;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut out = Vec::new();
    while let Some(m) = messages.next().await {
        let m = m.unwrap();
        let seq = m.info().unwrap().stream_sequence;
        let header = |name: &str| {
            m.headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.to_string())
                .unwrap_or_default()
        };
        out.push((
            m.subject.to_string(),
            header("Vko-Token").parse().unwrap_or(0),
            header("Nats-Msg-Id"),
        ));
        if seq >= last {
            break;
        }
    }
    out
}

/// Batches strictly in (token, meta) order (a meta-only batch follows its token's batch, its
/// message id ending `.m<meta>`), no message id twice.
fn assert_no_duplicates(messages: &[(String, u64, String)]) {
    let meta = |id: &str| -> u32 {
        let last = id.rsplit('.').next().unwrap_or_default();
        last.strip_prefix('m')
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    };
    let batches: Vec<(u64, u32)> = messages
        .iter()
        .filter(|m| m.0.ends_with(".batch"))
        .map(|m| (m.1, meta(&m.2)))
        .collect();
    assert!(
        batches.windows(2).all(|w| w[0] < w[1]),
        "batch tokens not increasing: {batches:?}"
    );
    let ids: BTreeSet<&String> = messages.iter().map(|m| &m.2).collect();
    assert_eq!(
        ids.len(),
        messages.len(),
        "a message id twice: {messages:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_resumes_without_duplicates_and_garbage_is_skipped() {
    let Some(nats) = NatsServer::start("fleet restart") else {
        return;
    };
    let sim = support::sim().await;
    let (dir_h, dir_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = host_daemon(&sim, dir_h.path(), &nats.url, "alpha").await;
    let (project, _) = small_world(&sim, "alpha").await;
    support::converge(&host.store, &sim, CONVERGE, "alpha").await;
    let fleet = fleet_node(dir_f.path(), &nats.url).await;
    let mcp_f = Mcp::connect(fleet.addr).await;
    converge_fleet(&mcp_f, &[("alpha", &Mcp::connect(host.addr).await)]).await;

    // Down, a change in VK, up again: the host resumes after its last acknowledged batch.
    host.shutdown().await;
    sim.add_task(project, "alpha: while the daemon was down", None);
    let host = host_daemon(&sim, dir_h.path(), &nats.url, "alpha").await;
    support::converge(&host.store, &sim, CONVERGE, "alpha restarted").await;
    let mcp_h = Mcp::connect(host.addr).await;
    converge_fleet(&mcp_f, &[("alpha", &mcp_h)]).await;
    let messages = stream_messages(&nats, "alpha").await;
    assert_no_duplicates(&messages);
    assert!(
        messages.iter().all(|m| m.0 == "vko.alpha.batch"),
        "no snapshot was needed: {messages:?}"
    );

    // Garbage on the host's subjects is skipped; what follows is applied.
    let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    js.publish("vko.alpha.batch", "{not json".into())
        .await
        .unwrap()
        .await
        .unwrap();
    // A snapshot part without its headers (the stream keeps only batches and snapshots).
    js.publish("vko.alpha.snapshot", "[]".into())
        .await
        .unwrap()
        .await
        .unwrap();
    sim.add_task(project, "alpha: after the garbage", None);
    support::converge(&host.store, &sim, CONVERGE, "alpha after garbage").await;
    converge_fleet(&mcp_f, &[("alpha", &mcp_h)]).await;

    // The stream deleted while the host is down: it republishes a snapshot, which the fleet
    // applies (a task deleted meanwhile disappears there too).
    host.shutdown().await;
    js.delete_stream("VKO_alpha").await.unwrap();
    let gone = sim.add_task(project, "alpha: deleted while down", None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    sim.delete_task(gone);
    let removed = *sim.truth().tasks.keys().next().unwrap();
    sim.delete_task(removed);
    let host = host_daemon(&sim, dir_h.path(), &nats.url, "alpha").await;
    support::converge(&host.store, &sim, CONVERGE, "alpha after stream loss").await;
    converge_fleet(&mcp_f, &[("alpha", &Mcp::connect(host.addr).await)]).await;
    let messages = stream_messages(&nats, "alpha").await;
    assert!(
        messages.iter().any(|m| m.0 == "vko.alpha.snapshot"),
        "{messages:?}"
    );
    assert_no_duplicates(&messages);
    fleet.shutdown().await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_down_is_a_backlog_not_a_stalled_host() {
    let Some(mut nats) = NatsServer::start("fleet nats down") else {
        return;
    };
    let sim = support::sim().await;
    let (dir_h, dir_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = host_daemon(&sim, dir_h.path(), &nats.url, "alpha").await;
    let (project, _) = small_world(&sim, "alpha").await;
    support::converge(&host.store, &sim, CONVERGE, "alpha").await;
    let fleet = fleet_node(dir_f.path(), &nats.url).await;
    let (mcp_h, mcp_f) = (
        Mcp::connect(host.addr).await,
        Mcp::connect(fleet.addr).await,
    );
    converge_fleet(&mcp_f, &[("alpha", &mcp_h)]).await;

    let published = stream_messages(&nats, "alpha").await.len();
    nats.stop();
    for i in 0..3 {
        sim.add_task(project, &format!("alpha: while NATS is down {i}"), None);
    }
    // Ingest and queries go on; the batches wait in the outbox.
    support::converge(&host.store, &sim, CONVERGE, "alpha without NATS").await;
    let tasks = mcp_h
        .call("list_tasks", json!({"project_id": project}))
        .await
        .ok();
    assert_eq!(tasks["total"], 5, "{tasks}");
    // The fleet keeps serving what it has.
    let on_fleet = mcp_f
        .call("list_tasks", json!({"project_id": project}))
        .await
        .ok();
    assert_eq!(on_fleet["total"], 2, "{on_fleet}");

    nats.start_again();
    converge_fleet(&mcp_f, &[("alpha", &mcp_h)]).await;
    let messages = stream_messages(&nats, "alpha").await;
    assert!(
        messages.len() > published,
        "the backlog was published once NATS was back"
    );
    assert!(
        messages.iter().all(|m| m.0 == "vko.alpha.batch"),
        "resumed, no snapshot: {messages:?}"
    );
    assert_no_duplicates(&messages);
    fleet.shutdown().await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_a_fleet_from_its_environment() {
    let Some(nats) = NatsServer::start("fleet binary") else {
        return;
    };
    let sim = support::sim().await;
    let (dir_h, dir_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = host_daemon(&sim, dir_h.path(), &nats.url, "alpha").await;
    small_world(&sim, "alpha").await;
    support::converge(&host.store, &sim, CONVERGE, "alpha").await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut node = tokio::process::Command::new(env!("CARGO_BIN_EXE_vk-observer"))
        .args([
            "serve",
            "--fleet",
            "--listen",
            &addr.to_string(),
            "--data-dir",
        ])
        .arg(dir_f.path())
        .env("VK_OBSERVER_FLEET__URLS", &nats.url)
        .env_remove("VK_OBSERVER_UPSTREAM")
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let ready = || async {
        let r = reqwest::get(format!("http://{addr}/readyz")).await;
        r.is_ok_and(|r| r.status().is_success())
    };
    while !ready().await {
        assert!(start.elapsed() < CONVERGE, "the fleet node never got ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    converge_fleet(
        &Mcp::connect(addr).await,
        &[("alpha", &Mcp::connect(host.addr).await)],
    )
    .await;
    node.kill().await.unwrap();
    host.shutdown().await;
}

/// A fleet may mix dialects (issue 38): a host daemon beside a VK of the fork's dialect and one
/// beside a VK 0.1.x, behind one fleet node, which answers every read of either as its host
/// does and wakes a wait on the 0.1.x host's attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_mixes_a_fork_host_and_a_vk_0_1_x_host() {
    let Some(nats) = NatsServer::start("fleet of both dialects") else {
        return;
    };
    let (sim_a, sim_b) = (support::sim().await, support::workspaces::sim().await);
    let (dir_a, dir_b, dir_f) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let host_a = host_daemon(&sim_a, dir_a.path(), &nats.url, "fork").await;
    let host_b = host_daemon(&sim_b, dir_b.path(), &nats.url, "bloop").await;
    let (_, _) = small_world(&sim_a, "fork").await;
    let (_, attempt_b) = small_world(&sim_b, "bloop").await;
    support::converge(&host_a.store, &sim_a, CONVERGE, "fork").await;
    support::workspaces::converge(&host_b.store, &sim_b, CONVERGE, "bloop").await;
    assert_eq!(host_b.health.dialect().dialect, "workspaces");
    let fleet = fleet_node(dir_f.path(), &nats.url).await;
    let (mcp_a, mcp_b, mcp_f) = (
        Mcp::connect(host_a.addr).await,
        Mcp::connect(host_b.addr).await,
        Mcp::connect(fleet.addr).await,
    );
    converge_fleet(&mcp_f, &[("fork", &mcp_a), ("bloop", &mcp_b)]).await;
    let pb = running_process(&sim_b, attempt_b);
    wait_wakes_on(&fleet, &[attempt_b], attempt_b, || {
        sim_b.append_log(pb, Channel::Normalized, note("bloop moves"));
    })
    .await;
    fleet.shutdown().await;
    host_a.shutdown().await;
    host_b.shutdown().await;
}
