//! The audit trail survives SIGKILL of the real binary (issue 26): mutations are sent while
//! the daemon is killed at random moments and restarted on the same data dir, calls with a
//! `request_id` retried until they answer. Afterwards every mutation VK saw has its audit entry
//! (none missing: the entry is durable before VK is asked) and no `request_id` has two (a
//! re-run rewrites its entry).

mod support;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use support::mcp::Mcp;
use vk_observer_sim::Sim;

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn spawn(sim: &Sim, addr: &str, dir: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_vk-observer"))
        .args([
            "serve",
            "--upstream",
            &sim.base_url(),
            "--listen",
            addr,
            "--data-dir",
        ])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .env_remove("VK_OBSERVER_MCP_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts")
}

async fn wait_ready(addr: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(r) = reqwest::get(format!("http://{addr}/readyz")).await
            && r.status().as_u16() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    panic!("daemon at {addr} never became ready");
}

async fn create(mcp: &Mcp, project: uuid::Uuid, title: &str, request_id: Option<&str>) -> bool {
    let mut args = json!({"project_id": project, "title": title});
    if let Some(r) = request_id {
        args["request_id"] = r.into();
    }
    let Value::Object(args) = args else {
        unreachable!()
    };
    let params = CallToolRequestParams::new("create_task").with_arguments(args);
    // A call whose daemon was killed fails or never answers: it counts as interrupted.
    let call = tokio::time::timeout(Duration::from_secs(5), mcp.client.peer().call_tool(params));
    matches!(call.await, Ok(Ok(r)) if r.is_error != Some(true))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_never_leaves_a_mutation_unaudited_or_audited_twice() {
    let seed: u64 = rand::random();
    eprintln!("audit kill seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let sim = support::sim().await;
    let project = sim.add_project("Audited", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let sock: std::net::SocketAddr = addr.parse().unwrap();
    let mut done: HashMap<String, bool> = HashMap::new();
    let mut sent_without_id = 0u32;
    for round in 0..4 {
        let mut child = spawn(&sim, &addr, dir.path());
        wait_ready(&addr).await;
        let mcp = Mcp::connect(sock).await;
        // Retry what an earlier kill interrupted, then start new calls and kill mid-way.
        let mut calls = Vec::new();
        for (rid, _) in done.iter().filter(|(_, ok)| !**ok) {
            calls.push(rid.clone());
        }
        for i in 0..6 {
            let rid = format!("r{round}-{i}");
            done.insert(rid.clone(), false);
            calls.push(rid);
        }
        let mcp = std::sync::Arc::new(mcp);
        let mut handles = Vec::new();
        for rid in calls {
            let mcp = mcp.clone();
            handles.push(tokio::spawn(async move {
                let ok = create(&mcp, project, &format!("task {rid}"), Some(&rid)).await;
                (rid, ok)
            }));
        }
        for i in 0..2 {
            let mcp = mcp.clone();
            sent_without_id += 1;
            handles.push(tokio::spawn(async move {
                create(&mcp, project, &format!("no id {round}-{i}"), None).await;
                (String::new(), false)
            }));
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..40))).await;
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        for h in handles {
            if let Ok((rid, true)) = h.await
                && !rid.is_empty()
            {
                done.insert(rid, true);
            }
        }
    }
    let interrupted = done.values().filter(|ok| !**ok).count();
    eprintln!(
        "seed {seed}: {interrupted} of {} request_ids interrupted by the kills",
        done.len()
    );
    // A last run: every interrupted request_id retried to its answer.
    let mut child = spawn(&sim, &addr, dir.path());
    wait_ready(&addr).await;
    let mcp = Mcp::connect(sock).await;
    for (rid, ok) in done.iter_mut() {
        if !*ok {
            *ok = create(&mcp, project, &format!("task {rid}"), Some(rid)).await;
            assert!(*ok, "{rid} answers after the kills");
        }
    }
    let audit: Value = reqwest::get(format!("http://{addr}/audit?limit=1000"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();

    let entries = audit["entries"].as_array().unwrap();
    let mut by_request: HashMap<String, Vec<&Value>> = HashMap::new();
    for e in entries {
        assert_eq!(e["tool"], "create_task");
        assert_eq!(e["caller"], "loopback");
        assert_eq!(e["targets"]["project_id"], project.to_string());
        if let Some(r) = e["request_id"].as_str() {
            by_request.entry(r.to_string()).or_default().push(e);
        }
    }
    for rid in done.keys() {
        let got = by_request.get(rid).map(Vec::len).unwrap_or(0);
        assert_eq!(got, 1, "seed {seed}: {rid} has {got} audit entries");
        assert_eq!(
            by_request[rid][0]["outcome"], "ok",
            "seed {seed}: {rid} answered"
        );
    }
    // VK's tasks: one per request_id (VK dedupes by Idempotency-Key), and each created without
    // one has an entry (pending when the kill came before the answer).
    let truth = sim.truth();
    let titled = |p: &str| {
        truth
            .tasks
            .values()
            .filter(|t| t["title"].as_str().unwrap_or("").starts_with(p))
            .count()
    };
    assert_eq!(titled("task "), done.len(), "seed {seed}");
    let without_id = entries.iter().filter(|e| e["request_id"].is_null()).count();
    assert!(
        titled("no id ") <= without_id && without_id as u32 <= sent_without_id,
        "seed {seed}: {} tasks created without a request_id, {without_id} audited, {sent_without_id} sent",
        titled("no id ")
    );
    sim.shutdown().await;
}
