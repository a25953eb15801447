//! Attempts as MCP tasks (tasks extension, SEP-2663) through rmcp's client against the
//! simulator: a client that declares the extension gets a task handle from
//! `start_task_attempt` (and `follow_up` send) and follows the run with `tasks/get` — working →
//! input_required (the approval as a form elicitation) → answered with `tasks/update` →
//! completed with the status answer as result; a failing agent ends `failed`; `tasks/cancel`
//! stops the run (`cancelled`); the handle survives a daemon restart; a `request_id` replay
//! answers the first call's task id; the task's resource
//! `vk-observer://tasks/{id}` is pushed over `subscriptions/listen` as the cache changes; a
//! client without the extension gets today's answers, and `tasks/*` refused.

mod mcp_tasks_support;
mod support;

use std::time::{Duration, Instant};

use mcp_tasks_support::{
    answer_of, approve, cached_task, result_status, send_args, start_args, started, tasks_client,
    tasks_client_with, the_approval, until,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, DetailedTask,
    GetTaskParams, ReadResourceRequestParams, ServerNotification, SubscriptionFilter, TaskPayload,
    TaskStatus,
};
use serde_json::{Value, json};
use support::approvals::COMMAND;
use support::mcp::Mcp;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_working_then_input_required_then_answered_then_completed() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "ASK first").await;
    let c = tasks_client(&daemon, true).await;
    let handle = started(&c, start_args(task, repo)).await;
    // The run's state when the handle left: working, unless the agent already asks (a loaded box).
    assert!(
        matches!(
            handle.task.status,
            TaskStatus::Working | TaskStatus::InputRequired
        ),
        "{handle:?}"
    );
    let attempt = answer_of(&handle)["attempt_id"]
        .as_str()
        .unwrap()
        .to_string();
    let id = handle.task.task_id.clone();
    assert_eq!(handle.task.poll_interval_ms, Some(2000));

    let asking = until(&c, &id, TaskStatus::InputRequired).await;
    let (key, message) = the_approval(&asking);
    assert!(key.starts_with("approval:"), "{key}");
    assert!(
        message.contains(COMMAND) && message.contains("expires"),
        "{message}"
    );
    // The same approval as respond_approval knows it.
    let status = mcp
        .call("get_attempt_status", json!({"attempt_id": attempt}))
        .await
        .ok();
    assert_eq!(
        format!(
            "approval:{}",
            status["pending_approvals"][0]["approval_id"]
                .as_str()
                .unwrap()
        ),
        key
    );

    c.peer()
        .update_task(approve(&id, &key))
        .await
        .expect("tasks/update");
    let done = until(&c, &id, TaskStatus::Completed).await;
    let s = result_status(&done);
    assert_eq!(s["attempt_id"], json!(attempt));
    assert_eq!(s["result"]["outcome"], "success", "{s}");
    assert_eq!(
        done.task.status_message.as_deref(),
        s["result"]["summary"].as_str()
    );
    // Answering again is ignored (the approval is no longer outstanding).
    c.peer()
        .update_task(approve(&id, &key))
        .await
        .expect("a stale answer is ignored");

    // follow_up send is a task too, following its own process.
    let follow = started(&c, send_args(&attempt, "one more thing")).await;
    let process = answer_of(&follow)["execution_process_id"].clone();
    let done = until(&c, &follow.task.task_id, TaskStatus::Completed).await;
    let s = result_status(&done);
    assert_eq!(s["result"]["outcome"], "success", "{s}");
    assert_ne!(
        s["state"], "running",
        "the run (cleanup included) is over: {s}"
    );
    let pid: Uuid = process.as_str().unwrap().parse().unwrap();
    assert_eq!(sim.truth().processes[&pid]["status"], "completed");
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_agent_ends_the_task_failed_with_the_status_as_error_data() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "FAIL please").await;
    let c = tasks_client(&daemon, true).await;
    let handle = started(&c, start_args(task, repo)).await;
    let t = until(&c, &handle.task.task_id, TaskStatus::Failed).await;
    let TaskPayload::Failed { error } = &t.payload else {
        unreachable!()
    };
    assert_eq!(error["data"]["result"]["outcome"], "failure", "{error:?}");
    assert_eq!(error["message"], error["data"]["result"]["summary"]);
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_attempt_vk_deleted_ends_failed_not_working_forever() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "ASK then delete").await;
    let c = tasks_client(&daemon, true).await;
    let handle = started(&c, start_args(task, repo)).await;
    let id = handle.task.task_id.clone();
    until(&c, &id, TaskStatus::InputRequired).await;
    let attempt = *sim.truth().attempts.keys().next().unwrap();
    assert!(
        sim.delete_task(task),
        "the simulator deletes the task and its attempt"
    );
    let t = until(&c, &id, TaskStatus::Failed).await;
    let TaskPayload::Failed { error } = &t.payload else {
        unreachable!()
    };
    assert_eq!(error["data"]["reason"], "attempt_gone", "{error:?}");
    assert_eq!(error["data"]["attempt_id"], json!(attempt), "{error:?}");
    assert!(error["message"].as_str().unwrap().contains("no longer has"));
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_stops_the_run_and_the_task_ends_cancelled() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "ASK then cancel").await;
    let c = tasks_client(&daemon, true).await;
    let handle = started(&c, start_args(task, repo)).await;
    let id = handle.task.task_id.clone();
    until(&c, &id, TaskStatus::InputRequired).await;
    c.peer()
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect("tasks/cancel");
    let t = until(&c, &id, TaskStatus::Cancelled).await;
    assert!(matches!(t.payload, TaskPayload::Cancelled));
    let killed = sim
        .truth()
        .processes
        .values()
        .any(|p| p["status"] == "killed" && p["run_reason"] == "codingagent");
    assert!(killed, "the agent's process was stopped in VK");
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handle_survives_a_daemon_restart() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "ASK across a restart").await;
    let c = tasks_client(&daemon, false).await;
    let handle = started(&c, start_args(task, repo)).await;
    let id = handle.task.task_id.clone();
    until(&c, &id, TaskStatus::InputRequired).await;
    let _ = c.cancel().await;
    drop(mcp);
    daemon.shutdown().await;

    let daemon = support::daemon_reopen(&sim, dir.path()).await;
    let c = tasks_client(&daemon, true).await;
    let asking = until(&c, &id, TaskStatus::InputRequired).await;
    let (key, _) = the_approval(&asking);
    c.peer()
        .update_task(approve(&id, &key))
        .await
        .expect("tasks/update");
    until(&c, &id, TaskStatus::Completed).await;
    let unknown = c
        .peer()
        .get_task(GetTaskParams::new(Uuid::new_v4().to_string()))
        .await
        .expect_err("an id no call handed out");
    assert!(
        unknown.to_string().contains("No task has this id"),
        "{unknown}"
    );
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_replay_answers_the_first_calls_task_id() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "ASK, then retried").await;
    let c = tasks_client(&daemon, true).await;
    let keyed = |key: &str| {
        let mut p = start_args(task, repo);
        let args = p.arguments.as_mut().unwrap();
        args.insert("request_id".into(), json!(key));
        p
    };
    let first = started(&c, keyed("retry-me")).await;
    let again = started(&c, keyed("retry-me")).await;
    let answer = |t: &CreateTaskResult| answer_of(t);
    assert_eq!(answer(&again)["replayed"], true, "{again:?}");
    assert_eq!(answer(&again)["attempt_id"], answer(&first)["attempt_id"]);
    assert_eq!(again.task.task_id, first.task.task_id, "one run, one task");
    // The same run answered through the replay's id: the one task reaches input_required.
    until(&c, &again.task.task_id, TaskStatus::InputRequired).await;
    // Another task's run gets a task of its own.
    let (other, other_repo) = cached_task(&sim, &mcp, "ASK elsewhere").await;
    let mut p = start_args(other, other_repo);
    p.arguments
        .as_mut()
        .unwrap()
        .insert("request_id".into(), json!("another-key"));
    let second = started(&c, p).await;
    assert_ne!(second.task.task_id, first.task.task_id);
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_resource_is_pushed_over_subscriptions_listen_as_the_cache_changes() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "ASK with pushes").await;
    let c = tasks_client(&daemon, true).await;
    let handle = started(&c, start_args(task, repo)).await;
    let id = handle.task.task_id.clone();
    let uri = format!("vk-observer://tasks/{id}");
    let filter = SubscriptionFilter::builder()
        .resource_subscriptions([uri.clone()])
        .build();
    let mut sub = c.peer().listen(filter).await.expect("listen acknowledged");
    assert_eq!(
        sub.acknowledged().resource_subscriptions.as_deref(),
        Some(std::slice::from_ref(&uri))
    );
    // Read once as subscribed (a change before the subscription is not pushed: under load the
    // run may already wait for its approval), then driven by pushes only: read the resource
    // when told, answer when it asks.
    let mut seen = Vec::new();
    let mut pushes = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if !seen.is_empty() {
            let n = tokio::time::timeout_at(deadline.into(), sub.next())
                .await
                .unwrap_or_else(|_| panic!("no push within 30 s; seen {seen:?}"))
                .unwrap()
                .expect("the stream is open");
            let ServerNotification::ResourceUpdatedNotification(n) = n else {
                continue;
            };
            assert_eq!(n.params.uri, uri);
            pushes += 1;
        }
        let read = c
            .peer()
            .read_resource(ReadResourceRequestParams::new(uri.clone()))
            .await
            .unwrap();
        let text = match &read.contents[0] {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => panic!("{other:?}"),
        };
        let t: DetailedTask = serde_json::from_str(&text).expect("the read is a task");
        if seen.last() != Some(&t.status()) {
            seen.push(t.status());
        }
        match t.status() {
            TaskStatus::InputRequired => {
                let (key, _) = the_approval(&t);
                c.peer().update_task(approve(&id, &key)).await.unwrap();
            }
            TaskStatus::Completed => break,
            TaskStatus::Working => {}
            other => panic!("ended {other:?}"),
        }
    }
    assert!(seen.contains(&TaskStatus::InputRequired), "{seen:?}");
    assert!(pushes >= 1, "the run ended on pushes: {seen:?}");
    sub.cancel().await.unwrap();
    let _ = c.cancel().await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_extension_the_calls_answer_as_before() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let (task, repo) = cached_task(&sim, &mcp, "Plain").await;
    let r = mcp
        .client
        .peer()
        .call_tool_once(start_args(task, repo))
        .await
        .unwrap();
    let CallToolResponse::Complete(r) = r else {
        panic!("a client without the extension got {r:?}");
    };
    let answer = r.structured_content.expect("today's answer");
    assert!(
        answer["attempt_id"].is_string() && answer["status"].is_object(),
        "{answer}"
    );
    // tasks/* are refused to it (missing client capability), and the listing is today's.
    let e = mcp
        .client
        .peer()
        .get_task(GetTaskParams::new(Uuid::new_v4().to_string()))
        .await
        .expect_err("refused without the extension");
    assert!(
        e.to_string().contains("-32021") || e.to_string().to_lowercase().contains("capabilit"),
        "{e}"
    );
    let with = tasks_client(&daemon, true).await;
    let listed: Vec<String> = with
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    let mut listed = listed;
    listed.sort();
    assert_eq!(listed, mcp.tool_names().await);
    // A call that starts no run is answered, not tasked, even with the extension.
    let queue = json!({"action": "queue", "prompt": "later", "attempt_id": answer["attempt_id"]});
    let Value::Object(map) = queue else {
        unreachable!()
    };
    let r = with
        .peer()
        .call_tool_once(CallToolRequestParams::new("follow_up").with_arguments(map))
        .await
        .unwrap();
    assert!(matches!(r, CallToolResponse::Complete(_)), "{r:?}");
    let _ = with.cancel().await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_methods_need_the_scopes_of_the_tools_they_stand_for() {
    use vk_observer_config::McpSettings;
    use vk_observer_config::access::{Scope, Scopes, TokenFile};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    let mut file = TokenFile::default();
    let all = file.create("all", Scopes::of(&Scope::ALL), vec![]).unwrap();
    let read = file
        .create("reader", Scopes::of(&[Scope::Read]), vec![])
        .unwrap();
    let write = file
        .create("writer", Scopes::of(&[Scope::Read, Scope::Write]), vec![])
        .unwrap();
    file.save(&path).unwrap();
    let settings = McpSettings {
        tokens_file: Some(path.clone()),
        ..Default::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let mcp = Mcp::connect_with_token(daemon.addr, &all).await;
    let (task, repo) = cached_task(&sim, &mcp, "ASK scoped").await;
    let owner = tasks_client_with(&daemon, true, Some(&write)).await;
    let id = started(&owner, start_args(task, repo)).await.task.task_id;
    let asking = until(&owner, &id, TaskStatus::InputRequired).await;
    let (key, _) = the_approval(&asking);

    // read: may follow the task, not answer it nor cancel it.
    let reader = tasks_client_with(&daemon, true, Some(&read)).await;
    until(&reader, &id, TaskStatus::InputRequired).await;
    let e = reader
        .peer()
        .update_task(approve(&id, &key))
        .await
        .expect_err("no approve scope");
    assert!(e.to_string().contains("approve"), "{e}");
    let e = reader
        .peer()
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect_err("no write scope");
    assert!(e.to_string().contains("write"), "{e}");
    // write without approve: may cancel, may not answer.
    let e = owner
        .peer()
        .update_task(approve(&id, &key))
        .await
        .expect_err("no approve scope");
    assert!(e.to_string().contains("approve"), "{e}");
    assert!(
        sim.approvals()
            .iter()
            .all(|(_, _, s)| *s == vk_observer_sim::SimApprovalStatus::Pending)
    );
    owner
        .peer()
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect("write may cancel");
    until(&reader, &id, TaskStatus::Cancelled).await;
    let _ = owner.cancel().await;
    let _ = reader.cancel().await;
    daemon.shutdown().await;
}
