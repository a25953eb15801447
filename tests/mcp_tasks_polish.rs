//! Attempts as MCP tasks, as a tasks-extension client meets them (issue 39): a new attempt's
//! task names the attempt's first execution process; `lastUpdatedAt` is never before
//! `createdAt`; `tasks/cancel` answers as soon as the stop is asked of VK (a simulator whose
//! stop takes seconds, as VK's does) and the task turns `cancelled` once VK confirms, while a
//! task that already ended refuses it; status messages name `tasks/update` and `tasks/cancel`;
//! a denied approval lets the run go on, and the task completes.

mod mcp_tasks_support;
mod support;

use std::time::Duration;

use chrono::{DateTime, FixedOffset};
use mcp_tasks_support::{
    Client, answer_of, cached_task, get, respond, result_status, send_args, start_args, started,
    tasks_client, the_approval, until,
};
use rmcp::model::{CancelTaskParams, DetailedTask, TaskPayload, TaskStatus};
use serde_json::json;
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::{Sim, SimApprovalStatus, SimConfig};

fn at(s: &str) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The task's `lastUpdatedAt` is not before its `createdAt`.
fn updated_after_created(t: &DetailedTask) {
    assert!(
        at(&t.task.last_updated_at) >= at(&t.task.created_at),
        "lastUpdatedAt {} before createdAt {}",
        t.task.last_updated_at,
        t.task.created_at
    );
}

fn message(t: &DetailedTask) -> &str {
    t.task.status_message.as_deref().unwrap_or_default()
}

/// The attempt's first execution process as VK has it (the earliest it started).
fn first_process_in_vk(sim: &Sim, attempt: Uuid) -> Uuid {
    let truth = sim.truth();
    let of_attempt = |p: &serde_json::Value| {
        let session = p["session_id"].as_str().and_then(|s| s.parse().ok());
        session
            .and_then(|s: Uuid| truth.sessions.get(&s))
            .is_some_and(|s| s["workspace_id"] == json!(attempt))
    };
    let (id, _) = truth
        .processes
        .iter()
        .filter(|(_, p)| of_attempt(p))
        .min_by_key(|(_, p)| at(p["created_at"].as_str().unwrap()))
        .expect("VK started a process for the attempt");
    *id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_attempts_task_names_its_first_process_and_is_never_updated_before_created() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "First process").await;
    let c = tasks_client(&daemon, true).await;
    let handle = started(&c, start_args(task, repo)).await;
    let answer = answer_of(&handle);
    let attempt: Uuid = answer["attempt_id"].as_str().unwrap().parse().unwrap();
    let named: Uuid = answer["execution_process_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the handle names no process: {answer}"))
        .parse()
        .unwrap();
    assert_eq!(named, first_process_in_vk(&sim, attempt), "{answer}");
    assert!(
        at(&handle.task.last_updated_at) >= at(&handle.task.created_at),
        "{handle:?}"
    );
    let done = until(&c, &handle.task.task_id, TaskStatus::Completed).await;
    updated_after_created(&done);

    // A follow-up on the finished attempt: the attempt was last active before the task existed.
    let follow = started(&c, send_args(&attempt.to_string(), "and once more")).await;
    assert!(
        at(&follow.task.last_updated_at) >= at(&follow.task.created_at),
        "{follow:?}"
    );
    updated_after_created(&get(&c, &follow.task.task_id).await);
    let done = until(&c, &follow.task.task_id, TaskStatus::Completed).await;
    updated_after_created(&done);
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

/// A simulator whose stop routes take `stop_delay` before they kill and answer, as VK's do.
async fn slow_to_stop_sim(stop_delay: Duration) -> Sim {
    Sim::start(SimConfig {
        keepalive: Duration::from_millis(500),
        ws_ping: Duration::from_millis(500),
        step_delay: Duration::from_millis(5),
        stop_delay,
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts")
}

/// The status of the attempt's coding-agent process in VK.
fn agent_status_in_vk(sim: &Sim) -> String {
    let truth = sim.truth();
    let agent = truth
        .processes
        .values()
        .find(|p| p["run_reason"] == "codingagent")
        .expect("VK started the agent");
    agent["status"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_answers_before_vk_has_stopped_the_run_then_the_task_turns_cancelled() {
    let sim = slow_to_stop_sim(Duration::from_secs(3)).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "ASK, then cancel a slow stop").await;
    let c = tasks_client(&daemon, true).await;
    let id = started(&c, start_args(task, repo)).await.task.task_id;
    until(&c, &id, TaskStatus::InputRequired).await;
    c.peer()
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect("tasks/cancel");
    // Answered while VK is still stopping: its agent still runs, the task is not cancelled yet.
    assert_eq!(
        agent_status_in_vk(&sim),
        "running",
        "VK's stop already ended"
    );
    let stopping = get(&c, &id).await;
    assert!(!stopping.status().is_terminal(), "{stopping:?}");
    assert!(
        message(&stopping).contains("tasks/cancel") && message(&stopping).contains("VK"),
        "{stopping:?}"
    );
    updated_after_created(&stopping);
    let cancelled = until(&c, &id, TaskStatus::Cancelled).await;
    assert!(matches!(cancelled.payload, TaskPayload::Cancelled));
    assert_eq!(agent_status_in_vk(&sim), "killed");
    // A task that ended has no run to cancel.
    let again = c
        .peer()
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect_err("an ended task cannot be cancelled");
    assert!(
        again.to_string().contains("-32602") || again.to_string().contains("already ended"),
        "{again}"
    );
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

/// Answers the task's one approval with `response`; the status message named `tasks/update`.
async fn answer_the_approval(c: &Client, id: &str, response: serde_json::Value) {
    let asking = until(c, id, TaskStatus::InputRequired).await;
    let (key, _) = the_approval(&asking);
    let said = message(&asking);
    assert!(
        said.contains("tasks/update") && said.contains("tasks/cancel"),
        "{said}"
    );
    assert!(!said.contains("respond_approval"), "{said}");
    c.peer()
        .update_task(respond(id, &key, response))
        .await
        .expect("tasks/update");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_approval_lets_the_run_go_on_and_the_task_completes() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let c = tasks_client(&daemon, true).await;
    let deny = json!({"action": "accept", "content": {"decision": "deny", "reason": "not now"}});
    let decline = json!({"action": "decline"});
    for (title, response) in [("ASK, denied", deny), ("ASK, declined", decline)] {
        let (task, repo) = cached_task(&sim, &mcp, title).await;
        let handle = started(&c, start_args(task, repo)).await;
        let id = handle.task.task_id.clone();
        let first = handle.task.status_message.as_deref().unwrap_or_default();
        assert!(first.contains("tasks/cancel"), "{handle:?}");
        answer_the_approval(&c, &id, response).await;
        let done = until(&c, &id, TaskStatus::Completed).await;
        let s = result_status(&done);
        assert_eq!(s["result"]["outcome"], "success", "{title}: {s}");
        assert_eq!(message(&done), s["result"]["summary"].as_str().unwrap());
    }
    let mut reasons: Vec<Option<String>> = sim
        .approvals()
        .into_iter()
        .map(|(_, _, s)| match s {
            SimApprovalStatus::Denied { reason } => reason,
            other => panic!("VK recorded {other:?}, not a denial"),
        })
        .collect();
    reasons.sort();
    assert_eq!(reasons, [None, Some("not now".to_string())]);
    let _ = c.cancel().await;
    daemon.shutdown().await;
}
