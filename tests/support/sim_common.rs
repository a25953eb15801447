//! Helpers for the simulator's own tests (`sim_wire.rs`, `sim_wire_sequencing.rs`,
//! `sim_faults.rs`, `sim_git_wire.rs`, through `support::sim_common`): HTTP/SSE/WS clients over
//! real sockets, fixture loading, the shape comparison, and a project, task and attempt created
//! over REST.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use sse_stream::{Sse, SseByteStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;
use vk_observer_sim::{Sim, SimConfig};

pub async fn start() -> Sim {
    let cfg = SimConfig {
        step_delay: Duration::from_millis(5),
        ..SimConfig::default()
    };
    Sim::start(cfg).await.expect("sim starts")
}

pub fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/vk-wire/samples/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture exists");
    serde_json::from_str(&text).expect("fixture is json")
}

/// Frames of a recorded `.jsonl` WS capture (first line is a comment).
pub fn ws_fixture(name: &str) -> Vec<Value> {
    let path = format!(
        "{}/tests/fixtures/vk-wire/samples/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture exists");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("jsonl line"))
        .collect()
}

pub async fn call(
    sim: &Sim,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, String) {
    call_raw(sim, method, path, body.map(|b| b.to_string())).await
}

/// A call with a literal JSON body text (the recordings' client put spaces after colons).
pub async fn call_raw(
    sim: &Sim,
    method: reqwest::Method,
    path: &str,
    body: Option<String>,
) -> (u16, String) {
    let mut req = reqwest::Client::new().request(method, format!("{}{path}", sim.base_url()));
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// GET returning the parsed envelope.
pub async fn get(sim: &Sim, path: &str) -> Value {
    let (status, body) = call(sim, reqwest::Method::GET, path, None).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).expect("json")
}

pub async fn post(sim: &Sim, path: &str, body: Value) -> Value {
    let (status, text) = call(sim, reqwest::Method::POST, path, Some(body)).await;
    assert_eq!(status, 200, "POST {path}: {text}");
    serde_json::from_str(&text).expect("json")
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Same key sets (recursively) and value types; null matches anything (nullable fields);
/// objects at a path listed in `maps` are id/variant-keyed maps, so their values are compared
/// with the first recorded value instead of by key. Arrays of equal length compare element
/// by element (JSON Patch op lists are heterogeneous), others against the first element.
pub fn assert_shape(rec: &Value, got: &Value, path: &str, maps: &[&str]) {
    if rec.is_null() || got.is_null() {
        return;
    }
    assert_eq!(
        kind(rec),
        kind(got),
        "type differs at {path}: {rec} vs {got}"
    );
    match (rec, got) {
        (Value::Object(r), Value::Object(g)) if maps.contains(&path) => {
            if let Some(first) = r.values().next() {
                for (k, v) in g {
                    assert_shape(first, v, &format!("{path}.{k}"), maps);
                }
            }
        }
        (Value::Object(r), Value::Object(g)) => {
            let rk: Vec<_> = r.keys().collect();
            let gk: Vec<_> = g.keys().collect();
            let mut rs = rk.clone();
            rs.sort();
            let mut gs = gk.clone();
            gs.sort();
            assert_eq!(rs, gs, "key set differs at {path}");
            for (k, v) in r {
                assert_shape(v, &g[k], &format!("{path}.{k}"), maps);
            }
        }
        (Value::Array(r), Value::Array(g)) if r.len() == g.len() => {
            for (i, (rv, gv)) in r.iter().zip(g).enumerate() {
                assert_shape(rv, gv, &format!("{path}[{i}]"), maps);
            }
        }
        (Value::Array(r), Value::Array(g)) => {
            if let Some(first) = r.first() {
                for (i, v) in g.iter().enumerate() {
                    assert_shape(first, v, &format!("{path}[{i}]"), maps);
                }
            }
        }
        _ => {}
    }
}

/// Opens `/api/events` and forwards parsed events (keep-alives are skipped by the parser).
pub async fn sse(
    sim: &Sim,
    query: &str,
    last_event_id: Option<u64>,
) -> mpsc::UnboundedReceiver<Sse> {
    let mut req = reqwest::Client::new().get(format!("{}/api/events{query}", sim.base_url()));
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id.to_string());
    }
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let Ok(resp) = req.send().await else { return };
        let mut stream = SseByteStream::new(resp.bytes_stream());
        while let Some(Ok(ev)) = stream.next().await {
            if ev.event.is_none() && ev.data.is_none() {
                continue;
            }
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
    rx
}

/// What a WS client saw: a text frame, or the end (close code, or None for no close frame).
#[derive(Debug, Clone)]
pub enum WsItem {
    Text(String),
    Closed(Option<u16>),
}

pub async fn ws(sim: &Sim, path: &str) -> mpsc::UnboundedReceiver<WsItem> {
    let url = format!("{}{path}", sim.base_url().replace("http://", "ws://"));
    let (mut socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("ws connects");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(t))) => {
                    let _ = tx.send(WsItem::Text(t.to_string()));
                }
                Some(Ok(Message::Close(frame))) => {
                    let _ = tx.send(WsItem::Closed(frame.map(|f| u16::from(f.code))));
                    return;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    let _ = tx.send(WsItem::Closed(None));
                    return;
                }
            }
        }
    });
    rx
}

/// Next item within `ms`, or None.
pub async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>, ms: u64) -> Option<T> {
    tokio::time::timeout(Duration::from_millis(ms), rx.recv())
        .await
        .ok()
        .flatten()
}

/// Everything received until `ms` of silence.
pub async fn drain<T>(rx: &mut mpsc::UnboundedReceiver<T>, ms: u64) -> Vec<T> {
    let mut v = Vec::new();
    while let Some(x) = next(rx, ms).await {
        v.push(x);
    }
    v
}

pub fn text_json(items: &[WsItem]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|i| match i {
            WsItem::Text(t) => serde_json::from_str(t).ok(),
            WsItem::Closed(_) => None,
        })
        .collect()
}

/// Polls the attempt status until its state is not `running`/`idle`.
pub async fn wait_attempt_done(sim: &Sim, attempt: &str) -> Value {
    for _ in 0..400 {
        let st = get(sim, &format!("/api/task-attempts/{attempt}/status")).await;
        let state = st["data"]["state"].as_str().unwrap_or("").to_string();
        let task = st["data"]["task_id"].as_str().unwrap_or("").to_string();
        if state == "completed" || state == "failed" {
            let t = get(sim, &format!("/api/tasks/{task}")).await;
            if !t["data"]["has_in_progress_attempt"]
                .as_bool()
                .unwrap_or(true)
                && t["data"]["status"] != "inprogress"
            {
                return st;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("attempt {attempt} did not finish");
}

/// A project with one repo "demo"; its id and the repo's id.
pub async fn project_with_repo(sim: &Sim) -> (Uuid, String) {
    let p = sim.add_project("Demo", &["demo"]);
    let repos = get(sim, &format!("/api/projects/{p}/repositories")).await;
    (p, repos["data"][0]["id"].as_str().unwrap_or("").to_string())
}

/// A task titled `title` and a CLAUDE_CODE attempt on `repo`; both creation envelopes.
pub async fn create_task_and_attempt(
    sim: &Sim,
    p: Uuid,
    repo: &str,
    title: &str,
) -> (Value, Value) {
    let task = post(
        sim,
        "/api/tasks",
        json!({"project_id": p, "title": title,
                                              "description": "Please do it."}),
    )
    .await;
    let tid = task["data"]["id"].as_str().unwrap_or("").to_string();
    let attempt = post(
        sim,
        "/api/task-attempts",
        json!({"task_id": tid,
        "executor_profile_id": {"executor": "CLAUDE_CODE", "variant": null},
        "repos": [{"repo_id": repo, "target_branch": "main"}]}),
    )
    .await;
    (task, attempt)
}
