//! Starting without guessing a branch, through a real MCP client against the simulator:
//! `list_repos` answers each repository's current branch at detail 0 (read live from VK's
//! `GET /api/repos/{id}/branches`; a detached HEAD and an unreachable VK are said, not errors
//! for the list), `start_task_attempt` defaults an omitted `target_branch` to it and says so
//! (`target_branch_source`), and `branch_prefix` names the attempt's branch as far as VK
//! allows (its own global prefix, else a rename right after creation).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;

fn id(v: &Value) -> Uuid {
    v.as_str().unwrap().parse().unwrap()
}

/// The repo of `list_repos`' answer named `name`.
fn repo<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["repos"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no repo {name} in {list}"))
}

/// The target branch VK holds for the attempt's repo, through get_attempt_branch_status.
async fn target_of(mcp: &Mcp, attempt: Uuid, repo: Uuid) -> Value {
    let st = mcp
        .call(
            "get_attempt_branch_status",
            json!({"attempt_id": attempt, "refresh": true}),
        )
        .await
        .ok();
    st["repos"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| id(&r["repo_id"]) == repo)
        .unwrap_or_else(|| panic!("no repo {repo} in {st}"))["target_branch"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_branches_are_listed_and_default_the_target() {
    let sim = support::sim().await;
    let project = sim.add_project("Branches", &["app", "lib"]);
    let ids = sim.project_repo_ids(project);
    let (app, lib) = (ids[0], ids[1]);
    assert!(sim.set_repo_current_branch(app, Some("release")));
    assert!(sim.set_repo_current_branch(lib, None));
    let task = sim.add_task(project, "Branch defaults", None);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "branches").await;
    let mcp = Mcp::connect(daemon.addr).await;

    // Detail 0: the current branch, or `head_detached`; nothing unavailable.
    let list = mcp
        .call_as_is("list_repos", json!({"project_id": project}))
        .await
        .ok();
    assert_eq!(repo(&list, "app")["current_branch"], "release", "{list}");
    assert_eq!(repo(&list, "lib")["head_detached"], true, "{list}");
    assert!(repo(&list, "lib").get("current_branch").is_none(), "{list}");
    assert!(list.get("branches_unavailable").is_none(), "{list}");
    assert!(
        list.get("branches").is_none(),
        "the read time is detail 1: {list}"
    );
    let branch_reads = || {
        sim.counters()
            .by_route
            .get("GET /api/repos/{id}/branches")
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(branch_reads(), 2, "one read per repo");
    let l1 = mcp
        .call_as_is("list_repos", json!({"project_id": project, "detail": 1}))
        .await
        .ok();
    assert!(l1["branches"]["as_of"].is_string(), "{l1}");
    assert_eq!(l1["branches"]["max_age_ms"], 5000, "{l1}");
    assert_eq!(
        branch_reads(),
        2,
        "a list within max_age_ms asks VK nothing"
    );

    // Omitted target_branch: the repo's current branch, said in the answer at detail 0.
    let start = json!({"task_id": task, "executor": "CLAUDE_CODE",
                       "repos": [{"repo_id": app}]});
    let r = mcp.call_as_is("start_task_attempt", start).await.ok();
    assert_eq!(
        r["repos"],
        json!([{"repo_id": app, "target_branch": "release",
                "target_branch_source": "default_current"}]),
        "{r}"
    );
    let attempt = id(&r["attempt_id"]);
    assert_eq!(target_of(&mcp, attempt, app).await, "release");

    // Given: used as is.
    let given = json!({"task_id": task, "executor": "CLAUDE_CODE",
                       "repos": [{"repo_id": app, "target_branch": "main"}]});
    let g = mcp.call_as_is("start_task_attempt", given).await.ok();
    assert_eq!(g["repos"][0]["target_branch_source"], "given", "{g}");
    assert_eq!(target_of(&mcp, id(&g["attempt_id"]), app).await, "main");

    // Omitted on a detached HEAD: refused before VK is asked.
    let creations = sim.counters().attempt_creations;
    let detached = json!({"task_id": task, "executor": "CLAUDE_CODE",
                          "repos": [{"repo_id": lib}]});
    let e = mcp.call_as_is("start_task_attempt", detached).await.err();
    assert_eq!(e["code"], "invalid_argument", "{e}");
    assert_eq!(e["details"]["reason"], "no_current_branch", "{e}");
    assert_eq!(id(&e["details"]["repo_id"]), lib, "{e}");
    assert_eq!(sim.counters().attempt_creations, creations);
    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branch_prefix_is_vk_s_own_or_a_rename() {
    let sim = support::sim().await;
    let project = sim.add_project("Prefixes", &["app"]);
    let app = sim.project_repo_ids(project)[0];
    let task = sim.add_task(project, "Prefixed branch", None);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "prefixes").await;
    let mcp = Mcp::connect(daemon.addr).await;
    let start = |prefix: &str| {
        json!({"task_id": task, "executor": "CLAUDE_CODE", "branch_prefix": prefix,
               "repos": [{"repo_id": app, "target_branch": "main"}]})
    };

    // VK's own global prefix: nothing to rename.
    let v = mcp.call_as_is("start_task_attempt", start("vk")).await.ok();
    assert_eq!(v["branch_prefix"]["outcome"], "vk_global", "{v}");
    assert!(
        v["workspace_branch"].as_str().unwrap().starts_with("vk/"),
        "{v}"
    );

    // Another prefix: VK's branch renamed right after creation, the cache shows the new name.
    let r = mcp
        .call_as_is("start_task_attempt", start("orch/run-1"))
        .await
        .ok();
    assert_eq!(r["branch_prefix"]["outcome"], "renamed", "{r}");
    let branch = r["workspace_branch"].as_str().unwrap().to_string();
    assert!(branch.starts_with("orch/run-1/"), "{r}");
    assert!(
        branch.ends_with("-prefixed-branch"),
        "VK's generated name kept: {r}"
    );
    let attempt = id(&r["attempt_id"]);
    assert_eq!(sim.truth().attempts[&attempt]["branch"], branch.as_str());
    let st = mcp
        .call("get_attempt_status", json!({"attempt_id": attempt}))
        .await
        .ok();
    assert_eq!(st["workspace_branch"], branch.as_str(), "{st}");

    // Not a branch prefix git accepts: refused before VK is asked.
    let creations = sim.counters().attempt_creations;
    let e = mcp
        .call_as_is("start_task_attempt", start("bad prefix"))
        .await
        .err();
    assert_eq!(e["code"], "invalid_argument", "{e}");
    assert_eq!(e["details"]["field"], "branch_prefix", "{e}");
    assert_eq!(sim.counters().attempt_creations, creations);
    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vk_unreachable_leaves_branches_out_not_the_list() {
    let sim = support::sim().await;
    let project = sim.add_project("Offline", &["app"]);
    let app = sim.project_repo_ids(project)[0];
    let task = sim.add_task(project, "Offline start", None);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "offline").await;
    let mcp = Mcp::connect(daemon.addr).await;
    sim.shutdown().await;

    let list = mcp
        .call_as_is("list_repos", json!({"project_id": project}))
        .await
        .ok();
    assert_eq!(id(&repo(&list, "app")["repo_id"]), app, "{list}");
    assert!(repo(&list, "app").get("current_branch").is_none(), "{list}");
    let why = &list["branches_unavailable"];
    assert_eq!(why["code"], "upstream_unavailable", "{list}");
    assert_eq!(why["repo_ids"], json!([app]), "{list}");
    assert!(
        why["hint"].as_str().unwrap().contains("target_branch"),
        "{list}"
    );

    // Starting without a target branch says why it cannot default it.
    let start = json!({"task_id": task, "executor": "CLAUDE_CODE", "repos": [{"repo_id": app}]});
    let e = mcp.call_as_is("start_task_attempt", start).await.err();
    assert_eq!(e["code"], "upstream_unavailable", "{e}");
    assert!(e["hint"].as_str().unwrap().contains("target_branch"), "{e}");
    daemon.shutdown().await;
}
