//! The workspace-first model against the recordings of a real VK v0.1.44
//! (`tests/fixtures/vk-wire-bloop/samples/`): mapped objects read as the store reads them.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use uuid::Uuid;

use vk_observer_store::rows::{AttemptRow, ProcessRow, SessionRow};
use vk_observer_store::task_digest::TaskDigest;
use vk_observer_vk::{self as vk, ProcessFacts};

use super::*;

macro_rules! sample {
    ($file:literal) => {
        include_str!(concat!(
            "../../../tests/fixtures/vk-wire-bloop/samples/",
            $file
        ))
    };
}

const WS_A: &str = "969dc258-b054-4595-a28f-e2128ea9a2fb";
const WS_B: &str = "c17933ee-2517-46de-a413-1d6e97749f91";
const REPO_A: &str = "d9eb9f10-1e79-47e7-98d6-cd5cda35eefe";
const REPO_B: &str = "076da70e-9f6f-4a2a-b695-9b120fe9c80b";
/// The derived project ids, computed independently (Python's `uuid.uuid5`).
const PROJECT_ALPHA: &str = "06b65672-5433-59a3-8b66-c8eaba818a17";
const PROJECT_ALPHA_BETA: &str = "55dc13cd-6073-5872-bc17-b062c45aeef8";
const PROJECT_NONE: &str = "8d96ad12-c082-5728-bdd9-d14a67c715b1";

fn id(s: &str) -> Uuid {
    s.parse().unwrap()
}

/// `data` of a recorded REST exchange.
fn rest(text: &str) -> Value {
    let v: Value = serde_json::from_str(text).unwrap();
    v["response"]["data"].clone()
}

fn rest_list(text: &str) -> Vec<Value> {
    rest(text).as_array().unwrap().clone()
}

/// The text frames of a recorded WebSocket, parsed.
fn frames(jsonl: &str) -> Vec<Value> {
    jsonl
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "text")
        .map(|e| serde_json::from_str(e["raw"].as_str().unwrap()).unwrap())
        .collect()
}

/// Every object value a stream sent under `/<root>` (snapshot members, adds, replaces).
fn sent_values(jsonl: &str, root: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for f in frames(jsonl) {
        for op in f["JsonPatch"].as_array().into_iter().flatten() {
            if op["path"] == format!("/{root}") {
                out.extend(op["value"].as_object().unwrap().values().cloned());
            } else if op["value"].is_object() {
                out.push(op["value"].clone());
            }
        }
    }
    out
}

/// A stream's `/<root>` map after its first `n` frames, patched leniently (wire fact 7).
fn state_after(jsonl: &str, root: &str, n: usize) -> BTreeMap<String, Value> {
    let mut map = BTreeMap::new();
    for f in frames(jsonl).into_iter().take(n) {
        for op in f["JsonPatch"].as_array().into_iter().flatten() {
            let path = op["path"].as_str().unwrap();
            if path == format!("/{root}") {
                map = op["value"]
                    .as_object()
                    .unwrap()
                    .clone()
                    .into_iter()
                    .collect();
            } else if let Some(key) = path.strip_prefix(&format!("/{root}/")) {
                if op["op"] == "remove" {
                    map.remove(key);
                } else {
                    map.insert(key.to_owned(), op["value"].clone());
                }
            }
        }
    }
    map
}

fn final_state(jsonl: &str, root: &str) -> BTreeMap<String, Value> {
    state_after(jsonl, root, usize::MAX)
}

/// The repos each recorded workspace was on (rest-workspace-repos-*.json; `x` had none).
fn repos_of(ws: &str) -> Vec<Value> {
    match ws {
        WS_A => rest_list(sample!("rest-workspace-repos-a.json")),
        WS_B => rest_list(sample!("rest-workspace-repos-b.json")),
        _ => Vec::new(),
    }
}

fn map_own(ws: &Value, repos: &[Value], processes: &[Value]) -> (Mapped, OwnTask) {
    let w = Workspace {
        json: ws,
        repos,
        processes,
    };
    let mapped = map_workspace(&OnePerWorkspace, w).unwrap();
    let own = mapped.own.clone().unwrap();
    (mapped, own)
}

#[test]
fn the_project_namespace_is_the_v5_name_it_says() {
    assert_eq!(
        PROJECT_NAMESPACE,
        Uuid::new_v5(&Uuid::NAMESPACE_URL, b"urn:vk-observer:project-of-repos")
    );
}

#[test]
fn project_ids_are_pinned_and_ignore_order_and_repeats() {
    let (a, b) = (id(REPO_A), id(REPO_B));
    assert_eq!(project_id(&[a]), id(PROJECT_ALPHA));
    assert_eq!(project_id(&[a, b]), id(PROJECT_ALPHA_BETA));
    assert_eq!(project_id(&[b, a, b]), id(PROJECT_ALPHA_BETA));
    assert_eq!(project_id(&[]), id(PROJECT_NONE));
    let mut reversed = repos_of(WS_B);
    reversed.reverse();
    assert_eq!(project_of(&reversed), project_of(&repos_of(WS_B)));
}

#[test]
fn projects_and_tasks_are_the_same_after_a_vk_restart() {
    let before = final_state(sample!("ws-workspaces.jsonl"), "workspaces");
    let after = final_state(sample!("ws-workspaces-after-restart.jsonl"), "workspaces");
    let mut both = 0;
    for (ws_id, ws) in &after {
        let Some(old) = before.get(ws_id) else {
            continue;
        };
        both += 1;
        let repos = repos_of(ws_id);
        let (m_old, own_old) = map_own(old, &repos, &[]);
        let (m_new, own_new) = map_own(ws, &repos, &[]);
        assert_eq!(own_old.project, own_new.project, "{ws_id}");
        assert_eq!(own_old.task["id"], json!(ws_id));
        assert_eq!(own_new.task["id"], json!(ws_id));
        assert_eq!(m_old.attempt["task_id"], m_new.attempt["task_id"]);
    }
    assert_eq!(both, 4, "ws-a, ws-b and the two orphans are in both");
    let project = |ws: &str| map_own(&after[ws], &repos_of(ws), &[]).1.project;
    assert_eq!(project(WS_A).id, id(PROJECT_ALPHA));
    assert_eq!(
        project(WS_A).json,
        json!({"id": PROJECT_ALPHA, "name": "alpha"})
    );
    assert_eq!(project(WS_B).id, id(PROJECT_ALPHA_BETA));
    assert_eq!(project(WS_B).json["name"], "alpha + beta");
}

#[test]
fn every_recorded_workspace_reads_as_an_attempt_and_a_task() {
    let streams = [
        sample!("ws-workspaces.jsonl"),
        sample!("ws-workspaces-after-restart.jsonl"),
    ];
    let mut seen = 0;
    for ws in streams.iter().flat_map(|s| sent_values(s, "workspaces")) {
        let ws_id = ws["id"].as_str().unwrap().to_owned();
        let (mapped, own) = map_own(&ws, &repos_of(&ws_id), &[]);
        let row: AttemptRow = serde_json::from_value(mapped.attempt.clone()).unwrap();
        assert_eq!(row.task_id, Some(id(&ws_id)));
        assert_eq!(row.branch.as_deref(), ws["branch"].as_str());
        assert_eq!(row.created_at, vk::ts_of(&ws, "created_at"));
        assert_eq!(row.updated_at, vk::ts_of(&ws, "updated_at"));
        assert_eq!(mapped.attempt["container_ref"], ws["container_ref"]);
        for flag in ["is_running", "is_errored", "archived", "pinned", "name"] {
            assert!(
                mapped.attempt.get(flag).is_none(),
                "{flag} stays off the attempt"
            );
        }
        let digest = TaskDigest::of(&own.task, Default::default());
        assert_eq!(digest.title, ws["name"].as_str().unwrap());
        assert_eq!(digest.project_id, Some(own.project.id));
        assert_eq!(digest.created_at, vk::ts_string(&ws, "created_at"));
        let expected = if ws["is_running"] == true {
            "inprogress"
        } else if ws["archived"] == true {
            "done"
        } else if ws["is_errored"] == true {
            "inreview"
        } else {
            "todo"
        };
        assert_eq!(digest.status, expected, "flags only: {ws}");
        seen += 1;
    }
    assert!(seen > 100, "{seen}");
}

#[test]
fn every_recorded_process_reads_as_the_store_reads_it() {
    let mut processes = sent_values(sample!("ws-session-a.jsonl"), "execution_processes");
    processes.extend(sent_values(
        sample!("ws-session-b.jsonl"),
        "execution_processes",
    ));
    let chain: Vec<Value> =
        serde_json::from_str(sample!("execution-processes-b-chain.json")).unwrap();
    processes.extend(chain);
    for f in [
        sample!("rest-execution-process-running.json"),
        sample!("rest-execution-process-completed.json"),
        sample!("rest-execution-process-failed.json"),
        sample!("rest-execution-process-killed.json"),
        sample!("rest-execution-process-dropped.json"),
    ] {
        processes.push(rest(f));
    }
    let mut variants = 0;
    for p in &processes {
        let m = process(p);
        let row: ProcessRow = serde_json::from_value(m.clone()).unwrap();
        assert_eq!(row.session_id, vk::uuid_of(p, "session_id"));
        assert_eq!(row.run_reason.as_deref(), p["run_reason"].as_str());
        assert_eq!(row.status.as_deref(), p["status"].as_str());
        assert_eq!(row.exit_code, p["exit_code"].as_i64());
        assert_eq!(row.dropped, p["dropped"].as_bool());
        assert_eq!(row.created_at, vk::ts_of(p, "created_at"));
        assert_eq!(row.started_at, vk::ts_of(p, "started_at"));
        assert_eq!(row.completed_at, vk::ts_of(p, "completed_at"));
        assert!(row.updated_at >= row.completed_at && row.updated_at >= vk::ts_of(p, "updated_at"));
        assert_eq!(ProcessFacts::from_value(&m), ProcessFacts::from_value(p));
        assert_eq!(vk::prompt_of(&m), vk::prompt_of(p));
        let mut action = &m["executor_action"];
        while action.is_object() {
            let typ = &action["typ"];
            if let Some(config) = typ.get("executor_config") {
                assert_eq!(&typ["executor_profile_id"], config, "executor and variant");
                variants += usize::from(config.get("variant").is_some());
            }
            if let Some(script) = typ.get("script") {
                assert_eq!(script, "<redacted>");
            }
            action = &action["next_action"];
        }
        if p["run_reason"] == "codingagent" {
            assert_eq!(vk::executor_of_process(&m).as_deref(), Some("CLAUDE_CODE"));
        }
    }
    assert!(variants > 0, "the APPROVALS variant is recorded");
    let archive = processes
        .iter()
        .find(|p| p["run_reason"] == "archivescript");
    let archive = process(archive.unwrap());
    assert_eq!(archive["run_reason"], "archivescript");
    assert!(!vk::is_relevant(&archive), "kept verbatim, never relevant");
    let completed = process(&rest(sample!("rest-execution-process-completed.json")));
    assert_eq!(completed["updated_at"], "2026-11-28T16:28:25.094619871Z");
}

#[test]
fn recorded_sessions_read_as_the_store_reads_them() {
    let mut sessions = rest_list(sample!("rest-sessions-list-a.json"));
    sessions.extend(rest_list(sample!("rest-sessions-list-b.json")));
    sessions.push(rest(sample!("rest-session-get-a.json")));
    for s in &sessions {
        let m = session(s);
        let row: SessionRow = serde_json::from_value(m.clone()).unwrap();
        assert_eq!(row.executor.as_deref(), Some("CLAUDE_CODE"));
        assert_eq!(row.created_at, vk::ts_of(s, "created_at"));
        assert_eq!(m["workspace_id"], s["workspace_id"]);
        assert!(m.get("name").is_none() && m.get("agent_working_dir").is_none());
    }
    assert_eq!(sessions[0]["workspace_id"], WS_A);
}

#[test]
fn task_status_of_the_recorded_running_completed_failed_killed_and_archived_workspaces() {
    let p = |f: &str| process(&rest(f));
    let status = |ws: &str, ps: &[Value]| task_status(&rest(ws), ps);
    let running = p(sample!("rest-execution-process-running.json"));
    let completed = p(sample!("rest-execution-process-completed.json"));
    let failed = p(sample!("rest-execution-process-failed.json"));
    let killed = p(sample!("rest-execution-process-killed.json"));
    let get_a = sample!("rest-workspace-get-a.json");
    assert_eq!(
        status(sample!("rest-workspace-get-a-running.json"), &[running]),
        TaskStatus::InProgress
    );
    assert_eq!(status(get_a, &[completed.clone()]), TaskStatus::InReview);
    assert_eq!(
        status(sample!("rest-workspace-get-failed.json"), &[failed]),
        TaskStatus::InReview
    );
    assert_eq!(status(get_a, &[completed, killed]), TaskStatus::InReview);
    let chain: Vec<Value> =
        serde_json::from_str(sample!("execution-processes-b-chain.json")).unwrap();
    let merged = sample!("rest-workspace-get-b-merged.json");
    assert_eq!(status(merged, &chain), TaskStatus::Done);
    // The start reply: the workspace before any process is read, then with its first one.
    let start = rest(sample!("rest-workspace-start-a.json"));
    let first = process(&start["execution_process"]);
    assert_eq!(task_status(&start["workspace"], &[]), TaskStatus::Todo);
    assert_eq!(
        task_status(&start["workspace"], &[first]),
        TaskStatus::InProgress
    );
    // A dev server alone is not work on the task (VK's is_running skips it too).
    let dev: Vec<Value> = sent_values(sample!("ws-session-a.jsonl"), "execution_processes")
        .into_iter()
        .filter(|p| p["run_reason"] == "devserver" && p["status"] == "running")
        .collect();
    assert_eq!(
        task_status(&start["workspace"], &dev[..1]),
        TaskStatus::Todo
    );
}

#[test]
fn task_status_follows_the_recorded_session_streams() {
    let a = sample!("ws-session-a.jsonl");
    let ws_a = rest(sample!("rest-workspace-get-a.json"));
    for n in 1..=frames(a).len() {
        let ps: Vec<Value> = state_after(a, "execution_processes", n)
            .into_values()
            .collect();
        let agent_running = ps
            .iter()
            .any(|p| vk::is_relevant(p) && p["status"] == "running");
        let expected = if agent_running {
            TaskStatus::InProgress
        } else {
            TaskStatus::InReview
        };
        assert_eq!(task_status(&ws_a, &ps), expected, "after frame {n}");
    }
    // Killed last (after text frame 27 of the stream: a stopped follow-up), with the
    // workspace's frame that said so (`is_errored`).
    let ps: Vec<Value> = state_after(a, "execution_processes", 27)
        .into_values()
        .collect();
    let newest = ps
        .iter()
        .filter(|p| vk::is_relevant(p))
        .max_by_key(|p| vk::ts_of(p, "created_at"));
    assert_eq!(newest.unwrap()["status"], "killed");
    let errored = json!({"id": WS_A, "is_running": false, "is_errored": true, "archived": false});
    assert_eq!(task_status(&errored, &ps), TaskStatus::InReview);
    assert_eq!(task_status(&errored, &[]), TaskStatus::InReview);
    // Workspace B at the end: un-archived by its last follow-up, chain completed.
    let b = sample!("ws-session-b.jsonl");
    let ws_b = &final_state(sample!("ws-workspaces.jsonl"), "workspaces")[WS_B];
    let ps: Vec<Value> = final_state(b, "execution_processes")
        .into_values()
        .collect();
    assert_eq!(task_status(ws_b, &ps), TaskStatus::InReview);
}

#[test]
fn an_orphan_of_a_failed_start_is_a_todo_task_in_the_no_repository_project() {
    let orphans: Vec<Value> = rest_list(sample!("rest-workspaces-final.json"))
        .into_iter()
        .filter(|w| w["name"] == "x")
        .collect();
    assert_eq!(orphans.len(), 2);
    for ws in &orphans {
        let (mapped, own) = map_own(ws, &[], &[]);
        assert_eq!(own.project.id, id(PROJECT_NONE));
        assert_eq!(own.project.json["name"], NO_REPOSITORY);
        assert!(own.project.repos.is_empty() && mapped.attempt_repos.is_empty());
        assert_eq!(own.task["title"], "x");
        assert_eq!(own.task["description"], Value::Null);
        assert_eq!(own.task["status"], "todo");
        assert_eq!(own.task["updated_at"], ws["updated_at"]);
        assert_eq!(mapped.attempt["container_ref"], Value::Null);
        assert!(mapped.attempt["branch"].as_str().unwrap().ends_with("-x"));
    }
}

#[test]
fn description_is_the_first_prompt_vk_answers() {
    let ps: Vec<Value> = final_state(sample!("ws-session-a.jsonl"), "execution_processes")
        .into_values()
        .map(|p| process(&p))
        .collect();
    let first = rest(sample!("rest-workspace-first-message.json"));
    assert_eq!(first_prompt(&ps).as_deref(), first.as_str());
    let ws = rest(sample!("rest-workspace-get-a.json"));
    let (_, own) = map_own(&ws, &repos_of(WS_A), &ps);
    assert_eq!(own.task["description"], first);
    assert_eq!(own.task["title"], "ws-a-single");
    assert_eq!(own.task["status"], "inreview");
    // The newest of the workspace's time and its processes' starts and ends.
    let newest = ps
        .iter()
        .filter(|p| vk::is_relevant_reason(vk::run_reason(p)))
        .flat_map(|p| [vk::ts_of(p, "created_at"), vk::ts_of(p, "completed_at")])
        .chain([vk::ts_of(&ws, "updated_at")])
        .max()
        .flatten();
    assert_eq!(vk::ts_of(&own.task, "updated_at"), newest);
    assert!(newest > vk::ts_of(&ws, "updated_at"));
}

#[test]
fn title_falls_back_to_the_prompt_cut_as_vk_names_then_the_branch() {
    let ws = json!({"id": WS_A, "name": null, "branch": "vk/969d-x"});
    let long = "Please write a greeting file and then another one and a third one too";
    assert_eq!(
        task_title(&ws, Some(long)),
        "Please write a greeting file and then another one and a..."
    );
    assert_eq!(task_title(&ws, Some("  short  ")), "short");
    assert_eq!(task_title(&ws, None), "vk/969d-x");
    assert_eq!(task_title(&json!({"id": WS_A}), None), WS_A);
}

#[test]
fn task_updated_at_moves_with_process_ends_and_never_back() {
    let completed = process(&rest(sample!("rest-execution-process-completed.json")));
    let running_ws = rest(sample!("rest-workspace-get-a-running.json"));
    let w = |ps: &[Value]| {
        own_task(
            Workspace {
                json: &running_ws,
                repos: &[],
                processes: ps,
            },
            id(WS_A),
            id(PROJECT_ALPHA),
        )
    };
    assert_eq!(w(&[])["updated_at"], running_ws["updated_at"]);
    assert_eq!(
        w(&[completed.clone()])["updated_at"],
        completed["completed_at"]
    );
    let later = process(&rest(sample!("rest-execution-process-killed.json")));
    let t = |v: Value| vk::ts_of(&v, "updated_at");
    assert!(t(w(&[completed.clone(), later])) >= t(w(&[completed])));
}

#[test]
fn attempt_repos_keep_their_target_branches_and_project_repos_the_fork_fields() {
    let ws = rest(sample!("rest-workspace-get-b-merged.json"));
    let (mapped, own) = map_own(&ws, &repos_of(WS_B), &[]);
    let names: Vec<_> = mapped
        .attempt_repos
        .iter()
        .map(|r| (r["name"].clone(), r["target_branch"].clone()))
        .collect();
    assert_eq!(
        names,
        vec![
            (json!("alpha"), json!("main")),
            (json!("beta"), json!("main"))
        ]
    );
    for r in own.project.repos.iter().chain(&mapped.attempt_repos) {
        assert!(r.get("setup_script").is_none() && r.get("dev_server_script").is_none());
        assert!(r["id"].is_string() && r["path"].is_string() && r["display_name"].is_string());
    }
    assert!(
        own.project
            .repos
            .iter()
            .all(|r| r.get("target_branch").is_none())
    );
}

#[test]
fn projects_cover_each_registered_repo_and_each_workspace_set_once() {
    let registered = rest_list(sample!("rest-repos.json"));
    let (a, b) = (repos_of(WS_A), repos_of(WS_B));
    let all = projects(&registered, [a.as_slice(), b.as_slice(), a.as_slice()]);
    let mut names: Vec<_> = all
        .iter()
        .map(|p| p.json["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["alpha", "alpha + beta", "beta"]);
}

#[test]
fn a_repo_added_to_a_workspace_moves_its_task_to_another_project() {
    let added = rest(sample!("rest-workspace-add-repo.json"));
    let beta = rest_list(sample!("rest-repos.json"))
        .into_iter()
        .find(|r| r["name"] == "beta")
        .unwrap();
    let before = [beta.clone()];
    let after = [beta, added["repo"].clone()];
    let (m1, own1) = map_own(&added["workspace"], &before, &[]);
    let (m2, own2) = map_own(&added["workspace"], &after, &[]);
    assert_eq!(own1.project.json["name"], "beta");
    assert_eq!(own2.project.id, id(PROJECT_ALPHA_BETA));
    assert_eq!(
        (own1.task["id"].clone(), m1.attempt["task_id"].clone()),
        (own2.task["id"].clone(), m2.attempt["task_id"].clone())
    );
}

#[test]
fn a_board_task_links_the_workspace_and_supplies_task_and_project() {
    struct Linked(Uuid, Uuid);
    impl Board for Linked {
        fn linked_task(&self, workspace: Uuid) -> Option<Uuid> {
            (workspace == self.0).then_some(self.1)
        }
    }
    let board = Linked(id(WS_A), Uuid::from_u128(7));
    let ws = rest(sample!("rest-workspace-get-a.json"));
    let repos = repos_of(WS_A);
    let w = Workspace {
        json: &ws,
        repos: &repos,
        processes: &[],
    };
    let mapped = map_workspace(&board, w).unwrap();
    assert_eq!(mapped.attempt["task_id"], json!(Uuid::from_u128(7)));
    assert!(mapped.own.is_none());
    let other = json!({"id": WS_B, "branch": "vk/c179-b"});
    let w = Workspace {
        json: &other,
        repos: &[],
        processes: &[],
    };
    assert!(
        map_workspace(&board, w).unwrap().own.is_some(),
        "unlinked: its own task"
    );
    assert!(
        map_workspace(
            &OnePerWorkspace,
            Workspace {
                json: &json!({}),
                repos: &[],
                processes: &[]
            }
        )
        .is_none()
    );
}
