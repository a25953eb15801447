//! The task tools through a real MCP client (rmcp) against the simulator's VK 0.1.x dialect:
//! a task the daemon keeps, started as a workspace once per `request_id` although VK takes no
//! key, its logs, status and waits from the cache, a follow-up, an approval answered, a stop,
//! a rename and a delete; and the workspaces nobody started through the daemon, each its own
//! task.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::{Mcp, Reply};
use uuid::Uuid;
use vk_observer_sim::Sim;

fn id(v: &Value) -> Uuid {
    v.as_str().unwrap_or_default().parse().unwrap()
}

fn starts(sim: &Sim) -> u64 {
    let routes = sim.counters().by_route;
    routes
        .get("POST /api/workspaces/start")
        .copied()
        .unwrap_or(0)
}

/// The project of the registered repo `alpha` and that repo, once the cache has them.
async fn alpha(mcp: &Mcp) -> (Uuid, Uuid) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = mcp.call("list_projects", json!({"detail": 1})).await.ok();
        let found = listed["projects"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["project_name"] == "alpha");
        if let Some(p) = found {
            let project = id(&p["project_id"]);
            let repos = mcp
                .call("list_repos", json!({"project_id": project}))
                .await
                .ok();
            return (project, id(&repos["repos"][0]["repo_id"]));
        }
        assert!(Instant::now() < deadline, "no project alpha: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `get_attempt_status` until `done` holds.
async fn status_until(
    mcp: &Mcp,
    attempt: Uuid,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = mcp
            .call(
                "get_attempt_status",
                json!({"attempt_id": attempt, "detail": 1}),
            )
            .await;
        // Not cached yet is an answer too (not_found): asked again.
        let s = match reply {
            Reply::Ok(s) | Reply::Err(s) => s,
        };
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never {what}: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start(mcp: &Mcp, task: Uuid, repo: Uuid, request_id: &str) -> Value {
    let args = json!({"task_id": task, "executor": "CLAUDE_CODE",
        "repos": [{"repo_id": repo, "target_branch": "main"}], "request_id": request_id});
    mcp.call("start_task_attempt", args).await.ok()
}

async fn new_task(mcp: &Mcp, project: Uuid, title: &str, description: &str) -> Uuid {
    let args = json!({"project_id": project, "title": title, "description": description});
    id(&mcp.call("create_task", args).await.ok()["task_id"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_kept_by_the_daemon_and_started_once_as_a_workspace() {
    let sim = support::workspaces::sim().await;
    sim.add_project("Demo", &["alpha"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::workspaces::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (project, repo) = alpha(&mcp).await;

    let args = json!({"project_id": project, "title": "Greet", "description": "Write a greeting file", "request_id": "c-1"});
    let created = mcp.call("create_task", args.clone()).await.ok();
    assert_eq!(created["pending_ingest"], false, "{created}");
    let task = id(&created["task_id"]);
    let again = mcp.call("create_task", args).await.ok();
    assert_eq!(id(&again["task_id"]), task);
    assert_eq!(again["replayed"], true);
    let got = mcp
        .call("get_task", json!({"task_id": task, "detail": 1}))
        .await
        .ok();
    assert_eq!(got["task"]["status"], "todo", "{got}");

    let started = start(&mcp, task, repo, "s-1").await;
    let attempt = id(&started["attempt_id"]);
    assert_eq!(id(&started["task_id"]), task);
    assert_eq!(started["pending_ingest"], false, "{started}");
    let replay = start(&mcp, task, repo, "s-1").await;
    assert_eq!(id(&replay["attempt_id"]), attempt);
    assert_eq!(replay["replayed"], true);
    assert_eq!(starts(&sim), 1, "one workspace per request_id");

    let done = status_until(&mcp, attempt, "completed", |s| s["state"] == "completed").await;
    assert_eq!(id(&done["task_id"]), task, "{done}");
    let tail = mcp
        .call("tail_attempt_logs", json!({"attempt_id": attempt}))
        .await
        .ok();
    assert!(!tail["entries"].as_array().unwrap().is_empty(), "{tail}");
    let listed = mcp
        .call("list_tasks", json!({"project_id": project, "detail": 1}))
        .await
        .ok();
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(
        tasks.len(),
        1,
        "the workspace is the task's attempt, not a task: {listed}"
    );
    assert_eq!(tasks[0]["status"], "inreview", "{listed}");

    // A follow-up, once per request_id.
    let f = json!({"attempt_id": attempt, "action": "send", "prompt": "Add a second line", "request_id": "f-1"});
    let sent = mcp.call("follow_up", f.clone()).await.ok();
    let pid = sent["execution_process_id"].clone();
    assert!(pid.is_string(), "{sent}");
    assert_eq!(
        mcp.call("follow_up", f).await.ok()["execution_process_id"],
        pid
    );
    status_until(&mcp, attempt, "completed again", |s| {
        s["state"] == "completed" && s["latest_execution_process_id"] == pid
    })
    .await;

    another_attempt_then_rename_and_delete(&mcp, &sim, task, repo, attempt).await;
    daemon.shutdown().await;
}

/// A second attempt of `task` is another workspace under it; then the task is renamed, and
/// deleted with its workspaces.
async fn another_attempt_then_rename_and_delete(
    mcp: &Mcp,
    sim: &Sim,
    task: Uuid,
    repo: Uuid,
    attempt: Uuid,
) {
    let second = start(mcp, task, repo, "s-2").await;
    assert_ne!(id(&second["attempt_id"]), attempt);
    let attempts = mcp
        .call("list_task_attempts", json!({"task_id": task}))
        .await
        .ok();
    assert_eq!(
        attempts["attempts"].as_array().unwrap().len(),
        2,
        "{attempts}"
    );

    // Renamed, then deleted with its workspaces.
    let renamed = mcp
        .call(
            "update_task",
            json!({"task_id": task, "title": "Greet twice"}),
        )
        .await
        .ok();
    assert_eq!(renamed["task"]["title"], "Greet twice", "{renamed}");
    status_until(mcp, id(&second["attempt_id"]), "ended", |s| {
        s["state"] != "running"
    })
    .await;
    let deleted = mcp.call("delete_task", json!({"task_id": task})).await.ok();
    assert_eq!(deleted["pending_ingest"], false, "{deleted}");
    assert!(
        sim.truth().attempts.is_empty(),
        "its workspaces are deleted at VK"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_stops_and_workspaces_started_elsewhere() {
    let sim = support::workspaces::sim().await;
    let demo = sim.add_project("Demo", &["alpha"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::workspaces::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (project, repo) = alpha(&mcp).await;

    // An approval, answered from the tools.
    let asks = new_task(&mcp, project, "Ask first", "APPROVAL run the tests").await;
    let attempt = id(&start(&mcp, asks, repo, "a-1").await["attempt_id"]);
    let blocked = status_until(&mcp, attempt, "blocked", |s| {
        s["pending_approvals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    })
    .await;
    let approval = blocked["pending_approvals"][0]["approval_id"].clone();
    let answer = json!({"approval_id": approval, "decision": "approve", "request_id": "r-1"});
    let answered = mcp.call("respond_approval", answer).await.ok();
    assert_eq!(answered["status"], "approved", "{answered}");
    status_until(&mcp, attempt, "completed", |s| s["state"] == "completed").await;
    assert!(
        sim.approvals()
            .iter()
            .any(|a| a.2 == vk_observer_sim::SimApprovalStatus::Approved)
    );

    // A slow agent, stopped.
    let slow = new_task(&mcp, project, "Slow", "SLOW take your time").await;
    let attempt = id(&start(&mcp, slow, repo, "slow-1").await["attempt_id"]);
    status_until(&mcp, attempt, "running", |s| s["state"] == "running").await;
    let stopped = mcp
        .call("stop_attempt", json!({"attempt_id": attempt}))
        .await;
    assert!(matches!(stopped, Reply::Ok(_)), "{stopped:?}");
    status_until(&mcp, attempt, "stopped", |s| s["state"] != "running").await;

    // A workspace started in VK's own UI stands as its own task.
    let task = sim.add_task(demo, "Started in VK", Some("by hand"));
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let own = status_until(&mcp, ids.attempt_id, "cached", |s| {
        s["attempt_id"].is_string()
    })
    .await;
    assert_eq!(id(&own["task_id"]), ids.attempt_id, "{own}");
    let got = mcp
        .call("get_task", json!({"task_id": ids.attempt_id, "detail": 1}))
        .await
        .ok();
    assert_eq!(got["task"]["title"], "Started in VK", "{got}");
    // Its description is the workspace's first prompt: not editable here.
    let refused = mcp
        .call(
            "update_task",
            json!({"task_id": ids.attempt_id, "description": "other"}),
        )
        .await
        .err();
    assert_eq!(refused["code"], "invalid_argument", "{refused}");
    daemon.shutdown().await;
}

/// The agent-mistakes catalogue's rows for VK 0.1.x (docs/agent-guide.md, rows 100–103): each
/// refused with its code, `retryable` and a hint naming what to do, and the store unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_vk_0_1_x_cannot_do_is_refused_clearly() {
    let sim = support::workspaces::sim().await;
    let demo = sim.add_project("Demo", &["alpha"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::workspaces::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (project, repo) = alpha(&mcp).await;
    let kept = new_task(&mcp, project, "Kept", "a task the daemon keeps").await;
    let task = sim.add_task(demo, "Started in VK", Some("by hand"));
    let ws = sim
        .run_attempt_script(task, vk_observer_sim::AttemptScript::default())
        .await;
    support::workspaces::converge(&daemon.store, &sim, Duration::from_secs(20), "world").await;
    let before = daemon.store.current_token();
    let cases: [(&str, &str, Value, &str, bool, &[&str]); 5] = [
        (
            "100 branch_prefix",
            "start_task_attempt",
            json!({"task_id": kept, "executor": "CLAUDE_CODE", "branch_prefix": "agent/",
                   "repos": [{"repo_id": repo, "target_branch": "main"}]}),
            "invalid_argument",
            false,
            &["branch_prefix", "VK"],
        ),
        (
            "101 description of a workspace's task",
            "update_task",
            json!({"task_id": ws.attempt_id, "description": "other"}),
            "invalid_argument",
            false,
            &["first prompt", "title"],
        ),
        (
            "101 status of a workspace's task",
            "update_task",
            json!({"task_id": ws.attempt_id, "status": "done"}),
            "invalid_argument",
            false,
            &["follows its attempts"],
        ),
        (
            "102 a file read",
            "get_attempt_file",
            json!({"attempt_id": ws.attempt_id, "path": "alpha/README.md"}),
            "not_configured",
            false,
            &["unsupported_by_upstream", "worktree"],
        ),
        (
            "103 a patch read",
            "get_attempt_patch",
            json!({"attempt_id": ws.attempt_id, "paths": ["alpha/README.md"]}),
            "not_configured",
            false,
            &["unsupported_by_upstream", "git diff"],
        ),
    ];
    for (name, tool, args, code, retryable, words) in cases {
        let e = mcp.call(tool, args).await.err();
        assert_eq!(e["code"], code, "{name}: {e}");
        assert_eq!(e["retryable"], retryable, "{name}: {e}");
        let said = format!("{} {}", e["hint"], e["details"]);
        for w in words {
            assert!(said.contains(w), "{name}: no {w:?} in {e}");
        }
    }
    // No change summary on VK 0.1.x: not ready, and the hint says where to look instead.
    let changes = mcp
        .call("get_attempt_changes", json!({"attempt_id": ws.attempt_id}))
        .await
        .ok();
    assert_eq!(changes["ready"], false, "{changes}");
    assert!(
        changes["hint"].as_str().unwrap().contains("VK 0.1.x"),
        "{changes}"
    );
    assert_eq!(starts(&sim), 0, "nothing was started");
    assert_eq!(
        daemon.store.current_token(),
        before,
        "refusals changed the store"
    );
    daemon.shutdown().await;
}
