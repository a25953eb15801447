//! Least privilege (issue 26) with real MCP clients against the simulator: every mutating tool
//! × every set of scopes is refused `forbidden` (hint naming the scope) before VK is asked, and
//! `tools/list` shows each caller only its tools; project-limited tokens; and a client inside
//! an attempt workspace without a token, through the stdio bridge, reads and follows up on its
//! own attempt but may not answer approvals or merge.

mod support;

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_config::McpSettings;
use vk_observer_config::access::{Scope, Scopes, TokenFile};
use vk_observer_sim::{AttemptScript, Sim};

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");

/// VK requests that change something: every counted route but GETs (ingest keeps reading).
fn vk_mutations(sim: &Sim) -> u64 {
    sim.counters()
        .by_route
        .iter()
        .filter(|(route, _)| !route.starts_with("GET "))
        .map(|(_, n)| n)
        .sum()
}

/// Every non-empty set of the four scopes.
fn scope_sets() -> Vec<Scopes> {
    (1u8..16)
        .map(|bits| {
            let scopes: Vec<Scope> = Scope::ALL
                .into_iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, s)| s)
                .collect();
            Scopes::of(&scopes)
        })
        .collect()
}

/// A mutating tool, its scope, and well-formed arguments naming the world's objects.
fn mutations(project: Uuid, task: Uuid, attempt: Uuid) -> Vec<(&'static str, Scope, Value)> {
    let a = json!({"attempt_id": attempt});
    vec![
        (
            "create_task",
            Scope::Write,
            json!({"project_id": project, "title": "t"}),
        ),
        (
            "update_task",
            Scope::Write,
            json!({"task_id": task, "title": "u"}),
        ),
        ("delete_task", Scope::Write, json!({"task_id": task})),
        (
            "start_task_attempt",
            Scope::Write,
            json!({"task_id": task, "executor": "CLAUDE_CODE"}),
        ),
        (
            "follow_up",
            Scope::Write,
            json!({"attempt_id": attempt, "prompt": "more", "action": "send"}),
        ),
        ("stop_attempt", Scope::Write, a.clone()),
        ("rebase_attempt", Scope::Deliver, a.clone()),
        ("abort_attempt_conflicts", Scope::Deliver, a.clone()),
        ("merge_attempt", Scope::Deliver, a.clone()),
        ("push_attempt", Scope::Deliver, a),
        (
            "respond_approval",
            Scope::Approve,
            json!({"approval_id": Uuid::new_v4(), "decision": "approve"}),
        ),
    ]
}

struct World {
    project: Uuid,
    other_project: Uuid,
    task: Uuid,
    other_task: Uuid,
    attempt: Uuid,
}

async fn world(sim: &Sim, daemon: &vk_observer_daemon::Daemon) -> World {
    let project = sim.add_project("Scoped", &["demo"]);
    let other_project = sim.add_project("Elsewhere", &["demo"]);
    let task = sim.add_task(project, "Mine", None);
    let other_task = sim.add_task(other_project, "Theirs", None);
    let ids = sim.run_attempt_script(task, AttemptScript::default()).await;
    support::converge(&daemon.store, sim, Duration::from_secs(20), "scoped world").await;
    World {
        project,
        other_project,
        task,
        other_task,
        attempt: ids.attempt_id,
    }
}

fn tokens_settings(path: &std::path::Path) -> McpSettings {
    McpSettings {
        tokens_file: Some(path.to_path_buf()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mutation_outside_a_tokens_scopes_is_refused_before_vk() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    let mut file = TokenFile::default();
    let tokens: Vec<(Scopes, String)> = scope_sets()
        .into_iter()
        .map(|set| {
            let name = format!("t{}", set.names().replace(',', "-"));
            (set, file.create(&name, set, vec![]).unwrap())
        })
        .collect();
    file.save(&path).unwrap();
    let daemon = support::daemon_with(&sim, dir.path(), tokens_settings(&path)).await;
    let w = world(&sim, &daemon).await;
    let all_tools: Vec<String> = {
        let mcp = Mcp::connect_with_token(daemon.addr, &tokens[14].1).await;
        assert!(tokens[14].0.is_all());
        mcp.tool_names().await
    };
    let mut refusals = 0;
    for (set, secret) in &tokens {
        let mcp = Mcp::connect_with_token(daemon.addr, secret).await;
        let listed = mcp.tool_names().await;
        let expected: Vec<String> = all_tools
            .iter()
            .filter(|t| set.contains(vk_observer_mcp::tools::scope_of(t).unwrap()))
            .cloned()
            .collect();
        assert_eq!(listed, expected, "tools/list for scopes {}", set.names());
        for (tool, scope, args) in mutations(w.project, w.task, w.attempt) {
            if set.contains(scope) {
                continue;
            }
            let before = vk_mutations(&sim);
            let e = mcp.call(tool, args).await.err();
            assert_eq!(e["code"], "forbidden", "{tool} with {}: {e}", set.names());
            assert_eq!(e["retryable"], false);
            let hint = e["hint"].as_str().unwrap();
            assert!(
                hint.contains(&format!("`{scope}`")),
                "{tool}: hint names the scope: {hint}"
            );
            assert_eq!(e["details"]["scope"], scope.as_str());
            assert_eq!(
                vk_mutations(&sim),
                before,
                "{tool} with {}: VK was asked",
                set.names()
            );
            refusals += 1;
        }
        // A read-less token is refused reads too.
        if !set.contains(Scope::Read) {
            let e = mcp.call("list_projects", json!({})).await.err();
            assert_eq!(e["code"], "forbidden");
            let uri = format!("vk-observer://attempts/{}/status", w.attempt);
            let refused = mcp
                .client
                .peer()
                .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
                .await
                .expect_err("resources are reads");
            assert!(refused.to_string().contains("`read`"), "{refused}");
        }
    }
    // 11 tools × 15 sets, minus the sets that hold each tool's scope (8 of 15 each).
    assert_eq!(refusals, 11 * 7);
    assert_eq!(sim.truth().tasks.len(), 2, "nothing was created or deleted");
    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_revoked_and_malformed_tokens_get_one_plain_401() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    let mut file = TokenFile::default();
    let kept = file.create("kept", Scopes::all(), vec![]).unwrap();
    let gone = file.create("gone", Scopes::all(), vec![]).unwrap();
    file.revoke("gone");
    file.save(&path).unwrap();
    let daemon = support::daemon_with(&sim, dir.path(), tokens_settings(&path)).await;
    let url = format!("http://{}/mcp", daemon.addr);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for auth in [
        None,
        Some(format!("Bearer {gone}")),
        Some("Bearer vko_0000".to_string()),
        Some(format!("Basic {kept}")),
        Some(format!("Bearer {}x", kept)),
    ] {
        let mut req = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(a) = &auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{auth:?}");
        answers.push(r.text().await.unwrap());
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "one answer for every failure: {answers:?}"
    );
    assert!(!answers[0].contains(&kept[..12]));
    let ok = Mcp::connect_with_token(daemon.addr, &kept).await;
    assert!(ok.tool_names().await.contains(&"merge_attempt".to_string()));
    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_limited_token_touches_only_its_projects() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    let daemon = support::daemon_with(&sim, dir.path(), tokens_settings(&path)).await;
    let w = world(&sim, &daemon).await;
    let mut file = TokenFile::default();
    let secret = file
        .create("limited", Scopes::all(), vec![w.project.to_string()])
        .unwrap();
    file.save(&path).unwrap();
    let mcp = Mcp::connect_with_token(daemon.addr, &secret).await;

    let before = vk_mutations(&sim);
    for (tool, args) in [
        (
            "update_task",
            json!({"task_id": w.other_task, "title": "no"}),
        ),
        (
            "create_task",
            json!({"project_id": w.other_project, "title": "no"}),
        ),
        (
            "update_task",
            json!({"task_id": Uuid::new_v4(), "title": "unknown"}),
        ),
    ] {
        let e = mcp.call(tool, args).await.err();
        assert_eq!(e["code"], "forbidden", "{tool}: {e}");
        assert!(e["hint"].as_str().unwrap().contains("project"), "{e}");
    }
    assert_eq!(vk_mutations(&sim), before, "refused before VK");
    let updated = mcp
        .call(
            "update_task",
            json!({"task_id": w.task, "title": "renamed"}),
        )
        .await
        .ok();
    assert_eq!(updated["task"]["title"], "renamed", "{updated}");
    assert_eq!(sim.counters().task_updates, 1);
    // Reads are limited by project too (tests/mcp_scoped_reads.rs covers every read tool).
    let e = mcp
        .call("get_task", json!({"task_id": w.other_task}))
        .await
        .err();
    assert_eq!(e["code"], "forbidden", "{e}");
    // The audit trail: the one mutation, under the token's name, in the feed at detail ≥ 1.
    let mut audited = Value::Null;
    for _ in 0..100 {
        let page = mcp
            .call(
                "tail_project_activity",
                json!({"project_id": w.project, "detail": 1}),
            )
            .await
            .ok();
        if page["audit"].as_array().is_some_and(|a| !a.is_empty()) {
            audited = page["audit"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let entries = audited
        .as_array()
        .expect("the update is audited in the feed");
    assert_eq!(entries.len(), 1, "{audited}");
    assert_eq!(entries[0]["caller"], "limited");
    assert_eq!(entries[0]["tool"], "update_task");
    assert_eq!(entries[0]["outcome"], "ok");
    assert_eq!(entries[0]["targets"]["task_id"], w.task.to_string());
    assert!(entries[0]["vk_ms"].is_u64());
    let compact = mcp
        .call(
            "tail_project_activity",
            json!({"project_id": w.project, "detail": 0}),
        )
        .await
        .ok();
    assert!(
        compact.get("audit").is_none(),
        "detail 0 leaves the audit out"
    );
    // Another project's feed (and its audit) is not this token's to read.
    let other = mcp
        .call(
            "tail_project_activity",
            json!({"project_id": w.other_project, "detail": 2}),
        )
        .await
        .err();
    assert_eq!(other["code"], "forbidden", "{other}");
    let http: Value = reqwest::Client::new()
        .get(format!("http://{}/audit?caller=limited", daemon.addr))
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(http["entries"].as_array().unwrap().len(), 1, "{http}");
    daemon.shutdown().await;
    sim.shutdown().await;
}

fn call_params(name: &'static str, args: Value) -> CallToolRequestParams {
    let Value::Object(map) = args else { panic!() };
    CallToolRequestParams::new(name).with_arguments(map)
}

fn envelope(r: &rmcp::model::CallToolResult) -> Value {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let text = r.content[0].as_text().expect("text").text.clone();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_workspace_the_bridge_may_not_approve_or_merge() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let w = world(&sim, &daemon).await;
    let other = sim
        .run_attempt_script(w.other_task, AttemptScript::default())
        .await;
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(20),
        "second attempt",
    )
    .await;
    let root = sim.truth().attempts[&w.attempt]["container_ref"]
        .as_str()
        .unwrap()
        .to_string();
    let url = format!("http://{}/mcp", daemon.addr);
    let child = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.args(["mcp", "--daemon", &url, "--workspace", &root]);
    }))
    .unwrap();
    let client = ().serve(child).await.expect("bridge handshake");
    let names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    for hidden in [
        "respond_approval",
        "merge_attempt",
        "push_attempt",
        "rebase_attempt",
    ] {
        assert!(
            !names.contains(&hidden.to_string()),
            "{hidden} listed: {names:?}"
        );
    }
    assert!(names.contains(&"follow_up".to_string()) && names.contains(&"get_context".to_string()));

    let before = vk_mutations(&sim);
    for (tool, args, scope) in [
        (
            "respond_approval",
            json!({"approval_id": Uuid::new_v4(), "decision": "approve"}),
            "approve",
        ),
        ("merge_attempt", json!({"attempt_id": w.attempt}), "deliver"),
    ] {
        let r = client
            .peer()
            .call_tool(call_params(tool, args))
            .await
            .unwrap();
        let e = envelope(&r);
        assert_eq!(e["code"], "forbidden", "{tool}: {e}");
        assert_eq!(e["details"]["scope"], scope);
        assert!(e["hint"].as_str().unwrap().contains(&format!("`{scope}`")));
    }
    // Write is limited to its own attempt: another attempt's follow-up is refused too.
    let r = client
        .peer()
        .call_tool(call_params(
            "follow_up",
            json!({"attempt_id": other.attempt_id, "prompt": "x", "action": "send"}),
        ))
        .await
        .unwrap();
    let e = envelope(&r);
    assert_eq!(e["code"], "forbidden");
    assert_eq!(e["details"]["limit"]["attempt_id"], w.attempt.to_string());
    assert_eq!(vk_mutations(&sim), before, "refused before VK");
    // Its own attempt: allowed.
    let r = client
        .peer()
        .call_tool(call_params(
            "follow_up",
            json!({"attempt_id": w.attempt, "prompt": "and tests", "action": "send"}),
        ))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(sim.counters().follow_ups, 1);
    client.cancel().await.ok();
    daemon.shutdown().await;
    sim.shutdown().await;
}
