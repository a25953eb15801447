//! `get_attempt_status` through a real MCP client against the simulator: the single shape
//! (seed 002: the status fields at the top level, no `attempts`) and the batch shape
//! (`attempts`), and seed 003's `result` (outcome, finalized_at, exit_code, last_error,
//! recommended_next_action, next_tool) for completed, failed, killed and running attempts.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use support::world::files;
use vk_observer::sim::{AgentOutcome, AttemptScript, Channel, ProcessStatus, RunReason};

const STATUS_FIELDS: [&str; 9] = [
    "attempt_id",
    "state",
    "latest_session_id",
    "latest_execution_process_id",
    "last_activity_at",
    "failure_summary",
    "result",
    "token",
    "freshness",
];

async fn status(mcp: &Mcp, attempt: uuid::Uuid) -> Value {
    mcp.call("get_attempt_status", json!({ "attempt_id": attempt }))
        .await
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_status_is_top_level_and_batch_keeps_attempts() {
    let sim = support::sim().await;
    let project = sim.add_project("Shapes", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let done = sim
        .run_attempt_script(
            sim.add_task(project, "Done", None),
            AttemptScript::default(),
        )
        .await;
    let other = sim
        .run_attempt_script(
            sim.add_task(project, "Other", None),
            AttemptScript::default(),
        )
        .await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "shapes").await;
    let mcp = Mcp::connect(daemon.addr).await;

    let one = status(&mcp, done.attempt_id).await;
    for f in STATUS_FIELDS {
        assert!(one.get(f).is_some(), "single status lacks {f}: {one}");
    }
    assert!(
        one.get("attempts").is_none(),
        "a single call is not a batch: {one}"
    );
    assert_eq!(one["attempt_id"], json!(done.attempt_id.to_string()));
    assert_eq!(one["state"], "completed");
    assert_eq!(one["unchanged"], 0);
    // The run changed no file: nothing to review, close the task.
    assert_eq!(
        one["result"]["recommended_next_action"], "mark_done",
        "{one}"
    );
    assert_eq!(one["result"]["next_tool"], "update_task");
    assert_eq!(one["result"]["exit_code"], 0);

    // Unchanged since the token: the page facts only, no status fields.
    let quiet = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_id": done.attempt_id, "since_token": one["token"]}),
        )
        .await
        .ok();
    assert_eq!(quiet["unchanged"], 1, "{quiet}");
    assert!(quiet.get("state").is_none() && quiet.get("attempts").is_none());

    let batch = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_ids": [done.attempt_id, other.attempt_id]}),
        )
        .await
        .ok();
    let attempts = batch["attempts"].as_array().expect("a batch has attempts");
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["attempt_id"], one["attempt_id"]);
    assert_eq!(
        attempts[0]["result"], one["result"],
        "same status either way"
    );
    assert!(
        batch.get("state").is_none(),
        "a batch has no top-level status"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_routes_completed_failed_killed_and_running_attempts() {
    let sim = support::sim().await;
    let project = sim.add_project("Routes", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let changed = sim
        .run_attempt_script(
            sim.add_task(project, "Changed files", None),
            AttemptScript {
                files: files("demo", 2, 3),
                ..AttemptScript::default()
            },
        )
        .await;
    let failed = sim
        .run_attempt_script(
            sim.add_task(project, "Fails", None),
            AttemptScript {
                agent: AgentOutcome::Fail,
                ..AttemptScript::default()
            },
        )
        .await;
    let killed = sim
        .run_attempt_script(
            sim.add_task(project, "Killed", None),
            AttemptScript {
                agent: AgentOutcome::Killed,
                ..AttemptScript::default()
            },
        )
        .await;
    // A failed setup script whose only error is on stderr (no normalized error entry).
    let setup = sim.create_attempt(sim.add_task(project, "Setup fails", None), "CLAUDE_CODE");
    let setup_pid = sim.start_process(setup.session_id, RunReason::SetupScript);
    sim.append_log(
        setup_pid,
        Channel::Raw,
        json!({"type": "STDERR", "content": "npm ERR! missing script: setup\n\n"}),
    );
    sim.finish_process(setup_pid, ProcessStatus::Failed, Some(127));
    let running = sim.create_attempt(sim.add_task(project, "Runs", None), "CLAUDE_CODE");
    sim.start_process(running.session_id, RunReason::CodingAgent);
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "routes").await;
    let mcp = Mcp::connect(daemon.addr).await;

    let r = status(&mcp, changed.attempt_id).await["result"].clone();
    assert_eq!(r["outcome"], "succeeded");
    assert_eq!(r["recommended_next_action"], "review_changes");
    assert_eq!(r["next_tool"], "get_attempt_changes");
    assert!(r["finalized_at"].is_string(), "{r}");
    assert_eq!(r["last_error"], Value::Null);

    let r = status(&mcp, failed.attempt_id).await["result"].clone();
    assert_eq!(r["outcome"], "failed");
    assert_eq!(r["recommended_next_action"], "follow_up");
    assert_eq!(r["next_tool"], "follow_up");
    assert_eq!(r["exit_code"], 1);
    assert_eq!(r["last_error"], "simulated failure", "the last error entry");
    assert!(r["finalized_at"].is_string());

    let r = status(&mcp, killed.attempt_id).await["result"].clone();
    assert_eq!(r["outcome"], "killed");
    assert_eq!(r["recommended_next_action"], "follow_up", "{r}");
    assert_eq!(r["exit_code"], Value::Null);
    assert!(r["finalized_at"].is_string());

    let r = status(&mcp, setup.attempt_id).await["result"].clone();
    assert_eq!(r["outcome"], "failed");
    assert_eq!(r["recommended_next_action"], "retry");
    assert_eq!(r["next_tool"], "start_task_attempt");
    assert_eq!(r["exit_code"], 127);
    assert_eq!(
        r["last_error"], "npm ERR! missing script: setup",
        "the last stderr line"
    );

    let st = status(&mcp, running.attempt_id).await;
    let r = &st["result"];
    assert_eq!(st["state"], "running");
    assert_eq!(r["outcome"], "in_progress");
    assert_eq!(r["recommended_next_action"], Value::Null);
    assert_eq!(r["next_tool"], "wait_for_attempt_change");
    assert_eq!(r["finalized_at"], Value::Null);
    assert_eq!(r["exit_code"], Value::Null);
    daemon.shutdown().await;
}
