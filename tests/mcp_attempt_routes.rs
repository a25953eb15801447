//! The start and follow-up roads `mcp_control.rs` does not take, through a real MCP client
//! against the simulator: `start_task_attempt` answers the attempt's `workspace_branch` at the
//! default detail, `reuse_running_attempt` returns the running attempt instead of starting
//! another (and starts one when none runs), `follow_up` send targeted by `session_id` and queue
//! targeted by `attempt_id` reach the right session in VK.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::{AttemptScript, RunReason};

fn id(v: &Value) -> Uuid {
    v.as_str().unwrap().parse().unwrap()
}

/// The simulator's (VK's) branch of the attempt.
fn branch_of(sim: &vk_observer_sim::Sim, attempt: Uuid) -> Value {
    sim.truth().attempts[&attempt]["branch"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_answers_the_branch_and_reuses_a_running_attempt() {
    let sim = support::sim().await;
    let project = sim.add_project("Starts", &["demo"]);
    let busy_task = sim.add_task(project, "Already running", None);
    let busy = sim.create_attempt(busy_task, "CLAUDE_CODE");
    sim.start_process(busy.session_id, RunReason::CodingAgent);
    let idle_task = sim.add_task(project, "Nothing running", None);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "starts").await;
    let mcp = Mcp::connect(daemon.addr).await;
    let repo = mcp
        .call("list_repos", json!({"project_id": project}))
        .await
        .ok()["repos"][0]["repo_id"]
        .clone();
    let repos = json!([{"repo_id": repo, "target_branch": "main"}]);

    // A running attempt: returned as started, nothing created in VK, its branch at detail 0.
    let reuse = json!({"task_id": busy_task, "executor": "CLAUDE_CODE", "repos": repos,
                       "reuse_running_attempt": true});
    let r = mcp.call_as_is("start_task_attempt", reuse).await.ok();
    assert_eq!(id(&r["attempt_id"]), busy.attempt_id, "{r}");
    assert_eq!(r["reused"], true, "{r}");
    assert_eq!(
        r["workspace_branch"],
        branch_of(&sim, busy.attempt_id),
        "{r}"
    );
    assert!(r["workspace_branch"].is_string(), "{r}");
    assert_eq!(r["status"]["state"], "running", "{r}");
    assert_eq!(sim.counters().attempt_creations, 0, "nothing started");

    // No attempt runs: the flag starts one, answered with VK's branch name.
    let fresh = json!({"task_id": idle_task, "executor": "CLAUDE_CODE", "repos": repos,
                       "reuse_running_attempt": true});
    let f = mcp.call_as_is("start_task_attempt", fresh).await.ok();
    let started = id(&f["attempt_id"]);
    assert_ne!(started, busy.attempt_id);
    // Detail 0 leaves `reused: false` out.
    assert_ne!(f["reused"], true, "{f}");
    assert_eq!(f["workspace_branch"], branch_of(&sim, started), "{f}");
    assert!(f["workspace_branch"].is_string(), "{f}");
    // VK starts the first process before it answers: the new attempt is running, not idle
    // (an idle one would route the orchestrator to follow_up). The simulator's agent may
    // already have finished by the time the daemon read it (~30 ms): completed then.
    let state = f["status"]["state"].as_str();
    assert!(matches!(state, Some("running" | "completed")), "{f}");
    assert!(
        f["status"]["latest_execution_process_id"].is_string(),
        "{f}"
    );
    assert_eq!(sim.counters().attempt_creations, 1);

    // Without the flag a second attempt of the busy task is started, as VK would.
    let again = json!({"task_id": busy_task, "executor": "CLAUDE_CODE", "repos": repos});
    let a = mcp.call_as_is("start_task_attempt", again).await.ok();
    assert_ne!(id(&a["attempt_id"]), busy.attempt_id, "{a}");
    assert_ne!(a["reused"], true, "{a}");
    assert_eq!(sim.counters().attempt_creations, 2);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_up_sends_by_session_and_queues_by_attempt() {
    let sim = support::sim().await;
    let project = sim.add_project("Follow", &["demo"]);
    let done_task = sim.add_task(project, "Finished", None);
    let done = sim
        .run_attempt_script(done_task, AttemptScript::default())
        .await;
    let live_task = sim.add_task(project, "Still working", None);
    let live = sim.create_attempt(live_task, "CLAUDE_CODE");
    sim.start_process(live.session_id, RunReason::CodingAgent);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "follow").await;
    let mcp = Mcp::connect(daemon.addr).await;

    // send by session id: the attempt is resolved from the session, the new process is VK's
    // process on that session and the cache shows it on return.
    let sent = mcp
        .call(
            "follow_up",
            json!({"action": "send", "session_id": done.session_id, "prompt": "add a test"}),
        )
        .await
        .ok();
    assert_eq!(sent["action"], "send");
    assert_eq!(id(&sent["session_id"]), done.session_id, "{sent}");
    assert_eq!(id(&sent["attempt_id"]), done.attempt_id, "{sent}");
    assert_eq!(sent["pending_ingest"], false, "{sent}");
    let pid = id(&sent["execution_process_id"]);
    let truth = sim.truth();
    assert_eq!(
        truth.processes[&pid]["session_id"],
        json!(done.session_id.to_string())
    );
    assert_eq!(sim.counters().follow_ups, 1);
    // The prompt's process (or, the agent being quick, its cleanup after it) is the
    // attempt's latest, on the session named.
    let st = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_id": done.attempt_id, "detail": 2}),
        )
        .await
        .ok();
    assert_eq!(id(&st["latest_session_id"]), done.session_id, "{st}");
    let latest = id(&st["latest_execution_process_id"]);
    let started = |p: Uuid| {
        truth.processes[&p]["started_at"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        latest == pid
            || sim.truth().processes[&latest]["started_at"]
                .as_str()
                .unwrap()
                >= started(pid).as_str(),
        "{st}"
    );

    // queue by attempt id: lands on the attempt's session in VK.
    let q = mcp
        .call(
            "follow_up",
            json!({"action": "queue", "attempt_id": live.attempt_id, "prompt": "then tidy up"}),
        )
        .await
        .ok();
    assert_eq!(q["action"], "queue");
    assert_eq!(q["queue_status"], "queued", "{q}");
    assert_eq!(id(&q["session_id"]), live.session_id, "{q}");
    assert_eq!(id(&q["attempt_id"]), live.attempt_id, "{q}");
    assert!(q["execution_process_id"].is_null(), "{q}");
    let url = format!("{}/api/sessions/{}/queue", sim.base_url(), live.session_id);
    let held: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    assert_eq!(held["data"]["status"], "queued", "{held}");
    assert_eq!(
        held["data"]["message"]["data"]["message"], "then tidy up",
        "{held}"
    );
    assert_eq!(sim.counters().queue_posts, 1);
    daemon.shutdown().await;
}
