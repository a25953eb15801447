//! Activity feeds through a real MCP client against the daemon fed by the simulator: every
//! item kind appears, paging oldest-first by `since_token` and newest-first by `cursor` visits
//! the same items, the two modes refuse each other (`mixed_pagination`), stale or expired
//! tokens answer `token_reset`, a project wait returns the new items with `include_activity`,
//! and `since_token` continues exactly across a daemon restart on the same data dir.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use vk_observer_sim::{AttemptScript, Sim};
use vk_observer_store::token::Token;

/// Identity of an item: (token, kind, task, process, attempt).
fn ident(v: &Value) -> String {
    format!(
        "{}|{}|{}|{}|{}",
        v["token"], v["kind"], v["task_id"], v["execution_process_id"], v["attempt_id"]
    )
}

fn seq(token: &Value) -> u64 {
    Token::parse(token.as_str().unwrap()).unwrap().seq
}

/// Every item after `since`, oldest first, in pages of `limit`; returns the items and the
/// token to continue from.
async fn walk_forward(mcp: &Mcp, args: Value, since: &str, limit: u32) -> (Vec<Value>, String) {
    let mut items = Vec::new();
    let mut since = since.to_string();
    let tool = if args.get("task_id").is_some() {
        "tail_task_activity"
    } else {
        "tail_project_activity"
    };
    loop {
        let mut a = args.clone();
        a["since_token"] = json!(since);
        a["limit"] = json!(limit);
        let page = mcp.call(tool, a).await.ok();
        assert_eq!(page["order"], "oldest_first");
        assert_eq!(page["token_reset"], false, "{page}");
        assert!(page["next_cursor"].is_null());
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        since = page["next_since_token"].as_str().unwrap().to_string();
        if page["has_more"] == false {
            return (items, since);
        }
    }
}

async fn walk_backward(mcp: &Mcp, project: uuid::Uuid, limit: u32) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let mut a = json!({"project_id": project, "limit": limit});
        if !cursor.is_null() {
            a["cursor"] = cursor.clone();
        }
        let page = mcp.call("tail_project_activity", a).await.ok();
        assert_eq!(page["order"], "newest_first");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        cursor = page["next_cursor"].clone();
        assert_eq!(page["has_more"], !cursor.is_null());
        if cursor.is_null() {
            return items;
        }
    }
}

async fn start_project(sim: &Sim, mcp: &Mcp, name: &str) -> (uuid::Uuid, String) {
    let project = sim.add_project(name, &["demo"]);
    for _ in 0..300 {
        let r = mcp
            .call("tail_project_activity", json!({"project_id": project}))
            .await;
        if let support::mcp::Reply::Ok(v) = r {
            assert!(v["items"].as_array().unwrap().is_empty(), "{v}");
            return (project, v["next_since_token"].as_str().unwrap().to_string());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("project never reached the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_appears_and_both_directions_walk_the_same_items() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (project, start) = start_project(&sim, &mcp, "Feed").await;

    let task = sim.add_task(project, "Feed task", None);
    let ids = sim
        .run_attempt_script(
            task,
            AttemptScript {
                files: support::world::files("demo", 2, 3),
                ..AttemptScript::default()
            },
        )
        .await;
    let follow = sim
        .follow_up_script(ids.session_id, "again", AttemptScript::default())
        .await;
    sim.update_task(task, None, None, Some("done"));
    let doomed = sim.add_task(project, "Doomed", None);
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "feed").await;
    sim.delete_task(doomed);
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "delete").await;

    let (items, _) = walk_forward(&mcp, json!({"project_id": project}), &start, 3).await;
    let kinds: BTreeSet<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    for k in [
        "task_created",
        "task_updated",
        "task_deleted",
        "attempt_started",
        "process_started",
        "process_ended",
        "follow_up_sent",
        "change_summary_moved",
    ] {
        assert!(kinds.contains(k), "kind {k} missing from {kinds:?}");
    }
    // Commit order, no duplicates.
    let idents: Vec<String> = items.iter().map(ident).collect();
    assert_eq!(
        idents.iter().collect::<BTreeSet<_>>().len(),
        idents.len(),
        "duplicates"
    );
    let tokens: Vec<u64> = items.iter().map(|i| seq(&i["token"])).collect();
    assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{tokens:?}");
    // Facts: the follow-up names its process; the status move says from → to; a process that
    // ended says how.
    let fu = items
        .iter()
        .find(|i| i["kind"] == "follow_up_sent")
        .unwrap();
    assert_eq!(fu["execution_process_id"], json!(follow));
    assert_eq!(fu["session_id"], json!(ids.session_id));
    let moved = items
        .iter()
        .find(|i| i["kind"] == "task_updated" && i["status"] == "done")
        .expect("status move to done");
    assert!(moved["previous_status"].is_string(), "{moved}");
    assert!(
        moved["fields"]
            .as_array()
            .unwrap()
            .contains(&json!("status"))
    );
    let ended: Vec<&Value> = items
        .iter()
        .filter(|i| i["kind"] == "process_ended")
        .collect();
    assert!(
        ended
            .iter()
            .all(|i| i["status"] == "completed" && i["exit_code"] == 0),
        "{ended:?}"
    );
    let created: Vec<&Value> = items
        .iter()
        .filter(|i| i["kind"] == "task_created")
        .collect();
    assert_eq!(created.len(), 2);
    assert_eq!(created[0]["title"], "Feed task");

    // Newest first by cursor: the same items, reversed.
    let mut back = walk_backward(&mcp, project, 4).await;
    back.reverse();
    assert_eq!(
        back.iter().map(ident).collect::<Vec<_>>(),
        idents,
        "cursor walk differs"
    );

    // The task feed: only this task's items, the same ones as in the project feed. Compared
    // without their tokens: when the simulated VK's streams deliver the attempt before its
    // task, the task feed files `attempt_started` at its own token while the project feed
    // takes it in after `task_created`, at the task's token (`store::feed_derive`, orphans).
    let (task_items, _) = walk_forward(&mcp, json!({"task_id": task}), &start, 2).await;
    let untokened = |v: &Value| ident(v).split_once('|').unwrap().1.to_owned();
    let mut of_task: Vec<String> = items
        .iter()
        .filter(|i| i["task_id"] == json!(task))
        .map(untokened)
        .collect();
    let mut in_task_feed: Vec<String> = task_items.iter().map(untokened).collect();
    of_task.sort();
    in_task_feed.sort();
    assert_eq!(in_task_feed, of_task);
    // A deleted task's activity stays readable.
    let gone = mcp
        .call(
            "tail_task_activity",
            json!({"task_id": doomed, "detail": 0}),
        )
        .await
        .ok();
    let gone_items = gone["items"].as_array().unwrap();
    assert_eq!(gone_items[0]["kind"], "task_deleted");
    assert!(
        gone_items[0].get("title").is_none(),
        "detail 0 is compact: {gone}"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_modes_are_exclusive_and_stale_tokens_reset() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (project, start) = start_project(&sim, &mcp, "Modes").await;
    for i in 0..3 {
        sim.add_task(project, &format!("t{i}"), None);
    }
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "tasks").await;
    let first = mcp
        .call(
            "tail_project_activity",
            json!({"project_id": project, "limit": 1}),
        )
        .await
        .ok();
    let cursor = first["next_cursor"].clone();
    assert!(cursor.is_string() && first["has_more"] == true);

    let e = mcp
        .call(
            "tail_project_activity",
            json!({"project_id": project, "since_token": start, "cursor": cursor}),
        )
        .await
        .err();
    assert_eq!(e["code"], "invalid_argument", "{e}");
    assert_eq!(e["details"]["reason"], "mixed_pagination", "{e}");
    // A project cursor is not a task cursor.
    let task = first["items"][0]["task_id"].clone();
    let e = mcp
        .call(
            "tail_task_activity",
            json!({"task_id": task, "cursor": cursor}),
        )
        .await
        .err();
    assert_eq!(
        (e["code"].as_str(), e["details"]["field"].as_str()),
        (Some("invalid_argument"), Some("cursor"))
    );
    // Another epoch, or the future: token_reset, from the oldest item kept.
    let epoch = start.split('.').next().unwrap();
    let other = format!("{:016x}.1", u64::from_str_radix(epoch, 16).unwrap() ^ 1);
    let future = format!("{epoch}.{}", u64::MAX / 2);
    for stale in [other, future] {
        let page = mcp
            .call(
                "tail_project_activity",
                json!({"project_id": project, "since_token": stale}),
            )
            .await
            .ok();
        assert_eq!(page["token_reset"], true, "{stale}: {page}");
        assert_eq!(page["items"].as_array().unwrap().len(), 3, "{page}");
    }
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_older_than_the_horizon_resets() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = support::settings(&sim.base_url(), dir.path(), Default::default());
    s.retention.activity_horizon = Duration::from_millis(500);
    s.retention.prune_every = Duration::from_millis(200);
    let daemon = vk_observer_daemon::Daemon::start(s.validate().unwrap(), None)
        .await
        .expect("daemon starts");
    let mcp = Mcp::connect(daemon.addr).await;
    let (project, start) = start_project(&sim, &mcp, "Horizon").await;
    sim.add_task(project, "old", None);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "old").await;
    let (old, after_old) = walk_forward(&mcp, json!({"project_id": project}), &start, 10).await;
    assert_eq!(old.len(), 1);
    // Past the horizon; the retention pass runs after the writer's next batch.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let fresh = sim.add_task(project, "fresh", None);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "fresh").await;
    let mut page = Value::Null;
    for _ in 0..100 {
        sim.update_task(
            fresh,
            Some(&format!("fresh {}", rand::random::<u32>())),
            None,
            None,
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        page = mcp
            .call(
                "tail_project_activity",
                json!({"project_id": project, "since_token": start}),
            )
            .await
            .ok();
        if page["token_reset"] == true {
            break;
        }
    }
    assert_eq!(
        page["token_reset"], true,
        "the old item was never pruned: {page}"
    );
    assert!(
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["title"] != "old"),
        "{page}"
    );
    // A token past the dropped items still continues without a reset.
    let recent = mcp
        .call(
            "tail_project_activity",
            json!({"project_id": project, "since_token": page["next_since_token"]}),
        )
        .await
        .ok();
    assert_eq!(recent["token_reset"], false, "{recent}");
    let _ = after_old;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_wait_answers_new_activity_when_asked() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (project, start) = start_project(&sim, &mcp, "Wait").await;
    let e = mcp
        .call(
            "wait_for_attempt_change",
            json!({"attempt_ids": [project], "include_activity": true}),
        )
        .await
        .err();
    assert_eq!(e["details"]["field"], "include_activity", "{e}");
    let waiter = {
        let addr = daemon.addr;
        let start = start.clone();
        tokio::spawn(async move {
            let mcp = Mcp::connect(addr).await;
            mcp.call(
                "wait_for_attempt_change",
                json!({"project_id": project, "since_token": start,
                       "include_activity": true, "timeout_ms": 20000}),
            )
            .await
            .ok()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A task without attempts changes no attempt: only its activity wakes the wait.
    let task = sim.add_task(project, "wake me", None);
    let r = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the wait answers")
        .unwrap();
    assert_eq!(r["changed"], true, "{r}");
    let items = r["activity"]["items"].as_array().unwrap();
    assert_eq!(items[0]["kind"], "task_created", "{r}");
    assert_eq!(items[0]["task_id"], json!(task));
    // Without include_activity the answer has no activity.
    let plain = mcp
        .call(
            "wait_for_attempt_change",
            json!({"project_id": project, "since_token": start, "timeout_ms": 50}),
        )
        .await
        .ok();
    assert!(plain.get("activity").is_none(), "{plain}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_token_continues_exactly_across_a_daemon_restart() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (project, start) = start_project(&sim, &mcp, "Restart").await;
    for i in 0..3 {
        sim.add_task(project, &format!("before {i}"), None);
    }
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "before").await;
    let (before, since) = walk_forward(&mcp, json!({"project_id": project}), &start, 2).await;
    daemon.shutdown().await;
    // Changes while the daemon is down, and after it is back.
    for i in 0..2 {
        sim.add_task(project, &format!("down {i}"), None);
    }
    let daemon = support::daemon_reopen(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    sim.add_task(project, "after", None);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "after").await;
    let (after, _) = walk_forward(&mcp, json!({"project_id": project}), &since, 2).await;
    let titles = |v: &[Value]| -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for i in v.iter().filter(|i| i["kind"] == "task_created") {
            *m.entry(i["title"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        m
    };
    let want_before: BTreeMap<String, usize> = (0..3).map(|i| (format!("before {i}"), 1)).collect();
    assert_eq!(titles(&before), want_before);
    let mut want_after: BTreeMap<String, usize> =
        (0..2).map(|i| (format!("down {i}"), 1)).collect();
    want_after.insert("after".into(), 1);
    assert_eq!(titles(&after), want_after, "{after:?}");
    assert!(seq(&after[0]["token"]) > seq(&before.last().unwrap()["token"]));
    daemon.shutdown().await;
}
