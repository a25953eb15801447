//! Two fleet nodes behind one name (issue 40 item 1, design-notes §23): two simulated VK hosts
//! publishing to a real `nats-server`, two fleet nodes following them (in process, each with
//! its own store, so their local tokens interleave the hosts differently), and real MCP
//! clients moved between the nodes as a load balancer would. A token, a feed's continuation
//! and a paging cursor taken from one node mean the same on the other: the feed followed
//! alternately has no gap and no duplicate, quiet statuses and waits report nothing again,
//! a wait whose node dies goes on at the other, and a mutation through either node with one
//! `request_id` is one VK mutation. Tokens of a host daemon or of another fleet are refused.
//! Skipped with a printed line when no nats-server is installed, failed under `CI`.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::fleet::{fleet_node, fleet_node_started, host_daemon};
use support::fleet_tokens::went_back;
use support::mcp::{Mcp, Reply};
use support::nats::NatsServer;
use uuid::Uuid;
use vk_observer_daemon::Daemon;
use vk_observer_daemon::fleet_node::FleetNode;
use vk_observer_sim::{AttemptScript, Channel, RunReason, Sim};

const CONVERGE: Duration = Duration::from_secs(40);

/// Two hosts, each with a project and a finished attempt, and two fleet nodes on them.
struct World {
    nats: NatsServer,
    sims: [Sim; 2],
    hosts: [Daemon; 2],
    nodes: Vec<FleetNode>,
    projects: [Uuid; 2],
    attempts: [Uuid; 2],
    _dirs: Vec<tempfile::TempDir>,
}

async fn world(name: &str) -> Option<World> {
    let nats = NatsServer::start(name)?;
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let sims = [support::sim().await, support::sim().await];
    let hosts = [
        host_daemon(&sims[0], dirs[0].path(), &nats.url, "alpha").await,
        host_daemon(&sims[1], dirs[1].path(), &nats.url, "beta").await,
    ];
    // Node A follows live from the start, message by message as each host publishes; node B
    // starts later and reads both backlogs at once (packed: `fleet::pack`), so the two nodes
    // interleave the hosts' messages in different local orders.
    let a = fleet_node(dirs[2].path(), &nats.url).await;
    let mut projects = [Uuid::nil(); 2];
    let mut attempts = [Uuid::nil(); 2];
    // Both hosts work at once, so A's live order alternates between them.
    let runs = sims.iter().enumerate().map(|(i, sim)| async move {
        let project = sim.add_project(&format!("project {i}"), &["repo"]);
        let task = sim.add_task(project, &format!("task {i}"), None);
        let script = AttemptScript {
            normalized_entries: 12,
            ..AttemptScript::default()
        };
        (
            project,
            sim.run_attempt_script(task, script).await.attempt_id,
        )
    });
    for (i, (project, attempt)) in futures::future::join_all(runs)
        .await
        .into_iter()
        .enumerate()
    {
        (projects[i], attempts[i]) = (project, attempt);
    }
    for (i, sim) in sims.iter().enumerate() {
        support::converge(&hosts[i].store, sim, CONVERGE, "host").await;
    }
    let b = fleet_node(dirs[3].path(), &nats.url).await;
    let w = World {
        nats,
        sims,
        hosts,
        nodes: vec![a, b],
        projects,
        attempts,
        _dirs: dirs,
    };
    w.nodes_agree().await;
    Some(w)
}

impl World {
    /// Wait until every host published all it committed and both nodes applied every host's
    /// stream to its end, and stay there.
    async fn nodes_agree(&self) {
        let start = Instant::now();
        let mut stable = 0;
        loop {
            let published: Vec<(String, u64)> = ["alpha", "beta"]
                .iter()
                .zip(&self.hosts)
                .filter_map(|(name, h)| {
                    let acked = h.store.fleet_acked()?;
                    (acked.token == h.store.current_token())
                        .then(|| (name.to_string(), acked.stream_seq))
                })
                .collect();
            let applied = |n: &FleetNode| -> Vec<(String, u64)> {
                let mut p: Vec<_> = n
                    .store
                    .read()
                    .fleet_positions()
                    .unwrap()
                    .into_iter()
                    .map(|(h, p)| (h, p.stream_seq))
                    .collect();
                p.sort();
                p
            };
            let done = published.len() == 2 && self.nodes.iter().all(|n| applied(n) == published);
            stable = if done { stable + 1 } else { 0 };
            if stable >= 5 {
                return;
            }
            assert!(
                start.elapsed() < CONVERGE,
                "the nodes never caught up: hosts published {published:?}, nodes applied {:?}",
                self.nodes.iter().map(applied).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn shutdown(self) {
        for n in self.nodes {
            n.shutdown().await;
        }
        for h in self.hosts {
            h.shutdown().await;
        }
    }
}

/// A tool's answer, asked again while it is refused as retryable (`not_ready`: the node has
/// not yet applied what the token saw).
async fn answer(mcp: &Mcp, tool: &str, args: Value) -> Value {
    let start = Instant::now();
    loop {
        match mcp.call(tool, args.clone()).await {
            Reply::Ok(v) => return v,
            Reply::Err(e) if e["retryable"] == true || e["code"] == "not_found" => {
                assert!(start.elapsed() < CONVERGE, "{tool} kept refusing: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Reply::Err(e) => panic!("{tool} {args}: {e}"),
        }
    }
}

/// Work on both hosts while a client follows: tasks and attempts on a new project of alpha's,
/// and log lines on both hosts' attempts, so both hosts' messages interleave.
async fn play(sims: [&Sim; 2], project: Uuid, attempts: [Uuid; 2]) {
    let processes: Vec<Uuid> = sims
        .iter()
        .zip(attempts)
        .map(|(sim, attempt)| {
            let session = sim.add_session(attempt, "CLAUDE_CODE");
            sim.start_process(session, RunReason::CodingAgent)
        })
        .collect();
    for round in 0..12 {
        let task = sims[0].add_task(project, &format!("followed {round}"), None);
        if round % 3 == 0 {
            let script = AttemptScript {
                normalized_entries: 4,
                ..AttemptScript::default()
            };
            sims[0].run_attempt_script(task, script).await;
        }
        for (sim, process) in sims.iter().zip(&processes) {
            let note = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
                "entry_type": {"type": "assistant_message"}, "content": format!("round {round}")}});
            sim.append_log(*process, Channel::Normalized, note);
        }
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
}

/// An activity item as compared across nodes: kind and ids (tokens are places, not numbers).
fn ident(item: &Value) -> String {
    let s = |f: &str| item[f].as_str().unwrap_or_default().to_owned();
    format!(
        "{} {} {} {}",
        s("kind"),
        s("task_id"),
        s("attempt_id"),
        s("execution_process_id")
    )
}

/// The whole feed of `project` read on one node from its start, as idents.
async fn whole_feed(mcp: &Mcp, project: Uuid) -> Vec<String> {
    let page = answer(
        mcp,
        "tail_project_activity",
        json!({"project_id": project, "limit": 200}),
    )
    .await;
    let mut items: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(ident)
        .collect();
    items.reverse(); // newest first → oldest first
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moved_between_two_nodes_sees_every_change_once() {
    let Some(w) = world("two fleet nodes: feed, statuses, waits").await else {
        return;
    };
    let clients = [
        Mcp::connect(w.nodes[0].addr).await,
        Mcp::connect(w.nodes[1].addr).await,
    ];
    let followed = w.sims[0].add_project("followed", &["repo"]);
    // The follower starts from a token of node A taken before the project had any activity.
    let mut since = answer(&clients[0], "list_projects", json!({})).await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let player = {
        let sims = [w.sims[0].clone(), w.sims[1].clone()];
        let attempts = w.attempts;
        tokio::spawn(async move { play([&sims[0], &sims[1]], followed, attempts).await })
    };
    let mut seen: Vec<String> = Vec::new();
    let mut call = 0usize;
    let mut quiet_rounds = 0;
    let began = Instant::now();
    while quiet_rounds < 10 {
        assert!(
            began.elapsed() < CONVERGE,
            "the follower never went quiet (items told again?): {} items after {call} calls",
            seen.len()
        );
        let mcp = &clients[call % 2];
        call += 1;
        let args = json!({"project_id": followed, "since_token": since, "limit": 3});
        let page = answer(mcp, "tail_project_activity", args).await;
        assert_eq!(page["token_reset"], false, "{page}");
        let items = page["items"].as_array().unwrap();
        seen.extend(items.iter().map(ident));
        let next = page["next_since_token"].as_str().unwrap().to_owned();
        assert!(!went_back(&since, &next), "went back: {since} -> {next}");
        since = next;
        let idle = items.is_empty() && player.is_finished();
        quiet_rounds = if idle { quiet_rounds + 1 } else { 0 };
        tokio::time::sleep(Duration::from_millis(if idle { 100 } else { 10 })).await;
    }
    player.await.unwrap();
    w.nodes_agree().await;
    let on_a = whole_feed(&clients[0], followed).await;
    let on_b = whole_feed(&clients[1], followed).await;
    assert_eq!(
        on_a, on_b,
        "both nodes hold the same feed of one host's project"
    );
    assert!(on_a.len() >= 12, "{on_a:?}");
    assert_eq!(
        seen, on_a,
        "the alternating follower has a gap or a duplicate"
    );
    // The nodes' local tokens apply the hosts' messages in different orders (else the test
    // would show nothing): B read both backlogs at once, A followed them live.
    let (ra, rb) = (w.nodes[0].store.read(), w.nodes[1].store.read());
    let top = w.nodes[0]
        .store
        .current_token()
        .min(w.nodes[1].store.current_token());
    let differ = (1..=top)
        .filter(|&t| ra.fleet_host_of(t).unwrap() != rb.fleet_host_of(t).unwrap())
        .count();
    eprintln!("{differ} of {top} local tokens name another host on each node; {call} calls");
    assert!(differ > 0, "both nodes applied the hosts in the same order");

    // Statuses and waits: quiet after a token of either node, on the other node too.
    let ids = w.attempts;
    let token = answer(
        &clients[0],
        "get_attempt_status",
        json!({"attempt_ids": ids}),
    )
    .await["token"]
        .clone();
    for mcp in &clients {
        let r = answer(
            mcp,
            "get_attempt_status",
            json!({"attempt_ids": ids, "since_token": token}),
        )
        .await;
        assert_eq!(
            r["attempts"],
            json!([]),
            "nothing changed after the token: {r}"
        );
        assert_eq!(r["unchanged"], 2, "{r}");
        let args = json!({"attempt_ids": ids, "since_token": token, "timeout_ms": 1500});
        let waited = answer(mcp, "wait_for_attempt_change", args).await;
        assert_eq!(
            waited["changed"], false,
            "a quiet wait answers no change: {waited}"
        );
        assert_eq!(waited["token_reset"], false);
    }
    // A log tail continued on the other node goes on after the index it had.
    let args = json!({"attempt_id": ids[1], "limit": 5});
    let tail = answer(&clients[0], "tail_attempt_logs", args).await;
    let last = tail["latest_entry_index"].as_u64().unwrap();
    let args =
        json!({"attempt_id": ids[1], "after_entry_index": last, "since_token": tail["token"]});
    let rest = answer(&clients[1], "tail_attempt_logs", args).await;
    assert_eq!(rest["entries"], json!([]), "{rest}");
    assert_eq!(rest["process_changed"], false, "{rest}");
    assert_eq!(rest["replaced"], json!([]), "{rest}");
    // A paging cursor of node A pages on at node B.
    let first = answer(
        &clients[0],
        "list_tasks",
        json!({"project_id": followed, "limit": 5}),
    )
    .await;
    let cursor = first["next_cursor"].as_str().unwrap();
    let on_b = answer(
        &clients[1],
        "list_tasks",
        json!({"project_id": followed, "limit": 5, "cursor": cursor}),
    )
    .await;
    let on_a = answer(
        &clients[0],
        "list_tasks",
        json!({"project_id": followed, "limit": 5, "cursor": cursor}),
    )
    .await;
    assert_eq!(on_a["tasks"], on_b["tasks"]);
    assert_eq!(on_b["tasks"].as_array().unwrap().len(), 5, "{on_b}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_node_dies_goes_on_at_the_other_and_mutations_stay_exactly_once() {
    let Some(mut w) = world("two fleet nodes: a node dies mid-wait").await else {
        return;
    };
    let a = Mcp::connect(w.nodes[0].addr).await;
    let ids = w.attempts;
    let token =
        answer(&a, "get_attempt_status", json!({"attempt_ids": ids})).await["token"].clone();
    let args = json!({"attempt_ids": ids, "since_token": token, "timeout_ms": 20000});
    let parked = tokio::spawn(async move {
        let Value::Object(args) = args else {
            unreachable!()
        };
        let call = rmcp::model::CallToolRequestParams::new("wait_for_attempt_change");
        // Its node dies under it: a protocol error, not an answer.
        a.client
            .peer()
            .call_tool(call.with_arguments(args))
            .await
            .is_err()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.nodes.remove(0).crash().await;
    assert!(
        parked.await.unwrap(),
        "the wait on the dead node got no answer"
    );
    let b = Mcp::connect(w.nodes[0].addr).await;
    let args = json!({"attempt_ids": ids, "since_token": token, "timeout_ms": 20000});
    let waiting = tokio::spawn(async move {
        let r = b.call("wait_for_attempt_change", args).await.ok();
        (b, r)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let session = w.sims[1].add_session(ids[1], "CLAUDE_CODE");
    w.sims[1].start_process(session, RunReason::CodingAgent);
    let (b, woke) = waiting.await.unwrap();
    assert_eq!(woke["changed"], true, "{woke}");
    assert_eq!(woke["token_reset"], false, "{woke}");
    let changed: Vec<&str> = woke["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["attempt_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        changed,
        [ids[1].to_string()],
        "only beta's attempt changed: {woke}"
    );

    // One request_id through two nodes: one task in VK, the second answer a replay.
    let dir = tempfile::tempdir().unwrap();
    let other = fleet_node(dir.path(), &w.nats.url).await;
    let c = Mcp::connect(other.addr).await;
    let args = json!({"project_id": w.projects[0], "title": "once through two nodes",
                      "request_id": "two-nodes-1"});
    let made = answer(&b, "create_task", args.clone()).await;
    let again = answer(&c, "create_task", args).await;
    assert_eq!(again["task_id"], made["task_id"], "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    let titled = w.sims[0]
        .truth()
        .tasks
        .values()
        .filter(|t| t["title"] == "once through two nodes")
        .count();
    assert_eq!(titled, 1);
    other.shutdown().await;
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_a_host_daemon_or_another_fleet_are_refused_and_a_node_behind_says_so() {
    let Some(w) = world("two fleet nodes: foreign tokens").await else {
        return;
    };
    let node = Mcp::connect(w.nodes[0].addr).await;
    let host = Mcp::connect(w.hosts[0].addr).await;
    let ids = [w.attempts[0]];
    let status = |since: &Value| json!({"attempt_ids": ids, "since_token": since});
    let host_token = answer(&host, "list_projects", json!({})).await["token"].clone();
    let node_token = answer(&node, "list_projects", json!({})).await["token"].clone();
    let refused = node
        .call("get_attempt_status", status(&host_token))
        .await
        .classed();
    assert_eq!(refused, "invalid_argument/foreign_token");
    let refused = host
        .call("get_attempt_status", status(&node_token))
        .await
        .classed();
    assert_eq!(refused, "invalid_argument/foreign_token");
    let other_fleet = fleet_token(&[("elsewhere", "2020-01-01 0:00:00.0 +00:00:00", 5)]);
    let refused = node
        .call("get_attempt_status", status(&json!(other_fleet)))
        .await
        .classed();
    assert_eq!(refused, "invalid_argument/foreign_token");
    let refused = node
        .call("get_attempt_status", status(&json!("f1.%%%")))
        .await
        .classed();
    assert_eq!(refused, "invalid_argument");
    // A place past what the node applied: retryable, with the hosts it is behind on.
    let places = support::fleet_tokens::places(node_token.as_str().unwrap()).unwrap();
    let ahead: Vec<(&str, &str, u64)> = places
        .iter()
        .map(|(h, (c, s))| (h.as_str(), c.as_str(), s + 1000))
        .collect();
    let behind = node
        .call("get_attempt_status", status(&json!(fleet_token(&ahead))))
        .await
        .err();
    assert_eq!(behind["code"], "not_ready", "{behind}");
    assert_eq!(behind["retryable"], true);
    assert_eq!(behind["details"]["reason"], "fleet_behind", "{behind}");
    w.shutdown().await;
}

/// A fleet token naming these places (the format of `query::fleet_token`).
fn fleet_token(places: &[(&str, &str, u64)]) -> String {
    use base64::Engine;
    let json = serde_json::to_vec(places).unwrap();
    format!(
        "f1.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_answers_not_ready_until_it_has_caught_up_never_an_empty_board() {
    let Some(mut w) = world("two fleet nodes: a new node catching up").await else {
        return;
    };
    w.nats.stop();
    let dir = tempfile::tempdir().unwrap();
    let fleet = vk_observer_config::FleetSettings {
        urls: vec![w.nats.url.clone()],
        node: true,
        ..Default::default()
    };
    let fresh = fleet_node_started(dir.path(), fleet.clone()).await;
    let mcp = Mcp::connect(fresh.addr).await;
    let refused = mcp.call("list_projects", json!({})).await.err();
    assert_eq!(refused["code"], "not_ready", "{refused}");
    assert_eq!(refused["retryable"], true);
    assert_eq!(
        refused["details"]["reason"], "fleet_catching_up",
        "{refused}"
    );
    w.nats.start_again();
    let listed = answer(&mcp, "list_projects", json!({})).await;
    assert_eq!(listed["projects"].as_array().unwrap().len(), 2, "{listed}");
    fresh.shutdown().await;
    // A node restarted on a store that holds its hosts serves its cache at once.
    let again = fleet_node_started(dir.path(), fleet).await;
    let mcp = Mcp::connect(again.addr).await;
    let listed = mcp.call("list_projects", json!({})).await.ok();
    assert_eq!(listed["projects"].as_array().unwrap().len(), 2, "{listed}");
    again.shutdown().await;
    w.shutdown().await;
}
