//! Tool approvals through a real MCP client against the simulator (which models VK's fork:
//! the `pending_approval` replace, the bare-status respond route, approve / deny / timeout):
//! a blocked attempt shows its approval in `get_attempt_status` and `list_approvals` (per
//! attempts and per project), a parked `wait_for_attempt_change` wakes when it appears, is
//! answered or times out, approve lets the agent finish, deny and timeout end as VK ends them,
//! answering twice is a stable error and a `request_id` retry replays the first answer. The
//! simulator's own route is checked against VK's recorded answers first. `watch` and a daemon
//! restart with an approval pending are in `mcp_approvals_watch.rs`.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::approvals::{COMMAND, asking, list, start_asking, status_until, without_clock};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::{Sim, SimApprovalStatus};

/// A token after which the attempt stayed unchanged for 300 ms.
async fn quiet_token(mcp: &Mcp, attempt: Uuid) -> Value {
    for _ in 0..60 {
        let t = status(mcp, attempt).await["token"].clone();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = mcp
            .call(
                "get_attempt_status",
                json!({"attempt_ids": [attempt], "since_token": t}),
            )
            .await
            .ok();
        if r["attempts"].as_array().unwrap().is_empty() {
            return t;
        }
    }
    panic!("the attempt never went quiet");
}

async fn status(mcp: &Mcp, attempt: Uuid) -> Value {
    mcp.call("get_attempt_status", json!({"attempt_id": attempt}))
        .await
        .ok()
}

/// A parked wait on `attempt` from `since`, answered in the returned task.
fn park(mcp: Mcp, attempt: Uuid, since: Value) -> tokio::task::JoinHandle<(Value, Instant)> {
    tokio::spawn(async move {
        let args = json!({"attempt_ids": [attempt], "since_token": since, "timeout_ms": 15000});
        let r = mcp.call("wait_for_attempt_change", args).await.ok();
        (r, Instant::now())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_like_vk() {
    let sim = support::sim().await;
    let project = sim.add_project("Sim approvals", &["demo"]);
    let b = start_asking(
        &sim,
        project,
        "Ask",
        asking(Duration::from_secs(3600), Duration::ZERO),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let id = loop {
        if let Some((id, _, _)) = sim.approvals().first() {
            break *id;
        }
        assert!(Instant::now() < deadline, "no approval asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let http = reqwest::Client::new();
    let url = |id: &str| format!("{}/api/approvals/{id}/respond", sim.base_url());
    let post = |u: String, body: Value| {
        let http = http.clone();
        async move {
            let r = http.post(u).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let approve = json!({"execution_process_id": b.process, "status": {"status": "approved"}});
    let failed = json!({"success": false, "data": null, "error_data": null,
                        "message": "Failed to respond to approval"});
    let (code, body) = post(url("not-a-uuid"), approve.clone()).await;
    assert_eq!(
        (code, serde_json::from_str::<Value>(&body).unwrap()),
        (500, failed)
    );
    let (code, _) = post(url(&Uuid::new_v4().to_string()), approve.clone()).await;
    assert_eq!(code, 500);
    let other = json!({"execution_process_id": Uuid::new_v4(), "status": {"status": "approved"}});
    assert_eq!(post(url(&id.to_string()), other).await.0, 500);
    let flat = json!({"execution_process_id": b.process, "status": "approved"});
    assert_eq!(post(url(&id.to_string()), flat).await.0, 422);
    let deny = json!({"execution_process_id": b.process,
                      "status": {"status": "denied", "reason": "no"}});
    let (code, body) = post(url(&id.to_string()), deny).await;
    assert_eq!(
        (code, serde_json::from_str::<Value>(&body).unwrap()),
        (200, json!({"status": "denied", "reason": "no"}))
    );
    // Idempotent: the recorded status, nothing changes.
    let (code, body) = post(url(&id.to_string()), approve).await;
    assert_eq!(
        (code, serde_json::from_str::<Value>(&body).unwrap()),
        (200, json!({"status": "denied", "reason": "no"}))
    );
    assert_eq!(
        sim.approvals()[0].2,
        SimApprovalStatus::Denied {
            reason: Some("no".into())
        }
    );
    b.run.await.unwrap();
    let raw = &sim.truth().raw_logs[&b.process];
    let lines: Vec<_> = raw
        .iter()
        .filter(|e| {
            e["content"]
                .as_str()
                .is_some_and(|c| c.contains("approval_response"))
        })
        .collect();
    assert_eq!(lines.len(), 1, "one approval_response line: {lines:?}");
}

/// The status and both list scopes show the one pending approval of `attempt`; its ids.
async fn shows_it_blocked(sim: &Sim, mcp: &Mcp, attempt: Uuid, project: Uuid) -> (Uuid, Uuid) {
    let s = status_until(mcp, attempt, "blocked", |s| s["waiting_for"] == "approval").await;
    assert_eq!(s["state"], "running");
    let pending = &s["pending_approvals"];
    assert_eq!(pending.as_array().unwrap().len(), 1, "{s}");
    let (sim_id, sim_pid, _) = sim.approvals()[0].clone();
    assert_eq!(pending[0]["approval_id"], sim_id.to_string());
    assert_eq!(pending[0]["execution_process_id"], sim_pid.to_string());
    assert_eq!(pending[0]["tool_name"], "Bash");
    assert_eq!(pending[0]["summary"], COMMAND);
    assert!(pending[0]["timeout_at"].is_string() && pending[0]["requested_at"].is_string());
    assert_eq!(s["result"]["recommended_next_action"], "respond_approval");
    assert_eq!(s["result"]["next_tool"], "respond_approval");
    // At the default detail the running attempt's `result` shows too: it routes somewhere.
    let cheap = mcp
        .call_as_is("get_attempt_status", json!({"attempt_id": attempt}))
        .await
        .ok();
    assert_eq!(cheap["result"]["next_tool"], "respond_approval", "{cheap}");
    // The clock an orchestrator decides on shows at detail 0: waited a little, VK waits 1 h.
    let clock = &cheap["pending_approvals"][0];
    assert!(clock["age_ms"].as_u64().unwrap() < 60_000, "{cheap}");
    let left = clock["expires_in_ms"].as_u64().unwrap();
    assert!((3_500_000..=3_600_000).contains(&left), "{cheap}");
    // The batch shape carries it too.
    let batch = mcp
        .call("get_attempt_status", json!({"attempt_ids": [attempt]}))
        .await
        .ok();
    assert_eq!(
        without_clock(batch["attempts"][0]["pending_approvals"].clone()),
        without_clock(pending.clone())
    );

    let by_attempt = list(mcp, json!({"attempt_ids": [attempt]})).await;
    let by_project = list(mcp, json!({"project_id": project})).await;
    assert_eq!(
        without_clock(json!(by_attempt)),
        without_clock(json!(by_project))
    );
    assert_eq!(by_attempt.len(), 1);
    assert_eq!(by_attempt[0]["status"], "pending");
    assert_eq!(by_attempt[0]["agent_waiting"], true);
    assert_eq!(by_attempt[0]["attempt_id"], attempt.to_string());
    let cheap = mcp
        .call_as_is("list_approvals", json!({"attempt_ids": [attempt]}))
        .await
        .ok();
    let item = &cheap["approvals"][0];
    assert!(item["age_ms"].as_u64().unwrap() < 60_000, "{cheap}");
    let left = item["expires_in_ms"].as_u64().unwrap();
    assert!((3_500_000..=3_600_000).contains(&left), "{cheap}");

    (sim_id, sim_pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_unblocks_the_agent_and_the_attempt_completes() {
    let sim = support::sim().await;
    let project = sim.add_project("Approvals", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let script = asking(Duration::from_secs(3600), Duration::from_millis(2500));
    let b = start_asking(&sim, project, "Build it", script).await;
    status_until(&mcp, b.attempt, "running", |s| s["state"] == "running").await;

    // A wait parked before the approval is asked wakes when it appears.
    let since = quiet_token(&mcp, b.attempt).await;
    let (woke, _) = park(Mcp::connect(daemon.addr).await, b.attempt, since)
        .await
        .unwrap();
    assert_eq!(woke["changed"], true, "{woke}");
    assert_eq!(
        woke["attempts"][0]["waiting_for"], "approval",
        "woken by the ask: {woke}"
    );
    let (sim_id, sim_pid) = shows_it_blocked(&sim, &mcp, b.attempt, project).await;

    // The answer wakes a parked wait, and the agent goes on.
    let since = quiet_token(&mcp, b.attempt).await;
    let waiter = park(Mcp::connect(daemon.addr).await, b.attempt, since);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let request_id = Uuid::new_v4().to_string();
    let args = json!({"approval_id": sim_id, "decision": "approve", "request_id": request_id});
    let answered = mcp.call("respond_approval", args.clone()).await.ok();
    // VK moves the task back to `inprogress` and rewrites the entry over different streams, so
    // the task's change may wake the wait first, the approval still pending: wait again from
    // that answer's token.
    let (mut woke, _) = waiter.await.unwrap();
    let mut wakes = 0;
    while woke["changed"] == true && !woke["attempts"][0]["waiting_for"].is_null() {
        wakes += 1;
        assert!(wakes < 5, "never woken by the answer: {woke}");
        let since = woke["token"].clone();
        woke = park(Mcp::connect(daemon.addr).await, b.attempt, since)
            .await
            .unwrap()
            .0;
    }
    assert_eq!(woke["changed"], true, "{woke}");
    assert_eq!(
        woke["attempts"][0]["waiting_for"],
        Value::Null,
        "woken by the answer: {woke}"
    );
    assert_eq!(answered["status"], "approved", "{answered}");
    assert_eq!(answered["replayed"], false);
    assert_eq!(answered["pending_ingest"], false);
    assert_eq!(answered["tool_name"], "Bash");
    assert_ne!(answered["attempt_status"]["waiting_for"], "approval");

    // A retry with the same request_id replays; answering again without one is refused.
    let replay = mcp.call("respond_approval", args).await.ok();
    assert_eq!(
        (replay["replayed"].clone(), replay["status"].clone()),
        (json!(true), json!("approved"))
    );
    let again = mcp
        .call(
            "respond_approval",
            json!({"approval_id": sim_id, "decision": "deny"}),
        )
        .await
        .err();
    assert_eq!(again["code"], "approval_already_answered", "{again}");
    assert_eq!(again["details"]["status"], "approved");
    let vk_calls = sim.counters().by_route["POST /api/approvals/{id}/respond"];
    assert_eq!(vk_calls, 1, "replay and refusal never reach VK");

    b.run.await.unwrap();
    let done = status_until(&mcp, b.attempt, "completed", |s| s["state"] == "completed").await;
    assert!(done["pending_approvals"].as_array().unwrap().is_empty());
    assert_eq!(done["waiting_for"], Value::Null);
    let approved = list(&mcp, json!({"project_id": project, "status": "approved"})).await;
    assert_eq!(approved.len(), 1);
    assert!(list(&mcp, json!({"project_id": project})).await.is_empty());
    // The project's activity feed tells the ask and the answer, once each, in that order.
    let feed = mcp
        .call(
            "tail_project_activity",
            json!({"project_id": project, "limit": 200}),
        )
        .await
        .ok();
    assert_eq!(feed["order"], "newest_first");
    let approval_items: Vec<&Value> = feed["items"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .filter(|i| i["kind"].as_str().unwrap().starts_with("approval_"))
        .collect();
    assert_eq!(approval_items.len(), 2, "{feed}");
    assert_eq!(approval_items[0]["kind"], "approval_requested");
    assert_eq!(approval_items[0]["tool"], "Bash");
    assert_eq!(approval_items[1]["kind"], "approval_answered");
    assert_eq!(approval_items[1]["status"], "approved");
    assert_eq!(
        approval_items[0]["approval_id"],
        approval_items[1]["approval_id"]
    );
    assert_eq!(
        approval_items[0]["approval_id"],
        json!(approved[0]["approval_id"])
    );
    let entry = sim.truth().normalized_logs[&sim_pid]
        .iter()
        .find(|e| e.pointer("/content/content") == Some(&json!(COMMAND)))
        .cloned()
        .unwrap();
    assert_eq!(
        entry.pointer("/content/entry_type/status/status"),
        Some(&json!("success"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_and_timeout_end_as_vk_ends_them() {
    let sim = support::sim().await;
    let project = sim.add_project("Refusals", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;

    deny_with_a_reason(&sim, &mcp, project).await;
    let timed_out_id = time_out(&sim, &mcp, &daemon, project).await;
    let timed = list(&mcp, json!({"project_id": project, "status": "timed_out"})).await;
    assert_eq!(timed.len(), 1);
    assert_eq!(timed[0]["approval_id"], timed_out_id);
    // Answered (here timed out): VK no longer times it out, so no expiry; its age still shows.
    assert!(timed[0].get("expires_in_ms").is_none(), "{:?}", timed[0]);
    assert!(
        timed[0]["age_ms"].as_u64().unwrap() >= 2_000,
        "{:?}",
        timed[0]
    );
    let answered = list(
        &mcp,
        json!({"project_id": project, "status": "answered", "limit": 1}),
    )
    .await;
    assert_eq!(answered.len(), 1, "paged by limit");

    // Unknown ids.
    let unknown = mcp
        .call(
            "respond_approval",
            json!({"approval_id": Uuid::new_v4(), "decision": "approve"}),
        )
        .await
        .code();
    assert_eq!(unknown, "unknown_approval");
}

/// Deny with a reason: the entry is denied, the agent is told and finishes.
async fn deny_with_a_reason(sim: &Sim, mcp: &Mcp, project: Uuid) {
    let d = start_asking(
        sim,
        project,
        "Deny me",
        asking(Duration::from_secs(3600), Duration::ZERO),
    )
    .await;
    let s = status_until(mcp, d.attempt, "blocked", |s| {
        s["waiting_for"] == "approval"
    })
    .await;
    let id = s["pending_approvals"][0]["approval_id"].clone();
    let denied = mcp
        .call(
            "respond_approval",
            json!({"approval_id": id, "decision": "deny", "reason": "no network access here"}),
        )
        .await
        .ok();
    assert_eq!(
        (denied["status"].clone(), denied["reason"].clone()),
        (json!("denied"), json!("no network access here"))
    );
    d.run.await.unwrap();
    status_until(mcp, d.attempt, "completed", |s| s["state"] == "completed").await;
    let feedback = sim.truth().normalized_logs[&d.process].iter().any(|e| {
        e.pointer("/content/entry_type/type") == Some(&json!("user_feedback"))
            && e.pointer("/content/content") == Some(&json!("no network access here"))
    });
    assert!(feedback, "a user_feedback entry with the reason");
    let listed = list(mcp, json!({"attempt_ids": [d.attempt], "status": "denied"})).await;
    assert_eq!(listed[0]["reason"], "no network access here");
    let twice = mcp
        .call(
            "respond_approval",
            json!({"approval_id": id, "decision": "approve"}),
        )
        .await
        .err();
    assert_eq!(
        (twice["code"].clone(), twice["details"]["status"].clone()),
        (json!("approval_already_answered"), json!("denied"))
    );
}

/// A timeout: a parked wait wakes when VK gives up; answering then is approval_timed_out.
async fn time_out(
    sim: &Sim,
    mcp: &Mcp,
    daemon: &vk_observer_daemon::Daemon,
    project: Uuid,
) -> Value {
    let t = start_asking(
        sim,
        project,
        "Time out",
        asking(Duration::from_millis(2500), Duration::ZERO),
    )
    .await;
    let s = status_until(mcp, t.attempt, "blocked", |s| {
        s["waiting_for"] == "approval"
    })
    .await;
    let id = s["pending_approvals"][0]["approval_id"].clone();
    let left = s["pending_approvals"][0]["expires_in_ms"].as_u64().unwrap();
    assert!(left <= 2_500, "VK's timeout here is 2.5 s: {s}");
    let mut since = quiet_token(mcp, t.attempt).await;
    // At the timeout VK (and the simulator) moves the task back to `inprogress` and rewrites
    // the entry; the two come over different streams, so the task's change may wake the wait
    // first, the approval still pending: wait again from that answer's token.
    let mut wakes = 0;
    let woke = loop {
        let (woke, _) = park(Mcp::connect(daemon.addr).await, t.attempt, since)
            .await
            .unwrap();
        assert_eq!(woke["changed"], true, "{woke}");
        if woke["attempts"][0]["waiting_for"].is_null() {
            break woke;
        }
        wakes += 1;
        assert!(wakes < 5, "never woken by the timeout: {woke}");
        since = woke["token"].clone();
    };
    assert_eq!(
        woke["attempts"][0]["waiting_for"],
        Value::Null,
        "woken by the timeout: {woke}"
    );
    t.run.await.unwrap();
    status_until(mcp, t.attempt, "completed", |s| s["state"] == "completed").await;
    let late = mcp
        .call(
            "respond_approval",
            json!({"approval_id": id, "decision": "approve"}),
        )
        .await
        .err();
    assert_eq!(late["code"], "approval_timed_out", "{late}");
    let error = sim.truth().normalized_logs[&t.process]
        .iter()
        .any(|e| e.pointer("/content/content") == Some(&json!("Approval timed out for tool Bash")));
    assert!(error, "an error_message entry for the timeout");
    id
}
