//! The scale board (issue 27): one VK at a hundred times today's size, built directly into the
//! simulated database (no scripted attempts, no timers) and deterministic, so every run measures
//! the same board. A big project (10,000 tasks, 20,000 attempts and their normalized logs), a
//! 1,000-task project beside it and a small project of today's size (98 tasks), all in one world.
//!
//! [`scale_rows`] renders the board as VK's JSON rows without a server (benches feed them to the
//! store writer directly); [`crate::Sim::load_scale`] builds it into a running simulator.

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::core::agent_action;
use super::render;
#[cfg(test)]
use super::types::Channel;
use super::types::{ProcessStatus, RunReason};
use super::util::{WORKTREES, attempt_dir};
use super::world::{LogEntry, ProcLogs, Process, Session, Task, Workspace, World};

/// How big the board is. [`ScaleSpec::default`] is the issue's target size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleSpec {
    /// Tasks of the big project.
    pub tasks: usize,
    /// Attempts of the big project, spread evenly over its tasks (one session, one coding-agent
    /// process each).
    pub attempts: usize,
    /// Tasks of the project beside it (one attempt each).
    pub side_tasks: usize,
    /// Tasks of the small project (today's board), no attempts.
    pub small_tasks: usize,
    /// Normalized log entries, spread evenly over the big project's processes.
    pub entries: u64,
}

impl Default for ScaleSpec {
    fn default() -> Self {
        ScaleSpec {
            tasks: 10_000,
            attempts: 20_000,
            side_tasks: 1_000,
            small_tasks: 98,
            entries: 5_000_000,
        }
    }
}

/// The five VK task statuses, assigned round robin (so each holds a fifth of a project).
pub(crate) const SCALE_STATUSES: [&str; 5] =
    ["todo", "inprogress", "inreview", "done", "cancelled"];

/// The board as VK's JSON rows, grouped the way VK's streams deliver them.
#[derive(Debug, Default)]
pub struct ScaleRows {
    /// The big project, the one beside it, the small one.
    pub project_ids: [Uuid; 3],
    pub projects: Vec<Value>,
    /// project → its repositories.
    pub repos: Vec<(Uuid, Vec<Value>)>,
    /// project → its tasks (`TaskWithAttemptStatus`).
    pub tasks: Vec<(Uuid, Vec<Value>)>,
    /// task → its attempts (VK workspaces).
    pub attempts: Vec<(Uuid, Vec<Value>)>,
    /// attempt → its sessions.
    pub sessions: Vec<(Uuid, Vec<Value>)>,
    /// attempt → its execution processes.
    pub processes: Vec<(Uuid, Vec<Value>)>,
    /// (attempt, process, number of normalized entries); entry `i` is [`scale_entry`]`(i)`.
    pub logs: Vec<(Uuid, Uuid, u64)>,
    /// The big project's tasks in creation order (oldest first); `updated_at` grows with it.
    pub big_tasks: Vec<Uuid>,
    /// The big project's attempts in creation order.
    pub big_attempts: Vec<Uuid>,
}

/// Normalized entry `i` of a scale-board log: a finished tool call, shaped like VK's recorded
/// entries (tests/fixtures/vk-wire/samples/ws_normalized_logs_live.jsonl).
pub fn scale_entry(i: u64) -> String {
    format!(
        r#"{{"type":"NORMALIZED_ENTRY","content":{{"timestamp":null,"entry_type":{{"type":"tool_use","tool_name":"Bash","action_type":{{"action":"command_run","command":"cargo test -- step {i}","result":{{"exit_status":{{"type":"success","success":true}},"output":"test result: ok. 12 passed"}}}},"status":{{"status":"success"}}}},"content":"cargo test -- step {i}"}}}}"#
    )
}

/// The board's rows, built in a fresh world that is dropped afterwards (no logs are held).
pub fn scale_rows(spec: ScaleSpec) -> ScaleRows {
    let mut world = World::default();
    let ids = build(&mut world, spec, false);
    render_rows(&world, ids, spec)
}

/// Builds the board into a simulator's world (logs included) and renders its rows.
pub(crate) fn load(w: &mut World, spec: ScaleSpec) -> ScaleRows {
    let ids = build(w, spec, true);
    render_rows(w, ids, spec)
}

/// Ids the builder hands back, in creation order.
pub(crate) struct Built {
    projects: [Uuid; 3],
    tasks: [Vec<Uuid>; 3],
    attempts: Vec<Uuid>,
}

/// Deterministic ids: kind in the high bits, a counter in the low ones, version 4 bits set.
fn id(kind: u8, n: usize) -> Uuid {
    let raw = (u128::from(kind) << 120) | (n as u128);
    uuid::Builder::from_random_bytes(raw.to_be_bytes()).into_uuid()
}

/// Second `n` after the board's epoch, as VK writes times.
fn ts(n: i64) -> String {
    let base = DateTime::<Utc>::from_timestamp(1_767_225_600, 0).unwrap_or_default(); // 2026-01-01
    (base + Duration::seconds(n)).to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// Builds the board into `w`; with `logs`, the normalized entries too (shared JSON values, see
/// `fill_logs`).
pub(crate) fn build(w: &mut World, spec: ScaleSpec, logs: bool) -> Built {
    let projects = [
        w.add_project("scale-big", &["big-repo"]),
        w.add_project("scale-side", &["side-repo"]),
        w.add_project("scale-small", &["small-repo"]),
    ];
    let counts = [spec.tasks, spec.side_tasks, spec.small_tasks];
    let mut tasks: [Vec<Uuid>; 3] = Default::default();
    let mut n = 0usize;
    for (p, (&project, &count)) in projects.iter().zip(&counts).enumerate() {
        for i in 0..count {
            n += 1;
            let task = add_task(w, project, n, i);
            tasks[p].push(task);
        }
    }
    let mut attempts = Vec::with_capacity(spec.attempts + spec.side_tasks);
    let per_task = spec.attempts.div_ceil(spec.tasks.max(1)).max(1);
    for k in 0..spec.attempts.min(spec.tasks * per_task) {
        let task = tasks[0][k / per_task];
        attempts.push(add_attempt(w, task, attempts.len()));
    }
    let big = attempts.len();
    for &task in &tasks[1] {
        attempts.push(add_attempt(w, task, attempts.len()));
    }
    if logs {
        fill_logs(w, &attempts[..big], spec.entries);
    }
    Built {
        projects,
        tasks,
        attempts,
    }
}

fn add_task(w: &mut World, project: Uuid, n: usize, i: usize) -> Uuid {
    let task = id(1, n);
    let ord = w.next_ord();
    let created = n as i64 * 60;
    w.tasks.insert(
        task,
        Task {
            id: task,
            project_id: project,
            title: format!("Scale task {i}: make step {i} pass"),
            description: Some(format!("Board task number {i}; keeps the build green.")),
            status: SCALE_STATUSES[i % SCALE_STATUSES.len()].to_string(),
            created_at: ts(created),
            updated_at: ts(created + 30),
            ord,
        },
    );
    task
}

/// A workspace with one session and one ended coding-agent process (every 50th failed, every
/// 100th still running).
fn add_attempt(w: &mut World, task: Uuid, k: usize) -> Uuid {
    let (title, repo, task_time) = {
        let t = &w.tasks[&task];
        let repo = w
            .project(t.project_id)
            .and_then(|p| p.repos.first())
            .map(|r| r.id);
        (t.title.clone(), repo, t.ord as i64 * 60)
    };
    let (ws, session, pid) = (id(2, k), id(3, k), id(4, k));
    let at = task_time + 1 + (k % 7) as i64;
    let ord = w.next_ord();
    w.workspaces.insert(
        ws,
        Workspace {
            id: ws,
            task_id: task,
            container_ref: Some(format!("{WORKTREES}/{}", attempt_dir(&ws, &title))),
            branch: format!("vk/{}", attempt_dir(&ws, &title)),
            repos: repo
                .map(|r| vec![(r, "main".to_string())])
                .unwrap_or_default(),
            created_at: ts(at),
            updated_at: ts(at),
            ord,
            archived: false,
            pinned: false,
        },
    );
    let ord = w.next_ord();
    w.sessions.insert(
        session,
        Session {
            id: session,
            workspace_id: ws,
            executor: Some("CLAUDE_CODE".into()),
            agent_session: id(5, k),
            created_at: ts(at),
            updated_at: ts(at),
            ord,
        },
    );
    let status = match k {
        k if k % 100 == 99 => ProcessStatus::Running,
        k if k % 50 == 49 => ProcessStatus::Failed,
        _ => ProcessStatus::Completed,
    };
    let ended = status != ProcessStatus::Running;
    let ord = w.next_ord();
    w.processes.insert(
        pid,
        Process {
            id: pid,
            session_id: session,
            run_reason: RunReason::CodingAgent,
            action: agent_action(&title, "CLAUDE_CODE", None, None, Value::Null),
            status,
            exit_code: ended.then_some(i64::from(status == ProcessStatus::Failed)),
            started_at: ts(at),
            completed_at: ended.then(|| ts(at + 20)),
            created_at: ts(at),
            updated_at: ts(at + 20),
            ord,
        },
    );
    let mut logs = ProcLogs::new();
    logs.finished = ended;
    w.logs.insert(pid, logs);
    ws
}

/// `entries` normalized entries spread over the processes of `attempts`. Every process's log is
/// the same sequence `scale_entry(0..)`, so each distinct entry is built once and shared: 5 M
/// entries cost the simulator 40 MB of pointers, not 5 GB of JSON values.
fn fill_logs(w: &mut World, attempts: &[Uuid], entries: u64) {
    let longest = log_counts(attempts.len(), entries).max().unwrap_or(0);
    let shared: Vec<LogEntry> = (0..longest)
        .map(|i| LogEntry::new(serde_json::from_str(&scale_entry(i)).unwrap_or(Value::Null)))
        .collect();
    for (k, count) in log_counts(attempts.len(), entries).enumerate() {
        let Some(logs) = w.logs.get_mut(&id(4, k)) else {
            continue;
        };
        logs.normalized = shared[..count as usize].to_vec();
    }
}

/// How many entries process `k` of `n` gets so that they sum to `entries`.
fn log_counts(n: usize, entries: u64) -> impl Iterator<Item = u64> {
    let n64 = n.max(1) as u64;
    (0..n as u64).map(move |k| entries / n64 + u64::from(k < entries % n64))
}

fn render_rows(w: &World, b: Built, spec: ScaleSpec) -> ScaleRows {
    let mut rows = ScaleRows {
        project_ids: b.projects,
        big_tasks: b.tasks[0].clone(),
        big_attempts: b.attempts[..spec.attempts.min(b.attempts.len())].to_vec(),
        ..ScaleRows::default()
    };
    for p in &w.projects {
        rows.projects.push(render::project_json(p));
        rows.repos
            .push((p.id, p.repos.iter().map(render::repo_json).collect()));
    }
    for (project, tasks) in b.projects.iter().zip(&b.tasks) {
        let list = tasks.iter().map(|t| task_json(w, *t)).collect();
        rows.tasks.push((*project, list));
    }
    let mut by_task: std::collections::HashMap<Uuid, Vec<Value>> = Default::default();
    for (k, &ws) in b.attempts.iter().enumerate() {
        let task = w.workspaces[&ws].task_id;
        by_task
            .entry(task)
            .or_default()
            .extend(render::workspace_json(w, ws));
        rows.sessions
            .push((ws, render::session_json(w, id(3, k)).into_iter().collect()));
        rows.processes
            .push((ws, vec![render::process_json(&w.processes[&id(4, k)])]));
    }
    rows.attempts = by_task.into_iter().collect();
    let big = rows.big_attempts.len();
    for (k, count) in log_counts(big, spec.entries).enumerate() {
        rows.logs.push((b.attempts[k], id(4, k), count));
    }
    rows
}

/// `TaskWithAttemptStatus` from the board's own facts (the simulator's general renderer walks
/// every process per task, quadratic at this size).
fn task_json(w: &World, task: Uuid) -> Value {
    let t = &w.tasks[&task];
    let mut v = render::task_row_json(t);
    if let Some(o) = v.as_object_mut() {
        o.insert("has_in_progress_attempt".into(), json!(false));
        o.insert("last_attempt_failed".into(), json!(false));
        o.insert("executor".into(), json!("CLAUDE_CODE"));
        o.insert("dispatch_state".into(), Value::Null);
        o.insert("orchestration".into(), Value::Null);
    }
    v
}

/// Channel of every scale-board log (only normalized entries are generated).
#[cfg(test)]
pub(crate) const SCALE_CHANNEL: Channel = Channel::Normalized;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_board_has_the_asked_sizes_and_is_deterministic() {
        let spec = ScaleSpec {
            tasks: 40,
            attempts: 80,
            side_tasks: 10,
            small_tasks: 5,
            entries: 1_001,
        };
        let rows = scale_rows(spec);
        let count = |v: &[(Uuid, Vec<Value>)]| v.iter().map(|(_, l)| l.len()).sum::<usize>();
        assert_eq!(count(&rows.tasks), 55);
        assert_eq!(count(&rows.attempts), 90);
        assert_eq!(count(&rows.processes), 90);
        assert_eq!(rows.logs.iter().map(|l| l.2).sum::<u64>(), 1_001);
        assert_eq!(rows.logs.len(), 80);
        assert_eq!(rows.big_tasks.len(), 40);
        assert_eq!(scale_rows(spec).big_tasks, rows.big_tasks);
        let entry: Value = serde_json::from_str(&scale_entry(7)).unwrap();
        assert_eq!(entry["type"], "NORMALIZED_ENTRY");
    }

    #[test]
    fn a_loaded_board_holds_no_log_channel_until_one_is_watched() {
        let spec = ScaleSpec {
            tasks: 20,
            attempts: 40,
            side_tasks: 5,
            small_tasks: 2,
            entries: 400,
        };
        let mut w = World::default();
        let rows = load(&mut w, spec);
        assert_eq!(w.logs.len(), 45);
        assert!(
            w.logs
                .values()
                .all(|l| !l.has_channel(SCALE_CHANNEL) && !l.has_channel(Channel::Raw))
        );
        let (_, pid, count) = rows.logs[0];
        assert_eq!(w.logs[&pid].entries(SCALE_CHANNEL).len() as u64, count);
        let mut rx = w.logs[&pid].subscribe(SCALE_CHANNEL);
        assert!(w.logs[&pid].has_channel(SCALE_CHANNEL));
        assert!(!w.logs[&pid].has_channel(Channel::Raw));
        w.logs[&pid].publish(SCALE_CHANNEL, super::super::world::LogEvent::Finished);
        assert!(matches!(
            rx.try_recv(),
            Ok(super::super::world::LogEvent::Finished)
        ));
    }
}
