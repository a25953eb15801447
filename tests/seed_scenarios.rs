//! The seeds' scenarios and "SHALL include" lists at every detail level (issue 39): a client
//! written from seed 002 or seed 003 finds every field those name — at the default detail too,
//! with `null`, `false` or `[]` when that is its value — through a real MCP client (rmcp)
//! against the simulator-fed daemon. Each check runs at detail 0, 1 and 2 and with `detail`
//! left out.

mod support;

use serde_json::{Value, json};
use support::mcp::Mcp;
use support::world::*;
use vk_observer_sim::RunReason;

/// The answers of `tool` at the default detail and at 0, 1 and 2, each labelled.
async fn at_every_level(mcp: &Mcp, tool: &str, args: Value) -> Vec<(String, Value)> {
    let mut out = vec![(
        format!("{tool}(default)"),
        mcp.call_as_is(tool, args.clone()).await.ok(),
    )];
    for d in 0..=2 {
        let mut a = args.clone();
        a["detail"] = json!(d);
        out.push((
            format!("{tool}(detail {d})"),
            mcp.call_as_is(tool, a).await.ok(),
        ));
    }
    out
}

/// Every field of `names` is present in `v` (null, false and empty count as present).
fn has_all(v: &Value, names: &[&str], what: &str) {
    for n in names {
        assert!(v.get(*n).is_some(), "{what}: `{n}` missing from {v}");
    }
}

const STATUS_FIELDS: &[&str] = &[
    "attempt_id",
    "task_id",
    "workspace_branch",
    "created_at",
    "updated_at",
    "latest_session_id",
    "latest_execution_process_id",
    "state",
    "last_activity_at",
    "failure_summary",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_002_scenarios_hold_at_every_level() {
    let Served {
        sim,
        dir: _dir,
        daemon,
        w,
        truth: _,
        mcp,
    } = serve_world().await;
    let running_task = sim.add_task(w.project, "Runs on", None);
    let running = sim.create_attempt(running_task, "CLAUDE_CODE");
    let running_pid = sim.start_process(running.session_id, RunReason::CodingAgent);
    support::converge(
        &daemon.store,
        &sim,
        std::time::Duration::from_secs(30),
        "running attempt",
    )
    .await;

    status_scenarios(&mcp, &w, running.attempt_id, running_pid).await;
    task_and_attempt_lists(&mcp, &w).await;
    log_tail_scenarios(&mcp, &w).await;
    change_scenarios(&mcp, &w).await;
    executor_list(&mcp).await;
    daemon.shutdown().await;
}

/// Seed 002's get_attempt_status list and its three scenarios, single and batch.
async fn status_scenarios(mcp: &Mcp, w: &World, running: uuid::Uuid, running_pid: uuid::Uuid) {
    // get_attempt_status: the "SHALL include" list, and the three scenarios.
    for (what, st) in at_every_level(
        mcp,
        "get_attempt_status",
        json!({"attempt_id": w.bare_attempt}),
    )
    .await
    {
        has_all(&st, STATUS_FIELDS, &what);
        assert_eq!(st["state"], "idle", "{what}: no sessions");
        assert_eq!(st["latest_session_id"], Value::Null, "{what}");
        assert_eq!(st["latest_execution_process_id"], Value::Null, "{what}");
        assert_eq!(st["failure_summary"], Value::Null, "{what}");
        assert!(st["token"].is_string(), "{what}: seed 003's token");
    }
    for (what, st) in
        at_every_level(mcp, "get_attempt_status", json!({"attempt_id": running})).await
    {
        has_all(&st, STATUS_FIELDS, &what);
        assert_eq!(st["state"], "running", "{what}");
        assert_eq!(
            st["latest_execution_process_id"],
            json!(running_pid.to_string()),
            "{what}: the running process is named"
        );
    }
    for (what, st) in at_every_level(
        mcp,
        "get_attempt_status",
        json!({"attempt_id": w.failed_attempt}),
    )
    .await
    {
        has_all(&st, STATUS_FIELDS, &what);
        assert_eq!(st["state"], "failed", "{what}");
        assert!(
            st["failure_summary"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{what}: {st}"
        );
        has_all(&st["result"], &["outcome", "summary"], &what);
    }
    // The batch form carries the same list per attempt.
    let ids = json!([w.ok_attempt, w.bare_attempt, running]);
    for (what, page) in at_every_level(mcp, "get_attempt_status", json!({"attempt_ids": ids})).await
    {
        for st in page["attempts"].as_array().unwrap() {
            has_all(st, STATUS_FIELDS, &what);
        }
    }
}

/// Seed 002's list_tasks summary and list_task_attempts list ("no sessions" too).
async fn task_and_attempt_lists(mcp: &Mcp, w: &World) {
    // list_tasks: each task with its attempt summary.
    const SUMMARY: &[&str] = &[
        "latest_attempt_id",
        "latest_workspace_branch",
        "latest_session_id",
        "latest_session_executor",
        "has_in_progress_attempt",
        "last_attempt_failed",
    ];
    for (what, page) in at_every_level(mcp, "list_tasks", json!({"project_id": w.project})).await {
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() >= 5, "{what}");
        for t in tasks {
            has_all(t, SUMMARY, &what);
            has_all(t, &["task_id", "title", "status", "updated_at"], &what);
        }
        let todo = tasks
            .iter()
            .find(|t| t["task_id"] == json!(w.todo_task))
            .unwrap();
        assert_eq!(todo["latest_attempt_id"], Value::Null, "{what}");
        assert_eq!(todo["has_in_progress_attempt"], false, "{what}");
        let ok = tasks
            .iter()
            .find(|t| t["task_id"] == json!(w.ok_task))
            .unwrap();
        assert_eq!(ok["latest_attempt_id"], json!(w.ok_attempt), "{what}");
        assert_eq!(ok["latest_session_id"], json!(w.ok_session), "{what}");
    }

    // list_task_attempts: the attempt list and the top-level summary; "no sessions".
    const ATTEMPT: &[&str] = &[
        "attempt_id",
        "workspace_branch",
        "created_at",
        "updated_at",
        "latest_session_id",
        "latest_session_executor",
    ];
    for (what, page) in
        at_every_level(mcp, "list_task_attempts", json!({"task_id": w.ok_task})).await
    {
        has_all(
            &page,
            &["attempts", "latest_attempt_id", "latest_session_id"],
            &what,
        );
        for a in page["attempts"].as_array().unwrap() {
            has_all(a, ATTEMPT, &what);
        }
        assert_eq!(page["latest_attempt_id"], json!(w.ok_attempt), "{what}");
    }
    for (what, page) in
        at_every_level(mcp, "list_task_attempts", json!({"task_id": w.bare_task})).await
    {
        assert_eq!(page["latest_session_id"], Value::Null, "{what}: top level");
        let a = &page["attempts"][0];
        has_all(a, ATTEMPT, &what);
        assert_eq!(a["latest_session_id"], Value::Null, "{what}: the attempt");
    }
}

/// Seed 002's tail scenarios: default tail, older history, no process.
async fn log_tail_scenarios(mcp: &Mcp, w: &World) {
    // tail_attempt_logs: default tail, older history, and no process.
    for (what, page) in at_every_level(
        mcp,
        "tail_attempt_logs",
        json!({"attempt_id": w.ok_attempt, "limit": 5}),
    )
    .await
    {
        has_all(
            &page,
            &[
                "attempt_id",
                "execution_process_id",
                "channel",
                "entries",
                "has_more",
                "history_truncated",
            ],
            &what,
        );
        assert_eq!(page["entries"].as_array().unwrap().len(), 5, "{what}");
        assert_eq!(page["has_more"], true, "{what}: older history exists");
        let cursor = page["next_cursor"].clone();
        assert!(cursor.is_u64(), "{what}: {page}");
        let older = mcp
            .call_as_is(
                "tail_attempt_logs",
                json!({"attempt_id": w.ok_attempt, "limit": 5, "cursor": cursor}),
            )
            .await
            .ok();
        let first = |p: &Value| p["entries"][0]["entry_index"].as_u64().unwrap();
        assert!(
            first(&older) < first(&page),
            "{what}: the older page is older"
        );
        assert!(older["next_cursor"].is_u64(), "{what}: a new cursor");
    }
    for (what, page) in at_every_level(
        mcp,
        "tail_attempt_logs",
        json!({"attempt_id": w.bare_attempt}),
    )
    .await
    {
        assert_eq!(page["entries"], json!([]), "{what}");
        assert_eq!(page["has_more"], false, "{what}");
        assert_eq!(page["execution_process_id"], Value::Null, "{what}");
    }
}

/// Seed 002's changes scenarios: the guard blocks, force bypasses.
async fn change_scenarios(mcp: &Mcp, w: &World) {
    // get_attempt_changes: the guard blocks, force bypasses.
    const CHANGES: &[&str] = &["summary", "blocked", "blocked_reason", "files"];
    for (what, c) in at_every_level(
        mcp,
        "get_attempt_changes",
        json!({"attempt_id": w.huge_attempt}),
    )
    .await
    {
        has_all(&c, CHANGES, &what);
        has_all(
            &c["summary"],
            &["file_count", "added", "deleted", "total_bytes"],
            &what,
        );
        assert_eq!(c["blocked"], true, "{what}");
        assert_eq!(c["files"], json!([]), "{what}");
    }
    for (what, c) in at_every_level(
        mcp,
        "get_attempt_changes",
        json!({"attempt_id": w.huge_attempt, "force": true}),
    )
    .await
    {
        has_all(&c, CHANGES, &what);
        assert_eq!(c["blocked"], false, "{what}");
        assert_eq!(c["blocked_reason"], Value::Null, "{what}");
        assert_eq!(c["files"].as_array().unwrap().len(), 600, "{what}");
    }
}

/// Seed 002's executor list.
async fn executor_list(mcp: &Mcp) {
    // list_executors: per executor its id, variants, MCP support and default variant.
    for (what, page) in at_every_level(mcp, "list_executors", json!({})).await {
        let executors = page["executors"].as_array().unwrap();
        assert!(!executors.is_empty(), "{what}");
        for e in executors {
            has_all(
                e,
                &["executor", "variants", "supports_mcp", "default_variant"],
                &what,
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_003_response_lists_hold_at_every_level() {
    let Served {
        sim: _sim,
        dir: _dir,
        daemon,
        w,
        truth: _,
        mcp,
    } = serve_world().await;
    seed_003_reads(&mcp, &w).await;
    seed_003_observations(&mcp, &w).await;
    seed_003_executor_flags(&mcp).await;
    daemon.shutdown().await;
}

/// Seed 003 §1, 2, 4, 5, 9: projects, repos, tasks, a task, a status.
async fn seed_003_reads(mcp: &Mcp, w: &World) {
    for (what, page) in at_every_level(mcp, "list_projects", json!({})).await {
        has_all(&page, &["projects", "count"], &what);
        let p = &page["projects"][0];
        has_all(p, &["project_id", "project_name", "name"], &what);
        assert_eq!(p["name"], p["project_name"], "{what}: the deprecated alias");
    }
    for (what, page) in at_every_level(mcp, "list_repos", json!({"project_id": w.project})).await {
        has_all(&page, &["repos", "count"], &what);
        for r in page["repos"].as_array().unwrap() {
            has_all(r, &["repo_id", "repo_name", "name"], &what);
            assert_eq!(r["name"], r["repo_name"], "{what}: the deprecated alias");
        }
    }
    for (what, page) in at_every_level(mcp, "list_tasks", json!({"project_id": w.project})).await {
        has_all(&page, &["tasks", "count"], &what);
    }
    for (what, t) in at_every_level(
        mcp,
        "get_task",
        json!({"task_id": w.ok_task, "include_attempts": true}),
    )
    .await
    {
        has_all(
            &t["task"],
            &["task_id", "title", "status", "created_at", "updated_at"],
            &what,
        );
        for a in t["attempts"].as_array().unwrap() {
            has_all(a, &["attempt_id", "workspace_branch", "created_at"], &what);
        }
    }
    for (what, st) in at_every_level(
        mcp,
        "get_attempt_status",
        json!({"attempt_id": w.ok_attempt}),
    )
    .await
    {
        has_all(&st, &["attempt_id", "state", "token"], &what);
        has_all(&st["result"], &["outcome", "summary"], &what);
    }
}

/// Seed 003 §10–12: the log tail, the changes, the transcript.
async fn seed_003_observations(mcp: &Mcp, w: &World) {
    for (what, page) in at_every_level(
        mcp,
        "tail_attempt_logs",
        json!({"attempt_id": w.ok_attempt, "channel": "raw"}),
    )
    .await
    {
        has_all(
            &page,
            &[
                "attempt_id",
                "channel",
                "entries",
                "has_more",
                "history_truncated",
            ],
            &what,
        );
        assert_eq!(page["channel"], "raw", "{what}");
    }
    for (what, c) in at_every_level(
        mcp,
        "get_attempt_changes",
        json!({"attempt_id": w.ok_attempt}),
    )
    .await
    {
        has_all(&c, &["summary", "blocked", "files"], &what);
    }
    for (what, page) in at_every_level(
        mcp,
        "tail_session_messages",
        json!({"attempt_id": w.ok_attempt}),
    )
    .await
    {
        has_all(&page, &["has_more"], &what);
    }
}

/// Seed 003 §3's flags from detail 1 (recommended_for is documented as absent).
async fn seed_003_executor_flags(mcp: &Mcp) {
    let page = mcp
        .call_as_is("list_executors", json!({"detail": 1}))
        .await
        .ok();
    for e in page["executors"].as_array().unwrap() {
        assert_eq!(e["supports_follow_up_queue"], true, "{e}");
        assert_eq!(e["supports_pr"], false, "{e}");
        assert_eq!(e["supports_dev_server"], false, "{e}");
    }
    let filtered = mcp
        .call_as_is(
            "list_executors",
            json!({"capabilities_filter": ["supports_follow_up_queue"]}),
        )
        .await
        .ok();
    assert_eq!(
        filtered["executors"].as_array().map(Vec::len),
        page["executors"].as_array().map(Vec::len),
        "every executor queues follow-ups"
    );
    let none = mcp
        .call_as_is(
            "list_executors",
            json!({"capabilities_filter": ["supports_pr"]}),
        )
        .await
        .ok();
    assert_eq!(none["executors"], json!([]), "{none}");
}

/// Seed 003's mutation answers at the default detail: create `{task_id}`, start `{attempt_id,
/// workspace_branch, task_id}`, follow-up `{action, session_id, execution_process_id}`, the
/// bounded reads' `blocked` (false included), delete `{deleted_task_id}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_003_mutation_answers_hold_at_the_default_detail() {
    let Served {
        sim: _sim,
        dir: _dir,
        daemon,
        w,
        truth: _,
        mcp,
    } = serve_world().await;
    let created = mcp
        .call_as_is(
            "create_task",
            json!({"project_id": w.project, "title": "Seed answers"}),
        )
        .await
        .ok();
    has_all(&created, &["task_id"], "create_task");
    let repos = mcp
        .call_as_is("list_repos", json!({"project_id": w.project}))
        .await
        .ok();
    let repo = repos["repos"][0]["repo_id"].clone();
    let started = mcp
        .call_as_is(
            "start_task_attempt",
            json!({"task_id": created["task_id"], "executor": "CLAUDE_CODE",
                   "repos": [{"repo_id": repo, "target_branch": "main"}]}),
        )
        .await
        .ok();
    has_all(
        &started,
        &["attempt_id", "workspace_branch", "task_id"],
        "start_task_attempt",
    );
    assert_eq!(started["task_id"], created["task_id"]);
    let sent = mcp
        .call_as_is(
            "follow_up",
            json!({"attempt_id": w.ok_attempt, "action": "send", "prompt": "one more line"}),
        )
        .await
        .ok();
    has_all(
        &sent,
        &["action", "session_id", "execution_process_id"],
        "follow_up",
    );
    let changes = mcp
        .call_as_is("get_attempt_changes", json!({"attempt_id": w.ok_attempt}))
        .await
        .ok();
    let path = changes["files"][0].clone();
    let file = mcp
        .call_as_is(
            "get_attempt_file",
            json!({"attempt_id": w.ok_attempt, "path": path}),
        )
        .await
        .ok();
    has_all(&file, &["blocked", "truncated"], "get_attempt_file");
    let outside = mcp
        .call_as_is(
            "get_attempt_patch",
            json!({"attempt_id": w.ok_attempt, "paths": ["../etc/passwd"]}),
        )
        .await
        .ok();
    assert_eq!(outside["blocked"], true, "{outside}");
    has_all(
        &outside,
        &["blocked_reason", "truncated"],
        "get_attempt_patch",
    );
    let deleted = mcp
        .call_as_is("delete_task", json!({"task_id": w.todo_task}))
        .await
        .ok();
    assert_eq!(deleted["deleted_task_id"], json!(w.todo_task), "{deleted}");
    daemon.shutdown().await;
}
