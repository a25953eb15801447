//! The agent mistakes catalogue (docs/agent-guide.md): common mis-calls an LLM makes, each
//! answered with a stable code, the right `retryable`, and a hint naming the next tool or field —
//! or, where the daemon can do the sensible thing (a too-large limit, a stale token, stopping an
//! idle attempt), a normal answer that says what happened. The store must not change for any of
//! the rejected calls.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::{Mcp, Reply};
use uuid::Uuid;
use vk_observer::sim::{AttemptScript, RunReason, SimFile};

/// One catalogue entry: (name, tool, arguments, expected code, retryable, words the hint must contain).
type Case = (
    &'static str,
    &'static str,
    Value,
    &'static str,
    bool,
    &'static [&'static str],
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_catalogued_mistake_gets_a_stable_code_and_a_useful_hint() {
    let sim = support::sim().await;
    let project = sim.add_project("Mistakes", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let done_task = sim.add_task(project, "Finished", None);
    let done = sim
        .run_attempt_script(
            done_task,
            AttemptScript {
                files: vec![SimFile {
                    repo: "demo".into(),
                    path: "src/a.rs".into(),
                    change: "added".into(),
                    additions: 1,
                    deletions: 0,
                    content: "fn a() {}\n".into(),
                }],
                ..AttemptScript::default()
            },
        )
        .await;
    let huge_task = sim.add_task(project, "Huge", None);
    let many: Vec<SimFile> = (0..600)
        .map(|i| SimFile {
            repo: "demo".into(),
            path: format!("g/{i}.rs"),
            change: "added".into(),
            additions: 1,
            deletions: 0,
            content: String::new(),
        })
        .collect();
    let huge = sim
        .run_attempt_script(
            huge_task,
            AttemptScript {
                files: many,
                ..AttemptScript::default()
            },
        )
        .await;
    let busy_task = sim.add_task(project, "Busy", None);
    let busy = sim.create_attempt(busy_task, "CLAUDE_CODE");
    let busy_pid = sim.start_process(busy.session_id, RunReason::CodingAgent);
    let bare_task = sim.add_task(project, "Bare", None);
    let bare = sim.create_bare_attempt(bare_task);
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "mistakes world",
    )
    .await;
    let mcp = Mcp::connect(daemon.addr).await;
    let a = done.attempt_id;
    let s = done.session_id;
    let ghost = Uuid::new_v4();
    let too_many_ids: Vec<Uuid> = (0..101).map(|_| Uuid::new_v4()).collect();
    let too_many_paths: Vec<String> = (0..101).map(|i| format!("demo/{i}.rs")).collect();
    let big = "x".repeat(512 * 1024);
    mcp.call(
        "create_task",
        json!({"project_id": project, "title": "First", "request_id": "dup"}),
    )
    .await
    .ok();
    mcp.call(
        "update_task",
        json!({"task_id": bare_task, "title": "Bare (renamed)", "request_id": "edit-1"}),
    )
    .await
    .ok();
    let tasks_page = mcp
        .call("list_tasks", json!({"project_id": project, "limit": 1}))
        .await
        .ok();
    let tasks_cursor = tasks_page["next_cursor"].clone();
    assert!(tasks_cursor.is_string(), "{tasks_page}");
    // The delivery tools re-read VK's branch status before refusing; read it once now so the
    // refusals below find it unchanged (a re-read that finds the same status moves no token).
    for attempt in [a, busy.attempt_id, bare] {
        mcp.call("get_attempt_branch_status", json!({"attempt_id": attempt}))
            .await
            .ok();
    }
    let token_before = daemon.store.current_token();

    let cases: Vec<Case> = vec![
        (
            "send without prompt",
            "follow_up",
            json!({"action": "send", "attempt_id": a}),
            "invalid_argument",
            false,
            &["prompt"],
        ),
        (
            "queue without prompt",
            "follow_up",
            json!({"action": "queue", "session_id": s}),
            "invalid_argument",
            false,
            &["prompt"],
        ),
        (
            "both attempt_id and session_id",
            "follow_up",
            json!({"action": "send", "attempt_id": a, "session_id": s, "prompt": "x"}),
            "ambiguous_target",
            false,
            &["attempt_id", "session_id"],
        ),
        (
            "no target at all",
            "follow_up",
            json!({"action": "send", "prompt": "x"}),
            "ambiguous_target",
            false,
            &["attempt_id", "session_id"],
        ),
        (
            "stop verb on follow_up",
            "follow_up",
            json!({"action": "stop", "attempt_id": a}),
            "invalid_argument",
            false,
            &["stop_attempt"],
        ),
        (
            "cancel with a prompt",
            "follow_up",
            json!({"action": "cancel", "attempt_id": a, "prompt": "stop now"}),
            "invalid_argument",
            false,
            &["cancel"],
        ),
        (
            "follow-up before any session",
            "follow_up",
            json!({"action": "send", "attempt_id": bare, "prompt": "hi"}),
            "no_session_yet",
            true,
            &["get_attempt_status", "latest_session_id"],
        ),
        (
            "both cursor and after_entry_index",
            "tail_attempt_logs",
            json!({"attempt_id": a, "cursor": 5, "after_entry_index": 2}),
            "mixed_pagination",
            false,
            &["cursor", "after_entry_index"],
        ),
        (
            "limit zero",
            "tail_attempt_logs",
            json!({"attempt_id": a, "limit": 0}),
            "invalid_argument",
            false,
            &["limit"],
        ),
        (
            "negative index",
            "tail_attempt_logs",
            json!({"attempt_id": a, "after_entry_index": -1}),
            "invalid_argument",
            false,
            &["schema"],
        ),
        (
            "task id used as attempt id",
            "tail_attempt_logs",
            json!({"attempt_id": done_task}),
            "not_found",
            false,
            &["list_task_attempts", "task_id"],
        ),
        (
            "unknown channel",
            "tail_attempt_logs",
            json!({"attempt_id": a, "channel": "stdout"}),
            "invalid_argument",
            false,
            &["normalized"],
        ),
        (
            "status with both forms",
            "get_attempt_status",
            json!({"attempt_id": a, "attempt_ids": [a]}),
            "ambiguous_target",
            false,
            &["attempt_id", "attempt_ids"],
        ),
        (
            "status with no id",
            "get_attempt_status",
            json!({}),
            "ambiguous_target",
            false,
            &["attempt_ids"],
        ),
        (
            "batch over 100",
            "get_attempt_status",
            json!({"attempt_ids": too_many_ids}),
            "invalid_argument",
            false,
            &["attempt_ids", "100"],
        ),
        (
            "made-up token",
            "get_attempt_status",
            json!({"attempt_id": a, "since_token": "42"}),
            "invalid_argument",
            false,
            &["token"],
        ),
        (
            "unknown attempt",
            "get_attempt_status",
            json!({"attempt_id": ghost}),
            "not_found",
            false,
            &["list_task_attempts"],
        ),
        (
            "guessed executor string",
            "start_task_attempt",
            json!({"task_id": done_task, "executor": "claude-code", "repos": []}),
            "invalid_argument",
            false,
            &["list_executors", "executor"],
        ),
        (
            "no repos",
            "start_task_attempt",
            json!({"task_id": done_task, "executor": "CLAUDE_CODE", "repos": []}),
            "invalid_argument",
            false,
            &["list_repos", "repo_id"],
        ),
        (
            "project id used as task id",
            "start_task_attempt",
            json!({"task_id": project, "executor": "CLAUDE_CODE", "repos": []}),
            "not_found",
            false,
            &["list_tasks"],
        ),
        (
            "attempt id used as project id",
            "list_tasks",
            json!({"project_id": a}),
            "not_found",
            false,
            &["list_projects", "project_id"],
        ),
        (
            "status spelled like prose",
            "list_tasks",
            json!({"project_id": project, "status": "in_progress"}),
            "invalid_argument",
            false,
            &["inprogress"],
        ),
        (
            "camelCase field",
            "get_task",
            json!({"taskId": done_task}),
            "invalid_argument",
            false,
            &["taskId"],
        ),
        (
            "uuid that is not one",
            "get_task",
            json!({"task_id": "task-1"}),
            "invalid_argument",
            false,
            &["UUID"],
        ),
        (
            "empty title",
            "create_task",
            json!({"project_id": project, "title": "  "}),
            "invalid_argument",
            false,
            &["title"],
        ),
        (
            "request_id reused for another task",
            "create_task",
            json!({"project_id": project, "title": "Second", "request_id": "dup"}),
            "idempotency_conflict",
            false,
            &["request_id"],
        ),
        (
            "update with nothing to change",
            "update_task",
            json!({"task_id": done_task}),
            "invalid_argument",
            false,
            &["title", "status"],
        ),
        (
            "delete while running",
            "delete_task",
            json!({"task_id": busy_task}),
            "conflict",
            false,
            &["stop_attempt"],
        ),
        (
            "cursor of another list",
            "list_task_attempts",
            json!({"task_id": done_task, "cursor": tasks_cursor}),
            "invalid_argument",
            false,
            &["belongs to list_tasks", "next_cursor", "cursor"],
        ),
        (
            "made-up cursor",
            "list_repos",
            json!({"project_id": project, "cursor": "page-2"}),
            "invalid_argument",
            false,
            &["Malformed", "next_cursor"],
        ),
        (
            "list limit 0",
            "list_projects",
            json!({"limit": 0}),
            "invalid_argument",
            false,
            &["limit", "200"],
        ),
        (
            "attempts page without include_attempts",
            "get_task",
            json!({"task_id": done_task, "attempts_limit": 5}),
            "invalid_argument",
            false,
            &["include_attempts"],
        ),
        (
            "request_id reused for another edit",
            "update_task",
            json!({"task_id": bare_task, "title": "Something else", "request_id": "edit-1"}),
            "idempotency_conflict",
            false,
            &["request_id"],
        ),
        (
            "wait on both scopes",
            "wait_for_attempt_change",
            json!({"attempt_ids": [a], "project_id": project}),
            "ambiguous_target",
            false,
            &["attempt_ids", "project_id"],
        ),
        (
            "wait with zero timeout",
            "wait_for_attempt_change",
            json!({"attempt_ids": [a], "timeout_ms": 0}),
            "invalid_argument",
            false,
            &["timeout_ms"],
        ),
        (
            "transcript with both ids",
            "tail_session_messages",
            json!({"attempt_id": a, "session_id": s}),
            "ambiguous_target",
            false,
            &["session_id", "attempt_id"],
        ),
        (
            "stop with both attempt_id and execution_process_id",
            "stop_attempt",
            json!({"attempt_id": busy.attempt_id, "execution_process_id": busy_pid}),
            "ambiguous_target",
            false,
            &["attempt_id", "execution_process_id"],
        ),
        (
            "stop with no target",
            "stop_attempt",
            json!({"force": true}),
            "ambiguous_target",
            false,
            &["attempt_id", "execution_process_id"],
        ),
        (
            "force on a process stop",
            "stop_attempt",
            json!({"execution_process_id": busy_pid, "force": true}),
            "invalid_argument",
            false,
            &["force", "attempt_id"],
        ),
        (
            "session id used as a process id",
            "stop_attempt",
            json!({"execution_process_id": busy.session_id}),
            "not_found",
            false,
            &["get_attempt_status", "latest_execution_process_id"],
        ),
        (
            "context outside a workspace",
            "get_context",
            json!({}),
            "no_workspace_context",
            false,
            &["list_projects"],
        ),
        (
            "half-megabyte path",
            "get_attempt_file",
            json!({"attempt_id": a, "path": big}),
            "invalid_argument",
            false,
            &["path", "get_attempt_changes"],
        ),
        (
            "byte offset mixed with a line range",
            "get_attempt_file",
            json!({"attempt_id": a, "path": "demo/src/a.rs", "start": 100, "start_line": 5}),
            "invalid_argument",
            false,
            &["start", "start_line", "not both"],
        ),
        (
            "line range backwards",
            "get_attempt_file",
            json!({"attempt_id": a, "path": "demo/src/a.rs", "start_line": 9, "end_line": 3}),
            "invalid_argument",
            false,
            &["end_line", "start_line", "inclusive"],
        ),
        (
            "line 0 (lines count from 1)",
            "get_attempt_file",
            json!({"attempt_id": a, "path": "demo/src/a.rs", "start_line": 0}),
            "invalid_argument",
            false,
            &["start_line: 1"],
        ),
        (
            "half-megabyte string where a number goes",
            "tail_attempt_logs",
            json!({"attempt_id": a, "limit": big}),
            "invalid_argument",
            false,
            &["schema"],
        ),
        // ---- delivery (rebase / merge / push) ----
        (
            "merge while the agent runs",
            "merge_attempt",
            json!({"attempt_id": busy.attempt_id}),
            "process_running",
            true,
            &["wait_for_attempt_change", "stop_attempt"],
        ),
        (
            "push with a repo_id of another attempt",
            "push_attempt",
            json!({"attempt_id": a, "repo_id": ghost}),
            "not_found",
            false,
            &["get_attempt_branch_status", "repo_id"],
        ),
        (
            "rebase onto a branch that does not exist",
            "rebase_attempt",
            json!({"attempt_id": a, "new_base_branch": "no-such-branch"}),
            "unknown_branch",
            false,
            &["new_base_branch"],
        ),
        (
            "merge an attempt that committed nothing",
            "merge_attempt",
            json!({"attempt_id": bare}),
            "nothing_to_merge",
            false,
            &["follow_up"],
        ),
        (
            "branch status of a project id",
            "get_attempt_branch_status",
            json!({"attempt_id": project}),
            "not_found",
            false,
            &["list_task_attempts"],
        ),
        (
            "force as a string",
            "push_attempt",
            json!({"attempt_id": a, "force": "yes"}),
            "invalid_argument",
            false,
            &["schema", "boolean"],
        ),
        (
            "activity with since_token and cursor",
            "tail_project_activity",
            json!({"project_id": project, "since_token": "a.1", "cursor": "ab"}),
            "mixed_pagination",
            false,
            &["since_token", "cursor"],
        ),
        (
            "activity of a project id passed as a task",
            "tail_task_activity",
            json!({"task_id": project}),
            "not_found",
            false,
            &["list_tasks"],
        ),
        (
            "activity paged with another list's cursor",
            "tail_project_activity",
            json!({"project_id": project, "cursor": tasks_cursor}),
            "invalid_argument",
            false,
            &["belongs to list_tasks", "next_cursor"],
        ),
        (
            "include_activity on an attempt wait",
            "wait_for_attempt_change",
            json!({"attempt_ids": [a], "include_activity": true}),
            "invalid_argument",
            false,
            &["include_activity", "project_id", "tail_task_activity"],
        ),
        (
            "activity detail out of range",
            "tail_task_activity",
            json!({"task_id": done_task, "detail": 3}),
            "invalid_argument",
            false,
            &["detail"],
        ),
        (
            "detail level out of range",
            "get_attempt_status",
            json!({"attempt_id": a, "detail": 3}),
            "invalid_argument",
            false,
            &["detail must be 0, 1 or 2"],
        ),
        // Approvals (issue 16): ids, decisions, reasons and scopes.
        (
            "attempt id passed as an approval id",
            "respond_approval",
            json!({"approval_id": a, "decision": "approve"}),
            "unknown_approval",
            false,
            &["list_approvals", "pending_approvals"],
        ),
        (
            "approval id that is not a UUID",
            "respond_approval",
            json!({"approval_id": "approve-the-bash-call", "decision": "approve"}),
            "invalid_argument",
            false,
            &["approval_id", "UUID", "list_approvals"],
        ),
        (
            "a reason with approve",
            "respond_approval",
            json!({"approval_id": ghost, "decision": "approve", "reason": "looks fine"}),
            "invalid_argument",
            false,
            &["reason", "deny"],
        ),
        (
            "decision yes instead of approve",
            "respond_approval",
            json!({"approval_id": ghost, "decision": "yes"}),
            "invalid_argument",
            false,
            &["decision", "approve"],
        ),
        (
            "list_approvals with both scopes",
            "list_approvals",
            json!({"attempt_ids": [a], "project_id": project}),
            "ambiguous_target",
            false,
            &["attempt_ids", "project_id"],
        ),
        (
            "list_approvals with no scope",
            "list_approvals",
            json!({"status": "pending"}),
            "ambiguous_target",
            false,
            &["attempt_ids", "project_id"],
        ),
        (
            "list_approvals with a list_tasks cursor",
            "list_approvals",
            json!({"project_id": project, "cursor": tasks_cursor}),
            "invalid_argument",
            false,
            &["belongs to list_tasks", "next_cursor"],
        ),
    ];
    assert!(cases.len() >= 25);
    for (name, tool, args, code, retryable, words) in &cases {
        let e = match mcp.call(tool, args.clone()).await {
            Reply::Err(e) => e,
            Reply::Ok(v) => panic!("{name}: {tool} accepted {args}: {v}"),
        };
        assert_eq!(e["code"], *code, "{name}: {e}");
        assert_eq!(e["retryable"], *retryable, "{name}: {e}");
        let hint = format!("{} {}", e["hint"].as_str().unwrap(), e["details"]);
        assert!(
            e.to_string().len() < 2000,
            "{name}: the envelope echoes too much input ({} bytes)",
            e.to_string().len()
        );
        assert!(
            e.to_string().len() < 2000,
            "{name}: the envelope echoes too much input ({} bytes)",
            e.to_string().len()
        );
        for w in *words {
            assert!(hint.contains(w), "{name}: hint/details lack {w:?}: {e}");
        }
    }
    assert_eq!(
        daemon.store.current_token(),
        token_before,
        "rejected calls changed the store"
    );

    // Mistakes the daemon absorbs, saying what it did.
    let capped = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": a, "limit": 100000}),
        )
        .await
        .ok();
    assert!(
        capped["entries"].as_array().unwrap().len() <= 500,
        "limit capped at 500"
    );
    let projects = mcp
        .call("list_projects", json!({"limit": 100000}))
        .await
        .ok();
    assert_eq!(
        (projects["count"].clone(), projects["has_more"].clone()),
        (json!(1), json!(false)),
        "a too-large list limit is capped at 200, not refused"
    );
    let reset = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_id": a, "since_token": "00000000000000ff.3"}),
        )
        .await
        .ok();
    assert_eq!(
        reset["token_reset"], true,
        "a stale token answers in full and says so"
    );
    let blocked = mcp
        .call(
            "get_attempt_changes",
            json!({"attempt_id": huge.attempt_id}),
        )
        .await
        .ok();
    assert_eq!(blocked["blocked_reason"], "threshold_exceeded");
    assert!(blocked["hint"].as_str().unwrap().contains("force"));
    let escaped = mcp
        .call(
            "get_attempt_file",
            json!({"attempt_id": a, "path": "../../etc/passwd"}),
        )
        .await
        .ok();
    assert_eq!(escaped["blocked_reason"], "path_outside_workspace");
    assert!(
        escaped["hint"]
            .as_str()
            .unwrap()
            .contains("get_attempt_changes")
    );
    let big_read = mcp
        .call(
            "get_attempt_file",
            json!({"attempt_id": a, "path": "demo/src/a.rs", "max_bytes": 10_000_000}),
        )
        .await
        .ok();
    assert_eq!(big_read["blocked_reason"], "size_exceeded");
    let no_prefix = mcp
        .call(
            "get_attempt_patch",
            json!({"attempt_id": a, "paths": too_many_paths}),
        )
        .await
        .ok();
    assert_eq!(no_prefix["blocked_reason"], "too_many_paths");
    let idle = mcp
        .call("stop_attempt", json!({"attempt_id": a}))
        .await
        .ok();
    assert_eq!(
        idle["was_running"], false,
        "stopping an idle attempt is a no-op, not an error"
    );
    let _ = busy;
    daemon.shutdown().await;
}
