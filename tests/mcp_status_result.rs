//! `get_attempt_status` through a real MCP client against the simulator: the single shape
//! (seed 002: the status fields at the top level, no `attempts`) and the batch shape
//! (`attempts`), and seed 003's `result` (outcome, state, summary, finalized_at, exit_code,
//! last_error_code, last_error, recommended_next_action, next_tool) for completed, failed,
//! stopped and running attempts; at detail 0, each `last_error_code` VK's data can tell apart,
//! from runs the simulator records as VK would (docs/vk-contract.md §11).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use support::world::files;
use vk_observer_sim::{AgentOutcome, AttemptScript, Channel, ProcessStatus, RunReason};

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
async fn result_routes_completed_failed_stopped_and_running_attempts() {
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
    assert_eq!(r["outcome"], "success");
    assert_eq!(r["state"], "succeeded");
    assert_eq!(r["last_error_code"], Value::Null);
    assert_eq!(r["reason"], r["summary"], "the deprecated alias repeats it");
    assert_eq!(r["recommended_next_action"], "review_changes");
    assert_eq!(r["next_tool"], "get_attempt_changes");
    assert!(r["finalized_at"].is_string(), "{r}");
    assert_eq!(r["last_error"], Value::Null);

    let r = status(&mcp, failed.attempt_id).await["result"].clone();
    assert_eq!(r["outcome"], "failure");
    assert_eq!(r["state"], "failed");
    assert_eq!(r["last_error_code"], "agent_exit_nonzero");
    assert_eq!(r["recommended_next_action"], "follow_up");
    assert_eq!(r["next_tool"], "follow_up");
    assert_eq!(r["exit_code"], 1);
    assert_eq!(r["last_error"], "simulated failure", "the last error entry");
    assert!(r["finalized_at"].is_string());

    let r = status(&mcp, killed.attempt_id).await["result"].clone();
    assert_eq!(r["outcome"], "cancelled");
    assert_eq!(r["state"], "killed");
    assert_eq!(r["last_error_code"], "stopped");
    assert_eq!(r["recommended_next_action"], "follow_up", "{r}");
    assert_eq!(r["exit_code"], Value::Null);
    assert!(r["finalized_at"].is_string());

    let r = status(&mcp, setup.attempt_id).await["result"].clone();
    assert_eq!(r["outcome"], "failure");
    assert_eq!(r["last_error_code"], "setup_script_failed");
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
    assert_eq!(r["outcome"], "unknown");
    assert_eq!(r["state"], "in_progress");
    assert_eq!(r["last_error_code"], Value::Null);
    assert_eq!(r["recommended_next_action"], Value::Null);
    assert_eq!(r["next_tool"], "wait_for_attempt_change");
    assert_eq!(r["finalized_at"], Value::Null);
    assert_eq!(r["exit_code"], Value::Null);
    daemon.shutdown().await;
}

/// A normalized `error_message` entry of the given `error_type`, as VK writes it.
fn error_entry(kind: &str, text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
           "entry_type": {"type": "error_message", "error_type": {"type": kind}}, "content": text}})
}

/// An attempt whose one process (`reason`) wrote these logs and ended so.
fn ended(
    sim: &vk_observer_sim::Sim,
    project: uuid::Uuid,
    title: &str,
    reason: RunReason,
    logs: &[(Channel, Value)],
    end: (ProcessStatus, Option<i64>),
) -> uuid::Uuid {
    let a = sim.create_attempt(sim.add_task(project, title, None), "CLAUDE_CODE");
    let pid = sim.start_process(a.session_id, reason);
    for (ch, entry) in logs {
        sim.append_log(pid, *ch, entry.clone());
    }
    sim.finish_process(pid, end.0, end.1);
    a.attempt_id
}

/// At the default detail (0): the status answers `result.outcome`, `summary`, `finalized_at`,
/// `exit_code`, `last_error_code` and `latest_execution_process_id` (what the next call is
/// decided on), never the finer `state` or the deprecated `reason`.
async fn status0(mcp: &Mcp, attempt: uuid::Uuid) -> Value {
    let s = mcp
        .call_as_is("get_attempt_status", json!({ "attempt_id": attempt }))
        .await
        .ok();
    let r = &s["result"];
    assert!(r["summary"].as_str().is_some_and(|t| t.len() > 20), "{s}");
    assert!(r["finalized_at"].is_string(), "{s}");
    assert!(s["latest_execution_process_id"].is_string(), "{s}");
    assert!(r.get("state").is_none() && r.get("reason").is_none(), "{s}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_error_codes_tell_apart_what_vk_records() {
    use ProcessStatus::{Completed, Failed};
    use RunReason::{CleanupScript, CodingAgent, SetupScript};
    let sim = support::sim().await;
    let project = sim.add_project("Codes", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let raw = |t: &str| (Channel::Raw, json!({"type": "STDERR", "content": t}));
    let norm = |kind: &str, t: &str| (Channel::Normalized, error_entry(kind, t));
    let ok = sim
        .run_attempt_script(
            sim.add_task(project, "Works", None),
            AttemptScript::default(),
        )
        .await;
    let fails = sim
        .run_attempt_script(
            sim.add_task(project, "Exits 1", None),
            AttemptScript {
                agent: AgentOutcome::Fail,
                ..AttemptScript::default()
            },
        )
        .await;
    let stderr = [raw("npm ERR! missing script: setup\n")];
    let setup = ended(
        &sim,
        project,
        "Setup",
        SetupScript,
        &stderr,
        (Failed, Some(1)),
    );
    let missing = [
        raw("Failed to start execution: Executable `claude` not found in PATH"),
        norm(
            "setup_required",
            "The required executable `claude` is not installed.",
        ),
    ];
    let not_found = ended(
        &sim,
        project,
        "No claude",
        CodingAgent,
        &missing,
        (Failed, None),
    );
    let login = [norm("setup_required", "Log in to Codex first.")];
    let login = ended(
        &sim,
        project,
        "Login",
        CodingAgent,
        &login,
        (Failed, Some(1)),
    );
    let spawn = [raw(
        "Failed to start execution: Permission denied (os error 13)",
    )];
    let spawn = ended(&sim, project, "Spawn", CodingAgent, &spawn, (Failed, None));
    // Only a stderr chunk (VK writes it as an `other` error): VK restarted under the run.
    let chunk = [norm("other", "working...")];
    let restart = ended(
        &sim,
        project,
        "Restart",
        CodingAgent,
        &chunk,
        (Failed, None),
    );
    let signal = ended(
        &sim,
        project,
        "Signal",
        CodingAgent,
        &chunk,
        (Failed, Some(-1)),
    );
    let clean = sim.create_attempt(sim.add_task(project, "Cleanup", None), "CLAUDE_CODE");
    let agent = sim.start_process(clean.session_id, CodingAgent);
    sim.finish_process(agent, Completed, Some(0));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cleanup = sim.start_process(clean.session_id, CleanupScript);
    sim.finish_process(cleanup, Failed, Some(2));
    let running = sim.create_attempt(sim.add_task(project, "Runs", None), "CLAUDE_CODE");
    sim.start_process(running.session_id, CodingAgent);
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "codes").await;
    let mcp = Mcp::connect(daemon.addr).await;

    // Success: no code, exit 0.
    let s = status0(&mcp, ok.attempt_id).await;
    assert_eq!(s["result"]["outcome"], "success");
    assert_eq!(s["result"]["exit_code"], 0);
    assert!(s["result"].get("last_error_code").is_none(), "{s}");

    // A running attempt at detail 0: no `result` (it says "wait"); the process id is there,
    // as seed 002's "attempt is running" scenario reads it.
    let s = mcp
        .call_as_is(
            "get_attempt_status",
            json!({"attempt_id": running.attempt_id}),
        )
        .await
        .ok();
    assert_eq!(s["state"], "running");
    assert!(s.get("result").is_none() && s["latest_execution_process_id"].is_string());

    // Each failure: (attempt, code, exit code, next_tool).
    let cases = [
        (
            fails.attempt_id,
            "agent_exit_nonzero",
            json!(1),
            "follow_up",
        ),
        (setup, "setup_script_failed", json!(1), "start_task_attempt"),
        (not_found, "executor_not_found", Value::Null, "update_task"),
        (login, "setup_required", json!(1), "update_task"),
        (spawn, "start_failed", Value::Null, "follow_up"),
        (restart, "vk_restarted", Value::Null, "follow_up"),
        (signal, "agent_killed_by_signal", json!(-1), "follow_up"),
        (
            clean.attempt_id,
            "cleanup_script_failed",
            json!(2),
            "follow_up",
        ),
    ];
    for (attempt, code, exit, next) in cases {
        let s = status0(&mcp, attempt).await;
        let r = &s["result"];
        assert_eq!(s["state"], "failed", "{code}: {s}");
        assert_eq!(r["outcome"], "failure", "{code}: {s}");
        assert_eq!(r["last_error_code"], code, "{s}");
        assert_eq!(
            r.get("exit_code").cloned().unwrap_or(Value::Null),
            exit,
            "{code}: {s}"
        );
        assert_eq!(r["next_tool"], next, "{code}: {s}");
    }
    let s = status0(&mcp, not_found).await;
    assert_eq!(
        s["result"]["last_error"], "The required executable `claude` is not installed.",
        "{s}"
    );

    // Stopped through the MCP tool: `cancelled`, code `stopped`, no exit code.
    mcp.call("stop_attempt", json!({"attempt_id": running.attempt_id}))
        .await
        .ok();
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "stopped").await;
    let s = status0(&mcp, running.attempt_id).await;
    assert_eq!(s["result"]["outcome"], "cancelled", "{s}");
    assert_eq!(s["result"]["last_error_code"], "stopped");
    assert!(s["result"].get("exit_code").is_none(), "{s}");
    assert_eq!(s["result"]["next_tool"], "follow_up");
    daemon.shutdown().await;
}
