//! The agent mistakes catalogue (docs/agent-guide.md): common mis-calls an LLM makes, each
//! answered with a stable code, the right `retryable`, and a hint naming the next tool or field —
//! or, where the daemon can do the sensible thing (a too-large limit, a stale token, stopping an
//! idle attempt), a normal answer that says what happened. The store must not change for any of
//! the rejected calls.

mod support;

use std::time::Duration;

use serde_json::json;
use support::mcp::{Mcp, Reply};
use support::mistakes::{Case, World};
use uuid::Uuid;
use vk_observer_sim::{AttemptScript, RunReason, SimFile};

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
    let detached_project = sim.add_project("Detached", &["headless"]);
    let detached_repo = sim.project_repo_ids(detached_project)[0];
    sim.set_repo_current_branch(detached_repo, None);
    let detached_task = sim.add_task(detached_project, "Detached", None);
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

    let cases: Vec<Case> = support::mistakes::cases(&World {
        project,
        done_task,
        bare_task,
        busy_task,
        a,
        s,
        bare,
        busy: &busy,
        busy_pid,
        ghost,
        too_many_ids: &too_many_ids,
        big: &big,
        tasks_cursor: &tasks_cursor,
        detached_task,
        detached_repo,
    });
    assert!(cases.len() >= 25);
    for (name, tool, args, code, retryable, words) in &cases {
        let e = match mcp.call(tool, args.clone()).await {
            Reply::Err(e) => e,
            Reply::Ok(v) => panic!("{name}: {tool} accepted {args}: {v}"),
        };
        let (code, reason) = code.split_once('/').unwrap_or((code, ""));
        assert_eq!(e["code"], code, "{name}: {e}");
        if !reason.is_empty() {
            assert_eq!(e["details"]["reason"], reason, "{name}: {e}");
        }
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
        (json!(2), json!(false)),
        "a too-large list limit is capped at 200, not refused (projects Mistakes and Detached)"
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
    let guarded = mcp
        .call(
            "get_attempt_patch",
            json!({"attempt_id": a, "paths": ["demo/src/a.rs", "demo/src/b.rs"],
                   "guard": {"max_files": 1}}),
        )
        .await
        .ok();
    assert_eq!(guarded["blocked"], true);
    assert_eq!(guarded["blocked_reason"], "too_many_files");
    assert!(
        guarded["hint"]
            .as_str()
            .unwrap()
            .contains("at most 1 paths")
    );
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

/// The refusals of least privilege (`support::mistakes_scopes`), each made by its own caller:
/// scoped tokens, a project-limited one, and a tokenless client inside an attempt workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_refusals_are_catalogued_with_their_callers() {
    use support::mistakes_scopes::{Caller, ScopeWorld, cases};
    use vk_observer_config::access::{Scope, Scopes, TokenFile};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let project = sim.add_project("Scoped", &["demo"]);
    let other_project = sim.add_project("Other", &["demo"]);
    let task = sim.add_task(project, "Mine", None);
    let other_task = sim.add_task(other_project, "Theirs", None);
    let mine = sim.run_attempt_script(task, AttemptScript::default()).await;
    let other = sim
        .run_attempt_script(other_task, AttemptScript::default())
        .await;
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "scoped world").await;
    let root = sim.truth().attempts[&mine.attempt_id]["container_ref"]
        .as_str()
        .unwrap()
        .to_string();
    // The workspace client first, while no token is in use.
    let inside = Mcp::connect_with(
        daemon.addr,
        std::collections::HashMap::from([("x-vk-workspace".to_string(), root)]),
    )
    .await;
    let w = ScopeWorld {
        project,
        other_project,
        attempt: mine.attempt_id,
        other_attempt: other.attempt_id,
        other_task,
    };
    let path = dir.path().join("tokens.toml");
    let mut file = TokenFile::default();
    let agent = file
        .create("agent", Scopes::of(&[Scope::Read, Scope::Write]), vec![])
        .unwrap();
    let reader = file
        .create("reader", Scopes::of(&[Scope::Read]), vec![])
        .unwrap();
    let limited = file
        .create("limited", Scopes::all(), vec![project.to_string()])
        .unwrap();
    let before = sim.counters().by_route.clone();
    for (name, caller, tool, args, code, retryable, words) in cases(&w) {
        if caller == Caller::InWorkspace {
            std::fs::remove_file(&path).ok();
        } else {
            file.save(&path).unwrap();
        }
        let mcp;
        let client = match caller {
            Caller::InWorkspace => &inside,
            other => {
                let secret = match other {
                    Caller::AgentToken => &agent,
                    Caller::ReadToken => &reader,
                    _ => &limited,
                };
                mcp = Mcp::connect_with_token(daemon.addr, secret).await;
                &mcp
            }
        };
        let e = match client.call(tool, args.clone()).await {
            Reply::Err(e) => e,
            Reply::Ok(v) => panic!("{name}: {tool} accepted {args}: {v}"),
        };
        assert_eq!(e["code"], code, "{name}: {e}");
        assert_eq!(e["retryable"], retryable, "{name}: {e}");
        let said = format!("{} {}", e["hint"].as_str().unwrap(), e["details"]);
        for w in words {
            assert!(said.contains(w), "{name}: hint/details lack {w:?}: {e}");
        }
    }
    let writes = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter()
            .filter(|(r, _)| !r.starts_with("GET "))
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    assert_eq!(
        writes(&sim.counters().by_route),
        writes(&before),
        "VK was asked"
    );
    daemon.shutdown().await;
}
