//! The delivery and stop tools on a VK 0.1.x (the workspace-first dialect). A stub
//! (`support::recorded_v01`) answers 0.1.x's routes with the exchanges recorded on BloopAI VK
//! v0.1.44 and anything else as 0.1.x does. The client is told the dialect, the cache holds the workspaces as ingest stores
//! them, and the proxy's functions are called directly. Each test checks what the proxy sent
//! (route and body) and what the tool answers for the recorded answer.
//!
//! Ingest is played by a small task: after a nudge it re-reads the attempt's processes from
//! VK's REST (its truth after a stop); a branch status read it makes from VK and stores, as the
//! workspace-first ingest does.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::recorded_v01::{Asked, Serve, data, recorded, recording, served_at, stub};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use uuid::Uuid;

use vk_observer_ingest::Signal;
use vk_observer_ingest::error::IngestError;
use vk_observer_proxy::Proxy;
use vk_observer_proxy::artifacts::PatchGuard;
use vk_observer_proxy::file_lines::LineRange;
use vk_observer_proxy::git::{GitActionDone, RebaseOutcome};
use vk_observer_proxy::idempotency::{Idempotency, IdempotencyTtl};
use vk_observer_proxy::stop::{AttemptStopped, StopTarget};
use vk_observer_query::Query;
use vk_observer_store::StoreOwner;
use vk_observer_store::events::DomainEvent;
use vk_observer_store::records::IdempotencyRecords;
use vk_observer_store::writer::Writer;
use vk_observer_telemetry::health::Health;
use vk_observer_tool_error::ToolError;
use vk_observer_upstream::VkClient;
use vk_observer_upstream::dialect::Dialect;
use vk_observer_vk::GitAction;

/// Workspace A (one repo, alpha), workspace B (alpha and beta), their repos, and the agent
/// process of A that the recording stopped (scenario-result.json of the recording).
const WS_A: Uuid = Uuid::from_u128(0x969dc258_b054_4595_a28f_e2128ea9a2fb);
const WS_B: Uuid = Uuid::from_u128(0xc17933ee_2517_46de_a413_1d6e97749f91);
const ALPHA: Uuid = Uuid::from_u128(0xd9eb9f10_1e79_47e7_98d6_cd5cda35eefe);
const BETA: Uuid = Uuid::from_u128(0x076da70e_9f6f_4a2a_b695_9b120fe9c80b);
const AGENT: Uuid = Uuid::from_u128(0xc073c2a4_3004_4e78_856f_a2ccc67aabc7);
const PROJECT: Uuid = Uuid::from_u128(0x5_0A4D);

/// A proxy facing the stub, over a cache holding workspaces A and B (as ingest stores them:
/// task id = workspace id), A's session and `processes` of A, then `extra`.
struct World {
    proxy: Proxy,
    asked: Arc<Mutex<Vec<Asked>>>,
    /// What the played ingest heard: `nudge`, `branch_status`.
    heard: Arc<Mutex<Vec<&'static str>>>,
    _owner: StoreOwner,
}

impl World {
    async fn new(serve: Vec<Serve>, processes: Vec<Value>, extra: Vec<DomainEvent>) -> World {
        let (base, asked) = stub(serve).await;
        let client = VkClient::new(&base, None).unwrap();
        client.set_dialect(Some(Dialect::Workspaces));
        let mut owner = StoreOwner::open_temporary(Default::default()).unwrap();
        let mut writer = owner.take_writer().unwrap();
        writer.apply(board(processes)).unwrap();
        writer.apply(extra).unwrap();
        let (signals, rx) = unbounded_channel();
        let heard = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(play_ingest(rx, writer, base, heard.clone()));
        let records = IdempotencyRecords::temporary().unwrap();
        let proxy = Proxy {
            client,
            query: Query::new(owner.store(), Arc::new(Health::new())),
            signals,
            idem: Idempotency::new(records, IdempotencyTtl::default()),
            settle_timeout: Duration::from_secs(5),
            branches: Default::default(),
        };
        let _owner = owner;
        World {
            proxy,
            asked,
            heard,
            _owner,
        }
    }

    /// The requests of `method` received so far: path and body.
    fn sent(&self, method: &str) -> Vec<(String, Option<Value>)> {
        let asked = self.asked.lock().unwrap();
        let of = asked.iter().filter(|a| a.0 == method);
        of.map(|a| (a.1.clone(), a.2.clone())).collect()
    }

    /// A git action without request_id.
    async fn act(
        &self,
        ws: Uuid,
        repo: Option<Uuid>,
        action: GitAction,
    ) -> Answered<GitActionDone> {
        self.proxy.git_action(ws, repo, action, None).await
    }

    async fn stop(&self, target: StopTarget, force: bool) -> Answered<AttemptStopped> {
        self.proxy.stop(target, force, None).await
    }

    fn heard(&self, what: &str) -> bool {
        self.heard.lock().unwrap().contains(&what)
    }
}

type Answered<T> = Result<T, ToolError>;

fn board(processes: Vec<Value>) -> Vec<DomainEvent> {
    let workspace = |file: &str, id: Uuid| {
        let mut w = data(file);
        w["task_id"] = json!(id);
        DomainEvent::AttemptsSnapshot {
            task_id: id,
            attempts: vec![w],
        }
    };
    let task = |id: Uuid, title: &str| {
        json!({"id": id, "project_id": PROJECT, "title": title, "description": null,
               "status": "inprogress", "created_at": "2026-11-28T16:28:14.743Z",
               "updated_at": "2026-11-28T16:28:14.743Z"})
    };
    let mut events = vec![
        DomainEvent::ProjectsSnapshot {
            projects: vec![json!({"id": PROJECT, "name": "alpha"})],
        },
        DomainEvent::TasksSnapshot {
            project_id: PROJECT,
            tasks: vec![task(WS_A, "ws-a-single"), task(WS_B, "ws-b-two-repos")],
        },
        workspace("rest-workspace-get-a.json", WS_A),
        workspace("rest-workspace-get-b-merged.json", WS_B),
        DomainEvent::SessionsSnapshot {
            attempt_id: WS_A,
            sessions: vec![data("rest-session-get-a.json")],
        },
    ];
    let upsert = |process| DomainEvent::ProcessUpserted {
        attempt_id: WS_A,
        process,
    };
    events.extend(processes.into_iter().map(upsert));
    events
}

/// Ingest's part: on a nudge, A's agent re-read from VK's REST (when VK answers it); a branch
/// status read from VK and stored, as the workspace-first ingest does.
async fn play_ingest(
    mut signals: UnboundedReceiver<Signal>,
    mut writer: Writer,
    base: String,
    heard: Arc<Mutex<Vec<&'static str>>>,
) {
    while let Some(signal) = signals.recv().await {
        match signal {
            Signal::Nudge {
                attempt_id: Some(attempt_id),
                ..
            } => {
                heard.lock().unwrap().push("nudge");
                let url = format!("{base}/api/execution-processes/{AGENT}");
                let answer = reqwest::get(url).await.unwrap().json::<Value>().await;
                if let Ok(Value::Object(answer)) = answer
                    && answer["success"] == true
                {
                    let process = answer["data"].clone();
                    let upsert = DomainEvent::ProcessUpserted {
                        attempt_id,
                        process,
                    };
                    writer.apply(vec![upsert]).unwrap();
                }
            }
            Signal::RefreshBranchStatus { attempt_id, done } => {
                heard.lock().unwrap().push("branch_status");
                let client = VkClient::new(&base, None).unwrap();
                client.set_dialect(Some(Dialect::Workspaces));
                let read = client.branch_status(attempt_id).await.map(|repos| {
                    let read_at_ms = chrono::Utc::now().timestamp_millis();
                    let event = DomainEvent::BranchStatusRead {
                        attempt_id,
                        repos,
                        read_at_ms,
                    };
                    writer.apply(vec![event]).unwrap();
                });
                let _ = done.map(|d| d.send(read.map_err(IngestError::Upstream)));
            }
            _ => {}
        }
    }
}

fn git(ws: Uuid, segment: &str) -> String {
    format!("/api/workspaces/{ws}/git/{segment}")
}

fn rebase() -> GitAction {
    GitAction::Rebase {
        old_base_branch: None,
        new_base_branch: None,
    }
}

/// The request body a recording was made with.
fn recorded_body(file: &str) -> Option<Value> {
    recording(file)["request"].get("body").cloned()
}

fn code(e: &ToolError) -> String {
    e.code.as_str().to_string()
}

fn assert_hint(e: &ToolError, says: &str) {
    assert!(e.hint.contains(says), "{}", e.hint);
}

#[tokio::test]
async fn branch_status_is_read_from_git_status_and_answered_as_the_forks() {
    let conflict = "rest-git-status-a-conflict.json";
    let merged = "rest-git-status-b-after-merge.json";
    let w = World::new(vec![recorded(conflict), recorded(merged)], vec![], vec![]).await;

    let a = w.proxy.branch_status(WS_A, false).await.unwrap();
    assert!(
        a.refreshed,
        "nothing cached yet: read from VK through ingest"
    );
    let repo = serde_json::to_value(&a.repos).unwrap();
    assert_eq!(repo[0]["repo_id"], json!(ALPHA));
    assert_eq!(repo[0]["target_branch"], "main");
    assert_eq!(repo[0]["commits_ahead"], 8);
    assert_eq!(repo[0]["commits_behind"], 1);
    assert_eq!(repo[0]["rebase_in_progress"], true);
    assert_eq!(repo[0]["conflict_op"], "rebase");
    assert_eq!(repo[0]["conflicted_files"], json!(["shared.txt"]));
    assert_eq!(repo[0]["ready_to_merge"], false);
    let b = w.proxy.branch_status(WS_B, true).await.unwrap();
    let beta = b.repos.iter().find(|r| r.repo_id == BETA).unwrap();
    assert!(beta.merged);
    let squash = "c53ce2e8ad936254948281245961c8ab5177128e";
    assert_eq!(beta.merge_commit.as_deref(), Some(squash));
    assert_eq!(
        beta.merged_at.as_deref(),
        Some("2026-11-28T16:29:52.105437945Z")
    );

    let read = [(git(WS_A, "status"), None), (git(WS_B, "status"), None)];
    assert_eq!(w.sent("GET"), read);
    assert!(w.heard("branch_status"), "read by ingest and cached");
    let again = w.proxy.branch_status(WS_A, false).await.unwrap();
    assert!(!again.refreshed, "the second read answers from the cache");
}

/// The recording's rebases in its order: a clean one, one that stops on conflicts, one more
/// while that one is stopped, and the abort (each between its status reads before and after;
/// the status before the third hides the stopped rebase, so that VK is asked).
#[tokio::test]
async fn rebases_and_the_abort_answer_as_on_the_fork() {
    let serve = vec![
        recorded("rest-git-status-a-behind.json"),
        recorded("rest-git-status-a-rebased.json"),
        recorded("rest-git-status-a-behind.json"),
        recorded("rest-git-status-a-conflict.json"),
        recorded("rest-git-status-a-behind.json"),
        recorded("rest-git-status-a-conflict.json"),
        recorded("rest-git-status-a-conflict.json"),
        recorded("rest-git-status-a-aborted.json"),
        recorded("rest-git-rebase-clean.json"),
        recorded("rest-git-rebase-conflict.json"),
        recorded("rest-git-rebase-again-in-progress.json"),
        recorded("rest-git-conflicts-abort.json"),
    ];
    let w = World::new(serve, vec![], vec![]).await;
    let done = w.act(WS_A, Some(ALPHA), rebase()).await.unwrap();
    assert_eq!(done.status, Some(RebaseOutcome::Ok));
    assert_eq!(done.branch.unwrap().commits_behind, Some(0));

    // HTTP 200 `success:false`, `error_data {type: merge_conflicts, …}`.
    let done = w.act(WS_A, None, rebase()).await.unwrap();
    assert_eq!(done.status, Some(RebaseOutcome::Conflicts));
    assert_eq!(done.conflicted_files, ["shared.txt"]);
    assert_eq!(done.op.as_deref(), Some("rebase"));
    assert!(done.branch.unwrap().rebase_in_progress);
    assert!(done.as_of.is_some());

    // HTTP 200 `error_data {type: rebase_in_progress}`.
    let e = w.act(WS_A, None, rebase()).await.unwrap_err();
    assert_eq!(code(&e), "rebase_in_progress");

    let done = w.act(WS_A, None, GitAction::AbortConflicts).await.unwrap();
    assert!(done.had_conflicts);
    assert!(!done.branch.unwrap().rebase_in_progress);

    let body = recorded_body("rest-git-rebase-conflict.json");
    assert_eq!(
        body,
        Some(json!({"repo_id": ALPHA, "old_base_branch": null, "new_base_branch": null}))
    );
    let abort = (
        git(WS_A, "conflicts/abort"),
        Some(json!({"repo_id": ALPHA})),
    );
    let rebased = (git(WS_A, "rebase"), body);
    let sent = [rebased.clone(), rebased.clone(), rebased, abort];
    assert_eq!(w.sent("POST"), sent);
}

#[tokio::test]
async fn a_merge_whose_target_moved_is_branch_behind() {
    // The status read before shows nothing to refuse; VK then finds the target moved (409).
    let serve = vec![
        recorded("rest-git-status-a-rebased.json"),
        recorded("rest-git-merge-diverged.json"),
        recorded("rest-git-merge-during-conflict.json"),
    ];
    let w = World::new(serve, vec![], vec![]).await;
    for _ in 0..2 {
        let e = w.act(WS_A, None, GitAction::Merge).await.unwrap_err();
        assert_eq!(code(&e), "branch_behind", "{e:?}");
        assert_eq!(e.details["status"], 409);
        let said = e.details["vk_message"].as_str().unwrap();
        assert!(
            said.starts_with("Cannot merge: base branch 'main'"),
            "{said}"
        );
    }
    let sent = w.sent("POST");
    assert_eq!(sent.len(), 2);
    assert!(
        sent.iter()
            .all(|s| s == &(git(WS_A, "merge"), Some(json!({"repo_id": ALPHA}))))
    );
}

#[tokio::test]
async fn a_merge_answers_the_squash_commit_once_per_request_id() {
    let serve = vec![
        recorded("rest-git-status-b-before-merge.json"),
        recorded("rest-git-status-b-before-merge.json"),
        recorded("rest-git-status-b-after-merge.json"),
        recorded("rest-git-merge.json"),
    ];
    let w = World::new(serve, vec![], vec![]).await;
    // Two repos: the call must name one.
    let e = w.act(WS_B, None, GitAction::Merge).await.unwrap_err();
    assert_eq!(code(&e), "repo_id_required");
    assert!(w.sent("POST").is_empty());

    let squash = "c53ce2e8ad936254948281245961c8ab5177128e";
    let merge = || {
        w.proxy
            .git_action(WS_B, Some(BETA), GitAction::Merge, Some("m-1"))
    };
    let first = merge().await.unwrap();
    assert_eq!(first.merge_commit.as_deref(), Some(squash));
    assert!(first.branch.as_ref().unwrap().merged);
    let again = merge().await.unwrap();
    assert!(again.replayed && !first.replayed);
    assert_eq!(again.merge_commit.as_deref(), Some(squash));
    assert_eq!(again.as_of, first.as_of, "the status read after the merge");
    assert_eq!(
        w.sent("POST"),
        [(git(WS_B, "merge"), recorded_body("rest-git-merge.json"))]
    );
}

#[tokio::test]
async fn a_push_a_rejected_push_and_a_forced_one() {
    let serve = vec![
        recorded("rest-git-status-a-aborted.json"),
        recorded("rest-git-status-a-pushed.json"),
        recorded("rest-git-push.json"),
        recorded("rest-git-push-rejected.json"),
        recorded("rest-git-push-force.json"),
    ];
    let w = World::new(serve, vec![], vec![]).await;
    let push = |force| GitAction::Push { force };
    let done = w.act(WS_A, None, push(false)).await.unwrap();
    assert_eq!(done.remote_branch.as_deref(), Some("vk/969d-ws-a-single"));
    let head = "8e23389f";
    assert!(done.head_oid.as_deref().unwrap().starts_with(head));
    // HTTP 200 `success:false`, `error_data {type: force_push_required}`.
    let e = w.act(WS_A, None, push(false)).await.unwrap_err();
    assert_eq!(code(&e), "force_push_required");
    assert_eq!(e.details["remote_branch"], "vk/969d-ws-a-single");
    let forced = w.act(WS_A, None, push(true)).await.unwrap();
    assert_eq!(forced.action, "force_push");
    let body = Some(json!({"repo_id": ALPHA}));
    assert_eq!(
        w.sent("POST"),
        [
            (git(WS_A, "push"), body.clone()),
            (git(WS_A, "push"), body.clone()),
            (git(WS_A, "push/force"), body)
        ]
    );
}

#[tokio::test]
async fn stopping_the_attempt_stops_the_workspace_and_force_is_the_same_stop() {
    let serve = vec![
        recorded("rest-workspace-execution-stop.json"),
        recorded("rest-execution-process-killed.json"),
    ];
    let running = data("rest-follow-up-slow-2.json");
    assert_eq!(running["status"], "running");
    let w = World::new(serve, vec![running], vec![]).await;
    let stopped = w.stop(StopTarget::Attempt(WS_A), false).await.unwrap();
    assert!(stopped.was_running && !stopped.pending_ingest);
    assert!(stopped.vk_ms.is_some());
    let p = serde_json::to_value(&stopped.stopped).unwrap();
    assert_eq!(
        p,
        json!([{"execution_process_id": AGENT, "run_reason": "codingagent",
                "status": "killed", "exit_code": null}])
    );
    assert!(w.heard("nudge"));
    // No force variant on 0.1.x: the same route, no query.
    let forced = w.stop(StopTarget::Attempt(WS_A), true).await.unwrap();
    assert!(!forced.was_running && forced.vk_ms.is_some());
    let stop = format!("/api/workspaces/{WS_A}/execution/stop");
    assert_eq!(w.sent("POST"), [(stop.clone(), None), (stop, None)]);
}

#[tokio::test]
async fn stopping_one_process_uses_the_process_route() {
    let serve = vec![
        recorded("rest-process-stop.json"),
        recorded("rest-execution-process-killed.json"),
    ];
    let w = World::new(serve, vec![data("rest-follow-up-slow-2.json")], vec![]).await;
    let stopped = w.stop(StopTarget::Process(AGENT), false).await.unwrap();
    assert_eq!(stopped.execution_process_id, Some(AGENT));
    assert_eq!(stopped.stopped[0].status, "killed");
    assert_eq!(
        w.sent("POST"),
        [(format!("/api/execution-processes/{AGENT}/stop"), None)]
    );
}

#[tokio::test]
async fn files_and_patches_are_refused_naming_the_worktree() {
    let w = World::new(vec![], vec![], vec![]).await;
    let p = &w.proxy;
    let file = p.attempt_file(WS_A, "alpha/hello.txt".into(), 0, 100).await;
    let range = LineRange {
        start: 1,
        end: Some(2),
    };
    let lines = p
        .attempt_file_lines(WS_A, "alpha/hello.txt".into(), range, 100)
        .await;
    let paths = vec!["alpha/hello.txt".to_string()];
    let patch = p
        .attempt_patch(WS_A, paths, false, 1000, PatchGuard::default())
        .await;
    for e in [file.unwrap_err(), lines.unwrap_err(), patch.unwrap_err()] {
        assert_eq!(code(&e), "not_configured");
        assert!(!e.retryable);
        assert_hint(&e, "VK 0.1.x has no file/patch route");
        assert_eq!(e.details["reason"], "unsupported_by_upstream");
        assert_eq!(e.details["worktree"], "<WORKTREES>/969d-ws-a-single");
    }
    assert!(w.asked.lock().unwrap().is_empty(), "VK was not asked");
}

#[tokio::test]
async fn odd_answers_become_clear_errors() {
    let unknown = "rest-err-workspace-unknown.json";
    let serve = vec![
        served_at("GET", git(WS_B, "status"), unknown),
        recorded("rest-git-status-a-rebased.json"),
    ];
    let w = World::new(serve, vec![], vec![]).await;
    // 404 with an empty body: VK does not know the workspace.
    let e = w.proxy.branch_status(WS_B, false).await.unwrap_err();
    assert_eq!(code(&e), "not_found");
    assert_eq!(e.details["kind"], "attempt");
    // No merge route answered: 0.1.x's 405 without a body.
    let e = w.act(WS_A, None, GitAction::Merge).await.unwrap_err();
    assert_eq!(code(&e), "upstream_error");
    assert_hint(&e, "no such route for this method");

    let stop = format!("/api/execution-processes/{AGENT}/stop");
    let serve = vec![served_at("POST", stop, "rest-err-process-unknown.json")];
    let w = World::new(serve, vec![data("rest-follow-up-slow-2.json")], vec![]).await;
    // A process VK does not know.
    let e = w.stop(StopTarget::Process(AGENT), false).await.unwrap_err();
    assert_eq!(code(&e), "not_found");
    assert_eq!(e.details["kind"], "execution_process");
    // An unknown GET: the web app's page (200 text/html).
    let e = w.proxy.branch_status(WS_A, false).await.unwrap_err();
    assert_eq!(code(&e), "upstream_error");
    assert_hint(&e, "a web page, not VK's API");
}

#[tokio::test]
async fn off_0_1_x_the_client_keeps_the_forks_routes() {
    let w = World::new(vec![], vec![], vec![]).await;
    let client = &w.proxy.client;
    for dialect in [None, Some(Dialect::Fork)] {
        client.set_dialect(dialect);
        let _ = client.branch_status(WS_A).await;
        let _ = client.git_action(WS_A, ALPHA, &GitAction::Merge).await;
    }
    let asked = w.asked.lock().unwrap();
    let paths: Vec<&str> = asked.iter().map(|a| a.1.as_str()).collect();
    let status = format!("/api/task-attempts/{WS_A}/branch-status");
    let merge = format!("/api/task-attempts/{WS_A}/merge");
    let (status, merge) = (status.as_str(), merge.as_str());
    assert_eq!(paths, [status, merge, status, merge]);
}
