//! What the MCP tasks tests share (`tests/mcp_tasks.rs`, `tests/mcp_tasks_polish.rs`): an rmcp
//! client that declares the tasks extension, a cached task to start, and the polling and
//! answering of a task through `tasks/get` and `tasks/update`.
//!
//! Each test binary uses only some of these helpers, so dead-code warnings are silenced here.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, CreateTaskResult,
    DetailedTask, GetTaskParams, Implementation, InputRequest, ProtocolVersion, TaskPayload,
    TaskStatus, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::{Value, json};
use uuid::Uuid;
use vk_observer_daemon::Daemon;
use vk_observer_sim::Sim;

use crate::support::mcp::{Mcp, Reply};

pub type Client = RunningService<RoleClient, ClientConfig>;

/// A client that declares the tasks extension, in either era.
pub async fn tasks_client(daemon: &Daemon, modern: bool) -> Client {
    tasks_client_with(daemon, modern, None).await
}

/// The same, presenting a bearer token.
pub async fn tasks_client_with(daemon: &Daemon, modern: bool, token: Option<&str>) -> Client {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut cfg =
        StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", daemon.addr));
    if let Some(t) = token {
        cfg = cfg.auth_header(t.to_string());
    }
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(cfg);
    let lifecycle = if modern {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        }
    } else {
        ClientLifecycleMode::Initialize
    };
    let info = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("mcp-tasks-test", "0"),
    );
    info.serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("MCP client connects")
}

/// A project with one repo and a task titled `title`, once the daemon's cache has the task.
pub async fn cached_task(sim: &Sim, mcp: &Mcp, title: &str) -> (Uuid, Uuid) {
    let project = sim.add_project(&format!("Tasks {title}"), &["demo"]);
    let task = sim.add_task(project, title, None);
    let repo = sim.project_repo_ids(project)[0];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = mcp.call("list_tasks", json!({"project_id": project})).await;
        if let Reply::Ok(r) = r
            && r.to_string().contains(&task.to_string())
        {
            return (task, repo);
        }
        assert!(
            Instant::now() < deadline,
            "the task never reached the cache"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn start_args(task: Uuid, repo: Uuid) -> CallToolRequestParams {
    let args = json!({"task_id": task, "executor": "CLAUDE_CODE",
        "repos": [{"repo_id": repo, "target_branch": "main"}]});
    let Value::Object(map) = args else {
        unreachable!()
    };
    CallToolRequestParams::new("start_task_attempt").with_arguments(map)
}

/// `follow_up` with `action: send` on `attempt`.
pub fn send_args(attempt: &str, prompt: &str) -> CallToolRequestParams {
    let args = json!({"action": "send", "prompt": prompt, "attempt_id": attempt});
    let Value::Object(map) = args else {
        unreachable!()
    };
    CallToolRequestParams::new("follow_up").with_arguments(map)
}

/// The task handle a call returned (it must be one).
pub async fn started(c: &Client, params: CallToolRequestParams) -> CreateTaskResult {
    match c.peer().call_tool_once(params).await.expect("tools/call") {
        CallToolResponse::Task(t) => t,
        other => panic!("expected a task handle, got {other:?}"),
    }
}

/// The tool's own answer a task handle carries.
pub fn answer_of(t: &CreateTaskResult) -> Value {
    t.meta.as_ref().expect("the tool's answer rides along")["vk-observer/answer"].clone()
}

/// One `tasks/get`.
pub async fn get(c: &Client, task_id: &str) -> DetailedTask {
    c.peer()
        .get_task(GetTaskParams::new(task_id))
        .await
        .expect("tasks/get")
        .task
}

/// Polls `tasks/get` until the task reaches `want` (or any end, which must be `want`).
pub async fn until(c: &Client, task_id: &str, want: TaskStatus) -> DetailedTask {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = get(c, task_id).await;
        if t.status() == want {
            return t;
        }
        assert!(
            !t.status().is_terminal(),
            "task ended {:?}, wanted {want:?}: {t:?}",
            t.status()
        );
        assert!(Instant::now() < deadline, "never {want:?}: {t:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The one approval an `input_required` task asks about: its key and message.
pub fn the_approval(t: &DetailedTask) -> (String, String) {
    let TaskPayload::InputRequired { input_requests } = &t.payload else {
        panic!("not input_required: {t:?}");
    };
    assert_eq!(input_requests.len(), 1, "{input_requests:?}");
    let (key, request) = input_requests.iter().next().unwrap();
    let InputRequest::Elicitation(e) = request else {
        panic!("not an elicitation: {request:?}");
    };
    let v = serde_json::to_value(&e.params).unwrap();
    assert_eq!(v["mode"], "form");
    assert_eq!(
        v["requestedSchema"]["properties"]["decision"]["enum"],
        json!(["approve", "deny"])
    );
    (key.clone(), v["message"].as_str().unwrap().to_string())
}

/// `tasks/update` answering the approval under `key` with `response` (an elicitation result).
pub fn respond(task_id: &str, key: &str, response: Value) -> UpdateTaskParams {
    let responses = [(key.to_string(), response)];
    UpdateTaskParams::new(task_id, responses.into_iter().collect())
}

pub fn approve(task_id: &str, key: &str) -> UpdateTaskParams {
    respond(
        task_id,
        key,
        json!({"action": "accept", "content": {"decision": "approve"}}),
    )
}

/// The status answer a completed task carries as its tool result.
pub fn result_status(t: &DetailedTask) -> Value {
    let TaskPayload::Completed { result } = &t.payload else {
        panic!("not completed: {t:?}");
    };
    assert_eq!(result.get("isError"), Some(&json!(false)), "{result:?}");
    result["structuredContent"].clone()
}
