//! Phase c6 `task_wake` (issue 28), beside c4 `resource_wake`: an attempt started as an MCP task
//! (`start_task_attempt` from a client that declares the tasks extension), its agent blocked on
//! an approval so its process stays running; the session subscribes to the task's resource
//! `vk-observer://tasks/{id}` (the push stand-in for `notifications/tasks`, which rmcp 3.11
//! cannot route). Measured per append: the simulator's `append_log` on the agent's process →
//! the client's `notifications/resources/updated` for the task (the push), and → the task's
//! state in hand (the push, then `tasks/get` answered).

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, SubscribeRequestParams, TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::daemon::DaemonProc;
use crate::data::{note, out_dir};
use crate::opts::Opts;
use crate::report::{Report, ms, stats};
use crate::scenario::ScenarioA;
use crate::session_waits::args;

/// A client that declares the tasks extension and hears resource updates.
struct TaskEars {
    updates: mpsc::UnboundedSender<Instant>,
}

impl rmcp::ClientHandler for TaskEars {
    async fn on_resource_updated(
        &self,
        _params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.updates.send(Instant::now());
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("bench-task-wake", "0"),
        )
    }
}

type Client = RunningService<RoleClient, TaskEars>;

async fn call(c: &Client, tool: &str, a: serde_json::Value) -> anyhow::Result<CallToolResponse> {
    Ok(c.peer()
        .call_tool_once(CallToolRequestParams::new(tool.to_string()).with_arguments(args(a)))
        .await?)
}

/// Starts an asking attempt as a task; returns the task id and the agent's process once the
/// task is `input_required` (the agent waits, its process running).
async fn blocked_task(c: &Client, a: &ScenarioA) -> anyhow::Result<(String, uuid::Uuid)> {
    let project = a.sim.add_project("Bench tasks", &["bench"]);
    let task = a.sim.add_task(project, "Bench task ASK", None);
    let repo = a.sim.project_repo_ids(project)[0];
    let start = json!({"task_id": task, "executor": "CLAUDE_CODE",
        "repos": [{"repo_id": repo, "target_branch": "main"}]});
    let t0 = Instant::now();
    let handle = loop {
        // The task may not be in the cache yet (not_found): retried.
        if let CallToolResponse::Task(h) = call(c, "start_task_attempt", start.clone()).await? {
            break h;
        }
        ensure!(t0.elapsed() < Duration::from_secs(60), "no task handle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let id = handle.task.task_id.clone();
    loop {
        let t = c.peer().get_task(GetTaskParams::new(&id)).await?.task;
        if t.status() == TaskStatus::InputRequired {
            break;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "never input_required"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attempt = &handle.meta.as_ref().context("answer meta")?["vk-observer/answer"]["attempt_id"];
    let CallToolResponse::Complete(s) =
        call(c, "get_attempt_status", json!({"attempt_id": attempt})).await?
    else {
        anyhow::bail!("status is not a task");
    };
    let s = s.structured_content.unwrap_or_default();
    let pid = s["pending_approvals"][0]["execution_process_id"]
        .as_str()
        .context("the agent's process")?
        .parse()?;
    Ok((id, pid))
}

/// c6: `append_log` → the task resource's update, and → `tasks/get` answered after it.
pub(crate) async fn phase_task_wake(r: &mut Report, o: &Opts, a: &ScenarioA) -> anyhow::Result<()> {
    println!(
        "\n== c6. task wake: simulator append_log → task resource update (→ tasks/get), session mode"
    );
    let dir = tempfile::tempdir()?;
    let mut d = DaemonProc::spawn(
        &a.sim.base_url(),
        dir.path(),
        false,
        None,
        &out_dir().join("daemon-c6.log"),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let c = TaskEars { updates: tx }
        .serve(StreamableHttpClientTransport::from_uri(format!(
            "http://{}/mcp",
            d.addr
        )))
        .await
        .context("rmcp client connects")?;
    let (id, pid) = blocked_task(&c, a).await?;
    #[allow(deprecated)]
    c.peer()
        .subscribe(SubscribeRequestParams::new(format!(
            "vk-observer://tasks/{id}"
        )))
        .await?;
    let iters = o.iters(300);
    let (mut push, mut state, mut missed) = (Vec::new(), Vec::new(), 0usize);
    for i in 0..iters + 10 {
        tokio::time::sleep(Duration::from_millis(15)).await;
        while rx.try_recv().is_ok() {}
        let t0 = Instant::now();
        a.sim.append_log(
            pid,
            vk_observer_sim::Channel::Normalized,
            note(5_000_000 + i as u64),
        );
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(t1)) => {
                c.peer().get_task(GetTaskParams::new(&id)).await?;
                if i >= 10 {
                    push.push(t1.saturating_duration_since(t0));
                    state.push(t0.elapsed());
                }
            }
            _ => missed += 1,
        }
    }
    let (p, s) = (stats(&push), stats(&state));
    println!(
        "  {} pushes: p50 {} p99 {}; with tasks/get answered: p50 {} p99 {}; missed {missed}",
        p.n,
        ms(p.p50_us),
        ms(p.p99_us),
        ms(s.p50_us),
        ms(s.p99_us)
    );
    r.row(
        "task wake, append_log → task resource update (push), p99 (p50)",
        format!("{} ({}); {missed} missed", ms(p.p99_us), ms(p.p50_us)),
        "p99 ≤ 10 ms",
        Some(p.p99_us <= 10_000.0 && missed == 0),
    );
    r.row(
        "task wake, append_log → push + tasks/get answered, p99 (p50)",
        format!("{} ({})", ms(s.p99_us), ms(s.p50_us)),
        "p99 ≤ 20 ms",
        Some(s.p99_us <= 20_000.0 && missed == 0),
    );
    r.detail(
        "task_wake",
        json!({"push": p, "push_then_get": s, "missed": missed}),
    );
    let _ = c.cancel().await;
    d.stop().await
}
