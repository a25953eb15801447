//! Detail levels through a real MCP client against the simulator-fed daemon: every read tool at
//! `detail` 0, 1 and 2 (each level a sub-document of the next, level 2 the full answer the other
//! tests check field for field, the default equal to 0), the `include_*` switches,
//! `capabilities_filter`, the forced-list ceiling (`too_many_files`), per-file counts and the
//! mutations' levels. Compact log entries: tests/mcp_detail_logs.rs.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::approvals::without_clock;
use support::mcp::Mcp;
use support::world::*;

/// Every field of `small` is in `big` with the same value (objects: a subset of keys; lists:
/// the same length, item by item). `freshness` is compared by its `upstream` only (its ages
/// move between calls).
fn assert_sub(small: &Value, big: &Value, path: &str) {
    match (small, big) {
        (Value::Object(s), Value::Object(b)) => {
            for (k, v) in s {
                let p = format!("{path}.{k}");
                let other = b
                    .get(k)
                    .unwrap_or_else(|| panic!("{p} missing from the larger level"));
                if k == "freshness" {
                    assert_eq!(v["upstream"], other["upstream"], "{p}");
                } else if support::approvals::CLOCK_FIELDS.contains(&k.as_str()) || k == "waited_ms"
                {
                    // Measured at each call: an approval's age and time left, a wait's time.
                } else {
                    assert_sub(v, other, &p);
                }
            }
        }
        (Value::Array(s), Value::Array(b)) => {
            assert_eq!(s.len(), b.len(), "{path}: list lengths differ");
            for (i, (x, y)) in s.iter().zip(b).enumerate() {
                assert_sub(x, y, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(small, big, "{path}"),
    }
}

/// The answers at 0, 1 and 2, checked to nest, and the default checked equal to 0.
async fn levels(mcp: &Mcp, tool: &str, args: Value) -> [Value; 3] {
    let at = |d: u8| {
        let mut a = args.clone();
        a["detail"] = json!(d);
        a
    };
    let l0 = mcp.call(tool, at(0)).await.ok();
    let l1 = mcp.call(tool, at(1)).await.ok();
    let l2 = mcp.call(tool, at(2)).await.ok();
    let default = mcp.call_as_is(tool, args).await.ok();
    assert_sub(&default, &l0, &format!("{tool}(default)"));
    assert_sub(&l0, &default, &format!("{tool}(0)"));
    assert_sub(&l0, &l1, &format!("{tool}(0⊂1)"));
    assert_sub(&l1, &l2, &format!("{tool}(1⊂2)"));
    let (b0, b2) = (l0.to_string().len(), l2.to_string().len());
    assert!(b0 <= b2, "{tool}: detail 0 ({b0} B) larger than 2 ({b2} B)");
    [l0, l1, l2]
}

fn has(v: &Value, k: &str) -> bool {
    v.get(k).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_tool_answers_at_three_levels() {
    let Served {
        sim: _sim,
        dir: _dir,
        daemon,
        w,
        truth,
        mcp,
    } = serve_world().await;

    let [p0, p1, p2] = levels(&mcp, "list_projects", json!({})).await;
    assert!(has(&p0["projects"][0], "project_name") && !has(&p0["projects"][0], "repo_count"));
    assert!(
        !has(&p0, "freshness"),
        "level 0 leaves freshness out while the cache is current: {p0}"
    );
    assert_eq!(p1["freshness"]["upstream"], "connected");
    assert!(has(&p1["projects"][0], "repo_count") && has(&p2["freshness"], "bootstrapped"));

    let [r0, r1, _] = levels(&mcp, "list_repos", json!({"project_id": w.project})).await;
    assert!(has(&r0["repos"][0], "repo_id") && !has(&r0["repos"][0], "path"));
    assert!(has(&r1["repos"][0], "path"));

    let [e0, e1, _] = levels(&mcp, "list_executors", json!({})).await;
    let claude = |v: &Value| {
        v["executors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["executor"] == "CLAUDE_CODE")
            .cloned()
            .unwrap()
    };
    // Seed 002's list at 0 (supports_mcp, default_variant); seed 003's other flags from 1.
    assert!(has(&claude(&e0), "variants") && has(&claude(&e0), "supports_mcp"));
    assert!(!has(&claude(&e0), "capabilities") && !has(&claude(&e0), "supports_pr"));
    assert_eq!(claude(&e1)["supports_mcp"], true);
    assert_eq!(claude(&e1)["supports_follow_up_queue"], true);
    assert_eq!(claude(&e1)["capabilities"], json!(["SESSION_FORK"]));

    let [t0, t1, t2] = levels(&mcp, "list_tasks", json!({"project_id": w.project})).await;
    let ok = |v: &Value| {
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| id(&t["task_id"]) == w.ok_task)
            .cloned()
            .unwrap()
    };
    for k in [
        "title",
        "status",
        "updated_at",
        "latest_attempt_id",
        "latest_session_id",
    ] {
        assert!(has(&ok(&t0), k), "list_tasks detail 0 lacks {k}");
    }
    // The seed's attempt summary shows its false at level 0 too; the project from 1.
    assert!(ok(&t0)["has_in_progress_attempt"] == false && ok(&t0)["last_attempt_failed"] == false);
    assert!(!has(&ok(&t0), "description") && !has(&ok(&t0), "project_id"));
    assert!(has(&ok(&t1), "project_id") && !has(&ok(&t1), "description"));
    assert_eq!(ok(&t2)["description"], "Please write a greeting file.");

    let [g0, _, g2] = levels(
        &mcp,
        "get_task",
        json!({"task_id": w.ok_task, "include_attempts": true}),
    )
    .await;
    assert_eq!(g0["task"]["description"], "Please write a greeting file.");
    assert!(has(&g0["attempts"][0], "state") && has(&g0["attempts"][0], "workspace_branch"));
    assert!(has(&g2["attempts"][0], "workspace_branch") && !has(&g0["task"], "project_id"));

    let [a0, a1, _] = levels(&mcp, "list_task_attempts", json!({"task_id": w.ok_task})).await;
    assert!(has(&a0, "latest_attempt_id") && has(&a0["attempts"][0], "created_at"));
    assert!(has(&a1["attempts"][0], "latest_session_executor"));

    let [s0, s1, s2] = levels(
        &mcp,
        "get_attempt_status",
        json!({"attempt_id": w.ok_attempt}),
    )
    .await;
    for k in [
        "attempt_id",
        "state",
        "latest_session_id",
        "last_activity_at",
        "token",
        "result",
    ] {
        assert!(has(&s0, k), "status detail 0 lacks {k}");
    }
    assert_eq!(s0["result"]["next_tool"], s2["result"]["next_tool"]);
    // What the next call is decided on is at level 0: the sentence, the end, the exit code and
    // the process; the finer state and the deprecated `reason` (= `summary`) from level 1.
    for k in ["summary", "outcome", "finalized_at", "exit_code"] {
        assert!(has(&s0["result"], k), "result at detail 0 lacks {k}: {s0}");
    }
    assert_eq!(s0["result"]["summary"], s2["result"]["summary"]);
    assert_eq!(
        s0["latest_execution_process_id"],
        s2["latest_execution_process_id"]
    );
    assert!(!has(&s0, "latest_process") && !has(&s0["result"], "reason"));
    assert!(!has(&s0["result"], "state"), "{s0}");
    assert!(has(&s1, "latest_process") && has(&s1["result"], "reason") && has(&s1, "created_at"));
    assert_eq!(s1["result"]["reason"], s1["result"]["summary"]);
    assert_eq!(s1["result"]["state"], "succeeded");
    assert!(!has(&s0, "attempt_token") && has(&s1, "attempt_token"));
    let [b0, b1, b2] = levels(
        &mcp,
        "get_attempt_status",
        json!({"attempt_ids": [w.ok_attempt, w.failed_attempt, w.bare_attempt]}),
    )
    .await;
    assert_eq!(b0["attempts"].as_array().unwrap().len(), 3);
    assert!(!has(&b0, "not_found") && b2["not_found"] == json!([]));
    let failed = &b0["attempts"][1];
    assert_eq!(failed["state"], "failed");
    assert!(has(failed, "failure_summary") && has(&failed["result"], "last_error"));
    assert_eq!(failed["result"]["last_error_code"], "agent_exit_nonzero");
    // Level 0 leaves out a `result` that only says "wait" (the bare attempt has no session
    // yet); levels 1 and 2 keep it.
    assert_eq!(
        b2["attempts"][2]["result"]["next_tool"],
        "wait_for_attempt_change"
    );
    assert!(!has(&b0["attempts"][2], "result"), "{}", b0["attempts"][2]);
    assert_eq!(
        b0["attempts"][2]["latest_execution_process_id"],
        Value::Null
    );
    assert!(has(&b1["attempts"][2], "result"));
    let no_result = mcp
        .call(
            "get_attempt_status",
            json!({"attempt_id": w.ok_attempt, "include_result": false}),
        )
        .await
        .ok();
    assert!(!has(&no_result, "result") && has(&no_result, "state"));

    let [c0, c1, c2] = levels(
        &mcp,
        "get_attempt_changes",
        json!({"attempt_id": w.ok_attempt}),
    )
    .await;
    assert_eq!(c0["files"].as_array().unwrap().len(), 3);
    assert!(has(&c0, "summary") && !has(&c0, "guard") && !has(&c0, "hint"));
    assert!(has(&c1, "guard") && c2["hint"].is_null());
    // Per-file counts from 1 on, read from VK's patch (the world's files are created files of
    // 3, 3 and 1 lines).
    assert!(!has(&c0, "file_stats"));
    assert_eq!(
        c1["file_stats"],
        json!([{"path": "demo/src/f0.rs", "added": 3, "deleted": 0},
               {"path": "demo/src/f1.rs", "added": 3, "deleted": 0},
               {"path": "docs/src/f0.rs", "added": 1, "deleted": 0}])
    );
    assert_eq!(c2["file_stats"], c1["file_stats"]);
    let summary_only = mcp
        .call(
            "get_attempt_changes",
            json!({"attempt_id": w.ok_attempt, "include_files": false}),
        )
        .await
        .ok();
    assert!(!has(&summary_only, "files") && summary_only["summary"]["file_count"] == 3);

    let [m0, m1, _] = levels(
        &mcp,
        "tail_session_messages",
        json!({"attempt_id": w.ok_attempt}),
    )
    .await;
    assert!(has(&m0["turns"][0], "prompt") && !has(&m0["turns"][0], "created_at"));
    assert!(!has(&m0, "executor") && has(&m1, "executor"));

    // The wait: statuses shaped as get_attempt_status shapes them.
    let since = format!(
        "{}.0",
        s2["token"].as_str().unwrap().split('.').next().unwrap()
    );
    let [w0, w1, _] = levels(
        &mcp,
        "wait_for_attempt_change",
        json!({"attempt_ids": [w.ok_attempt], "since_token": since, "timeout_ms": 1000}),
    )
    .await;
    assert_eq!(w0["changed"], true);
    assert!(has(&w0["attempts"][0], "state") && !has(&w0["attempts"][0], "latest_process"));
    assert!(!has(&w0, "waited_ms") && has(&w1, "waited_ms"));

    // get_context, for a client inside the attempt's workspace.
    let root = truth.attempts[&w.ok_attempt]["container_ref"]
        .as_str()
        .unwrap()
        .to_string();
    let inside = Mcp::connect_with(
        daemon.addr,
        std::collections::HashMap::from([("x-vk-workspace".to_string(), format!("{root}/demo"))]),
    )
    .await;
    let [x0, x1, _] = levels(&inside, "get_context", json!({})).await;
    assert_eq!(id(&x0["attempt_id"]), w.ok_attempt);
    assert!(has(&x0, "workspace_repos") && !has(&x0, "workspace_path"));
    assert_eq!(x1["workspace_path"], root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_switches_filter_and_trim() {
    let Served {
        w,
        mcp,
        sim: _s,
        dir: _d,
        daemon: _dm,
        truth: _t,
    } = serve_world().await;
    let bare = mcp
        .call(
            "list_tasks",
            json!({"project_id": w.project, "include_attempt_summary": false}),
        )
        .await
        .ok();
    for t in bare["tasks"].as_array().unwrap() {
        assert!(
            has(t, "task_id") && !has(t, "latest_attempt_id") && !has(t, "has_in_progress_attempt")
        );
    }
    let names = mcp
        .call("list_executors", json!({"include_variants": false}))
        .await
        .ok();
    for e in names["executors"].as_array().unwrap() {
        assert!(has(e, "executor") && !has(e, "variants"));
    }
    let fork = mcp
        .call(
            "list_executors",
            json!({"capabilities_filter": ["SESSION_FORK"], "detail": 1}),
        )
        .await
        .ok();
    let fork: Vec<&Value> = fork["executors"].as_array().unwrap().iter().collect();
    assert_eq!(fork.len(), 1);
    assert_eq!(fork[0]["executor"], "CLAUDE_CODE");
    let mcp_ok = mcp
        .call(
            "list_executors",
            json!({"capabilities_filter": ["supports_mcp"], "detail": 1}),
        )
        .await
        .ok();
    assert!(
        mcp_ok["executors"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["supports_mcp"] == true)
    );
    assert_eq!(
        mcp.call("list_executors", json!({"capabilities_filter": [" "]}))
            .await
            .code(),
        "invalid_argument"
    );
    assert_eq!(
        mcp.call("list_projects", json!({"detail": 3})).await.code(),
        "invalid_argument"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_file_lists_have_an_absolute_ceiling() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Ceiling", &["demo"]);
    let task = sim.add_task(project, "Touch everything", None);
    let ids = sim
        .run_attempt_script(
            task,
            vk_observer_sim::AttemptScript {
                files: files("demo", 5_001, 1),
                ..Default::default()
            },
        )
        .await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "ceiling").await;
    let mcp = Mcp::connect(daemon.addr).await;
    let guarded = mcp
        .call("get_attempt_changes", json!({"attempt_id": ids.attempt_id}))
        .await
        .ok();
    assert_eq!(guarded["blocked_reason"], "threshold_exceeded");
    let forced = mcp
        .call(
            "get_attempt_changes",
            json!({"attempt_id": ids.attempt_id, "force": true, "detail": 0}),
        )
        .await
        .ok();
    assert_eq!(forced["blocked"], true);
    assert_eq!(forced["blocked_reason"], "too_many_files");
    assert_eq!(forced["summary"]["file_count"], 5_001);
    assert!(forced["files"] == json!([]) && forced["hint"].as_str().unwrap().contains("5000"));
}

/// Per-file counts come from VK's patch (its created file's empty old side counts as nothing)
/// and only within the patch's limits: over 100 files there are none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_file_counts_come_from_vks_patch_within_its_limits() {
    use vk_observer_sim::{AttemptScript, SimFile};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Counts", &["demo"]);
    let file = |path: &str, change: &str, additions: u64, deletions: u64| SimFile {
        repo: "demo".into(),
        path: path.into(),
        change: change.into(),
        additions,
        deletions,
        content: "one\ntwo\nthree\n".into(),
    };
    let mixed = sim
        .run_attempt_script(
            sim.add_task(project, "Mixed change", None),
            AttemptScript {
                files: vec![
                    file("new.rs", "added", 3, 0),
                    file("lib.rs", "modified", 2, 5),
                    file("gone.rs", "deleted", 0, 4),
                ],
                ..Default::default()
            },
        )
        .await;
    let wide = sim
        .run_attempt_script(
            sim.add_task(project, "Wide change", None),
            AttemptScript {
                files: files("demo", 101, 1),
                ..Default::default()
            },
        )
        .await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "counts").await;
    let mcp = Mcp::connect(daemon.addr).await;
    let counted = mcp
        .call(
            "get_attempt_changes",
            json!({"attempt_id": mixed.attempt_id, "detail": 1}),
        )
        .await
        .ok();
    assert_eq!(
        counted["file_stats"],
        json!([{"path": "demo/gone.rs", "added": 0, "deleted": 4},
               {"path": "demo/lib.rs", "added": 2, "deleted": 5},
               {"path": "demo/new.rs", "added": 3, "deleted": 0}]),
        "{counted}"
    );
    let wide = mcp
        .call(
            "get_attempt_changes",
            json!({"attempt_id": wide.attempt_id, "detail": 1}),
        )
        .await
        .ok();
    assert_eq!(wide["files"].as_array().unwrap().len(), 101);
    assert!(!has(&wide, "file_stats"), "over /patch's 100 paths: none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutations_answer_at_the_level_asked() {
    let Served {
        w,
        mcp,
        sim: _s,
        dir: _d,
        daemon: _dm,
        truth: _t,
    } = serve_world().await;
    let args = |d: u8, title: &str| json!({"project_id": w.project, "title": title, "description": "Shaped answer", "detail": d});
    let c0 = mcp.call("create_task", args(0, "Cheap create")).await.ok();
    assert_eq!(c0["task"]["title"], "Cheap create");
    assert_eq!(c0["task"]["description"], "Shaped answer");
    assert!(!has(&c0["task"], "project_id") && !has(&c0, "replayed") && has(&c0, "token"));
    let c2 = mcp.call("create_task", args(2, "Full create")).await.ok();
    assert!(has(&c2["task"], "project_id") && c2["replayed"] == false);
    let u0 = mcp
        .call_as_is(
            "update_task",
            json!({"task_id": c0["task_id"], "status": "inreview"}),
        )
        .await
        .ok();
    assert_eq!(u0["task"]["status"], "inreview");
    assert!(!has(&u0["task"], "project_id"));
    let stop0 = mcp
        .call(
            "stop_attempt",
            json!({"attempt_id": w.ok_attempt, "detail": 0}),
        )
        .await
        .ok();
    assert_eq!(stop0["status"]["state"], "completed");
    assert!(!has(&stop0["status"], "latest_process") && !has(&stop0, "stopped"));
}

/// The tools whose answers have nothing to leave out (issue 25: they refused `detail` as an
/// unknown field) take it at every level and answer the same document: reads and mutations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_with_nothing_to_leave_out_take_every_level() {
    let Served {
        w,
        mcp,
        sim: _s,
        dir: _d,
        daemon: _dm,
        truth: _t,
    } = serve_world().await;
    let without_freshness = |mut v: Value| {
        v.as_object_mut().unwrap().remove("freshness");
        v
    };
    let [a0, _, a2] = levels(&mcp, "list_approvals", json!({"project_id": w.project})).await;
    assert_eq!(
        without_clock(without_freshness(a0)),
        without_clock(without_freshness(a2))
    );

    let branch = |d: u8| json!({"attempt_id": w.ok_attempt, "detail": d});
    let b2 = mcp.call("get_attempt_branch_status", branch(2)).await.ok();
    for d in [0, 1] {
        let b = mcp.call("get_attempt_branch_status", branch(d)).await.ok();
        assert_eq!(b["repos"], b2["repos"], "detail {d}");
        assert!(has(&b, "as_of") && has(&b, "token"), "detail {d}: {b}");
    }

    let task = mcp
        .call(
            "create_task",
            json!({"project_id": w.project, "title": "Deleted at level 0"}),
        )
        .await
        .ok();
    let deleted = mcp
        .call_as_is(
            "delete_task",
            json!({"task_id": task["task_id"], "detail": 0}),
        )
        .await
        .ok();
    assert_eq!(deleted["deleted_task_id"], task["task_id"]);
    // A mutation's own refusals are unchanged by `detail`: not an unknown-field error.
    let e = mcp
        .call(
            "follow_up",
            json!({"action": "cancel", "session_id": uuid::Uuid::new_v4(), "detail": 1}),
        )
        .await
        .err();
    assert_ne!(e["code"], "invalid_argument", "{e}");
}
