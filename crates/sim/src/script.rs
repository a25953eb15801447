//! Scripted runs: an attempt (setup → coding agent → cleanup), a follow-up on a session and a
//! dev server, writing logs like VK's Claude normalization and the recorded scripts (the
//! agent's raw stdout as Claude stream-json, `agent_stdout`), pausing
//! `step_delay` between steps and stopping as soon as their process is no longer running.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use super::approvals;
use super::core::{Inner, agent_action};
use super::types::{AgentOutcome, AttemptScript, Channel, ProcessStatus, RunReason, SimDialect};
use super::world::World;

fn running(inner: &Inner, pid: Uuid) -> bool {
    inner
        .world()
        .processes
        .get(&pid)
        .is_some_and(|p| p.status == ProcessStatus::Running)
}

fn delay(inner: &Inner, prompt: &str) -> Duration {
    if prompt.contains("SLOW") {
        inner.cfg.step_delay * 5
    } else {
        inner.cfg.step_delay
    }
}

fn normalized(kind: &str, content: &str, extra: Value, metadata: Option<Value>) -> Value {
    let mut entry_type = json!({"type": kind});
    if let (Some(o), Some(e)) = (entry_type.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    let mut c = json!({"timestamp": null, "entry_type": entry_type, "content": content});
    if let (Some(m), Some(o)) = (metadata, c.as_object_mut()) {
        o.insert("metadata".into(), m);
    }
    json!({"type": "NORMALIZED_ENTRY", "content": c})
}

fn assistant(text: &str) -> Value {
    let meta = json!({"type": "text", "text": text});
    normalized("assistant_message", text, json!({}), Some(meta))
}

fn error_message(text: &str) -> Value {
    normalized(
        "error_message",
        text,
        json!({"error_type": {"type": "other"}}),
        None,
    )
}

/// A Bash tool call: created (with the tool metadata), or completed with its result; the
/// completed form carries no metadata, as VK's replacement does.
fn command(step: usize, done: bool) -> Value {
    bash(&format!("echo step {step}"), &format!("step {step}"), done)
}

/// A Bash tool_use entry running `cmd`: `created`, or `success` with `output`.
pub(crate) fn bash(cmd: &str, output: &str, done: bool) -> Value {
    if done {
        let result = json!({"exit_status": {"type": "success", "success": true},
                            "output": output});
        return normalized(
            "tool_use",
            cmd,
            json!({"tool_name": "Bash", "action_type": {"action": "command_run", "command": cmd,
                   "result": result}, "status": {"status": "success"}}),
            None,
        );
    }
    let call_id = format!("toolu_{}", Uuid::new_v4().simple());
    let meta = json!({"type": "tool_use", "id": call_id, "name": "Bash",
                      "input": {"command": cmd, "description": "Run a step"},
                      "tool_call_id": call_id});
    normalized(
        "tool_use",
        cmd,
        json!({"tool_name": "Bash", "action_type": {"action": "command_run", "command": cmd,
               "result": null}, "status": {"status": "created"}}),
        Some(meta),
    )
}

/// The i-th of n normalized entries of an agent run.
fn agent_entry(i: usize, n: usize, prompt: &str, fail: bool) -> Value {
    match i {
        0 => error_message("sim-agent: started\n"),
        1 => normalized(
            "system_message",
            "System initialized with model: sim-agent-1",
            json!({}),
            None,
        ),
        2 => assistant(&format!("Working on: {prompt}")),
        _ if i + 1 == n && fail => error_message("simulated failure"),
        _ if i + 1 == n => assistant("Done. I made the changes."),
        _ => command(i, false),
    }
}

/// Writes the agent's logs, then finishes it as scripted. Returns true when it completed.
/// The k-th tool call writes the k-th scripted file (between the call's entry and its result,
/// as a real tool does); files left over when the calls run out are written at the end.
async fn run_agent(inner: &Inner, ws: Uuid, pid: Uuid, prompt: &str, s: &AttemptScript) -> bool {
    let fail = s.agent != AgentOutcome::Succeed;
    let mut replaced = 0;
    let mut edits = s.files.iter();
    let mut stdout = super::agent_stdout::raw_entries(s.raw_entries, prompt, s.agent).into_iter();
    for i in 0..s.normalized_entries.max(s.raw_entries) {
        tokio::time::sleep(delay(inner, prompt)).await;
        if !running(inner, pid) {
            return false;
        }
        if i < s.normalized_entries
            && i == 3
            && i + 1 < s.normalized_entries
            && let Some(a) = &s.approval
        {
            if !approvals::tool_call_with_approval(inner, pid, a).await {
                return false;
            }
        } else if i < s.normalized_entries {
            let entry = agent_entry(i, s.normalized_entries, prompt, fail);
            let is_cmd = entry.pointer("/content/entry_type/action_type/action")
                == Some(&json!("command_run"));
            let idx = inner.append_log(pid, Channel::Normalized, entry);
            if is_cmd && let Some(f) = edits.next() {
                inner.edit_file(ws, f.clone());
            }
            if let Some(idx) = idx
                && is_cmd
                && replaced < s.replacements
            {
                replaced += 1;
                inner.replace_log(pid, Channel::Normalized, idx, command(i, true));
            }
        }
        if let Some(chunk) = stdout.next() {
            inner.append_log(pid, Channel::Raw, chunk);
        }
    }
    if !s.files.is_empty() {
        inner.set_changes(ws, s.files.clone());
    }
    tokio::time::sleep(inner.cfg.step_delay).await;
    let (status, code) = match s.agent {
        AgentOutcome::Succeed => (ProcessStatus::Completed, Some(0)),
        AgentOutcome::Fail => (ProcessStatus::Failed, Some(1)),
        AgentOutcome::Killed => (ProcessStatus::Killed, None),
    };
    inner.finish_process(pid, status, code) && s.agent == AgentOutcome::Succeed
}

/// Runs a setup or cleanup script process to completion. Returns true when it completed.
async fn run_script(inner: &Inner, session: Uuid, reason: RunReason, action: Value) -> bool {
    let Some(pid) = inner.start_process_with(session, reason, action) else {
        return false;
    };
    script_body(inner, pid, reason).await
}

/// The log lines and the end of a setup or cleanup script already started as `pid`.
async fn script_body(inner: &Inner, pid: Uuid, reason: RunReason) -> bool {
    let name = if reason == RunReason::SetupScript {
        "setup"
    } else {
        "cleanup"
    };
    let lines = [
        ("STDOUT", format!("{name}: starting\n")),
        ("STDOUT", format!("{name}: step 1\n")),
        ("STDERR", format!("{name}: warning on stderr\n")),
        ("STDOUT", format!("{name}: done\n")),
    ];
    for (ty, text) in lines {
        tokio::time::sleep(inner.cfg.step_delay).await;
        if !running(inner, pid) {
            return false;
        }
        inner.append_log(pid, Channel::Raw, json!({"type": ty, "content": text}));
    }
    inner.finish_process(pid, ProcessStatus::Completed, Some(0))
}

fn cleanup_action(inner: &Inner, ws: Uuid, s: &AttemptScript) -> Value {
    if !s.cleanup {
        return Value::Null;
    }
    let dir = inner.world().first_repo_name(ws);
    World::script_action("CleanupScript", dir.as_deref(), Value::Null)
}

/// Setup → agent → cleanup on a fresh attempt, then the dev server and a queued follow-up.
pub(crate) async fn drive_attempt(
    inner: Arc<Inner>,
    ws: Uuid,
    session: Uuid,
    prompt: String,
    s: AttemptScript,
) {
    if s.setup {
        tokio::time::sleep(inner.cfg.step_delay).await;
    }
    if let Some(first) = start_attempt(&inner, ws, session, &prompt, &s) {
        continue_attempt(inner, ws, session, first, prompt, s).await;
    }
}

/// The first process of a new attempt, started now: VK starts it (setup script, else the
/// agent) before it answers `POST /api/task-attempts`.
pub(crate) struct FirstProcess {
    pid: Uuid,
    reason: RunReason,
    agent: Value,
}

/// Starts the attempt's first process (setup script or agent); None when the session is gone.
pub(crate) fn start_attempt(
    inner: &Inner,
    ws: Uuid,
    session: Uuid,
    prompt: &str,
    s: &AttemptScript,
) -> Option<FirstProcess> {
    let agent = agent_action(
        prompt,
        &s.executor,
        None,
        None,
        cleanup_action(inner, ws, s),
    );
    let (reason, action) = if s.setup {
        let dir = inner.world().first_repo_name(ws);
        let setup = World::script_action("SetupScript", dir.as_deref(), agent.clone());
        (RunReason::SetupScript, setup)
    } else {
        (RunReason::CodingAgent, agent.clone())
    };
    let pid = inner.start_process_with(session, reason, action)?;
    Some(FirstProcess { pid, reason, agent })
}

/// The rest of an attempt whose first process `start_attempt` started.
pub(crate) async fn continue_attempt(
    inner: Arc<Inner>,
    ws: Uuid,
    session: Uuid,
    first: FirstProcess,
    prompt: String,
    s: AttemptScript,
) {
    let pid = if first.reason == RunReason::SetupScript {
        if !script_body(&inner, first.pid, first.reason).await {
            return;
        }
        let Some(pid) = inner.start_process_with(session, RunReason::CodingAgent, first.agent)
        else {
            return;
        };
        pid
    } else {
        first.pid
    };
    drive_agent_chain(inner, ws, session, pid, prompt, s).await;
}

/// A follow-up: task back in progress, a new agent process on the session. Returns its id.
pub(crate) fn start_follow_up(
    inner: &Inner,
    session: Uuid,
    prompt: &str,
    variant: Option<&str>,
    s: &AttemptScript,
) -> Option<(Uuid, Uuid)> {
    let (ws, task, agent_session, executor) = {
        let w = inner.world();
        let sess = w.sessions.get(&session)?;
        let task = w.task_of_session(session)?;
        let exec = sess.executor.clone().unwrap_or_else(|| s.executor.clone());
        (sess.workspace_id, task, sess.agent_session, exec)
    };
    inner.update_task(task, None, None, Some("inprogress"));
    let cleanup = cleanup_action(inner, ws, s);
    let action = agent_action(prompt, &executor, variant, Some(agent_session), cleanup);
    let pid = inner.start_process_with(session, RunReason::CodingAgent, action)?;
    Some((ws, pid))
}

/// Agent logs and finish, cleanup after success, dev server, then a queued message if any.
pub(crate) async fn drive_agent_chain(
    inner: Arc<Inner>,
    ws: Uuid,
    session: Uuid,
    pid: Uuid,
    prompt: String,
    s: AttemptScript,
) {
    let mut current = (pid, prompt, s);
    loop {
        let (pid, prompt, s) = current;
        let ok = run_agent(&inner, ws, pid, &prompt, &s).await;
        if ok && s.cleanup {
            let action = cleanup_action(&inner, ws, &s);
            tokio::time::sleep(inner.cfg.step_delay).await;
            run_script(&inner, session, RunReason::CleanupScript, action).await;
        }
        if s.dev_server {
            start_dev_server(&inner, ws);
        }
        let queued = inner.world().queue.remove(&session);
        let Some((msg, _)) = queued else { return };
        // VK 0.1.x runs a queued message only after a successful run (it is discarded after a
        // failed or killed one), and its repos have no cleanup script.
        let workspaces = inner.cfg.dialect == SimDialect::Workspaces;
        if workspaces && !ok {
            return;
        }
        let text = msg
            .pointer("/data/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        let variant = msg
            .pointer("/data/variant")
            .or_else(|| msg.pointer("/data/executor_config/variant"))
            .and_then(Value::as_str);
        let next = AttemptScript {
            dev_server: false,
            files: Vec::new(),
            cleanup: !workspaces,
            ..AttemptScript::default()
        };
        let Some((_, next_pid)) = start_follow_up(&inner, session, text, variant, &next) else {
            return;
        };
        current = (next_pid, text.to_string(), next);
    }
}

/// Starts a dev server on the attempt's latest session; it ticks until stopped.
pub(crate) fn start_dev_server(inner: &Arc<Inner>, ws: Uuid) -> Option<Uuid> {
    let session = *inner.world().sessions_of(ws).first()?;
    let action = inner.default_action(session, RunReason::DevServer);
    let pid = inner.start_process_with(session, RunReason::DevServer, action)?;
    let inner = inner.clone();
    tokio::spawn(async move {
        inner.append_log(
            pid,
            Channel::Raw,
            json!({"type": "STDOUT", "content": "dev: server starting\n"}),
        );
        for tick in 1..=50 {
            tokio::time::sleep(inner.cfg.step_delay * 5).await;
            if !running(&inner, pid) {
                return;
            }
            let text = format!("dev: tick {tick}\n");
            inner.append_log(
                pid,
                Channel::Raw,
                json!({"type": "STDOUT", "content": text}),
            );
        }
    });
    Some(pid)
}
