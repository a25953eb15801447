//! Paging and history loss through a real MCP client against the simulator: every paged list
//! (`list_projects`, `list_repos`, `list_tasks`, `list_task_attempts`, get_task's attempts)
//! walked with a small limit visits each item exactly once in the list's order, foreign and
//! garbage cursors get the `invalid_argument` envelope, and `tail_attempt_logs` says
//! `history_truncated` exactly when entries are gone for good (VK's `skip_history` fault, the
//! cache's per-log cap) and not otherwise.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::{AttemptScript, Faults};
use vk_observer_store::Retention;
use vk_observer_store::keys::Channel;

fn id(v: &Value) -> Uuid {
    v.as_str().unwrap().parse().unwrap()
}

/// Walk a paged list with `limit` 3: ids in order, checking every page's own counts.
async fn walk(
    mcp: &Mcp,
    tool: &str,
    mut args: Value,
    items: &str,
    id_field: &str,
    paging: [&str; 5],
) -> Vec<Uuid> {
    let [cursor_arg, limit_arg, next, more, count] = paging;
    args[limit_arg] = json!(3);
    let mut ids = Vec::new();
    for _ in 0..20 {
        let page = mcp.call(tool, args.clone()).await.ok();
        let got = page[items].as_array().unwrap();
        assert!(got.len() <= 3, "{tool}: page over the limit: {page}");
        assert_eq!(page[count], got.len(), "{tool}: count is this page's");
        ids.extend(got.iter().map(|x| id(&x[id_field])));
        match page[next].as_str() {
            Some(c) => {
                assert_eq!(page[more], true, "{tool}: a next cursor means has_more");
                args[cursor_arg] = json!(c);
            }
            None => {
                assert_eq!(page[more], false, "{tool}: no cursor, no more");
                return ids;
            }
        }
    }
    panic!("{tool}: the walk did not end");
}

/// Each id once, and exactly the expected set.
fn once_each(tool: &str, ids: &[Uuid], want: &BTreeSet<Uuid>) {
    let seen: BTreeSet<Uuid> = ids.iter().copied().collect();
    assert_eq!(seen.len(), ids.len(), "{tool}: an item came twice: {ids:?}");
    assert_eq!(&seen, want, "{tool}: items missed or foreign");
}

const PAGED: [&str; 5] = ["cursor", "limit", "next_cursor", "has_more", "count"];

/// Seven of each paged kind: projects (plus the one holding the rest), repos, tasks, attempts.
struct Lists {
    projects: BTreeSet<Uuid>,
    project: Uuid,
    tasks: BTreeSet<Uuid>,
    task: Uuid,
    attempts: BTreeSet<Uuid>,
}

fn lists(sim: &vk_observer_sim::Sim) -> Lists {
    let projects = (0..7)
        .map(|i| sim.add_project(&format!("P{}", 6 - i), &[]))
        .collect();
    let repo_names: Vec<String> = (0..7).map(|i| format!("repo{i}")).collect();
    let names: Vec<&str> = repo_names.iter().map(String::as_str).collect();
    let project = sim.add_project("Many", &names);
    let tasks: BTreeSet<Uuid> = (0..7)
        .map(|i| sim.add_task(project, &format!("task {i}"), None))
        .collect();
    let task = *tasks.iter().next().unwrap();
    let attempts = (0..7).map(|_| sim.create_bare_attempt(task)).collect();
    Lists {
        projects,
        project,
        tasks,
        task,
        attempts,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_paged_list_is_walked_once_and_foreign_cursors_are_refused() {
    let sim = support::sim().await;
    let Lists {
        projects,
        project,
        tasks,
        task,
        attempts,
    } = lists(&sim);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "paging world").await;
    let truth = sim.truth();
    let mcp = Mcp::connect(daemon.addr).await;

    let mut all_projects = projects.clone();
    all_projects.insert(project);
    let ids = walk(
        &mcp,
        "list_projects",
        json!({}),
        "projects",
        "project_id",
        PAGED,
    )
    .await;
    once_each("list_projects", &ids, &all_projects);
    // Name order across pages: P0 … P6, then Many is before them ("M" < "P").
    assert_eq!(ids[0], project);
    let repos: BTreeSet<Uuid> = truth.repos[&project].iter().map(|r| id(&r["id"])).collect();
    let args = json!({"project_id": project});
    let ids = walk(&mcp, "list_repos", args.clone(), "repos", "repo_id", PAGED).await;
    once_each("list_repos", &ids, &repos);
    let ids = walk(&mcp, "list_tasks", args, "tasks", "task_id", PAGED).await;
    once_each("list_tasks", &ids, &tasks);
    let args = json!({"task_id": task});
    let ids = walk(
        &mcp,
        "list_task_attempts",
        args.clone(),
        "attempts",
        "attempt_id",
        PAGED,
    )
    .await;
    once_each("list_task_attempts", &ids, &attempts);
    let listed_order = ids;
    let get_task = [
        "attempts_cursor",
        "attempts_limit",
        "attempts_next_cursor",
        "attempts_has_more",
        "attempts_count",
    ];
    let with = json!({"task_id": task, "include_attempts": true});
    let ids = walk(&mcp, "get_task", with, "attempts", "attempt_id", get_task).await;
    assert_eq!(
        ids, listed_order,
        "get_task pages attempts in the same order"
    );

    // Defaults keep small lists whole: one page, no cursor; totals count all pages.
    let all = mcp.call("list_task_attempts", args).await.ok();
    assert_eq!(
        (all["count"].clone(), all["total"].clone()),
        (json!(7), json!(7))
    );
    assert_eq!(
        (all["has_more"].clone(), all["next_cursor"].clone()),
        (json!(false), Value::Null)
    );
    assert_eq!(id(&all["latest_attempt_id"]), listed_order[0]);
    let first = mcp.call("list_projects", json!({"limit": 2})).await.ok();
    assert_eq!(first["total"], 8);

    let elsewhere = *projects.iter().next().unwrap();
    let cursor = first["next_cursor"].as_str().unwrap();
    bad_cursors(&mcp, [project, elsewhere], task, cursor).await;
    daemon.shutdown().await;
}

/// A cursor of another list, of the same list of another scope, or garbage: `invalid_argument`
/// naming the cursor field, with a hint saying where a good one comes from.
async fn bad_cursors(
    mcp: &Mcp,
    [project, elsewhere]: [Uuid; 2],
    task: Uuid,
    projects_cursor: &str,
) {
    let e = mcp
        .call(
            "list_repos",
            json!({"project_id": project, "cursor": projects_cursor}),
        )
        .await
        .err();
    assert_eq!(e["code"], "invalid_argument");
    assert_eq!(e["details"]["field"], "cursor");
    assert!(
        e["hint"]
            .as_str()
            .unwrap()
            .contains("belongs to list_projects"),
        "{e}"
    );
    let repos = mcp
        .call("list_repos", json!({"project_id": project, "limit": 1}))
        .await
        .ok();
    let e = mcp
        .call(
            "list_tasks",
            json!({"project_id": project, "cursor": repos["next_cursor"]}),
        )
        .await
        .err();
    assert!(
        e["hint"]
            .as_str()
            .unwrap()
            .contains("belongs to list_repos"),
        "{e}"
    );
    let attempts = mcp
        .call("list_task_attempts", json!({"task_id": task, "limit": 1}))
        .await
        .ok();
    let e = mcp
        .call(
            "get_task",
            json!({"task_id": task, "include_attempts": true, "attempts_cursor": attempts["next_cursor"]}),
        )
        .await
        .err();
    assert_eq!(e["details"]["field"], "attempts_cursor", "{e}");
    assert!(
        e["hint"].as_str().unwrap().contains("attempts_next_cursor"),
        "{e}"
    );
    for garbage in ["not-a-cursor", "00", "7b7d"] {
        let e = mcp
            .call("list_projects", json!({"cursor": garbage}))
            .await
            .err();
        assert_eq!(e["code"], "invalid_argument", "{garbage}");
        assert!(e["hint"].as_str().unwrap().contains("next_cursor"), "{e}");
    }
    // Same tool, other scope: a project's task cursor is not another project's.
    let tasks = mcp
        .call("list_tasks", json!({"project_id": project, "limit": 1}))
        .await
        .ok();
    let e = mcp
        .call(
            "list_tasks",
            json!({"project_id": elsewhere, "cursor": tasks["next_cursor"]}),
        )
        .await
        .err();
    assert!(
        e["hint"].as_str().unwrap().contains("another project"),
        "{e}"
    );
}

/// Poll `tail_attempt_logs` until its log is complete.
async fn complete_log(mcp: &Mcp, attempt: Uuid) -> Value {
    for _ in 0..200 {
        let page = mcp
            .call(
                "tail_attempt_logs",
                json!({"attempt_id": attempt, "limit": 500}),
            )
            .await
            .ok();
        if page["log_complete"] == true {
            return page;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the log of {attempt} never completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_truncated_only_when_vk_lost_history_the_cache_never_saw() {
    let sim = support::sim().await;
    let project = sim.add_project("Logs", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let script = AttemptScript {
        normalized_entries: 40,
        ..AttemptScript::default()
    };
    let whole = sim
        .run_attempt_script(sim.add_task(project, "whole", None), script.clone())
        .await;
    let page = complete_log(&mcp, whole.attempt_id).await;
    assert_eq!(page["history_truncated"], false, "{page}");
    assert_eq!(page["entries"][0]["entry_index"], 0);
    let pid = id(&page["execution_process_id"]);
    assert!(
        !daemon
            .store
            .read()
            .log_history_lost(pid, Channel::Normalized)
            .unwrap()
    );

    // Only history reaches the logs now, and VK lost the older half of every log.
    sim.set_faults(Faults {
        skip_history: true,
        refuse_log_ws: true,
        ..Faults::default()
    });
    let lost = sim
        .run_attempt_script(sim.add_task(project, "lost", None), script)
        .await;
    let page = complete_log(&mcp, lost.attempt_id).await;
    assert_eq!(page["history_truncated"], true, "{page}");
    assert!(page["entries"][0]["entry_index"].as_u64().unwrap() > 0);
    // VK's own flag reached the store (not only the lowest-index rule).
    let pid = id(&page["execution_process_id"]);
    assert!(
        daemon
            .store
            .read()
            .log_history_lost(pid, Channel::Normalized)
            .unwrap()
    );
    let again = mcp
        .call("tail_attempt_logs", json!({"attempt_id": whole.attempt_id}))
        .await
        .ok();
    assert_eq!(
        again["history_truncated"], false,
        "the fault is not retroactive"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_truncated_when_the_local_cap_dropped_entries() {
    let sim = support::sim().await;
    let project = sim.add_project("Cap", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let mut s = support::settings(&sim.base_url(), dir.path(), Default::default());
    s.retention = Retention {
        max_entries_per_process: 10,
        ..s.retention
    };
    let daemon = vk_observer_daemon::Daemon::start(s.validate().unwrap(), None)
        .await
        .expect("daemon starts");
    let mcp = Mcp::connect(daemon.addr).await;
    let script = AttemptScript {
        normalized_entries: 30,
        ..AttemptScript::default()
    };
    let small = AttemptScript {
        normalized_entries: 3,
        ..AttemptScript::default()
    };
    let capped = sim
        .run_attempt_script(sim.add_task(project, "long", None), script)
        .await;
    let fits = sim
        .run_attempt_script(sim.add_task(project, "short", None), small)
        .await;
    let page = complete_log(&mcp, capped.attempt_id).await;
    assert_eq!(page["history_truncated"], true, "{page}");
    assert_eq!(page["entries"].as_array().unwrap().len(), 10);
    let page = complete_log(&mcp, fits.attempt_id).await;
    assert_eq!(page["history_truncated"], false, "{page}");
    daemon.shutdown().await;
}
