//! Mutating and artifact tools through a real MCP client against the simulator: request_id
//! idempotency (retry, race, restart, conflict; the simulator counts exactly one creation),
//! read-your-writes, follow-up targeting and modes, stop, delete, bounded file/patch reads
//! (paths leaving the workspace are blocked before VK is asked), and VK-down errors.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::{AttemptScript, RunReason, SimFile};

fn id(v: &Value) -> Uuid {
    v.as_str().unwrap().parse().unwrap()
}

fn route_calls(sim: &vk_observer_sim::Sim, route: &str) -> u64 {
    sim.counters().by_route.get(route).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_start_are_idempotent_across_retries_races_and_restarts() {
    let sim = support::sim().await;
    let project = sim.add_project("Idem", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    // Until the project is cached.
    for _ in 0..100 {
        if let support::mcp::Reply::Ok(_) =
            mcp.call("list_repos", json!({"project_id": project})).await
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let args = json!({"project_id": project, "title": "Write docs", "description": "Add a README", "request_id": "req-1"});
    let first = mcp.call("create_task", args.clone()).await.ok();
    assert_eq!(first["replayed"], false);
    assert_eq!(first["pending_ingest"], false, "read-your-writes: {first}");
    assert_eq!(first["task"]["title"], "Write docs");
    let task_id = id(&first["task_id"]);
    // The next read sees the write.
    let listed = mcp
        .call("list_tasks", json!({"project_id": project}))
        .await
        .ok();
    assert!(
        listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| id(&t["task_id"]) == task_id)
    );
    let again = mcp.call("create_task", args.clone()).await.ok();
    assert_eq!(id(&again["task_id"]), task_id);
    assert_eq!(again["replayed"], true);
    // A race: two retries in flight together create nothing new either.
    let race = json!({"project_id": project, "title": "Raced", "request_id": "req-race"});
    let (m1, m2) = (
        Mcp::connect(daemon.addr).await,
        Mcp::connect(daemon.addr).await,
    );
    let (a, b) = tokio::join!(
        m1.call("create_task", race.clone()),
        m2.call("create_task", race.clone())
    );
    assert_eq!(a.ok()["task_id"], b.ok()["task_id"]);
    assert_eq!(
        sim.counters().task_creations,
        2,
        "one creation per request_id"
    );
    // Same key, other payload.
    let conflict = mcp
        .call(
            "create_task",
            json!({"project_id": project, "title": "Something else", "request_id": "req-1"}),
        )
        .await
        .err();
    assert_eq!(conflict["code"], "idempotency_conflict");
    assert!(
        conflict["hint"]
            .as_str()
            .unwrap()
            .contains("new request_id")
    );

    // start_task_attempt: same key twice → one attempt.
    let repo = mcp
        .call("list_repos", json!({"project_id": project}))
        .await
        .ok()["repos"][0]["repo_id"]
        .clone();
    let start = json!({"task_id": task_id, "executor": "CLAUDE_CODE", "repos": [{"repo_id": repo, "target_branch": "main"}], "request_id": "start-1"});
    let s1 = mcp.call("start_task_attempt", start.clone()).await.ok();
    let attempt = id(&s1["attempt_id"]);
    assert_eq!(s1["pending_ingest"], false);
    assert!(
        !s1["status"]["latest_session_id"].is_null(),
        "the session is visible: {s1}"
    );
    let s2 = mcp.call("start_task_attempt", start.clone()).await.ok();
    assert_eq!(id(&s2["attempt_id"]), attempt);
    assert_eq!(sim.counters().attempt_creations, 1);
    assert_eq!(
        mcp.call("start_task_attempt", json!({"task_id": task_id, "executor": "NOT_AN_AGENT", "repos": [{"repo_id": repo, "target_branch": "main"}]})).await.err()["details"]["known"],
        json!(["CLAUDE_CODE", "CODEX"])
    );
    assert_eq!(
        mcp.call("start_task_attempt", json!({"task_id": task_id, "executor": "CLAUDE_CODE", "repos": [{"repo_id": Uuid::new_v4(), "target_branch": "main"}]})).await.code(),
        "invalid_argument"
    );

    // Restart the daemon on the same data dir: the keys are still honoured.
    daemon.shutdown().await;
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let after = mcp.call("create_task", args.clone()).await.ok();
    assert_eq!(id(&after["task_id"]), task_id);
    let after = mcp.call("start_task_attempt", start).await.ok();
    assert_eq!(id(&after["attempt_id"]), attempt);
    let counters = sim.counters();
    assert_eq!(
        (counters.task_creations, counters.attempt_creations),
        (2, 1)
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_up_stop_update_delete_and_artifacts() {
    let sim = support::sim().await;
    let project = sim.add_project("Ctl", &["demo", "docs"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let done_task = sim.add_task(project, "Finished work", None);
    let files: Vec<SimFile> = (0..3)
        .map(|i| SimFile {
            repo: "demo".into(),
            path: format!("src/f{i}.rs"),
            change: "added".into(),
            additions: 2,
            deletions: 0,
            content: format!("fn f{i}() {{}}\n// line two of f{i}\n"),
        })
        .collect();
    let done = sim
        .run_attempt_script(
            done_task,
            AttemptScript {
                files,
                ..AttemptScript::default()
            },
        )
        .await;
    let live_task = sim.add_task(project, "Long running", None);
    let live = sim.create_attempt(live_task, "CLAUDE_CODE");
    let live_pid = sim.start_process(live.session_id, RunReason::CodingAgent);
    let bare_task = sim.add_task(project, "No session", None);
    let bare = sim.create_bare_attempt(bare_task);
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(20),
        "control world",
    )
    .await;
    let mcp = Mcp::connect(daemon.addr).await;

    // follow_up send by attempt id: resolves the latest session, new process visible at once.
    let before = sim.counters().follow_ups;
    let sent = mcp
        .call("follow_up", json!({"action": "send", "attempt_id": done.attempt_id, "prompt": "also add tests", "request_id": "fu-1"}))
        .await
        .ok();
    assert_eq!(id(&sent["session_id"]), done.session_id);
    assert_eq!(sent["pending_ingest"], false);
    let pid = id(&sent["execution_process_id"]);
    let st = mcp
        .call("get_attempt_status", json!({"attempt_id": done.attempt_id}))
        .await
        .ok();
    let latest = st["latest_execution_process_id"].clone();
    assert!(
        latest == json!(pid.to_string()) || st["state"] != "running",
        "{st}"
    );
    let replay = mcp
        .call("follow_up", json!({"action": "send", "attempt_id": done.attempt_id, "prompt": "also add tests", "request_id": "fu-1"}))
        .await
        .ok();
    assert_eq!(replay["execution_process_id"], sent["execution_process_id"]);
    assert_eq!(
        sim.counters().follow_ups,
        before + 1,
        "the retry started nothing"
    );
    // queue and cancel by session id.
    let q = mcp
        .call(
            "follow_up",
            json!({"action": "queue", "session_id": live.session_id, "prompt": "then tidy up"}),
        )
        .await
        .ok();
    assert_eq!(q["queue_status"], "queued");
    let c = mcp
        .call(
            "follow_up",
            json!({"action": "cancel", "session_id": live.session_id}),
        )
        .await
        .ok();
    assert_eq!(c["queue_status"], "empty");
    // Mistakes agents make, each with its own envelope.
    assert_eq!(
        mcp.call(
            "follow_up",
            json!({"action": "send", "attempt_id": done.attempt_id})
        )
        .await
        .err()["details"]["field"],
        "prompt"
    );
    assert_eq!(mcp.call("follow_up", json!({"action": "send", "attempt_id": done.attempt_id, "session_id": done.session_id, "prompt": "x"})).await.classed(), "invalid_argument/ambiguous_target");
    let none = mcp
        .call(
            "follow_up",
            json!({"action": "send", "attempt_id": bare, "prompt": "hello"}),
        )
        .await
        .err();
    assert_eq!(none["code"], "no_session_yet");
    assert!(
        none["hint"]
            .as_str()
            .unwrap()
            .contains("get_attempt_status")
    );
    assert!(none["hint"].as_str().unwrap().contains("latest_session_id"));
    assert_eq!(
        mcp.call(
            "follow_up",
            json!({"action": "stop", "attempt_id": done.attempt_id})
        )
        .await
        .code(),
        "invalid_argument"
    );

    // stop_attempt: afterwards the state is no longer running.
    let stopped = mcp
        .call("stop_attempt", json!({"attempt_id": live.attempt_id}))
        .await
        .ok();
    assert_eq!(stopped["was_running"], true);
    assert_ne!(stopped["status"]["state"], "running", "{stopped}");
    assert_eq!(sim.truth().processes[&live_pid]["status"], "killed");
    let idle = mcp
        .call("stop_attempt", json!({"attempt_id": live.attempt_id}))
        .await
        .ok();
    assert_eq!(idle["was_running"], false);

    // update_task / delete_task
    let up = mcp
        .call(
            "update_task",
            json!({"task_id": live_task, "title": "Long running (renamed)", "status": "done"}),
        )
        .await
        .ok();
    assert_eq!(up["pending_ingest"], false);
    assert_eq!(up["task"]["title"], "Long running (renamed)");
    assert_eq!(up["task"]["status"], "done");
    assert_eq!(
        mcp.call("update_task", json!({"task_id": live_task}))
            .await
            .code(),
        "invalid_argument"
    );
    let del = mcp
        .call("delete_task", json!({"task_id": bare_task}))
        .await
        .ok();
    assert_eq!(del["pending_ingest"], false);
    assert_eq!(
        mcp.call("get_task", json!({"task_id": bare_task}))
            .await
            .code(),
        "not_found"
    );
    let busy_task = sim.add_task(project, "Busy", None);
    let busy = sim.create_attempt(busy_task, "CLAUDE_CODE");
    sim.start_process(busy.session_id, RunReason::CodingAgent);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "busy task").await;
    let refused = mcp
        .call("delete_task", json!({"task_id": busy_task}))
        .await
        .err();
    assert_eq!(refused["code"], "conflict");
    assert!(refused["hint"].as_str().unwrap().contains("stop_attempt"));

    // get_attempt_file: bounded slices; escaping paths blocked before VK is asked.
    let f = mcp
        .call(
            "get_attempt_file",
            json!({"attempt_id": done.attempt_id, "path": "demo/src/f1.rs"}),
        )
        .await
        .ok();
    assert_eq!(f["content"], "fn f1() {}\n// line two of f1\n");
    assert_eq!(f["truncated"], false);
    let part = mcp
        .call(
            "get_attempt_file",
            json!({"attempt_id": done.attempt_id, "path": "demo/src/f1.rs", "max_bytes": 5}),
        )
        .await
        .ok();
    assert_eq!(part["content"], "fn f1");
    assert_eq!(part["truncated"], true);
    let rest = mcp
        .call(
            "get_attempt_file",
            json!({"attempt_id": done.attempt_id, "path": "demo/src/f1.rs", "start": 5}),
        )
        .await
        .ok();
    assert_eq!(rest["content"], "() {}\n// line two of f1\n");
    let file_route = "GET /api/task-attempts/{id}/file";
    let reads_before = route_calls(&sim, file_route);
    for bad in [
        "../../etc/passwd",
        "/etc/passwd",
        "demo/../../../etc/shadow",
    ] {
        let b = mcp
            .call(
                "get_attempt_file",
                json!({"attempt_id": done.attempt_id, "path": bad}),
            )
            .await
            .ok();
        assert_eq!(b["blocked"], true, "{bad}");
        assert_eq!(b["blocked_reason"], "path_outside_workspace");
        assert!(b["content"].is_null());
    }
    let big = mcp
        .call(
            "get_attempt_file",
            json!({"attempt_id": done.attempt_id, "path": "demo/src/f1.rs", "max_bytes": 600000}),
        )
        .await
        .ok();
    assert_eq!(big["blocked_reason"], "size_exceeded");
    assert_eq!(
        route_calls(&sim, file_route),
        reads_before,
        "blocked reads never reached VK"
    );
    assert_eq!(
        mcp.call(
            "get_attempt_file",
            json!({"attempt_id": done.attempt_id, "path": "demo/missing.rs"})
        )
        .await
        .code(),
        "not_found"
    );

    // get_attempt_patch
    let p = mcp
        .call(
            "get_attempt_patch",
            json!({"attempt_id": done.attempt_id, "paths": ["demo/src/f0.rs", "demo/src/f2.rs"]}),
        )
        .await
        .ok();
    let text = p["patch"].as_str().unwrap();
    assert!(
        text.contains("+++ b/demo/src/f0.rs") && text.contains("+fn f2() {}"),
        "{text}"
    );
    assert!(!text.contains("f1.rs"));
    let many: Vec<String> = (0..101).map(|i| format!("demo/f{i}")).collect();
    assert_eq!(
        mcp.call(
            "get_attempt_patch",
            json!({"attempt_id": done.attempt_id, "paths": many})
        )
        .await
        .ok()["blocked_reason"],
        "too_many_paths"
    );
    assert_eq!(
        mcp.call(
            "get_attempt_patch",
            json!({"attempt_id": done.attempt_id, "paths": ["/etc/passwd"]})
        )
        .await
        .ok()["blocked_reason"],
        "path_outside_workspace"
    );
    let cut = mcp
        .call(
            "get_attempt_patch",
            json!({"attempt_id": done.attempt_id, "paths": ["demo/src/f0.rs"], "max_bytes": 10}),
        )
        .await
        .ok();
    assert_eq!(cut["truncated"], true);
    assert_eq!(cut["bytes"], 10);

    // VK down: mutations say so and are retryable; reads still work.
    sim.shutdown().await;
    let down = mcp
        .call(
            "create_task",
            json!({"project_id": project, "title": "while down", "request_id": "down-1"}),
        )
        .await
        .err();
    assert_eq!(down["code"], "upstream_unavailable");
    assert_eq!(down["retryable"], true);
    mcp.call("list_tasks", json!({"project_id": project}))
        .await
        .ok();
    daemon.shutdown().await;
}

/// request_id on the writes that are not creations: update_task, delete_task and follow_up
/// cancel. The same key twice reaches VK once (the simulator counts), a replayed delete answers
/// the same `deleted_task_id` though the task is gone, and the same key with other arguments is
/// `idempotency_conflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_delete_and_cancel_replay_by_request_id() {
    let sim = support::sim().await;
    let project = sim.add_project("Replays", &["demo"]);
    let task = sim.add_task(project, "Edit me", None);
    let doomed = sim.add_task(project, "Delete me", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "replays").await;
    let mcp = Mcp::connect(daemon.addr).await;

    let edit = json!({"task_id": task, "status": "inreview", "request_id": "up-1"});
    let first = mcp.call("update_task", edit.clone()).await.ok();
    assert_eq!(
        (first["replayed"].clone(), first["task"]["status"].clone()),
        (json!(false), json!("inreview"))
    );
    let again = mcp.call("update_task", edit).await.ok();
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["task_id"], first["task_id"]);
    assert_eq!(sim.counters().task_updates, 1, "one update per request_id");
    let other = json!({"task_id": task, "status": "done", "request_id": "up-1"});
    assert_eq!(
        mcp.call("update_task", other).await.code(),
        "idempotency_conflict"
    );
    assert_eq!(sim.counters().task_updates, 1);

    let delete = json!({"task_id": doomed, "request_id": "del-1"});
    let gone = mcp.call("delete_task", delete.clone()).await.ok();
    assert_eq!(
        (gone["deleted_task_id"].clone(), gone["replayed"].clone()),
        (json!(doomed), json!(false))
    );
    let replay = mcp.call("delete_task", delete).await.ok();
    assert_eq!(replay["deleted_task_id"], json!(doomed), "{replay}");
    assert_eq!(replay["replayed"], true);
    assert_eq!(
        sim.counters().task_deletions,
        1,
        "one deletion per request_id"
    );
    // Without the key a deleted task is simply unknown; with it and another task, a conflict.
    let plain = json!({"task_id": doomed});
    assert_eq!(mcp.call("delete_task", plain).await.code(), "not_found");
    let moved = json!({"task_id": task, "request_id": "del-1"});
    assert_eq!(
        mcp.call("delete_task", moved).await.code(),
        "idempotency_conflict"
    );

    let cancel_route = "DELETE /api/sessions/{id}/queue";
    let cancel = json!({"action": "cancel", "session_id": ids.session_id, "request_id": "can-1"});
    let c1 = mcp.call("follow_up", cancel.clone()).await.ok();
    let c2 = mcp.call("follow_up", cancel).await.ok();
    assert_eq!(
        (c1["replayed"].clone(), c2["replayed"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(c1["queue_status"], c2["queue_status"]);
    assert_eq!(
        route_calls(&sim, cancel_route),
        1,
        "one cancel per request_id"
    );
    let by_attempt =
        json!({"action": "cancel", "attempt_id": ids.attempt_id, "request_id": "can-1"});
    let e = mcp.call("follow_up", by_attempt).await;
    // The attempt resolves to the same session: the same request, replayed.
    assert_eq!(e.ok()["replayed"], true);
    let queue = json!({"action": "queue", "session_id": ids.session_id, "prompt": "later", "request_id": "can-1"});
    assert_eq!(
        mcp.call("follow_up", queue).await.code(),
        "idempotency_conflict"
    );
    assert_eq!(route_calls(&sim, cancel_route), 1);
    daemon.shutdown().await;
}
