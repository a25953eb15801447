//! Every read tool through a real MCP client (rmcp over Streamable HTTP) against the daemon fed
//! by the simulator, values checked against the simulator's ground truth — discovery, tasks,
//! attempts and status here; logs, changes, transcripts and context in tests/mcp_observe.rs —
//! plus the seed-002 scenarios on these tools.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::world::*;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_tasks_and_status_answer_from_the_cache_as_vk_would() {
    let Served {
        sim,
        dir: _dir,
        daemon,
        w,
        truth,
        mcp,
    } = serve_world().await;
    let rest_before = sim.counters().rest_gets;

    // Tool list: every read tool; get_context only inside a workspace.
    let names = mcp.tool_names().await;
    for n in [
        "get_attempt_changes",
        "get_attempt_status",
        "get_task",
        "list_executors",
        "list_projects",
        "list_repos",
        "list_task_attempts",
        "list_tasks",
        "tail_attempt_logs",
        "tail_session_messages",
    ] {
        assert!(names.contains(&n.to_string()), "{n} missing from {names:?}");
    }
    assert!(!names.contains(&"get_context".to_string()));

    // list_projects / list_repos
    let projects = mcp.call("list_projects", json!({})).await.ok();
    assert_eq!(
        projects["projects"].as_array().unwrap().len(),
        truth.projects.len()
    );
    let p = &projects["projects"][0];
    assert_eq!(id(&p["project_id"]), w.project);
    assert_eq!(p["name"], "Demo");
    assert_eq!(p["repo_count"], 2);
    assert_eq!(projects["freshness"]["upstream"], "connected");
    let repos = mcp
        .call("list_repos", json!({"project_id": w.project}))
        .await
        .ok();
    let names: Vec<&str> = repos["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["demo", "docs"]);
    for r in repos["repos"].as_array().unwrap() {
        assert!(
            truth.repos[&w.project]
                .iter()
                .any(|t| t["id"] == r["repo_id"])
        );
    }

    // list_executors: from VK's /api/info.
    let ex = mcp.call("list_executors", json!({})).await.ok();
    let claude = ex["executors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["executor"] == "CLAUDE_CODE")
        .unwrap();
    assert_eq!(
        claude["variants"],
        json!(["APPROVALS", "DEFAULT", "OPUS", "PLAN"])
    );
    assert_eq!(claude["default_variant"], "DEFAULT");
    assert_eq!(claude["supports_mcp"], true);
    assert_eq!(claude["is_default"], true);
    assert!(
        ex["executors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["executor"] == "CODEX")
    );

    // list_tasks: every task with the attempt summary computed independently from the truth.
    let tasks = mcp
        .call("list_tasks", json!({"project_id": w.project}))
        .await
        .ok();
    let listed = tasks["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 5);
    assert_eq!(tasks["total"], 5);
    assert!(tasks["next_cursor"].is_null());
    for t in listed {
        let tid = id(&t["task_id"]);
        let vk = &truth.tasks[&tid];
        assert_eq!(t["title"], vk["title"]);
        assert_eq!(t["status"], vk["status"]);
        assert_eq!(
            t["has_in_progress_attempt"], vk["has_in_progress_attempt"],
            "{}",
            t["title"]
        );
        assert_eq!(
            t["last_attempt_failed"], vk["last_attempt_failed"],
            "{}",
            t["title"]
        );
        let attempts = attempts_of(&truth, tid);
        let latest = attempts.first();
        assert_eq!(t["latest_attempt_id"], uuid_or_null(latest.map(|a| a.0)));
        assert_eq!(
            t["latest_workspace_branch"],
            latest.map(|a| a.1["branch"].clone()).unwrap_or(Value::Null)
        );
        let session = latest.and_then(|a| latest_session(&truth, a.0));
        assert_eq!(
            t["latest_session_id"],
            uuid_or_null(session.as_ref().map(|s| s.0))
        );
        assert_eq!(
            t["latest_session_executor"],
            session
                .map(|s| s.1["executor"].clone())
                .unwrap_or(Value::Null)
        );
    }
    let created: Vec<_> = listed.iter().map(|t| instant(&t["created_at"])).collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "newest first");
    // Filters and cursor paging.
    let failed = mcp
        .call(
            "list_tasks",
            json!({"project_id": w.project, "q": "should fail"}),
        )
        .await
        .ok();
    assert_eq!(failed["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(failed["tasks"][0]["last_attempt_failed"], true);
    let todo = mcp
        .call(
            "list_tasks",
            json!({"project_id": w.project, "status": "todo"}),
        )
        .await
        .ok();
    let todo_ids: Vec<Uuid> = todo["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| id(&t["task_id"]))
        .collect();
    let expected_todo: Vec<Uuid> = truth
        .tasks
        .iter()
        .filter(|(_, t)| t["status"] == "todo")
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(todo_ids.len(), expected_todo.len());
    assert!(todo_ids.contains(&w.todo_task));
    let future = mcp
        .call(
            "list_tasks",
            json!({"project_id": w.project, "updated_since": "2999-01-01T00:00:00Z"}),
        )
        .await
        .ok();
    assert_eq!(future["tasks"].as_array().unwrap().len(), 0);
    let mut paged = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let mut args = json!({"project_id": w.project, "limit": 2});
        if !cursor.is_null() {
            args["cursor"] = cursor.clone();
        }
        let page = mcp.call("list_tasks", args).await.ok();
        paged.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["task_id"].clone()),
        );
        cursor = page["next_cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    let all: Vec<Value> = listed.iter().map(|t| t["task_id"].clone()).collect();
    assert_eq!(paged, all, "cursor pages cover every task once, in order");
    assert_eq!(
        mcp.call(
            "list_tasks",
            json!({"project_id": w.project, "cursor": "garbage"})
        )
        .await
        .code(),
        "invalid_argument"
    );
    assert_eq!(
        mcp.call("list_tasks", json!({"project_id": Uuid::new_v4()}))
            .await
            .code(),
        "not_found"
    );

    // get_task / list_task_attempts
    let task = mcp
        .call(
            "get_task",
            json!({"task_id": w.ok_task, "include_attempts": true}),
        )
        .await
        .ok();
    assert_eq!(task["task"]["title"], "Add a greeting file");
    assert_eq!(task["attempts"].as_array().unwrap().len(), 1);
    assert!(
        mcp.call("get_task", json!({"task_id": w.ok_task}))
            .await
            .ok()["attempts"]
            .is_null()
    );
    assert_eq!(
        mcp.call("get_task", json!({"task_id": Uuid::new_v4()}))
            .await
            .code(),
        "not_found"
    );
    let la = mcp
        .call("list_task_attempts", json!({"task_id": w.ok_task}))
        .await
        .ok();
    assert_eq!(id(&la["latest_attempt_id"]), w.ok_attempt);
    assert_eq!(id(&la["latest_session_id"]), w.ok_session);
    assert_eq!(la["attempts"][0]["latest_session_executor"], "CLAUDE_CODE");
    assert_eq!(
        la["attempts"][0]["workspace_branch"],
        truth.attempts[&w.ok_attempt]["branch"]
    );
    assert_eq!(la["attempts"][0]["state"], "completed");
    // Seed 002: an attempt with no session has null session fields, also at the top level.
    let bare = mcp
        .call("list_task_attempts", json!({"task_id": w.bare_task}))
        .await
        .ok();
    assert_eq!(id(&bare["latest_attempt_id"]), w.bare_attempt);
    assert!(bare["latest_session_id"].is_null());
    assert!(bare["attempts"][0]["latest_session_id"].is_null());
    let none = mcp
        .call("list_task_attempts", json!({"task_id": w.todo_task}))
        .await
        .ok();
    assert!(none["latest_attempt_id"].is_null());
    assert_eq!(none["attempts"], json!([]));

    // Seed 002: attempts are `attempt_id` everywhere; no workspace_id alias leaks out.
    assert!(!la.to_string().contains("workspace_id"), "{la}");
    assert!(!task.to_string().contains("workspace_id"));

    // get_attempt_status: single and batch equal VK's /status rules (computed by the simulator).
    let all_attempts: Vec<Uuid> = truth.attempts.keys().copied().collect();
    let batch = mcp
        .call("get_attempt_status", json!({"attempt_ids": all_attempts}))
        .await
        .ok();
    assert_eq!(
        batch["attempts"].as_array().unwrap().len(),
        all_attempts.len()
    );
    for s in batch["attempts"].as_array().unwrap() {
        let a = id(&s["attempt_id"]);
        let vk = &truth.attempt_status[&a];
        for f in [
            "task_id",
            "workspace_branch",
            "latest_session_id",
            "latest_execution_process_id",
            "state",
            "failure_summary",
        ] {
            assert_eq!(s[f], vk[f], "attempt {a} field {f}");
        }
        for f in ["created_at", "updated_at", "last_activity_at"] {
            assert_eq!(instant(&s[f]), instant(&vk[f]), "attempt {a} field {f}");
        }
    }
    let one = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_id": w.failed_attempt}),
        )
        .await
        .ok();
    let st = &one;
    assert_eq!(st["state"], "failed");
    assert!(!st["failure_summary"].as_str().unwrap().is_empty());
    assert_eq!(st["result"]["outcome"], "failure");
    assert_eq!(
        st["result"]["state"], "failed",
        "the finer word, at detail 2"
    );
    assert_eq!(
        st["result"]["last_error_code"], "agent_exit_nonzero",
        "{st}"
    );
    assert_eq!(st["result"]["recommended_next_action"], "follow_up");
    assert_eq!(st["result"]["next_tool"], "follow_up");
    let ok = mcp
        .call("get_attempt_status", json!({"attempt_id": w.ok_attempt}))
        .await
        .ok();
    assert_eq!(ok["result"]["recommended_next_action"], "review_changes");
    assert_eq!(ok["result"]["next_tool"], "get_attempt_changes");
    assert_eq!(
        ok["dev_server_running"], true,
        "the dev server runs but does not count"
    );
    let idle = mcp
        .call("get_attempt_status", json!({"attempt_id": w.bare_attempt}))
        .await
        .ok();
    assert_eq!(idle["state"], "idle");
    assert!(idle["latest_session_id"].is_null());
    assert!(idle["latest_execution_process_id"].is_null());
    let ghost = Uuid::new_v4();
    let mixed = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_ids": [w.ok_attempt, ghost]}),
        )
        .await
        .ok();
    assert_eq!(mixed["not_found"], json!([ghost]));
    assert_eq!(
        mcp.call("get_attempt_status", json!({"attempt_id": ghost}))
            .await
            .code(),
        "not_found"
    );
    assert_eq!(
        mcp.call(
            "get_attempt_status",
            json!({"attempt_id": w.ok_attempt, "attempt_ids": [w.ok_attempt]})
        )
        .await
        .classed(),
        "invalid_argument/ambiguous_target"
    );
    assert_eq!(
        mcp.call("get_attempt_status", json!({})).await.classed(),
        "invalid_argument/ambiguous_target"
    );
    let too_many: Vec<Uuid> = (0..101).map(|_| Uuid::new_v4()).collect();
    assert_eq!(
        mcp.call("get_attempt_status", json!({"attempt_ids": too_many}))
            .await
            .code(),
        "invalid_argument"
    );
    // since_token: nothing changed → nothing returned; a foreign token → complete answer + reset.
    let token = batch["token"].clone();
    let quiet = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_ids": all_attempts, "since_token": token}),
        )
        .await
        .ok();
    assert_eq!(quiet["attempts"], json!([]));
    assert_eq!(quiet["unchanged"], all_attempts.len());
    let foreign = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_ids": all_attempts, "since_token": "00000000deadbeef.1"}),
        )
        .await
        .ok();
    assert_eq!(foreign["token_reset"], true);
    assert_eq!(
        foreign["attempts"].as_array().unwrap().len(),
        all_attempts.len()
    );
    assert_eq!(
        mcp.call(
            "get_attempt_status",
            json!({"attempt_id": w.ok_attempt, "since_token": "nope"})
        )
        .await
        .code(),
        "invalid_argument"
    );

    // No read tool called VK: every answer came from the cache.
    // VK's own aggregate routes (what a proxying MCP server would call) were never used, and
    // the few other GETs are ingest's own background refreshes, not one per read.
    let counters = sim.counters();
    for route in [
        "GET /api/task-attempts/{id}/status",
        "GET /api/sessions/{id}/messages",
    ] {
        assert_eq!(
            counters.by_route.get(route).copied().unwrap_or(0),
            0,
            "{route} was called"
        );
    }
    let rest_after = counters.rest_gets;
    assert!(
        rest_after - rest_before <= 10,
        "reads went upstream: {} REST GETs during ~90 tool calls",
        rest_after - rest_before
    );

    // Reads keep answering while VK is down, and say so.
    sim.shutdown().await;
    let mut state = Value::Null;
    for _ in 0..100 {
        let r = mcp
            .call("list_tasks", json!({"project_id": w.project}))
            .await
            .ok();
        assert_eq!(r["tasks"].as_array().unwrap().len(), 5);
        state = r["freshness"]["upstream"].clone();
        if state != "connected" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(
        state, "connected",
        "freshness must report the lost upstream"
    );
    daemon.shutdown().await;
}
