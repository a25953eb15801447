//! Helpers of the tool-approval tests (`mcp_approvals.rs`, `mcp_approvals_watch.rs`): an
//! attempt whose scripted agent asks before its Bash call, started and followed until it shows
//! that call, and status and `list_approvals` reads through the MCP client.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;
use vk_observer_sim::{ApprovalScript, AttemptIds, AttemptScript, Sim};

use super::mcp::Mcp;

/// The Bash command the scripted agent asks to run.
pub const COMMAND: &str = "rm -rf build && cargo build";

/// A script whose agent asks before its first Bash call, `ask_after` after showing it.
pub fn asking(timeout: Duration, ask_after: Duration) -> AttemptScript {
    AttemptScript {
        approval: Some(ApprovalScript {
            command: COMMAND.into(),
            timeout,
            ask_after: Some(ask_after),
        }),
        ..AttemptScript::default()
    }
}

/// An attempt whose agent is about to ask: the attempt, the agent's process, the script run.
pub struct Blocked {
    pub attempt: Uuid,
    pub process: Uuid,
    pub run: tokio::task::JoinHandle<AttemptIds>,
}

/// Starts the script on a new task and returns once the agent showed its tool call (created).
pub async fn start_asking(sim: &Sim, project: Uuid, title: &str, script: AttemptScript) -> Blocked {
    let task = sim.add_task(project, title, None);
    let run = {
        let sim = sim.clone();
        tokio::spawn(async move { sim.run_attempt_script(task, script).await })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            Instant::now() < deadline,
            "the agent never showed its tool call"
        );
        let truth = sim.truth();
        let attempt = truth
            .attempts
            .iter()
            .find(|(_, a)| a["task_id"] == json!(task.to_string()))
            .map(|(id, _)| *id);
        let of_attempt = |pid: &Uuid| {
            let session = truth.processes[pid]["session_id"]
                .as_str()
                .unwrap_or_default();
            let ws = session
                .parse()
                .ok()
                .and_then(|s: Uuid| truth.sessions.get(&s));
            attempt.is_some_and(|a| ws.is_some_and(|w| w["workspace_id"] == json!(a.to_string())))
        };
        let process = truth.normalized_logs.iter().find_map(|(pid, entries)| {
            let shown = entries
                .iter()
                .any(|e| e.pointer("/content/content") == Some(&json!(COMMAND)));
            (shown && of_attempt(pid)).then_some(*pid)
        });
        if let (Some(attempt), Some(process)) = (attempt, process) {
            return Blocked {
                attempt,
                process,
                run,
            };
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the status until `pred` holds.
pub async fn status_until(
    mcp: &Mcp,
    attempt: Uuid,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // The attempt may not be in the cache yet.
        let s = match mcp
            .call("get_attempt_status", json!({"attempt_id": attempt}))
            .await
        {
            super::mcp::Reply::Ok(s) => s,
            super::mcp::Reply::Err(e) => e,
        };
        if pred(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never {what}: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The approvals `list_approvals` answers for `args`.
pub async fn list(mcp: &Mcp, args: Value) -> Vec<Value> {
    let r = mcp.call("list_approvals", args).await.ok();
    r["approvals"].as_array().unwrap().clone()
}

/// The clock fields of approvals (`age_ms`, `expires_in_ms`): computed at each read, so two
/// reads of the same approval differ in them.
pub const CLOCK_FIELDS: [&str; 2] = ["age_ms", "expires_in_ms"];

/// `v` with every approval's clock fields removed (at any depth), for comparing two reads.
pub fn without_clock(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                CLOCK_FIELDS.iter().for_each(|k| {
                    m.remove(*k);
                });
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}
