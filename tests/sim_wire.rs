//! The simulator against the recordings: every REST response and every SSE/WS frame kind has
//! the recorded key sets and value types, for a completed attempt (with a follow-up, a dev
//! server and live log sockets) and a failed one, and VK's error answers. SSE ids, WS seqs,
//! resume, restart and log paging are in `sim_wire_sequencing.rs`.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::sim_common::*;

/// Normalized entries of the recordings, keyed by kind (entry type, action, status).
fn entry_sig(e: &Value) -> String {
    let c = &e["content"];
    format!(
        "{}:{}:{}:{}",
        c["entry_type"]["type"].as_str().unwrap_or(""),
        c["entry_type"]["action_type"]["action"]
            .as_str()
            .unwrap_or(""),
        c["entry_type"]["status"]["status"].as_str().unwrap_or(""),
        c.get("metadata").is_some()
    )
}

fn recorded_entries() -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    for f in ws_fixture("ws_normalized_logs_live.jsonl") {
        if let Some(e) = f["data"].get("entry") {
            m.insert(entry_sig(e), e.clone());
        }
    }
    for name in [
        "rest_normalized_history_page1.json",
        "rest_normalized_history_page2.json",
    ] {
        for e in fixture(name)["response"]["data"]["entries"]
            .as_array()
            .into_iter()
            .flatten()
        {
            m.insert(entry_sig(&e["entry"]), e["entry"].clone());
        }
    }
    m
}

fn assert_entry(examples: &BTreeMap<String, Value>, e: &Value) {
    let sig = entry_sig(e);
    let rec = examples
        .get(&sig)
        .unwrap_or_else(|| panic!("no recorded entry like {sig}: {e}"));
    assert_shape(rec, e, "entry", &[]);
}

/// A log page or frame: envelope by shape, entries by their recorded kind.
fn assert_log_page(rec: &Value, got: &Value, examples: &BTreeMap<String, Value>) {
    let mut r = rec.clone();
    let mut g = got.clone();
    r["data"]["entries"] = json!([]);
    g["data"]["entries"] = json!([]);
    assert_shape(&r, &g, "page", &[]);
    for e in got["data"]["entries"].as_array().into_iter().flatten() {
        assert_eq!(e.as_object().map(|o| o.len()), Some(2));
        if e["entry"]["type"] == "NORMALIZED_ENTRY" {
            assert_entry(examples, &e["entry"]);
        } else {
            assert_shape(&rec["data"]["entries"][0]["entry"], &e["entry"], "raw", &[]);
        }
    }
}

fn rec(name: &str) -> Value {
    fixture(name)["response"].clone()
}

#[tokio::test]
async fn rest_and_stream_shapes_match_recordings() {
    let sim = start().await;
    let examples = recorded_entries();
    let mut events = sse(&sim, "", None).await;
    let (p, repo) = project_with_repo(&sim).await;
    let mut projects_ws = ws(&sim, "/api/projects/stream/ws").await;
    let mut tasks_ws = ws(&sim, &format!("/api/tasks/stream/ws?project_id={p}")).await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let (task, attempt) = create_task_and_attempt(&sim, p, &repo, "Add a greeting file").await;
    assert_shape(&rec("rest_create_task.json"), &task, "", &[]);
    assert_shape(&rec("rest_create_task_attempt.json"), &attempt, "", &[]);
    assert!(attempt["data"]["container_ref"].is_null());
    let tid = task["data"]["id"].as_str().unwrap_or("").to_string();
    let aid = attempt["data"]["id"].as_str().unwrap_or("").to_string();
    assert!(
        attempt["data"]["branch"]
            .as_str()
            .unwrap_or("")
            .ends_with("-add-a-greeting-f")
    );
    let mut procs_ws = ws(
        &sim,
        &format!("/api/execution-processes/stream/ws?workspace_id={aid}"),
    )
    .await;
    let status = wait_attempt_done(&sim, &aid).await;
    assert_shape(&rec("rest_task_attempt_status.json"), &status, "", &[]);
    assert_eq!(status["data"]["state"], "completed");

    for (name, path) in [
        ("rest_task.json", format!("/api/tasks/{tid}")),
        ("rest_tasks.json", format!("/api/tasks?project_id={p}")),
        (
            "rest_task_attempt.json",
            format!("/api/task-attempts/{aid}"),
        ),
        (
            "rest_task_attempts.json",
            format!("/api/task-attempts?task_id={tid}"),
        ),
        (
            "rest_task_attempt_changes.json",
            format!("/api/task-attempts/{aid}/changes"),
        ),
        (
            "rest_task_attempt_repos.json",
            format!("/api/task-attempts/{aid}/repos"),
        ),
        (
            "rest_task_attempt_branch_status.json",
            format!("/api/task-attempts/{aid}/branch-status"),
        ),
        (
            "rest_sessions.json",
            format!("/api/sessions?workspace_id={aid}"),
        ),
        ("rest_health.json", "/health".to_string()),
        ("rest_projects.json", "/api/projects".to_string()),
        (
            "rest_project_repositories.json",
            format!("/api/projects/{p}/repositories"),
        ),
        ("rest_config_status.json", "/api/config/status".to_string()),
        ("rest_profiles.json", "/api/profiles".to_string()),
    ] {
        let got = get(&sim, &path).await;
        assert_shape(&rec(name), &got, name, &[]);
    }
    let task_now = get(&sim, &format!("/api/tasks/{tid}")).await;
    assert_eq!(task_now["data"]["status"], "inreview");
    assert_eq!(task_now["data"]["executor"], "CLAUDE_CODE");
    let changes = get(&sim, &format!("/api/task-attempts/{aid}/changes")).await;
    assert_eq!(changes["data"]["files"][0], "demo/sim_agent_output.txt");
    let reload = post(&sim, "/api/config/reload", json!(null)).await;
    assert_shape(&rec("rest_config_reload.json"), &reload, "", &[]);
    let mut info = get(&sim, "/api/info").await;
    assert!(info["data"]["executors"]["CODEX"]["DEFAULT"].is_object());
    if let Some(o) = info["data"]["executors"].as_object_mut() {
        o.remove("CODEX");
    }
    assert_shape(
        &rec("rest_info.json"),
        &info,
        "",
        &[".data.agent_command_resolutions"],
    );

    // Session, messages, processes, history.
    let sid = status["data"]["latest_session_id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_shape(
        &rec("rest_session.json"),
        &get(&sim, &format!("/api/sessions/{sid}")).await,
        "",
        &[],
    );
    let msgs = get(&sim, &format!("/api/sessions/{sid}/messages")).await;
    assert_shape(&rec("rest_session_messages.json"), &msgs, "", &[]);
    let truth = sim.truth();
    let agent = truth
        .processes
        .values()
        .find(|p| p["run_reason"] == "codingagent")
        .cloned()
        .unwrap_or_default();
    let setup = truth
        .processes
        .values()
        .find(|p| p["run_reason"] == "setupscript")
        .cloned()
        .unwrap_or_default();
    let agent_id = agent["id"].as_str().unwrap_or("").to_string();
    let got = get(&sim, &format!("/api/execution-processes/{agent_id}")).await;
    assert_shape(&rec("rest_execution_process.json"), &got, "", &[]);
    let page1 = get(
        &sim,
        &format!("/api/execution-processes/{agent_id}/normalized-logs/v2?limit=3"),
    )
    .await;
    assert_log_page(
        &rec("rest_normalized_history_page1.json"),
        &page1,
        &examples,
    );
    assert_eq!(page1["data"]["next_cursor"], 3);
    assert_eq!(page1["data"]["has_more"], true);
    let page2 = get(
        &sim,
        &format!("/api/execution-processes/{agent_id}/normalized-logs/v2?limit=3&cursor=3"),
    )
    .await;
    assert_log_page(
        &rec("rest_normalized_history_page2.json"),
        &page2,
        &examples,
    );
    assert_eq!(page2["data"]["has_more"], false);
    let setup_id = setup["id"].as_str().unwrap_or("");
    let raw = get(
        &sim,
        &format!("/api/execution-processes/{setup_id}/raw-logs/v2"),
    )
    .await;
    assert_log_page(&rec("rest_raw_history_setup.json"), &raw, &examples);

    // Follow-up with live log sockets.
    let fu = post(
        &sim,
        &format!("/api/sessions/{sid}/follow-up"),
        json!({"prompt": "SLOW: add a line"}),
    )
    .await;
    assert_shape(&rec("rest_follow_up.json"), &fu, "", &[]);
    let fid = fu["data"]["id"].as_str().unwrap_or("").to_string();
    let mut norm_ws = ws(
        &sim,
        &format!("/api/execution-processes/{fid}/normalized-logs/v2/ws"),
    )
    .await;
    let mut raw_ws = ws(
        &sim,
        &format!("/api/execution-processes/{fid}/raw-logs/v2/ws"),
    )
    .await;
    let running = get(
        &sim,
        &format!("/api/execution-processes/{fid}/normalized-logs/v2?limit=2"),
    )
    .await;
    assert_log_page(
        &rec("rest_normalized_history_while_running.json"),
        &running,
        &examples,
    );
    wait_attempt_done(&sim, &aid).await;
    for (rx, name) in [
        (&mut norm_ws, "ws_normalized_logs_live.jsonl"),
        (&mut raw_ws, "ws_raw_logs_live.jsonl"),
    ] {
        let items = drain(rx, 300).await;
        assert!(
            matches!(items.last(), Some(WsItem::Closed(None))),
            "{name}: dropped, no close frame"
        );
        let frames = text_json(&items);
        assert_eq!(frames.last(), Some(&json!({"type": "finished"})));
        let recorded = ws_fixture(name);
        for f in &frames {
            let kind = f["type"].as_str().unwrap_or("");
            let r = recorded
                .iter()
                .find(|r| r["data"]["type"] == kind)
                .map(|r| &r["data"]);
            let r = r.unwrap_or_else(|| panic!("{name}: no recorded {kind}"));
            let (mut r2, mut f2) = (r.clone(), f.clone());
            r2["entry"] = Value::Null;
            f2["entry"] = Value::Null;
            assert_shape(&r2, &f2, name, &[]);
            if f["entry"]["type"] == "NORMALIZED_ENTRY" {
                assert_entry(&examples, &f["entry"]);
            } else if kind != "finished" {
                assert_shape(&r["entry"], &f["entry"], name, &[]);
            }
        }
        assert!(frames.iter().any(|f| f["type"] == "append"));
    }
    assert!(
        ws_fixture("ws_normalized_logs_live.jsonl")
            .iter()
            .any(|f| f["data"]["type"] == "replace")
    );
    let mut gone = ws(
        &sim,
        &format!("/api/execution-processes/{fid}/normalized-logs/v2/ws"),
    )
    .await;
    assert!(matches!(
        next(&mut gone, 1000).await,
        Some(WsItem::Closed(Some(4404)))
    ));

    // Dev server: start, raw live frames, stop → killed with no exit code.
    let started = post(
        &sim,
        &format!("/api/task-attempts/{aid}/start-dev-server"),
        json!({}),
    )
    .await;
    assert_shape(&rec("rest_start_dev_server.json"), &started, "", &[]);
    let dev = sim
        .truth()
        .processes
        .values()
        .find(|p| p["run_reason"] == "devserver")
        .cloned()
        .unwrap_or_default();
    let dev_id = dev["id"].as_str().unwrap_or("").to_string();
    let mut dev_ws = ws(
        &sim,
        &format!("/api/execution-processes/{dev_id}/raw-logs/v2/ws"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    let stopped = post(
        &sim,
        &format!("/api/execution-processes/{dev_id}/stop"),
        json!(null),
    )
    .await;
    assert_shape(&rec("rest_stop_process.json"), &stopped, "", &[]);
    let dev_frames = text_json(&drain(&mut dev_ws, 300).await);
    let rec_dev = ws_fixture("ws_raw_logs_devserver_live.jsonl");
    assert_shape(&rec_dev[0]["data"], &dev_frames[0], "dev", &[]);
    let dev_now = get(&sim, &format!("/api/execution-processes/{dev_id}")).await;
    assert_eq!(dev_now["data"]["status"], "killed");
    assert!(dev_now["data"]["exit_code"].is_null());

    // Object streams and SSE frames.
    let check_ws = |got: Vec<Value>, name: &str| {
        let recorded = ws_fixture(name);
        assert!(!got.is_empty(), "{name}: frames");
        for (i, f) in got.iter().enumerate() {
            let r = if i == 0 {
                &recorded[0]
            } else {
                recorded.get(1).unwrap_or(&recorded[0])
            };
            let op = f["JsonPatch"][0]["op"].as_str().unwrap_or("");
            let reason = &f["JsonPatch"][0]["value"]["run_reason"];
            let same_op = |r: &&Value| r["data"]["JsonPatch"][0]["op"] == op;
            let rest = || recorded.iter().skip(usize::from(i > 0));
            let r = rest()
                .filter(same_op)
                .find(|r| {
                    let v = &r["data"]["JsonPatch"][0]["value"];
                    v["run_reason"] == *reason
                        && v["executor_action"]["typ"]["type"]
                            == f["JsonPatch"][0]["value"]["executor_action"]["typ"]["type"]
                })
                .or_else(|| rest().find(same_op))
                .unwrap_or(r);
            let (mut r2, mut f2) = (r["data"].clone(), f.clone());
            let is_snapshot = f["JsonPatch"][0]["path"]
                .as_str()
                .is_some_and(|p| p.matches('/').count() == 1);
            if is_snapshot {
                // Snapshot maps are keyed by id: compare their values with the recorded one.
                let rv = r2["JsonPatch"][0]["value"]
                    .as_object()
                    .and_then(|m| m.values().next().cloned());
                for v in f2["JsonPatch"][0]["value"]
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.values())
                {
                    if let Some(rv) = &rv {
                        assert_shape(rv, v, name, &[]);
                    }
                }
                r2["JsonPatch"][0]["value"] = json!({});
                f2["JsonPatch"][0]["value"] = json!({});
            }
            assert_shape(&r2, &f2, name, &[]);
        }
    };
    check_ws(
        text_json(&drain(&mut tasks_ws, 200).await),
        "ws_tasks.jsonl",
    );
    check_ws(
        text_json(&drain(&mut procs_ws, 200).await),
        "ws_execution_processes.jsonl",
    );
    check_ws(
        text_json(&drain(&mut projects_ws, 200).await),
        "ws_projects.jsonl",
    );
    let mut diff = ws(&sim, &format!("/api/task-attempts/{aid}/diff/ws")).await;
    let diff_frames = text_json(&drain(&mut diff, 200).await);
    let rec_diff = ws_fixture("ws_diff.jsonl");
    assert_eq!(diff_frames.len(), 2);
    assert_shape(&rec_diff[0]["data"], &diff_frames[0], "diff0", &[]);
    assert_shape(
        &rec_diff[1]["data"]["JsonPatch"][0]["value"],
        &diff_frames[1]["JsonPatch"][0]["value"],
        "diff1",
        &[],
    );
    let evs = drain(&mut events, 200).await;
    assert!(!evs.is_empty());
    let rec_inv: Value =
        json!({"taskIds": ["x"], "workspaceIds": [], "hasExecutionProcess": false});
    for e in &evs {
        assert_eq!(e.event.as_deref(), Some("invalidate"));
        let d: Value = serde_json::from_str(e.data.as_deref().unwrap_or("")).unwrap_or_default();
        assert_shape(&rec_inv, &d, "sse", &[]);
        assert!(d["workspaceIds"].as_array().is_some_and(Vec::is_empty));
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn failed_attempt_and_error_responses_match_recordings() {
    let sim = start().await;
    let (p, repo) = project_with_repo(&sim).await;
    let (task, attempt) = create_task_and_attempt(&sim, p, &repo, "Task that should FAIL").await;
    let aid = attempt["data"]["id"].as_str().unwrap_or("").to_string();
    let st = wait_attempt_done(&sim, &aid).await;
    assert_shape(&rec("rest_task_attempt_status_failed.json"), &st, "", &[]);
    assert_eq!(st["data"]["failure_summary"], "failed (exit_code=1)");
    let tid = task["data"]["id"].as_str().unwrap_or("");
    let t = get(&sim, &format!("/api/tasks/{tid}")).await;
    assert_eq!(
        (
            t["data"]["status"].as_str(),
            t["data"]["last_attempt_failed"].as_bool()
        ),
        (Some("inreview"), Some(true))
    );
    let pid = st["data"]["latest_execution_process_id"]
        .as_str()
        .unwrap_or("");
    let proc_ = get(&sim, &format!("/api/execution-processes/{pid}")).await;
    assert_shape(&rec("rest_execution_process_failed.json"), &proc_, "", &[]);
    assert_eq!(proc_["data"]["exit_code"], 1);
    assert!(
        sim.truth()
            .processes
            .values()
            .all(|p| p["run_reason"] != "cleanupscript"),
        "no cleanup after failure"
    );

    let errors = fixture("rest_errors.json");
    let (s, body) = call(
        &sim,
        Method::GET,
        "/api/tasks/00000000-0000-0000-0000-000000000000",
        None,
    )
    .await;
    assert_eq!((s, body.as_str()), (404, ""));
    let (s, body) = call(&sim, Method::GET, "/api/nope", None).await;
    assert_eq!((s, body.as_str()), (404, ""));
    let (s, body) = call_raw(
        &sim,
        Method::POST,
        "/api/tasks",
        Some(r#"{"title": 1}"#.to_string()),
    )
    .await;
    assert_eq!(s, 422);
    assert_eq!(body, errors["bad_body"]["response"].as_str().unwrap_or(""));
    for (key, path, b) in [
        ("create_project_disabled", "/api/projects", json!({})),
        (
            "bad_attempt",
            "/api/task-attempts",
            errors["bad_attempt"]["body"].clone(),
        ),
    ] {
        let (s, body) = call(&sim, Method::POST, path, Some(b)).await;
        assert_eq!(
            s as u64,
            errors[key]["status"].as_u64().unwrap_or(0),
            "{key}"
        );
        let got: Value = serde_json::from_str(&body).unwrap_or_default();
        assert_eq!(got, errors[key]["response"], "{key}");
    }
    sim.shutdown().await;
}
