//! A pending tool approval seen from outside a single MCP call: `vk-observer watch` prints it
//! with the `respond_approval` to answer it and ends with the attempt once it is answered, and
//! the approval survives a daemon restart on the same data dir (listed, still blocking) and is
//! answered after it. The approval flow itself is in `mcp_approvals.rs`.

mod support;

use std::time::Duration;

use serde_json::json;
use support::approvals::{COMMAND, asking, list, start_asking, status_until};
use support::mcp::Mcp;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_shows_the_pending_approval_and_its_answer() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let sim = support::sim().await;
    let project = sim.add_project("Watch approvals", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let b = start_asking(
        &sim,
        project,
        "Watch me",
        asking(Duration::from_secs(3600), Duration::ZERO),
    )
    .await;
    let s = status_until(&mcp, b.attempt, "blocked", |s| {
        s["waiting_for"] == "approval"
    })
    .await;
    let id = s["pending_approvals"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_vk-observer"))
        .args([
            "watch",
            &b.attempt.to_string(),
            "--daemon",
            &format!("http://{}/mcp", daemon.addr),
            "--linger",
            "1",
        ])
        .env("COLUMNS", "200")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("⏸ approval")) {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the pending approval is printed")
            .unwrap()
            .expect("watch is still running");
        seen.push(line);
    }
    let shown = seen.last().unwrap().clone();
    assert!(
        shown.contains(COMMAND) && shown.contains(&id) && shown.contains("respond_approval"),
        "{shown}"
    );
    mcp.call(
        "respond_approval",
        json!({"approval_id": id, "decision": "approve"}),
    )
    .await
    .ok();
    let rest = async {
        while let Some(l) = lines.next_line().await.unwrap() {
            seen.push(l);
        }
        child.wait().await.unwrap()
    };
    let code = tokio::time::timeout(Duration::from_secs(60), rest)
        .await
        .expect("watch ends with the attempt");
    let out = seen.join("\n");
    assert_eq!(code.code(), Some(0), "{out}");
    assert!(out.contains("answered"), "{out}");
    assert!(out.contains("final state: completed"), "{out}");
    b.run.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_approval_survives_a_daemon_restart_and_is_answered_after_it() {
    let sim = support::sim().await;
    let project = sim.add_project("Restart", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let b = start_asking(
        &sim,
        project,
        "Across a restart",
        asking(Duration::from_secs(3600), Duration::ZERO),
    )
    .await;
    {
        let mcp = Mcp::connect(daemon.addr).await;
        status_until(&mcp, b.attempt, "blocked", |s| {
            s["waiting_for"] == "approval"
        })
        .await;
    }
    daemon.shutdown().await;

    // The reopened cache still lists it, and the status still says the agent waits.
    let daemon = support::daemon_reopen(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let listed = list(&mcp, json!({"project_id": project})).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let id = listed[0]["approval_id"].clone();
    let s = status_until(&mcp, b.attempt, "blocked again", |s| {
        s["waiting_for"] == "approval"
    })
    .await;
    assert_eq!(s["pending_approvals"][0]["approval_id"], id);
    let answered = mcp
        .call(
            "respond_approval",
            json!({"approval_id": id, "decision": "approve"}),
        )
        .await
        .ok();
    assert_eq!(answered["status"], "approved");
    b.run.await.unwrap();
    status_until(&mcp, b.attempt, "completed", |s| s["state"] == "completed").await;
    daemon.shutdown().await;
}
