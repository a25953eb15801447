//! `wait_for_attempt_change` with `until`, through a real MCP client against the simulator:
//! an attempt already in a target state answers at once; changes that reach no target state
//! keep the call parked until one does; a finished attempt's answer carries its final agent
//! message, clipped; `needs_input` reaches on a pending approval, project-wide too; every
//! answer says why it ended (`outcome`: reached, changed, timeout, token_reset, deleted).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::approvals::{asking, start_asking};
use support::mcp::{Mcp, Reply};
use uuid::Uuid;
use vk_observer_sim::{Channel, ProcessStatus, RunReason, Sim};

fn note(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}})
}

/// Until the cache shows every attempt of `ids` running.
async fn until_running(mcp: &Mcp, ids: &[Uuid]) {
    for _ in 0..200 {
        if let Reply::Ok(r) = mcp
            .call("get_attempt_status", json!({"attempt_ids": ids}))
            .await
        {
            let all = r["attempts"].as_array().unwrap();
            if all.len() == ids.len() && all.iter().all(|s| s["state"] == "running") {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the attempts never ran");
}

/// A token after which the attempts stayed unchanged for a while.
async fn quiet_token(mcp: &Mcp, ids: &[Uuid]) -> Value {
    for _ in 0..50 {
        let t = mcp
            .call("get_attempt_status", json!({"attempt_ids": ids}))
            .await
            .ok()["token"]
            .clone();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let r = mcp
            .call(
                "get_attempt_status",
                json!({"attempt_ids": ids, "since_token": t}),
            )
            .await
            .ok();
        if r["attempts"].as_array().unwrap().is_empty() {
            return t;
        }
    }
    panic!("the attempts never went quiet");
}

/// Until the cache holds a normalized entry of the attempt with this text.
async fn until_logged(mcp: &Mcp, attempt: Uuid, text: &str) {
    let mut page = Value::Null;
    for _ in 0..200 {
        page = mcp
            .call(
                "tail_attempt_logs",
                json!({"attempt_id": attempt, "limit": 500}),
            )
            .await
            .ok();
        if page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.to_string().contains(&format!("{text:?}")))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{text:?} never reached the cache: {page}");
}

/// Until the cache knows the project (a wait on an unknown one is `not_found`).
async fn until_project_known(mcp: &Mcp, project: Uuid) {
    for _ in 0..200 {
        let args = json!({"project_id": project, "timeout_ms": 1});
        if let Reply::Ok(_) = mcp.call("wait_for_attempt_change", args).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the project never reached the cache");
}

/// A wait on its own client, running in the background.
fn spawn_wait(addr: std::net::SocketAddr, args: Value) -> tokio::task::JoinHandle<Value> {
    tokio::spawn(async move {
        let mcp = Mcp::connect(addr).await;
        mcp.call("wait_for_attempt_change", args).await.ok()
    })
}

/// A running coding agent on a new task: (task, attempt, process).
fn running_agent(sim: &Sim, project: Uuid, title: &str) -> (Uuid, Uuid, Uuid) {
    let task = sim.add_task(project, title, None);
    let a = sim.create_attempt(task, "CLAUDE_CODE");
    let p = sim.start_process(a.session_id, RunReason::CodingAgent);
    (task, a.attempt_id, p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_parks_past_other_changes_and_answers_the_final_message() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Until", &["demo"]);
    let (_, a, pa) = running_agent(&sim, project, "A");
    let mcp = Mcp::connect(daemon.addr).await;
    until_running(&mcp, &[a]).await;

    let first = quiet_token(&mcp, &[a]).await;
    // 0. Without until, a change answers `changed`.
    let waiter = spawn_wait(
        daemon.addr,
        json!({"attempt_ids": [a], "since_token": first, "timeout_ms": 30000}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.append_log(pa, Channel::Normalized, note("first line"));
    let r = waiter.await.unwrap();
    assert_eq!(r["outcome"], "changed", "{r}");
    assert!(r.get("final_messages").is_none(), "only with until: {r}");
    // 1. Parked: a new log entry (still running) reaches no target state.
    let until = json!(["completed", "failed", "cancelled"]);
    let waiter = spawn_wait(
        daemon.addr,
        json!({"attempt_ids": [a], "until": until, "timeout_ms": 40000}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.append_log(pa, Channel::Normalized, note("still working"));
    until_logged(&mcp, a, "still working").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "a change that reached no target state ended the wait"
    );

    // 2. The run ends: reached, with its last agent message clipped at 2000 characters.
    let long = format!("Done. {}", "All tests pass. ".repeat(200));
    let last = sim.append_log(pa, Channel::Normalized, note(&long));
    sim.finish_process(pa, ProcessStatus::Completed, Some(0));
    let r = waiter.await.unwrap();
    assert_eq!(r["outcome"], "reached", "{r}");
    assert_eq!(r["changed"], true);
    let attempts = r["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{r}");
    assert_eq!(attempts[0]["attempt_id"], a.to_string());
    assert_eq!(attempts[0]["state"], "completed");
    assert_eq!(attempts[0]["result"]["outcome"], "success");
    let m = &r["final_messages"][0];
    assert_eq!(m["attempt_id"], a.to_string(), "{r}");
    assert_eq!(m["execution_process_id"], pa.to_string(), "at detail 2");
    assert_eq!(m["entry_index"], last);
    assert_eq!(m["truncated"], true);
    let text = m["text"].as_str().unwrap();
    assert_eq!(
        text.chars().count(),
        2001,
        "2000 characters and the ellipsis"
    );
    assert!(text.starts_with("Done. All tests pass.") && text.ends_with('…'));
    // The whole message is one tail call away, where the answer says.
    let whole = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": a, "after_entry_index": last - 1, "limit": 1, "detail": 2}),
        )
        .await
        .ok();
    assert_eq!(whole["entries"][0]["entry"]["content"]["content"], long);

    finished_attempt_answers(&mcp, a, last).await;
    daemon.shutdown().await;
}

/// Steps 3–5 on the finished attempt `a` whose last agent message is entry `last`: already
/// there answers at once; a quiet token times out; a foreign token resets.
async fn finished_attempt_answers(mcp: &Mcp, a: Uuid, last: u64) {
    // 3. Already there: answered at once, without a token. At the default detail the
    // status routes (result) and the message says where the whole of it is.
    let args = json!({"attempt_ids": [a], "until": ["completed"], "timeout_ms": 30000});
    let r = mcp.call("wait_for_attempt_change", args.clone()).await.ok();
    assert_eq!(r["outcome"], "reached", "{r}");
    assert!(r["waited_ms"].as_u64().unwrap_or(0) < 5000, "{r}");
    let r = mcp.call_as_is("wait_for_attempt_change", args).await.ok();
    assert_eq!(r["outcome"], "reached", "{r}");
    assert_eq!(r["attempts"][0]["result"]["outcome"], "success", "{r}");
    let m = &r["final_messages"][0];
    assert_eq!(m["truncated"], true, "{r}");
    assert_eq!(m["entry_index"], last);
    assert_eq!(m["attempt_id"], a.to_string());
    assert!(
        m.get("execution_process_id").is_none(),
        "from detail 1: {r}"
    );
    assert_eq!(m["text"].as_str().unwrap().chars().count(), 2001);

    // 4. With a token after which nothing changed: the timeout, with and without until.
    let quiet = quiet_token(&mcp, &[a]).await;
    for args in [
        json!({"attempt_ids": [a], "until": ["completed"], "since_token": quiet, "timeout_ms": 1500}),
        json!({"attempt_ids": [a], "since_token": quiet, "timeout_ms": 1500}),
    ] {
        let r = mcp.call("wait_for_attempt_change", args).await.ok();
        assert_eq!(r["outcome"], "timeout", "{r}");
        assert_eq!(r["changed"], false);
        assert!(r.get("final_messages").is_none(), "{r}");
    }

    // 5. A token of another store generation: token_reset, every watched attempt listed.
    let r = mcp
        .call(
            "wait_for_attempt_change",
            json!({"attempt_ids": [a], "until": ["failed"], "since_token": "0123456789abcdef.5"}),
        )
        .await
        .ok();
    assert_eq!(r["outcome"], "token_reset", "{r}");
    assert_eq!(r["token_reset"], true);
    assert_eq!(r["attempts"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_input_and_project_wide_until() {
    let sim = support::sim().await;
    let project = sim.add_project("Asks", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;

    // Parked on the whole (empty) project before the attempt exists: its setup, start and log
    // lines reach no target state; the pending approval does.
    until_project_known(&mcp, project).await;
    let waiter = spawn_wait(
        daemon.addr,
        json!({"project_id": project, "until": ["needs_input"], "timeout_ms": 45000}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let script = asking(Duration::from_secs(3600), Duration::from_millis(1500));
    let b = start_asking(&sim, project, "Build it", script).await;
    let r = waiter.await.unwrap();
    assert_eq!(r["outcome"], "reached", "{r}");
    let s = &r["attempts"][0];
    assert_eq!(s["attempt_id"], b.attempt.to_string(), "{r}");
    assert_eq!(s["waiting_for"], "approval");
    assert_eq!(s["state"], "running");
    assert_eq!(s["pending_approvals"].as_array().unwrap().len(), 1, "{r}");
    assert!(r.get("final_messages").is_none(), "not finished: {r}");
    let token = r["token"].clone();

    // The same set by attempt: already there.
    let r = mcp
        .call(
            "wait_for_attempt_change",
            json!({"attempt_ids": [b.attempt], "until": ["needs_input", "completed"]}),
        )
        .await
        .ok();
    assert_eq!(r["outcome"], "reached", "{r}");

    // Project-wide with the token: another attempt's log line does not end it, its end does;
    // only the attempt that reached is listed.
    let (_, c, pc) = running_agent(&sim, project, "C");
    until_running(&mcp, &[c]).await;
    let waiter = spawn_wait(
        daemon.addr,
        json!({"project_id": project, "until": ["completed", "failed"], "since_token": token, "timeout_ms": 45000}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.append_log(pc, Channel::Normalized, note("c works"));
    until_logged(&mcp, c, "c works").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "a log line ended a wait until completed"
    );
    sim.append_log(pc, Channel::Normalized, note("C is done."));
    sim.finish_process(pc, ProcessStatus::Failed, Some(2));
    let r = waiter.await.unwrap();
    assert_eq!(r["outcome"], "reached", "{r}");
    let listed: Vec<&Value> = r["attempts"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 1, "{r}");
    assert_eq!(listed[0]["attempt_id"], c.to_string());
    assert_eq!(listed[0]["state"], "failed");
    assert_eq!(r["final_messages"][0]["text"], "C is done.");
    assert_eq!(r["final_messages"][0]["truncated"], false);
    b.run.abort();
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_attempt_ends_the_wait_as_deleted() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Deletes", &["demo"]);
    let (t1, a, _) = running_agent(&sim, project, "Doomed");
    let (_, b, _) = running_agent(&sim, project, "Stays");
    let mcp = Mcp::connect(daemon.addr).await;
    until_running(&mcp, &[a, b]).await;
    let quiet = quiet_token(&mcp, &[a, b]).await;

    let until = json!(["completed", "failed"]);
    let by_id = spawn_wait(
        daemon.addr,
        json!({"attempt_ids": [a, b], "until": until, "timeout_ms": 40000}),
    );
    let by_project = spawn_wait(
        daemon.addr,
        json!({"project_id": project, "until": until, "timeout_ms": 40000}),
    );
    let plain = spawn_wait(
        daemon.addr,
        json!({"project_id": project, "since_token": quiet, "timeout_ms": 40000}),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(sim.delete_task(t1));
    for (name, waiter) in [("attempt_ids", by_id), ("project_id", by_project)] {
        let r = waiter.await.unwrap();
        assert_eq!(r["outcome"], "deleted", "{name}: {r}");
        assert_eq!(r["changed"], true);
        assert_eq!(r["removed"], json!([a.to_string()]), "{name}: {r}");
        assert_eq!(r["attempts"], json!([]), "none reached: {r}");
    }
    // Without until, the deletion may come after another change (the task's): wait on.
    let mut r = plain.await.unwrap();
    for _ in 0..5 {
        if r["outcome"] != "changed" {
            break;
        }
        let args = json!({"project_id": project, "since_token": r["token"], "timeout_ms": 20000});
        r = mcp.call("wait_for_attempt_change", args).await.ok();
    }
    assert_eq!(r["outcome"], "deleted", "{r}");
    assert_eq!(r["removed"], json!([a.to_string()]), "{r}");

    // A deleted attempt in the set answers at once from then on.
    let r = mcp
        .call(
            "wait_for_attempt_change",
            json!({"attempt_ids": [a], "until": ["completed"], "timeout_ms": 30000}),
        )
        .await
        .ok();
    assert_eq!(r["outcome"], "deleted", "{r}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_until_is_refused_with_the_words() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Words", &["demo"]);
    let mcp = Mcp::connect(daemon.addr).await;
    for (until, reason) in [
        (json!(["done"]), "unknown_word"),
        (json!([]), "empty_set"),
        (json!("completed"), "wrong_type"),
        (json!([7]), "wrong_type"),
    ] {
        let args = json!({"project_id": project, "until": until, "timeout_ms": 10});
        let e = mcp.call("wait_for_attempt_change", args).await.err();
        assert_eq!(e["code"], "invalid_argument", "{e}");
        assert_eq!(e["details"]["reason"], reason, "{until}: {e}");
        assert_eq!(e["details"]["field"], "until");
        assert_eq!(
            e["details"]["valid"],
            json!([
                "idle",
                "running",
                "completed",
                "failed",
                "cancelled",
                "needs_input"
            ])
        );
        let hint = e["hint"].as_str().unwrap();
        assert!(
            hint.contains("needs_input") && hint.contains("completed"),
            "{hint}"
        );
    }
    daemon.shutdown().await;
}
