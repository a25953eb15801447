//! Reads obey the same limits as mutations (issue 26), with real MCP clients against the
//! simulator: a project-limited token reads inside its projects and is refused `forbidden`
//! (details.limit, details.refused, a hint) outside them across every read tool family and the
//! resources; listings that name no project are filtered to its projects; a batch naming a
//! foreign attempt is refused whole. A tokenless client inside an attempt workspace, through
//! the stdio bridge, reads its own attempt and task, sees only its project and task in the
//! listings, and is refused other attempts and its project's wider feeds.

mod support;

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams, SubscribeRequestParams};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use support::mcp::{Mcp, Reply};
use uuid::Uuid;
use vk_observer_config::McpSettings;
use vk_observer_config::access::{Scopes, TokenFile};
use vk_observer_sim::{AttemptScript, Sim};

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");

/// Two projects, each with a task and an attempt; a neighbour task and attempt in the first.
struct World {
    project: Uuid,
    task: Uuid,
    attempt: Uuid,
    session: Uuid,
    neighbour_task: Uuid,
    neighbour_attempt: Uuid,
    other_project: Uuid,
    other_task: Uuid,
    other_attempt: Uuid,
    other_session: Uuid,
}

async fn world(sim: &Sim, daemon: &vk_observer_daemon::Daemon) -> World {
    let project = sim.add_project("Scoped", &["demo"]);
    let other_project = sim.add_project("Elsewhere", &["demo"]);
    let task = sim.add_task(project, "Mine", None);
    let neighbour_task = sim.add_task(project, "Neighbour", None);
    let other_task = sim.add_task(other_project, "Theirs", None);
    let mine = sim.run_attempt_script(task, AttemptScript::default()).await;
    let neighbour = sim
        .run_attempt_script(neighbour_task, AttemptScript::default())
        .await;
    let other = sim
        .run_attempt_script(other_task, AttemptScript::default())
        .await;
    support::converge(&daemon.store, sim, Duration::from_secs(20), "read world").await;
    World {
        project,
        task,
        attempt: mine.attempt_id,
        session: mine.session_id,
        neighbour_task,
        neighbour_attempt: neighbour.attempt_id,
        other_project,
        other_task,
        other_attempt: other.attempt_id,
        other_session: other.session_id,
    }
}

/// Every read tool naming one target, with well-formed arguments: (tool, arguments) for a
/// project, its task, its attempt and that attempt's session.
fn reads(project: Uuid, task: Uuid, attempt: Uuid, session: Uuid) -> Vec<(&'static str, Value)> {
    let a = json!({"attempt_id": attempt});
    vec![
        ("list_tasks", json!({"project_id": project})),
        ("list_repos", json!({"project_id": project})),
        ("tail_project_activity", json!({"project_id": project})),
        ("list_approvals", json!({"project_id": project})),
        (
            "wait_for_attempt_change",
            json!({"project_id": project, "timeout_ms": 0}),
        ),
        ("get_task", json!({"task_id": task})),
        ("list_task_attempts", json!({"task_id": task})),
        ("tail_task_activity", json!({"task_id": task})),
        ("get_attempt_status", a.clone()),
        ("get_attempt_status", json!({"attempt_ids": [attempt]})),
        ("tail_attempt_logs", a.clone()),
        ("get_attempt_changes", a.clone()),
        (
            "get_attempt_file",
            json!({"attempt_id": attempt, "path": "README.md"}),
        ),
        (
            "get_attempt_patch",
            json!({"attempt_id": attempt, "paths": ["README.md"]}),
        ),
        ("get_attempt_branch_status", a.clone()),
        ("tail_session_messages", json!({"session_id": session})),
        ("list_approvals", json!({"attempt_ids": [attempt]})),
        (
            "wait_for_attempt_change",
            json!({"attempt_ids": [attempt], "timeout_ms": 0}),
        ),
    ]
}

/// True for a `forbidden` refusal; any answer or other error is not one.
fn forbidden(reply: &Reply) -> bool {
    matches!(reply, Reply::Err(e) if e["code"] == "forbidden")
}

fn tokens_settings(path: &std::path::Path) -> McpSettings {
    McpSettings {
        tokens_file: Some(path.to_path_buf()),
        ..Default::default()
    }
}

fn ids(list: &Value, field: &str, id: &str) -> Vec<String> {
    list[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} in {list}"))
        .iter()
        .map(|i| i[id].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_limited_token_reads_only_its_projects() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    let daemon = support::daemon_with(&sim, dir.path(), tokens_settings(&path)).await;
    let w = world(&sim, &daemon).await;
    let mut file = TokenFile::default();
    let limited = file
        .create("reader", Scopes::all(), vec![w.project.to_string()])
        .unwrap();
    let full = file.create("orchestrator", Scopes::all(), vec![]).unwrap();
    file.save(&path).unwrap();
    let mcp = Mcp::connect_with_token(daemon.addr, &limited).await;
    let orchestrator = Mcp::connect_with_token(daemon.addr, &full).await;

    let inside = reads(w.project, w.task, w.attempt, w.session);
    let outside = reads(
        w.other_project,
        w.other_task,
        w.other_attempt,
        w.other_session,
    );
    for ((tool, mine), (_, theirs)) in inside.into_iter().zip(outside) {
        let reply = mcp.call(tool, mine.clone()).await;
        assert!(!forbidden(&reply), "{tool} {mine} inside: {reply:?}");
        let e = mcp.call(tool, theirs.clone()).await.err();
        assert_eq!(e["code"], "forbidden", "{tool} {theirs} outside: {e}");
        assert_eq!(e["retryable"], false);
        assert_eq!(e["details"]["scope"], "read");
        assert_eq!(e["details"]["limit"]["project_ids"], json!([w.project]));
        assert!(e["hint"].as_str().unwrap().contains("projects"), "{e}");
        // The unlimited token is answered as before.
        let reply = orchestrator.call(tool, theirs).await;
        assert!(!forbidden(&reply), "{tool} full: {reply:?}");
    }
    // A wait of a limited caller is not parked before its check: a foreign one is refused at
    // once (never when the attempt changes), its own waits its time out.
    // (Parked, it would answer only after its 50 s; half of that is a generous bound.)
    let foreign_wait = mcp.call(
        "wait_for_attempt_change",
        json!({"attempt_ids": [w.other_attempt], "timeout_ms": 50_000}),
    );
    let e = tokio::time::timeout(Duration::from_secs(25), foreign_wait)
        .await
        .expect("refused before waiting, not parked")
        .err();
    assert_eq!(e["code"], "forbidden", "{e}");
    let token = mcp
        .call("get_attempt_status", json!({"attempt_id": w.attempt}))
        .await
        .ok()["token"]
        .clone();
    let waited = mcp
        .call(
            "wait_for_attempt_change",
            json!({"attempt_ids": [w.attempt], "since_token": token, "timeout_ms": 300}),
        )
        .await
        .ok();
    assert_eq!(waited["outcome"], "timeout", "{waited}");
    // A batch naming a foreign attempt is refused whole, naming it.
    let e = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_ids": [w.attempt, w.other_attempt]}),
        )
        .await
        .err();
    assert_eq!(e["code"], "forbidden", "{e}");
    assert_eq!(
        e["details"]["refused"],
        json!([{"field": "attempt_ids", "id": w.other_attempt}])
    );
    // An id the cache does not hold cannot be shown to be its own.
    let unknown = Uuid::new_v4();
    let e = mcp
        .call("get_attempt_status", json!({"attempt_id": unknown}))
        .await
        .err();
    assert_eq!(e["code"], "forbidden", "{e}");
    // Listings naming no project are filtered.
    let projects = mcp.call("list_projects", json!({})).await.ok();
    assert_eq!(
        ids(&projects, "projects", "project_id"),
        [w.project.to_string()]
    );
    assert_eq!(projects["total"], 1, "{projects}");
    let all = orchestrator.call("list_projects", json!({})).await.ok();
    assert_eq!(all["projects"].as_array().unwrap().len(), 2, "{all}");
    let tasks = mcp
        .call("list_tasks", json!({"project_id": w.project}))
        .await
        .ok();
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 2, "{tasks}");
    audit_shows_only_its_projects(&daemon, &w, &orchestrator, &full, &limited).await;
    resources_inside_and_outside(&mcp, &w).await;
    daemon.shutdown().await;
    sim.shutdown().await;
}

/// `GET /audit` of the limited token: the orchestrator's edit of the other project is not its to
/// see, and naming that project is refused.
async fn audit_shows_only_its_projects(
    daemon: &vk_observer_daemon::Daemon,
    w: &World,
    orchestrator: &Mcp,
    full: &str,
    limited: &str,
) {
    orchestrator
        .call(
            "update_task",
            json!({"task_id": w.other_task, "title": "renamed"}),
        )
        .await
        .ok();
    let audit = |secret: String, query: String| {
        let addr = daemon.addr;
        async move {
            let r = reqwest::Client::new()
                .get(format!("http://{addr}/audit{query}"))
                .bearer_auth(secret)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, all) = audit(full.to_string(), String::new()).await;
    assert_eq!(
        (status, all["entries"].as_array().unwrap().len()),
        (200, 1),
        "{all}"
    );
    let (status, mine) = audit(limited.to_string(), String::new()).await;
    assert_eq!(
        (status, mine["entries"].as_array().unwrap().len()),
        (200, 0),
        "{mine}"
    );
    let (status, refused) = audit(
        limited.to_string(),
        format!("?project_id={}", w.other_project),
    )
    .await;
    assert_eq!(
        (status, &refused["code"]),
        (403, &json!("forbidden")),
        "{refused}"
    );
}

/// Resources of the limited token: read and subscribe inside its project, refused outside.
#[allow(deprecated)] // resources/subscribe: the 2025 era's subscription, still served
async fn resources_inside_and_outside(mcp: &Mcp, w: &World) {
    for (uri_of, wake_ok) in [
        (format!("vk-observer://attempts/{}", w.attempt), true),
        (
            format!("vk-observer://attempts/{}/logs", w.other_attempt),
            false,
        ),
        (
            format!("vk-observer://projects/{}/activity", w.project),
            true,
        ),
        (
            format!("vk-observer://projects/{}/activity", w.other_project),
            false,
        ),
    ] {
        let read = mcp
            .client
            .peer()
            .read_resource(ReadResourceRequestParams::new(uri_of.clone()))
            .await;
        let sub = mcp
            .client
            .peer()
            .subscribe(SubscribeRequestParams::new(uri_of.clone()))
            .await;
        if wake_ok {
            read.unwrap_or_else(|e| panic!("{uri_of}: {e}"));
            sub.unwrap_or_else(|e| panic!("{uri_of}: {e}"));
        } else {
            let e = read.expect_err("foreign resource");
            assert!(e.to_string().contains("projects"), "{uri_of}: {e}");
            sub.expect_err("foreign subscription");
        }
    }
}

fn params(name: &'static str, args: Value) -> CallToolRequestParams {
    let Value::Object(map) = args else { panic!() };
    CallToolRequestParams::new(name).with_arguments(map)
}

/// A tool answer of the bridge as `Reply` (`Err` holds the envelope).
async fn bridge_call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    name: &'static str,
    args: Value,
) -> Reply {
    let mut args = args;
    args.as_object_mut()
        .unwrap()
        .entry("detail")
        .or_insert(json!(2));
    if name == "get_context" {
        args = json!({});
    }
    let r = client.peer().call_tool(params(name, args)).await.unwrap();
    let text = r.content[0].as_text().expect("text").text.clone();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if r.is_error == Some(true) {
        Reply::Err(v)
    } else {
        Reply::Ok(r.structured_content.unwrap_or(v))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_workspace_the_bridge_reads_only_its_own_attempt() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let w = world(&sim, &daemon).await;
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

    let context = bridge_call(&client, "get_context", json!({})).await.ok();
    assert_eq!(context["attempt_id"], w.attempt.to_string(), "{context}");
    // Its own attempt, task and (for the task list and repos) project: answered.
    for (tool, args) in reads(w.project, w.task, w.attempt, w.session) {
        let refused_by_design = matches!(
            (tool, args.get("project_id")),
            (
                "tail_project_activity" | "list_approvals" | "wait_for_attempt_change",
                Some(_)
            )
        );
        let reply = bridge_call(&client, tool, args.clone()).await;
        assert_eq!(
            forbidden(&reply),
            refused_by_design,
            "{tool} {args}: {reply:?}"
        );
    }
    // Another attempt of its own project, its task, and the other project: refused.
    let neighbour = reads(
        w.project,
        w.neighbour_task,
        w.neighbour_attempt,
        Uuid::nil(),
    );
    let foreign = reads(
        w.other_project,
        w.other_task,
        w.other_attempt,
        w.other_session,
    );
    for (tool, args) in neighbour.into_iter().chain(foreign) {
        let own_project_listing = matches!(tool, "list_tasks" | "list_repos")
            && args["project_id"] == w.project.to_string();
        if own_project_listing
            || tool == "tail_session_messages" && args["session_id"] == Uuid::nil().to_string()
        {
            continue;
        }
        let e = bridge_call(&client, tool, args.clone()).await.err();
        assert_eq!(e["code"], "forbidden", "{tool} {args}: {e}");
        assert_eq!(e["details"]["limit"]["attempt_id"], w.attempt.to_string());
        assert!(e["hint"].as_str().unwrap().contains("get_context"), "{e}");
    }
    // Listings: its project, and in it its task.
    let projects = bridge_call(&client, "list_projects", json!({})).await.ok();
    assert_eq!(
        ids(&projects, "projects", "project_id"),
        [w.project.to_string()]
    );
    let tasks = bridge_call(&client, "list_tasks", json!({"project_id": w.project}))
        .await
        .ok();
    assert_eq!(ids(&tasks, "tasks", "task_id"), [w.task.to_string()]);
    // Resources of another attempt: refused.
    let uri = format!("vk-observer://attempts/{}", w.neighbour_attempt);
    client
        .peer()
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .expect_err("another attempt's status resource");
    let own = format!("vk-observer://attempts/{}", w.attempt);
    client
        .peer()
        .read_resource(ReadResourceRequestParams::new(own))
        .await
        .expect("its own status resource");
    client.cancel().await.ok();
    daemon.shutdown().await;
    sim.shutdown().await;
}
