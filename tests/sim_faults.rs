//! Fault switches, connection drops, auth and idempotency of the simulator.

mod support;

use std::time::Duration;

use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use support::sim_common::*;
use vk_observer_sim::{Channel, Faults, ProcessStatus, RunReason, Sim, SimConfig};

/// Raw SSE bytes received within `ms`.
async fn sse_bytes(sim: &Sim, ms: u64) -> String {
    let resp = reqwest::Client::new()
        .get(format!("{}/api/events?after_seq=0", sim.base_url()))
        .send();
    let Ok(Ok(resp)) = tokio::time::timeout(Duration::from_millis(ms), resp).await else {
        return String::new();
    };
    let mut out = String::new();
    let mut body = resp.bytes_stream();
    while let Ok(Some(Ok(b))) = tokio::time::timeout(Duration::from_millis(ms), body.next()).await {
        out.push_str(&String::from_utf8_lossy(&b));
    }
    out
}

#[tokio::test]
async fn sse_faults_switch_on_and_off() {
    let sim = start().await;
    let p = sim.add_project("Demo", &["demo"]);
    sim.add_task(p, "one", None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    sim.set_faults(Faults {
        garbage_sse: true,
        ..Faults::default()
    });
    let text = sse_bytes(&sim, 300).await;
    assert!(text.contains("[oops") && text.contains("id: 1\n"), "{text}");
    sim.set_faults(Faults {
        stall_sse: true,
        ..Faults::default()
    });
    assert_eq!(sse_bytes(&sim, 300).await, "", "stalled: nothing");
    sim.set_faults(Faults::default());
    let text = sse_bytes(&sim, 300).await;
    assert!(!text.contains("oops") && text.contains("id: 1\n"));
    sim.shutdown().await;
}

#[tokio::test]
async fn ws_faults_and_connection_drops() {
    let sim = start().await;
    let p = sim.add_project("Demo", &["demo"]);
    let t = sim.add_task(p, "one", None);
    let ids = sim.create_attempt(t, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    for i in 0..5 {
        sim.append_log(
            pid,
            Channel::Raw,
            json!({"type": "STDOUT", "content": format!("{i}\n")}),
        );
    }
    sim.set_faults(Faults {
        garbage_ws: true,
        ..Faults::default()
    });
    let mut tasks = ws(&sim, &format!("/api/tasks/stream/ws?project_id={p}")).await;
    let items = drain(&mut tasks, 200).await;
    let texts: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            WsItem::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| serde_json::from_str::<Value>(t).is_err()),
        "non-JSON injected"
    );
    assert!(
        texts.iter().any(|t| t.contains("\"seq\":\"NaN\"")),
        "wrong-typed frame injected"
    );
    sim.set_faults(Faults {
        drop_log_ws_after: Some(2),
        ..Faults::default()
    });
    let mut logs = ws(
        &sim,
        &format!("/api/execution-processes/{pid}/raw-logs/v2/ws"),
    )
    .await;
    let items = drain(&mut logs, 300).await;
    assert_eq!(text_json(&items).len(), 2);
    assert!(matches!(items.last(), Some(WsItem::Closed(None))));
    sim.set_faults(Faults::default());
    let mut logs = ws(
        &sim,
        &format!("/api/execution-processes/{pid}/raw-logs/v2/ws"),
    )
    .await;
    let mut tasks = ws(&sim, &format!("/api/tasks/stream/ws?project_id={p}")).await;
    assert_eq!(text_json(&drain(&mut logs, 200).await).len(), 5);
    assert!(
        text_json(&drain(&mut tasks, 200).await)
            .iter()
            .all(|f| f.get("seq").is_some_and(Value::is_u64))
    );
    sim.drop_connections();
    assert!(matches!(
        next(&mut logs, 1000).await,
        Some(WsItem::Closed(None))
    ));
    assert!(matches!(
        next(&mut tasks, 1000).await,
        Some(WsItem::Closed(None))
    ));
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    sim.shutdown().await;
}

#[tokio::test]
async fn skip_history_hides_older_entries() {
    let sim = start().await;
    let p = sim.add_project("Demo", &["demo"]);
    let t = sim.add_task(p, "one", None);
    let ids = sim.create_attempt(t, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::SetupScript);
    for i in 0..10 {
        sim.append_log(
            pid,
            Channel::Raw,
            json!({"type": "STDOUT", "content": format!("{i}\n")}),
        );
    }
    let path = format!("/api/execution-processes/{pid}/raw-logs/v2");
    sim.set_faults(Faults {
        skip_history: true,
        ..Faults::default()
    });
    let page = get(&sim, &path).await["data"].clone();
    assert_eq!(
        (
            page["entries"].as_array().map(Vec::len),
            page["next_cursor"].clone()
        ),
        (Some(5), json!(5))
    );
    assert_eq!(
        (page["has_more"].clone(), page["history_truncated"].clone()),
        (json!(false), json!(true))
    );
    sim.set_faults(Faults::default());
    let page = get(&sim, &path).await["data"].clone();
    assert_eq!(
        (
            page["entries"].as_array().map(Vec::len),
            page["history_truncated"].clone()
        ),
        (Some(10), json!(false))
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn auth_token_rules() {
    let cfg = SimConfig {
        auth_token: Some("T".into()),
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg).await.expect("sim");
    let client = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", sim.base_url());
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(
        status(client.get(url("/health")).send().await.expect("r")),
        200
    );
    let r = client.get(url("/api/projects")).send().await.expect("r");
    assert_eq!(r.status().as_u16(), 401);
    let body: Value = r.json().await.unwrap_or_default();
    assert_eq!(
        body,
        json!({"success": false, "data": null, "error_data": null, "message": "Unauthorized"})
    );
    assert_eq!(
        status(
            client
                .get(url("/api/projects"))
                .bearer_auth("T")
                .send()
                .await
                .expect("r")
        ),
        200
    );
    assert_eq!(
        status(
            client
                .get(url("/api/projects"))
                .header("X-API-Token", "T")
                .send()
                .await
                .expect("r")
        ),
        200
    );
    assert_eq!(
        status(
            client
                .get(url("/api/projects?token=T"))
                .send()
                .await
                .expect("r")
        ),
        401
    );
    let ev = client.get(url("/api/events?token=T")).send();
    sim.add_task(sim.add_project("P", &["r"]), "x", None);
    assert_eq!(status(ev.await.expect("r")), 200);
    sim.shutdown().await;
}

#[tokio::test]
async fn idempotency_key_and_counters() {
    let sim = start().await;
    let p = sim.add_project("Demo", &["demo"]);
    let client = reqwest::Client::new();
    let send = |body: Value, key: &'static str| {
        client
            .post(format!("{}/api/tasks", sim.base_url()))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let body = json!({"project_id": p, "title": "once"});
    let a: Value = send(body.clone(), "k1")
        .await
        .expect("r")
        .json()
        .await
        .unwrap_or_default();
    let b: Value = send(body.clone(), "k1")
        .await
        .expect("r")
        .json()
        .await
        .unwrap_or_default();
    assert_eq!(a, b);
    let c = send(json!({"project_id": p, "title": "other"}), "k1")
        .await
        .expect("r");
    assert_eq!(c.status().as_u16(), 409);
    let counters = sim.counters();
    assert_eq!(counters.task_creations, 1);
    assert_eq!(counters.by_route.get("POST /api/tasks"), Some(&3));
    let before = sim.counters().rest_gets;
    let (s, _) = call(&sim, Method::GET, "/api/tasks", None).await;
    assert_eq!((s, sim.counters().rest_gets), (200, before + 1));
    sim.shutdown().await;
}
