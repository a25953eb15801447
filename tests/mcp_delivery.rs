//! Delivery through a real MCP client against the simulator's git model: branch status (fresh,
//! after an agent commit, after the base moved, re-read when a process ends), rebase with and
//! without conflicts, abort, merge, push, the force-push refusal then a force push, every
//! refusal with its code (before VK is called where the cache tells), and request_id replays.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::{ProcessStatus, RunReason, Sim};

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

/// A simulator with one single-repo attempt (no process), a daemon that mirrored it, a client.
struct World {
    sim: Sim,
    daemon: vk_observer_daemon::Daemon,
    mcp: Mcp,
    attempt: vk_observer_sim::AttemptIds,
    repo: Uuid,
    _dir: tempfile::TempDir,
}

impl World {
    async fn new(title: &str) -> World {
        let sim = support::sim().await;
        let project = sim.add_project(title, &["demo"]);
        let dir = tempfile::tempdir().unwrap();
        let daemon = support::daemon(&sim, dir.path()).await;
        let attempt = sim.create_attempt(sim.add_task(project, title, None), "CLAUDE_CODE");
        let repo = sim.attempt_repo_ids(attempt.attempt_id)[0];
        support::converge(&daemon.store, &sim, Duration::from_secs(20), title).await;
        let mcp = Mcp::connect(daemon.addr).await;
        World {
            sim,
            daemon,
            mcp,
            attempt,
            repo,
            _dir: dir,
        }
    }

    fn target(&self) -> Value {
        json!({"attempt_id": self.attempt.attempt_id, "repo_id": self.repo})
    }

    async fn call(&self, tool: &str, args: Value) -> support::mcp::Reply {
        self.mcp.call(tool, args).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branch_status_fresh_after_an_agent_commit_and_after_a_base_move() {
    let w = World::new("Status").await;
    let (a, repo) = (w.attempt.attempt_id, w.repo);

    // Fresh: nothing cached yet, so the first call reads VK.
    let st = status(&w.mcp, a, false).await;
    assert_eq!(st["refreshed"], true, "{st}");
    assert!(st["as_of"].is_string());
    let r = repo0(&st);
    assert_eq!(r["repo_id"], json!(repo.to_string()));
    assert_eq!(r["repo_name"], "demo");
    assert_eq!(r["target_branch"], "main");
    assert_eq!(r["commits_ahead"], 0);
    assert_eq!(r["commits_behind"], 0);
    assert_eq!(r["merged"], false);
    assert_eq!(r["ready_to_merge"], false);
    assert_eq!(r["remote_commits_ahead"], Value::Null);

    // The agent commits: the cache answers until refreshed, then shows it.
    assert!(w.sim.agent_commit(a, repo));
    let cached = status(&w.mcp, a, false).await;
    assert_eq!(cached["refreshed"], false);
    assert_eq!(repo0(&cached)["commits_ahead"], 0);
    let st = status(&w.mcp, a, true).await;
    assert_eq!(repo0(&st)["commits_ahead"], 1);
    assert_eq!(repo0(&st)["ready_to_merge"], true);
    assert!(st["as_of"].as_str() >= cached["as_of"].as_str());

    // The base moves: behind 1, no longer ready.
    w.sim.move_base(repo, "main", None);
    let st = status(&w.mcp, a, true).await;
    assert_eq!(repo0(&st)["commits_behind"], 1);
    assert_eq!(repo0(&st)["ready_to_merge"], false);
    w.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_is_refused_then_rebase_and_merge_once_with_request_id() {
    let w = World::new("Merge").await;
    let a = w.attempt.attempt_id;
    w.sim.agent_commit(a, w.repo);
    w.sim.move_base(w.repo, "main", None);

    // Refused before VK is asked: the status is re-read first.
    let e = w
        .call("merge_attempt", json!({"attempt_id": a}))
        .await
        .err();
    assert_eq!(e["code"], "branch_behind", "{e}");
    assert!(e["hint"].as_str().unwrap().contains("rebase_attempt"));
    assert_eq!(route_calls(&w.sim, MERGE), 0);

    // Rebase without conflicts.
    let rb = w.call("rebase_attempt", w.target()).await.ok();
    assert_eq!(rb["outcome"], "ok", "{rb}");
    assert_eq!(
        rb["status"], "ok",
        "seed 003's name beside the deprecated outcome: {rb}"
    );
    assert_eq!(rb["action"], "rebase");
    assert_eq!(rb["conflicted_files"], json!([]));
    assert_eq!(rb["branch"]["commits_behind"], 0);
    assert_eq!(rb["branch"]["commits_ahead"], 1);

    // Merge with a request_id (repo_id omitted: one repo), then its replay.
    let args = json!({"attempt_id": a, "request_id": "merge-1"});
    let m = w.call("merge_attempt", args.clone()).await.ok();
    let commit = m["merge_commit"].as_str().unwrap().to_string();
    assert_eq!(commit.len(), 40, "{m}");
    assert_eq!(
        m["merged"], true,
        "seed 003: merged at the top of the answer"
    );
    assert_eq!(m["pushed"], Value::Null);
    assert_eq!(m["repo_id"], json!(w.repo.to_string()));
    assert_eq!(m["branch"]["merged"], true);
    assert_eq!(m["branch"]["merge_commit"], json!(commit));
    assert_eq!(m["branch"]["commits_ahead"], 0);
    assert_eq!(m["replayed"], false);
    let again = w.call("merge_attempt", args).await.ok();
    assert_eq!(again["replayed"], true);
    assert_eq!(again["merge_commit"], json!(commit));
    assert_eq!(
        route_calls(&w.sim, MERGE),
        1,
        "a replay does not merge twice"
    );
    let task = w.sim.truth().tasks.values().next().cloned().unwrap();
    assert_eq!(task["status"], "done");
    // The merge shows in the task's activity once, with its commit.
    let task_id = task["id"].as_str().unwrap();
    let feed = w
        .call(
            "tail_task_activity",
            json!({"task_id": task_id, "limit": 200}),
        )
        .await
        .ok();
    let merged: Vec<&Value> = feed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "branch_merged")
        .collect();
    assert_eq!(merged.len(), 1, "{feed}");
    assert_eq!(merged[0]["merge_commit"], json!(commit));
    assert_eq!(merged[0]["repo_id"], json!(w.repo.to_string()));

    // A second merge is refused from the cache: merged, nothing ahead.
    let e = w
        .call("merge_attempt", json!({"attempt_id": a}))
        .await
        .err();
    assert_eq!(e["code"], "already_merged", "{e}");
    assert_eq!(route_calls(&w.sim, MERGE), 1);
    w.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_then_force_push_refusal_after_a_merge_then_force() {
    let w = World::new("Push").await;
    let a = w.attempt.attempt_id;
    w.sim.agent_commit(a, w.repo);
    let pushed = w.call("push_attempt", json!({"attempt_id": a})).await.ok();
    assert_eq!(pushed["action"], "push");
    assert_eq!(
        pushed["pushed"], true,
        "seed 003: pushed at the top of the answer"
    );
    assert_eq!(pushed["merged"], Value::Null);
    let branch = pushed["remote_branch"].as_str().unwrap().to_string();
    assert!(branch.starts_with("vk/"), "{pushed}");
    assert_eq!(pushed["head_oid"].as_str().map(str::len), Some(40));
    assert_eq!(pushed["head_oid"], pushed["branch"]["head_oid"]);

    // After the squash merge the branch was rewritten: the plain push is rejected and never
    // forced automatically.
    let commit = w.call("merge_attempt", w.target()).await.ok()["merge_commit"].clone();
    let e = w.call("push_attempt", w.target()).await.err();
    assert_eq!(e["code"], "force_push_required", "{e}");
    assert!(e["hint"].as_str().unwrap().contains("force=true"));
    assert_eq!(e["details"]["remote_branch"], json!(branch));
    assert_eq!(
        route_calls(&w.sim, "POST /api/task-attempts/{id}/push/force"),
        0
    );
    let mut force = w.target();
    force["force"] = json!(true);
    let forced = w.call("push_attempt", force).await.ok();
    assert_eq!(forced["action"], "force_push");
    assert_eq!(forced["head_oid"], commit);
    assert_eq!(
        route_calls(&w.sim, "POST /api/task-attempts/{id}/push/force"),
        1
    );
    w.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebase_conflicts_block_the_other_actions_until_aborted() {
    let w = World::new("Conflicts").await;
    let a = w.attempt.attempt_id;
    w.sim.agent_commit(a, w.repo);
    w.sim.move_base(w.repo, "main", Some("README.md"));
    let target = w.target();

    // The rebase stops on the conflicting file: a structured outcome, not an error.
    let rb = w.call("rebase_attempt", target.clone()).await.ok();
    assert_eq!(rb["outcome"], "conflicts", "{rb}");
    assert_eq!(rb["status"], "conflicts", "{rb}");
    assert_eq!(rb["conflicted_files"], json!(["README.md"]));
    assert_eq!(rb["op"], "rebase");
    assert_eq!(rb["branch"]["rebase_in_progress"], true);
    assert_eq!(rb["branch"]["conflict_op"], "rebase");

    // While it is stopped: rebase, merge and push are refused before VK.
    let (rebases, pushes) = (route_calls(&w.sim, REBASE), route_calls(&w.sim, PUSH));
    let code = w.call("rebase_attempt", target.clone()).await.code();
    assert_eq!(code, "rebase_in_progress");
    let e = w.call("merge_attempt", target.clone()).await.err();
    assert_eq!(e["code"], "conflicts_present");
    assert_eq!(e["details"]["conflicted_files"], json!(["README.md"]));
    let code = w.call("push_attempt", target.clone()).await.code();
    assert_eq!(code, "conflicts_present");
    assert_eq!(route_calls(&w.sim, REBASE), rebases);
    assert_eq!(route_calls(&w.sim, PUSH), pushes);
    assert_eq!(route_calls(&w.sim, MERGE), 0);

    // Abort: back where it was; a second abort has nothing to do.
    let ab = w.call("abort_attempt_conflicts", target.clone()).await.ok();
    assert_eq!(ab["had_conflicts"], true, "{ab}");
    assert_eq!(ab["branch"]["rebase_in_progress"], false);
    assert_eq!(ab["branch"]["conflicted_files"], json!([]));
    assert_eq!(ab["branch"]["commits_ahead"], 1);
    let ab = w.call("abort_attempt_conflicts", target.clone()).await.ok();
    assert_eq!(ab["had_conflicts"], false);

    // VK's own refusal of an unknown base branch.
    let mut args = target;
    args["new_base_branch"] = json!("nope");
    let e = w.call("rebase_attempt", args).await.err();
    assert_eq!(e["code"], "unknown_branch", "{e}");
    assert_eq!(e["details"]["status"], 400);
    w.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_agent_blocks_merge_and_rebase_and_its_end_rereads_the_status() {
    let w = World::new("Running").await;
    let a = w.attempt.attempt_id;
    w.sim.agent_commit(a, w.repo);
    assert_eq!(repo0(&status(&w.mcp, a, false).await)["commits_ahead"], 1);

    let pid = w
        .sim
        .start_process(w.attempt.session_id, RunReason::CodingAgent);
    wait_state(&w.mcp, a, "running").await;
    let e = w.call("merge_attempt", w.target()).await.err();
    assert_eq!(e["code"], "process_running");
    assert_eq!(e["retryable"], true);
    assert!(
        e["hint"]
            .as_str()
            .unwrap()
            .contains("wait_for_attempt_change")
    );
    let code = w.call("rebase_attempt", w.target()).await.code();
    assert_eq!(code, "process_running");
    assert_eq!(route_calls(&w.sim, MERGE) + route_calls(&w.sim, REBASE), 0);

    // When it ends (VK auto-commits), ingest re-reads the cached branch status by itself.
    w.sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = status(&w.mcp, a, false).await;
        if repo0(&st)["commits_ahead"] == 2 {
            assert_eq!(st["refreshed"], false);
            break;
        }
        assert!(Instant::now() < deadline, "branch status not re-read: {st}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w.daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dirty_worktree_unknown_ids_and_a_reused_request_id_are_refused() {
    let w = World::new("Refusals").await;
    let a = w.attempt.attempt_id;
    w.sim.agent_commit(a, w.repo);

    w.sim.set_uncommitted(a, w.repo, &["src/lib.rs"]);
    let e = w.call("push_attempt", w.target()).await.err();
    assert_eq!(e["code"], "uncommitted_changes", "{e}");
    assert_eq!(e["details"]["uncommitted_count"], 1);
    let code = w.call("rebase_attempt", w.target()).await.code();
    assert_eq!(code, "uncommitted_changes");
    assert_eq!(route_calls(&w.sim, PUSH) + route_calls(&w.sim, REBASE), 0);
    w.sim.set_uncommitted(a, w.repo, &[]);

    let foreign = json!({"attempt_id": a, "repo_id": Uuid::new_v4()});
    let e = w.call("merge_attempt", foreign).await.err();
    assert_eq!(e["code"], "not_found");
    assert_eq!(e["details"]["kind"], "repo");
    let e = w
        .call(
            "get_attempt_branch_status",
            json!({"attempt_id": Uuid::new_v4()}),
        )
        .await
        .err();
    assert_eq!(e["code"], "not_found");

    let mut first = w.target();
    first["request_id"] = json!("abort-x");
    w.call("abort_attempt_conflicts", first).await.ok();
    let other = json!({"attempt_id": a, "repo_id": Uuid::new_v4(), "request_id": "abort-x"});
    let code = w.call("abort_attempt_conflicts", other).await.code();
    assert_eq!(code, "idempotency_conflict");
    w.daemon.shutdown().await;
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
