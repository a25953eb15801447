//! The board's actions over plain HTTP (issue 41), against the simulator and a real daemon:
//! approve and stop run the tools themselves (`respond_approval`, `stop_attempt`) with the
//! caller's grant — VK records the answer, the audit names the token — while a token without
//! the scope, and a POST without the board's own Origin, are refused before VK is asked.

mod board_support;

use std::time::Duration;

use board_support::{Answer, World, card, card_until, get, post, until};
use serde_json::{Value, json};
use vk_observer_sim::{ApprovalScript, AttemptScript, SimApprovalStatus};

const WAIT: Duration = Duration::from_secs(30);

fn asking(timeout: Duration) -> AttemptScript {
    AttemptScript {
        approval: Some(ApprovalScript {
            timeout,
            ask_after: Some(Duration::from_millis(100)),
            ..ApprovalScript::default()
        }),
        ..AttemptScript::default()
    }
}

fn refused(a: &Answer, code: &str) {
    assert_eq!(
        (a.status.as_u16(), a.json["code"].as_str()),
        (403, Some(code)),
        "{}",
        a.text
    );
}

/// VK's count of approval answers it was sent.
fn vk_answers(w: &World) -> Option<u64> {
    let counters = w.sim.counters();
    counters
        .by_route
        .get("POST /api/approvals/{id}/respond")
        .copied()
}

/// The newest audit entry of `tool`, read as an operator reads it.
async fn newest_audit(w: &World, tool: &str) -> Value {
    let audit: Value = board_support::http()
        .get(format!("{}/audit?tool={tool}", w.base()))
        .bearer_auth(&w.tokens.operator)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    audit["entries"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_from_the_board_goes_through_the_tool_and_its_audit() {
    let w = World::start(Duration::from_millis(5)).await;
    let task = w.sim.add_task(w.project, "Needs approval", None);
    let sim = w.sim.clone();
    let script = asking(Duration::from_secs(120));
    let run = tokio::spawn(async move { sim.run_attempt_script(task, script).await });
    let waiting = card_until(&w, &w.tokens.reader, "approval", "Needs approval", WAIT).await;
    let approval = waiting["approvals"][0].clone();
    assert_eq!(approval["tool_name"], "Bash", "{waiting}");
    let expires = approval["expires_in_ms"].as_u64().unwrap();
    assert!(expires > 60_000, "{approval}");
    let id = approval["approval_id"].as_str().unwrap().to_string();
    let path = format!("/board/api/approvals/{id}");
    let own = w.base();
    let approve = json!({"decision": "approve"});
    // A read token is refused by the tool's own grant check; forged requests by their Origin.
    let read = post(
        &w,
        &path,
        Some(&w.tokens.reader),
        Some(&own),
        approve.clone(),
    )
    .await;
    refused(&read, "forbidden");
    assert!(read.json["message"].as_str().unwrap().contains("approve"));
    let approver = Some(w.tokens.approver.as_str());
    refused(
        &post(&w, &path, approver, None, approve.clone()).await,
        "origin_missing",
    );
    let evil = Some("http://evil.example");
    refused(
        &post(&w, &path, approver, evil, approve.clone()).await,
        "origin_refused",
    );
    assert_eq!(vk_answers(&w), None, "nothing refused reached VK");

    let ok = post(&w, &path, approver, Some(&own), approve).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.json["status"], "approved");
    assert_eq!(vk_answers(&w), Some(1));
    let recorded = w
        .sim
        .approvals()
        .into_iter()
        .find(|(a, _, _)| a.to_string() == id);
    let status = recorded.map(|(_, _, s)| s);
    assert_eq!(status, Some(SimApprovalStatus::Approved), "VK records it");
    let entry = newest_audit(&w, "respond_approval").await;
    let who = (entry["caller"].as_str(), entry["outcome"].as_str());
    assert_eq!(who, (Some("approver"), Some("ok")), "{entry}");
    run.await.unwrap();
    card_until(&w, &w.tokens.reader, "completed", "Needs approval", WAIT).await;
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_needs_write_and_runs_the_tool() {
    let w = World::start(Duration::from_millis(200)).await;
    let task = w.sim.add_task(w.project, "Runs long", None);
    let script = AttemptScript {
        normalized_entries: 500,
        ..AttemptScript::default()
    };
    let sim = w.sim.clone();
    let run = tokio::spawn(async move { sim.run_attempt_script(task, script).await });
    // Running, and once the agent logs, its last line on the card.
    let running = until("the agent's last line on its card", WAIT, || async {
        let b = get(&w, "/board/api/board", Some(&w.tokens.reader)).await;
        card(&b.json, "running", "Runs long").filter(|c| c["last_line"].is_string())
    })
    .await;
    let attempt = running["attempt_id"].as_str().unwrap();
    let path = format!("/board/api/attempts/{attempt}/stop");
    let own = w.base();
    let approver = Some(w.tokens.approver.as_str());
    refused(
        &post(&w, &path, approver, Some(&own), json!({})).await,
        "forbidden",
    );
    let operator = Some(w.tokens.operator.as_str());
    refused(
        &post(&w, &path, operator, None, json!({})).await,
        "origin_missing",
    );
    let stopped = post(&w, &path, operator, Some(&own), json!({})).await;
    assert_eq!(stopped.status, 200, "{}", stopped.text);
    assert_eq!(stopped.json["was_running"], true, "{}", stopped.text);
    let entry = newest_audit(&w, "stop_attempt").await;
    assert_eq!(entry["caller"], "operator", "{entry}");
    card_until(&w, &w.tokens.reader, "failed", "Runs long", WAIT).await;
    run.abort();
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_with_a_body_the_board_never_sends_is_told_why() {
    let w = World::start(Duration::from_millis(5)).await;
    let own = w.base();
    let path = format!("/board/api/approvals/{}", uuid::Uuid::new_v4());
    let approver = Some(w.tokens.approver.as_str());
    let odd = post(&w, &path, approver, Some(&own), json!({"decision": 3})).await;
    assert_eq!(odd.status, 400, "{}", odd.text);
    let unknown = post(
        &w,
        &path,
        approver,
        Some(&own),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    assert!(!unknown.json["message"].as_str().unwrap().is_empty());
    w.shutdown().await;
}
