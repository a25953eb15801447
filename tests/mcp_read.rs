//! Every read tool through a real MCP client (rmcp over Streamable HTTP) against the daemon fed
//! by the simulator, values checked against the simulator's ground truth, plus the seed-002
//! scenarios on these tools (attempt without session, idle/running/failed states, default tail,
//! older pages, mixed pagination, guard block and force, exactly-one targeting).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer::sim::{AgentOutcome, AttemptScript, SimFile, Truth};

fn files(repo: &str, n: usize, lines: u64) -> Vec<SimFile> {
    (0..n)
        .map(|i| SimFile {
            repo: repo.into(),
            path: format!("src/f{i}.rs"),
            change: "added".into(),
            additions: lines,
            deletions: 0,
            content: format!("fn f{i}() {{}}\n"),
        })
        .collect()
}

fn instant(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()?
        .parse::<DateTime<Utc>>()
        .ok()
        .map(|t| DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap())
}

fn id(v: &Value) -> Uuid {
    v.as_str().unwrap().parse().unwrap()
}

/// Attempts of a task, newest created first, id ascending on ties (the spec's order).
fn attempts_of(truth: &Truth, task: Uuid) -> Vec<(Uuid, Value)> {
    let mut v: Vec<(Uuid, Value)> = truth
        .attempts
        .iter()
        .filter(|(_, a)| a["task_id"] == json!(task.to_string()))
        .map(|(k, a)| (*k, a.clone()))
        .collect();
    v.sort_by(|(ia, a), (ib, b)| {
        instant(&b["created_at"])
            .cmp(&instant(&a["created_at"]))
            .then(ia.cmp(ib))
    });
    v
}

fn latest_session(truth: &Truth, attempt: Uuid) -> Option<(Uuid, Value)> {
    truth
        .sessions
        .iter()
        .filter(|(_, s)| s["workspace_id"] == json!(attempt.to_string()))
        .max_by_key(|(_, s)| instant(&s["created_at"]))
        .map(|(k, s)| (*k, s.clone()))
}

fn uuid_or_null(v: Option<Uuid>) -> Value {
    v.map(|u| json!(u.to_string())).unwrap_or(Value::Null)
}

struct World {
    project: Uuid,
    ok_task: Uuid,
    ok_attempt: Uuid,
    ok_session: Uuid,
    failed_attempt: Uuid,
    todo_task: Uuid,
    bare_task: Uuid,
    bare_attempt: Uuid,
    huge_attempt: Uuid,
}

async fn build_world(sim: &vk_observer::sim::Sim) -> World {
    let project = sim.add_project("Demo", &["demo", "docs"]);
    let ok_task = sim.add_task(
        project,
        "Add a greeting file",
        Some("Please write a greeting file."),
    );
    let ok = sim
        .run_attempt_script(
            ok_task,
            AttemptScript {
                normalized_entries: 130,
                raw_entries: 40,
                replacements: 5,
                files: [files("demo", 2, 3), files("docs", 1, 1)].concat(),
                dev_server: true,
                ..AttemptScript::default()
            },
        )
        .await;
    sim.follow_up_script(
        ok.session_id,
        "now add a second line",
        AttemptScript {
            normalized_entries: 12,
            replacements: 2,
            ..AttemptScript::default()
        },
    )
    .await;
    let failed_task = sim.add_task(project, "Task that should FAIL", None);
    let failed = sim
        .run_attempt_script(
            failed_task,
            AttemptScript {
                agent: AgentOutcome::Fail,
                ..AttemptScript::default()
            },
        )
        .await;
    let todo_task = sim.add_task(project, "Plain todo, nothing started", None);
    let bare_task = sim.add_task(project, "Attempt without a session", None);
    let bare_attempt = sim.create_bare_attempt(bare_task);
    let huge_task = sim.add_task(project, "Huge refactor", None);
    let huge = sim
        .run_attempt_script(
            huge_task,
            AttemptScript {
                files: files("demo", 600, 2),
                ..AttemptScript::default()
            },
        )
        .await;
    World {
        project,
        ok_task,
        ok_attempt: ok.attempt_id,
        ok_session: ok.session_id,
        failed_attempt: failed.attempt_id,
        todo_task,
        bare_task,
        bare_attempt,
        huge_attempt: huge.attempt_id,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_tool_answers_from_the_cache_as_vk_would() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let w = build_world(&sim).await;
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "scripted world",
    )
    .await;
    let truth = sim.truth();
    let mcp = Mcp::connect(daemon.addr).await;
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
    let st = &one["attempts"][0];
    assert_eq!(st["state"], "failed");
    assert!(!st["failure_summary"].as_str().unwrap().is_empty());
    assert_eq!(st["result"]["outcome"], "failed");
    assert_eq!(st["result"]["recommended_next_action"], "tail_attempt_logs");
    let ok = mcp
        .call("get_attempt_status", json!({"attempt_id": w.ok_attempt}))
        .await
        .ok();
    assert_eq!(
        ok["attempts"][0]["result"]["recommended_next_action"],
        "get_attempt_changes"
    );
    assert_eq!(
        ok["attempts"][0]["dev_server_running"], true,
        "the dev server runs but does not count"
    );
    let idle = mcp
        .call("get_attempt_status", json!({"attempt_id": w.bare_attempt}))
        .await
        .ok();
    assert_eq!(idle["attempts"][0]["state"], "idle");
    assert!(idle["attempts"][0]["latest_session_id"].is_null());
    assert!(idle["attempts"][0]["latest_execution_process_id"].is_null());
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
        .code(),
        "ambiguous_target"
    );
    assert_eq!(
        mcp.call("get_attempt_status", json!({})).await.code(),
        "ambiguous_target"
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

    // tail_attempt_logs: default tail, older pages, incremental tail, raw channel.
    let agent = truth.attempt_status[&w.ok_attempt].clone();
    let _ = agent;
    let processes: Vec<(Uuid, Value)> = truth
        .processes
        .iter()
        .filter(|(pid, _)| sim_attempt_of(&truth, **pid) == Some(w.ok_attempt))
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    let follow_agent = processes
        .iter()
        .filter(|(_, p)| p["run_reason"] == "codingagent")
        .max_by_key(|(_, p)| instant(&p["created_at"]))
        .unwrap()
        .0;
    let full = &truth.normalized_logs[&follow_agent];
    let tail = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "limit": 5}),
        )
        .await
        .ok();
    assert_eq!(
        id(&tail["execution_process_id"]),
        follow_agent,
        "latest coding agent, not the cleanup script"
    );
    let got: Vec<Value> = tail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["entry"].clone())
        .collect();
    assert_eq!(got, full[full.len() - 5..].to_vec());
    assert_eq!(tail["latest_entry_index"], full.len() - 1);
    assert_eq!(tail["has_more"], true);
    assert_eq!(tail["log_complete"], true);
    let mut walked: Vec<Value> = got.clone();
    let mut cursor = tail["next_cursor"].clone();
    while !cursor.is_null() {
        let page = mcp
            .call(
                "tail_attempt_logs",
                json!({"attempt_id": w.ok_attempt, "limit": 4, "cursor": cursor}),
            )
            .await
            .ok();
        let mut older: Vec<Value> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["entry"].clone())
            .collect();
        older.extend(walked);
        walked = older;
        cursor = page["next_cursor"].clone();
    }
    assert_eq!(
        &walked, full,
        "older pages walk back to entry 0 without gaps"
    );
    let newer = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "after_entry_index": full.len() - 3}),
        )
        .await
        .ok();
    assert_eq!(newer["entries"].as_array().unwrap().len(), 2);
    assert_eq!(newer["has_more"], false);
    assert_eq!(
        mcp.call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "cursor": 3, "after_entry_index": 1})
        )
        .await
        .code(),
        "mixed_pagination"
    );
    let raw = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "channel": "raw", "limit": 500}),
        )
        .await
        .ok();
    let raw_got: Vec<Value> = raw["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["entry"].clone())
        .collect();
    assert_eq!(raw_got, truth.raw_logs[&follow_agent]);
    let empty = mcp
        .call("tail_attempt_logs", json!({"attempt_id": w.bare_attempt}))
        .await
        .ok();
    assert_eq!(empty["entries"], json!([]));
    assert_eq!(empty["has_more"], false);
    assert!(empty["execution_process_id"].is_null());
    let first_agent = processes
        .iter()
        .filter(|(_, p)| p["run_reason"] == "codingagent")
        .min_by_key(|(_, p)| instant(&p["created_at"]))
        .unwrap()
        .0;
    let pinned = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "execution_process_id": first_agent, "limit": 500}),
        )
        .await
        .ok();
    assert_eq!(
        pinned["entries"].as_array().unwrap().len(),
        truth.normalized_logs[&first_agent].len()
    );
    let dev = processes
        .iter()
        .find(|(_, p)| p["run_reason"] == "devserver")
        .unwrap()
        .0;
    assert_eq!(
        mcp.call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "execution_process_id": dev})
        )
        .await
        .code(),
        "invalid_argument"
    );

    // get_attempt_changes: summary, repo-prefixed files, guard block and force.
    let ch = mcp
        .call("get_attempt_changes", json!({"attempt_id": w.ok_attempt}))
        .await
        .ok();
    let vk = &truth.changes[&w.ok_attempt];
    assert_eq!(ch["blocked"], false);
    assert_eq!(ch["summary"]["file_count"], vk["summary"]["fileCount"]);
    assert_eq!(ch["summary"]["added"], vk["summary"]["added"]);
    assert_eq!(ch["files"], vk["files"]);
    assert!(
        ch["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().starts_with("docs/"))
    );
    let huge = mcp
        .call("get_attempt_changes", json!({"attempt_id": w.huge_attempt}))
        .await
        .ok();
    assert_eq!(huge["blocked"], true);
    assert_eq!(huge["blocked_reason"], "threshold_exceeded");
    assert_eq!(huge["files"], json!([]));
    assert_eq!(huge["summary"]["file_count"], 600);
    assert_eq!(huge["guard"]["preset"], "BALANCED");
    let forced = mcp
        .call(
            "get_attempt_changes",
            json!({"attempt_id": w.huge_attempt, "force": true}),
        )
        .await
        .ok();
    assert_eq!(forced["blocked"], false);
    assert_eq!(forced["forced"], true);
    assert_eq!(forced["files"].as_array().unwrap().len(), 600);
    let nothing = mcp
        .call("get_attempt_changes", json!({"attempt_id": w.bare_attempt}))
        .await
        .ok();
    assert_eq!(nothing["summary"]["file_count"], 0);
    assert_eq!(nothing["files"], json!([]));

    // tail_session_messages: one turn per coding-agent run of the latest session.
    let tr = mcp
        .call("tail_session_messages", json!({"attempt_id": w.ok_attempt}))
        .await
        .ok();
    assert_eq!(id(&tr["session_id"]), w.ok_session);
    let turns = tr["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[1]["prompt"], "now add a second line");
    assert_eq!(turns[0]["summary"], "Done. I made the changes.");
    assert_eq!(id(&turns[1]["execution_process_id"]), follow_agent);
    let older = mcp
        .call(
            "tail_session_messages",
            json!({"session_id": w.ok_session, "limit": 1}),
        )
        .await
        .ok();
    assert_eq!(older["turns"].as_array().unwrap().len(), 1);
    assert_eq!(older["next_cursor"], 1);
    let first = mcp
        .call(
            "tail_session_messages",
            json!({"session_id": w.ok_session, "cursor": 1}),
        )
        .await
        .ok();
    assert_eq!(first["turns"][0]["turn_index"], 0);
    assert_eq!(first["has_more"], false);
    let no_session = mcp
        .call(
            "tail_session_messages",
            json!({"attempt_id": w.bare_attempt}),
        )
        .await
        .err();
    assert_eq!(no_session["code"], "no_session_yet");
    assert!(
        no_session["hint"]
            .as_str()
            .unwrap()
            .contains("get_attempt_status")
    );
    assert_eq!(
        mcp.call(
            "tail_session_messages",
            json!({"attempt_id": w.ok_attempt, "session_id": w.ok_session})
        )
        .await
        .code(),
        "ambiguous_target"
    );

    // Bad input never reaches the query layer: envelope, not a protocol error.
    let bad = mcp
        .call("get_task", json!({"task_id": "not-a-uuid"}))
        .await
        .err();
    assert_eq!(bad["code"], "invalid_argument");
    assert_eq!(
        mcp.call("get_task", json!({"taskId": w.ok_task}))
            .await
            .code(),
        "invalid_argument"
    );

    // get_context is refused outside a workspace ...
    assert_eq!(
        mcp.call("get_context", json!({})).await.code(),
        "no_workspace_context"
    );
    // ... and listed and answered for a client inside one.
    let root = truth.attempts[&w.ok_attempt]["container_ref"]
        .as_str()
        .unwrap()
        .to_string();
    let inside = Mcp::connect_with(
        daemon.addr,
        HashMap::from([("x-vk-workspace".to_string(), format!("{root}/demo/src"))]),
    )
    .await;
    assert!(
        inside
            .tool_names()
            .await
            .contains(&"get_context".to_string())
    );
    let ctx = inside.call("get_context", json!({})).await.ok();
    assert_eq!(id(&ctx["attempt_id"]), w.ok_attempt);
    assert_eq!(id(&ctx["task_id"]), w.ok_task);
    assert_eq!(id(&ctx["project_id"]), w.project);
    assert_eq!(ctx["project_name"], "Demo");
    assert_eq!(ctx["task_title"], "Add a greeting file");
    let repo_names: BTreeMap<String, Value> = ctx["workspace_repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["repo_name"].as_str().unwrap().to_string(),
                r["target_branch"].clone(),
            )
        })
        .collect();
    assert_eq!(repo_names.keys().collect::<Vec<_>>(), ["demo", "docs"]);
    assert!(repo_names.values().all(|b| b == "main"));

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

fn sim_attempt_of(truth: &Truth, pid: Uuid) -> Option<Uuid> {
    let session: Uuid = truth.processes.get(&pid)?["session_id"]
        .as_str()?
        .parse()
        .ok()?;
    truth.sessions.get(&session)?["workspace_id"]
        .as_str()?
        .parse()
        .ok()
}

fn note(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}})
}

/// Poll the tail until `pred` holds (the cache catches up within milliseconds to seconds).
async fn tail_until(mcp: &Mcp, args: Value, pred: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        // Before ingest saw the attempt the answer is `not_found`; keep polling.
        if let support::mcp::Reply::Ok(r) = mcp.call("tail_attempt_logs", args.clone()).await {
            if pred(&r) {
                return r;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("cache never reached the expected log state for {args}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_tokens_bring_replacements_and_the_end_of_the_previous_process() {
    use vk_observer::sim::{Channel, ProcessStatus, RunReason};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Tokens", &["demo"]);
    let task = sim.add_task(project, "Token reader", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let p1 = sim.start_process(ids.session_id, RunReason::CodingAgent);
    for i in 0..4 {
        sim.append_log(p1, Channel::Normalized, note(&format!("m{i}")));
    }
    let mcp = Mcp::connect(daemon.addr).await;
    let a = json!({"attempt_id": ids.attempt_id});
    let page1 = tail_until(&mcp, a.clone(), |r| r["latest_entry_index"] == 3).await;
    assert_eq!(id(&page1["execution_process_id"]), p1);
    let t1 = page1["token"].clone();

    // Entry 1 is rewritten in place and two more arrive.
    sim.replace_log(p1, Channel::Normalized, 1, note("m1 (edited)"));
    sim.append_log(p1, Channel::Normalized, note("m4"));
    sim.append_log(p1, Channel::Normalized, note("m5"));
    let args = json!({"attempt_id": ids.attempt_id, "after_entry_index": 3, "since_token": t1});
    let page2 = tail_until(&mcp, args, |r| {
        r["entries"].as_array().unwrap().len() == 2 && r["replaced"].as_array().unwrap().len() == 1
    })
    .await;
    assert_eq!(page2["entries"][0]["entry"], note("m4"));
    assert_eq!(page2["replaced"][0]["entry_index"], 1);
    assert_eq!(page2["replaced"][0]["entry"], note("m1 (edited)"));
    assert_eq!(page2["process_changed"], false);
    let t2 = page2["token"].clone();

    // The process writes its last entry and ends; a follow-up starts a new process.
    sim.append_log(p1, Channel::Normalized, note("m6 (last words)"));
    sim.finish_process(p1, ProcessStatus::Completed, Some(0));
    let p2 = sim.start_process(ids.session_id, RunReason::CodingAgent);
    sim.append_log(p2, Channel::Normalized, note("f0"));
    sim.append_log(p2, Channel::Normalized, note("f1"));
    let args = json!({"attempt_id": ids.attempt_id, "after_entry_index": 5, "since_token": t2});
    let page3 = tail_until(&mcp, args, |r| {
        r["execution_process_id"] == json!(p2.to_string())
            && r["entries"].as_array().unwrap().len() == 2
    })
    .await;
    assert_eq!(
        page3["process_changed"], true,
        "after_entry_index 5 belonged to the old process"
    );
    assert_eq!(page3["entries"][0]["entry"], note("f0"));
    let earlier = page3["earlier_process_entries"].as_array().unwrap();
    assert_eq!(earlier.len(), 1, "{earlier:?}");
    assert_eq!(id(&earlier[0]["execution_process_id"]), p1);
    assert_eq!(earlier[0]["entry"], note("m6 (last words)"));

    // Same token again: nothing new means an empty page, no replays.
    let t3 = page3["token"].clone();
    let quiet = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": ids.attempt_id, "after_entry_index": 1, "since_token": t3}),
        )
        .await
        .ok();
    assert_eq!(quiet["entries"], json!([]));
    assert_eq!(quiet["replaced"], json!([]));
    assert_eq!(quiet["earlier_process_entries"], json!([]));
    let st = mcp
        .call("get_attempt_status", json!({"attempt_id": ids.attempt_id}))
        .await
        .ok();
    assert_eq!(st["attempts"][0]["state"], "running");
    assert_eq!(id(&st["attempts"][0]["latest_execution_process_id"]), p2);
    daemon.shutdown().await;
}
