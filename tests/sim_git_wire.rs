//! The simulator's git routes on the wire, as recorded from a real VK (`../shared/vk-wire/README.md`
//! "Git", docs/vk-contract.md §9.8): status codes, envelopes and `error_data` of branch-status,
//! rebase (ok, conflicts at 200, again mid-rebase 500, unknown base 400), conflicts/abort,
//! merge (ok, diverged 500, twice 500), push (ok, 409 force_push_required, dirty 500) and
//! push/force; an unknown repo is VK's 404 envelope, an unknown attempt its empty 404.

mod support;

use reqwest::Method;
use serde_json::{Value, json};
use support::sim_common::*;
use uuid::Uuid;

async fn post_git(
    sim: &vk_observer_sim::Sim,
    attempt: Uuid,
    route: &str,
    body: Value,
) -> (u16, Value) {
    let path = format!("/api/task-attempts/{attempt}/{route}");
    let (status, text) = call(sim, Method::POST, &path, Some(body)).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn branch(sim: &vk_observer_sim::Sim, attempt: Uuid) -> Value {
    let v = get(sim, &format!("/api/task-attempts/{attempt}/branch-status")).await;
    v["data"][0].clone()
}

#[tokio::test]
async fn git_routes_answer_with_vks_codes_and_envelopes() {
    let sim = start().await;
    let project = sim.add_project("Git", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "Wire", None), "CLAUDE_CODE");
    let (ws, repo) = (a.attempt_id, sim.attempt_repo_ids(a.attempt_id)[0]);
    let body = json!({"repo_id": repo});
    let s = branch(&sim, ws).await;
    assert_eq!(
        (s["commits_ahead"].clone(), s["commits_behind"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(s["merges"], json!([]));

    // Agent commit, base moves with a conflicting file: the rebase stops, 200 success:false.
    sim.agent_commit(ws, repo);
    sim.move_base(repo, "main", Some("README.md"));
    assert_eq!(branch(&sim, ws).await["commits_behind"], 1);
    let (code, v) = post_git(
        &sim,
        ws,
        "rebase",
        json!({"repo_id": repo, "old_base_branch": null, "new_base_branch": null}),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(v["success"], false);
    assert_eq!(v["data"], Value::Null);
    assert_eq!(v["message"], Value::Null);
    assert_eq!(v["error_data"]["type"], "merge_conflicts");
    assert_eq!(v["error_data"]["op"], "rebase");
    assert!(
        v["error_data"]["message"]
            .as_str()
            .unwrap()
            .contains("onto 'main'. Conflicted files: README.md.")
    );
    let s = branch(&sim, ws).await;
    assert_eq!(s["is_rebase_in_progress"], true);
    assert_eq!(s["conflict_op"], "rebase");
    assert_eq!(s["conflicted_files"], json!(["README.md"]));
    assert_eq!(s["has_uncommitted_changes"], true);

    // Again mid-rebase: the clean-worktree guard answers 500 first.
    let (code, v) = post_git(&sim, ws, "rebase", body.clone()).await;
    assert_eq!(code, 500);
    assert_eq!(
        v["message"],
        "GitServiceError: unknown branch has uncommitted changes: README.md"
    );
    // Merge while behind: diverged.
    let (code, v) = post_git(&sim, ws, "merge", body.clone()).await;
    assert_eq!(code, 500);
    assert!(v["message"].as_str().unwrap().starts_with(
        "GitServiceError: Branches diverged: Cannot merge: base branch 'main' is 1 commits ahead"
    ));
    // Abort, then again (nothing to abort): both 200.
    for _ in 0..2 {
        let (code, v) = post_git(&sim, ws, "conflicts/abort", body.clone()).await;
        assert_eq!((code, v["success"].clone()), (200, json!(true)));
    }
    assert_eq!(branch(&sim, ws).await["is_rebase_in_progress"], false);

    // Unknown base 400; unknown repo 404 envelope; unknown attempt empty 404.
    let (code, v) = post_git(
        &sim,
        ws,
        "rebase",
        json!({"repo_id": repo, "new_base_branch": "nope"}),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        v["message"],
        "Branch 'nope' does not exist in the repository"
    );
    let (code, v) = post_git(&sim, ws, "merge", json!({"repo_id": Uuid::new_v4()})).await;
    assert_eq!(
        (code, v["message"].clone()),
        (404, json!("RepoError: Repository not found"))
    );
    let (code, text) = call(
        &sim,
        Method::POST,
        &format!("/api/task-attempts/{}/merge", Uuid::new_v4()),
        Some(body.clone()),
    )
    .await;
    assert_eq!((code, text.as_str()), (404, ""));
}

#[tokio::test]
async fn merge_then_push_needs_force_and_a_dirty_worktree_is_refused() {
    let sim = start().await;
    let project = sim.add_project("Push", &["demo"]);
    let task = sim.add_task(project, "Push it", None);
    let a = sim.create_attempt(task, "CLAUDE_CODE");
    let (ws, repo) = (a.attempt_id, sim.attempt_repo_ids(a.attempt_id)[0]);
    let body = json!({"repo_id": repo});
    sim.agent_commit(ws, repo);

    sim.set_uncommitted(ws, repo, &["src/a.rs"]);
    let (code, v) = post_git(&sim, ws, "push", body.clone()).await;
    assert_eq!(code, 500);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .ends_with("has uncommitted changes: src/a.rs")
    );
    sim.set_uncommitted(ws, repo, &[]);
    let (code, _) = post_git(&sim, ws, "push", body.clone()).await;
    assert_eq!(code, 200);

    let (code, v) = post_git(&sim, ws, "merge", body.clone()).await;
    assert_eq!((code, v["success"].clone()), (200, json!(true)));
    let s = branch(&sim, ws).await;
    assert_eq!(
        (s["commits_ahead"].clone(), s["commits_behind"].clone()),
        (json!(0), json!(0))
    );
    let merge = &s["merges"][0];
    assert_eq!(merge["type"], "direct");
    assert_eq!(merge["target_branch_name"], "main");
    let mut keys: Vec<&str> = merge
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "created_at",
            "id",
            "merge_commit",
            "repo_id",
            "target_branch_name",
            "type",
            "workspace_id"
        ]
    );
    assert_eq!(s["head_oid"], merge["merge_commit"]);
    assert_eq!(sim.truth().tasks[&task]["status"], "done");
    let (code, v) = post_git(&sim, ws, "merge", body.clone()).await;
    assert_eq!(code, 500);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("nothing to commit, working tree clean")
    );

    let (code, v) = post_git(&sim, ws, "push", body.clone()).await;
    assert_eq!(code, 409);
    assert_eq!(
        v,
        json!({"success": false, "data": null, "error_data": {"type": "force_push_required"}, "message": null})
    );
    let (code, v) = post_git(&sim, ws, "push/force", body).await;
    assert_eq!((code, v["success"].clone()), (200, json!(true)));
}
