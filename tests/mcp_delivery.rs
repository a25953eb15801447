//! Delivery through a real MCP client against the simulator's git model: branch status (fresh,
//! after an agent commit, after the base moved, re-read when a process ends), rebase with and
//! without conflicts, abort, merge, push, the force-push refusal then a force push, every
//! refusal with its code (before VK is called where the cache tells), and request_id replays.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer::sim::{ProcessStatus, RunReason, Sim};

fn route_calls(sim: &Sim, route: &str) -> u64 {
    sim.counters().by_route.get(route).copied().unwrap_or(0)
}

const MERGE: &str = "POST /api/task-attempts/{id}/merge";
const REBASE: &str = "POST /api/task-attempts/{id}/rebase";
const PUSH: &str = "POST /api/task-attempts/{id}/push";

/// The one repo entry of a branch status or action answer.
fn repo0(v: &Value) -> Value {
    v["repos"][0].clone()
}

async fn status(mcp: &Mcp, attempt: Uuid, refresh: bool) -> Value {
    mcp.call(
        "get_attempt_branch_status",
        json!({"attempt_id": attempt, "refresh": refresh}),
    )
    .await
    .ok()
}

/// Polls the attempt's cached status until `state` is as wanted.
async fn wait_state(mcp: &Mcp, attempt: Uuid, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = mcp
            .call("get_attempt_status", json!({"attempt_id": attempt}))
            .await
            .ok();
        if s["state"] == state {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "attempt never became {state}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branch_status_rebase_merge_and_push() {
    let sim = support::sim().await;
    let project = sim.add_project("Deliver", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let a = sim.create_attempt(sim.add_task(project, "Ship it", None), "CLAUDE_CODE");
    let repo = sim.attempt_repo_ids(a.attempt_id)[0];
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "delivery").await;
    let mcp = Mcp::connect(daemon.addr).await;

    // Fresh: nothing cached yet, so the first call reads VK.
    let st = status(&mcp, a.attempt_id, false).await;
    assert_eq!(st["refreshed"], true, "{st}");
    assert!(st["as_of"].is_string());
    let r = repo0(&st);
    assert_eq!(r["repo_id"], json!(repo.to_string()));
    assert_eq!(r["repo_name"], "demo");
    assert_eq!(r["target_branch"], "main");
    assert_eq!(
        (r["commits_ahead"].clone(), r["commits_behind"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(r["merged"], false);
    assert_eq!(r["ready_to_merge"], false);
    assert_eq!(r["remote_commits_ahead"], Value::Null);

    // The agent commits: the cache answers until refreshed, then shows it.
    assert!(sim.agent_commit(a.attempt_id, repo));
    let cached = status(&mcp, a.attempt_id, false).await;
    assert_eq!(cached["refreshed"], false);
    assert_eq!(repo0(&cached)["commits_ahead"], 0);
    let st = status(&mcp, a.attempt_id, true).await;
    assert_eq!(repo0(&st)["commits_ahead"], 1);
    assert_eq!(repo0(&st)["ready_to_merge"], true);
    assert!(st["as_of"].as_str() >= cached["as_of"].as_str());

    // A first push (repo_id omitted: the attempt has one repo).
    let pushed = mcp
        .call("push_attempt", json!({"attempt_id": a.attempt_id}))
        .await
        .ok();
    assert_eq!(pushed["action"], "push");
    assert_eq!(pushed["repo_id"], json!(repo.to_string()));
    let branch = pushed["remote_branch"].as_str().unwrap().to_string();
    assert!(branch.starts_with("vk/"), "{pushed}");
    assert_eq!(pushed["head_oid"].as_str().map(str::len), Some(40));

    // The base moves: behind 1, and merge is refused before VK is asked.
    sim.move_base(repo, "main", None);
    let st = status(&mcp, a.attempt_id, true).await;
    assert_eq!(repo0(&st)["commits_behind"], 1);
    let e = mcp
        .call("merge_attempt", json!({"attempt_id": a.attempt_id}))
        .await
        .err();
    assert_eq!(e["code"], "branch_behind", "{e}");
    assert!(e["hint"].as_str().unwrap().contains("rebase_attempt"));
    assert_eq!(route_calls(&sim, MERGE), 0);

    // Rebase without conflicts.
    let rb = mcp
        .call(
            "rebase_attempt",
            json!({"attempt_id": a.attempt_id, "repo_id": repo}),
        )
        .await
        .ok();
    assert_eq!(rb["outcome"], "ok", "{rb}");
    assert_eq!(rb["conflicted_files"], json!([]));
    assert_eq!(rb["branch"]["commits_behind"], 0);
    assert_eq!(rb["branch"]["commits_ahead"], 1);

    // Merge with a request_id, then its replay.
    let args = json!({"attempt_id": a.attempt_id, "repo_id": repo, "request_id": "merge-1"});
    let m = mcp.call("merge_attempt", args.clone()).await.ok();
    let commit = m["merge_commit"].as_str().unwrap().to_string();
    assert_eq!(commit.len(), 40, "{m}");
    assert_eq!(m["branch"]["merged"], true);
    assert_eq!(m["branch"]["merge_commit"], json!(commit));
    assert_eq!(m["branch"]["commits_ahead"], 0);
    assert_eq!(m["replayed"], false);
    let again = mcp.call("merge_attempt", args).await.ok();
    assert_eq!(again["replayed"], true);
    assert_eq!(again["merge_commit"], json!(commit));
    assert_eq!(route_calls(&sim, MERGE), 1, "a replay does not merge twice");
    let task = sim.truth().tasks.values().next().cloned().unwrap();
    assert_eq!(task["status"], "done");

    // A second merge is refused from the cache: merged, nothing ahead.
    let e = mcp
        .call("merge_attempt", json!({"attempt_id": a.attempt_id}))
        .await
        .err();
    assert_eq!(e["code"], "already_merged", "{e}");

    // After the squash merge a plain push is rejected; never forced automatically.
    let e = mcp
        .call("push_attempt", json!({"attempt_id": a.attempt_id}))
        .await
        .err();
    assert_eq!(e["code"], "force_push_required", "{e}");
    assert!(e["hint"].as_str().unwrap().contains("force=true"));
    assert_eq!(e["details"]["remote_branch"], json!(branch));
    let forced = mcp
        .call(
            "push_attempt",
            json!({"attempt_id": a.attempt_id, "force": true}),
        )
        .await
        .ok();
    assert_eq!(forced["action"], "force_push");
    assert_eq!(forced["head_oid"], json!(commit));
    assert_eq!(
        route_calls(&sim, "POST /api/task-attempts/{id}/push/force"),
        1
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_abort_and_every_refusal() {
    let sim = support::sim().await;
    let project = sim.add_project("Conflicts", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let a = sim.create_attempt(sim.add_task(project, "Clash", None), "CLAUDE_CODE");
    let repo = sim.attempt_repo_ids(a.attempt_id)[0];
    sim.agent_commit(a.attempt_id, repo);
    sim.move_base(repo, "main", Some("README.md"));
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "conflicts").await;
    let mcp = Mcp::connect(daemon.addr).await;
    let target = json!({"attempt_id": a.attempt_id, "repo_id": repo});

    // The rebase stops on the conflicting file: a structured outcome, not an error.
    let rb = mcp.call("rebase_attempt", target.clone()).await.ok();
    assert_eq!(rb["outcome"], "conflicts", "{rb}");
    assert_eq!(rb["conflicted_files"], json!(["README.md"]));
    assert_eq!(rb["op"], "rebase");
    assert_eq!(rb["branch"]["rebase_in_progress"], true);
    assert_eq!(rb["branch"]["conflict_op"], "rebase");

    // While it is stopped: rebase, merge and push are refused before VK.
    let (rebases, pushes) = (route_calls(&sim, REBASE), route_calls(&sim, PUSH));
    let code = mcp.call("rebase_attempt", target.clone()).await.code();
    assert_eq!(code, "rebase_in_progress");
    let e = mcp.call("merge_attempt", target.clone()).await.err();
    assert_eq!(e["code"], "conflicts_present");
    assert_eq!(e["details"]["conflicted_files"], json!(["README.md"]));
    assert_eq!(
        mcp.call("push_attempt", target.clone()).await.code(),
        "conflicts_present"
    );
    assert_eq!(route_calls(&sim, REBASE), rebases);
    assert_eq!(route_calls(&sim, PUSH), pushes);
    assert_eq!(route_calls(&sim, MERGE), 0);

    // Abort: back where it was; a second abort has nothing to do.
    let ab = mcp
        .call("abort_attempt_conflicts", target.clone())
        .await
        .ok();
    assert_eq!(ab["had_conflicts"], true, "{ab}");
    assert_eq!(ab["branch"]["rebase_in_progress"], false);
    assert_eq!(ab["branch"]["conflicted_files"], json!([]));
    assert_eq!(ab["branch"]["commits_ahead"], 1);
    let ab = mcp
        .call("abort_attempt_conflicts", target.clone())
        .await
        .ok();
    assert_eq!(ab["had_conflicts"], false);

    // VK's own refusal of an unknown base branch.
    let mut args = target.clone();
    args["new_base_branch"] = json!("nope");
    let e = mcp.call("rebase_attempt", args).await.err();
    assert_eq!(e["code"], "unknown_branch", "{e}");
    assert_eq!(e["details"]["status"], 400);

    // A running agent blocks merge and rebase.
    let pid = sim.start_process(a.session_id, RunReason::CodingAgent);
    wait_state(&mcp, a.attempt_id, "running").await;
    let e = mcp.call("merge_attempt", target.clone()).await.err();
    assert_eq!(e["code"], "process_running");
    assert_eq!(e["retryable"], true);
    assert!(
        e["hint"]
            .as_str()
            .unwrap()
            .contains("wait_for_attempt_change")
    );
    assert_eq!(
        mcp.call("rebase_attempt", target.clone()).await.code(),
        "process_running"
    );

    // When it ends (and commits), ingest re-reads the cached branch status by itself.
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = status(&mcp, a.attempt_id, false).await;
        if repo0(&st)["commits_ahead"] == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "branch status not re-read: {st}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A dirty worktree: push refused.
    sim.set_uncommitted(a.attempt_id, repo, &["src/lib.rs"]);
    status(&mcp, a.attempt_id, true).await;
    let e = mcp.call("push_attempt", target.clone()).await.err();
    assert_eq!(e["code"], "uncommitted_changes", "{e}");
    assert_eq!(e["details"]["uncommitted_count"], 1);
    sim.set_uncommitted(a.attempt_id, repo, &[]);

    // Unknown ids, and a request_id reused with other arguments.
    let e = mcp
        .call(
            "merge_attempt",
            json!({"attempt_id": a.attempt_id, "repo_id": Uuid::new_v4()}),
        )
        .await
        .err();
    assert_eq!(
        (e["code"].clone(), e["details"]["kind"].clone()),
        (json!("not_found"), json!("repo"))
    );
    let e = mcp
        .call(
            "get_attempt_branch_status",
            json!({"attempt_id": Uuid::new_v4()}),
        )
        .await
        .err();
    assert_eq!(e["code"], "not_found");
    let mut first = target.clone();
    first["request_id"] = json!("abort-x");
    mcp.call("abort_attempt_conflicts", first).await.ok();
    let other =
        json!({"attempt_id": a.attempt_id, "repo_id": Uuid::new_v4(), "request_id": "abort-x"});
    let code = mcp.call("abort_attempt_conflicts", other).await.code();
    assert_eq!(code, "idempotency_conflict");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_repos_need_a_repo_id() {
    let sim = support::sim().await;
    let project = sim.add_project("Multi", &["api", "web"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let a = sim.create_attempt(sim.add_task(project, "Both", None), "CLAUDE_CODE");
    let repos = sim.attempt_repo_ids(a.attempt_id);
    sim.agent_commit(a.attempt_id, repos[1]);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "multi").await;
    let mcp = Mcp::connect(daemon.addr).await;

    let st = status(&mcp, a.attempt_id, false).await;
    assert_eq!(st["repos"].as_array().unwrap().len(), 2);
    let e = mcp
        .call("merge_attempt", json!({"attempt_id": a.attempt_id}))
        .await
        .err();
    assert_eq!(e["code"], "repo_id_required", "{e}");
    assert_eq!(e["details"]["repo_ids"].as_array().unwrap().len(), 2);
    // The repo without commits has nothing to merge; the other merges.
    let e = mcp
        .call(
            "merge_attempt",
            json!({"attempt_id": a.attempt_id, "repo_id": repos[0]}),
        )
        .await
        .err();
    assert_eq!(e["code"], "nothing_to_merge", "{e}");
    let m = mcp
        .call(
            "merge_attempt",
            json!({"attempt_id": a.attempt_id, "repo_id": repos[1]}),
        )
        .await
        .ok();
    assert_eq!(m["repo_id"], json!(repos[1].to_string()));
    assert!(m["merge_commit"].is_string());
    daemon.shutdown().await;
}
