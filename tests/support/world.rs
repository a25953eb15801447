//! The scripted world the MCP read tests share: a project with two repos, a completed attempt
//! with a follow-up and a dev server, a failed one, a task with no attempt, an attempt with no
//! session, and one whose change is over the diff guard; plus helpers to read the truth.
#![allow(dead_code)]

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;
use vk_observer_sim::{AgentOutcome, AttemptScript, SimFile, Truth};

pub fn files(repo: &str, n: usize, lines: u64) -> Vec<SimFile> {
    (0..n)
        .map(|i| SimFile {
            repo: repo.into(),
            path: format!("src/f{i}.rs"),
            change: "added".into(),
            additions: lines,
            deletions: 0,
            content: format!("fn f{i}() {{}}\n"),
        })
        .collect()
}

pub fn instant(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()?
        .parse::<DateTime<Utc>>()
        .ok()
        .map(|t| DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap())
}

pub fn id(v: &Value) -> Uuid {
    v.as_str().unwrap().parse().unwrap()
}

/// Attempts of a task, newest created first, id ascending on ties (the spec's order).
pub fn attempts_of(truth: &Truth, task: Uuid) -> Vec<(Uuid, Value)> {
    let mut v: Vec<(Uuid, Value)> = truth
        .attempts
        .iter()
        .filter(|(_, a)| a["task_id"] == json!(task.to_string()))
        .map(|(k, a)| (*k, a.clone()))
        .collect();
    v.sort_by(|(ia, a), (ib, b)| {
        instant(&b["created_at"])
            .cmp(&instant(&a["created_at"]))
            .then(ia.cmp(ib))
    });
    v
}

pub fn latest_session(truth: &Truth, attempt: Uuid) -> Option<(Uuid, Value)> {
    truth
        .sessions
        .iter()
        .filter(|(_, s)| s["workspace_id"] == json!(attempt.to_string()))
        .max_by_key(|(_, s)| instant(&s["created_at"]))
        .map(|(k, s)| (*k, s.clone()))
}

pub fn uuid_or_null(v: Option<Uuid>) -> Value {
    v.map(|u| json!(u.to_string())).unwrap_or(Value::Null)
}

pub struct World {
    pub project: Uuid,
    pub ok_task: Uuid,
    pub ok_attempt: Uuid,
    pub ok_session: Uuid,
    pub failed_attempt: Uuid,
    pub todo_task: Uuid,
    pub bare_task: Uuid,
    pub bare_attempt: Uuid,
    pub huge_attempt: Uuid,
}

pub async fn build_world(sim: &vk_observer_sim::Sim) -> World {
    let project = sim.add_project("Demo", &["demo", "docs"]);
    let ok_task = sim.add_task(
        project,
        "Add a greeting file",
        Some("Please write a greeting file."),
    );
    let ok = sim
        .run_attempt_script(
            ok_task,
            AttemptScript {
                normalized_entries: 130,
                raw_entries: 40,
                replacements: 5,
                files: [files("demo", 2, 3), files("docs", 1, 1)].concat(),
                dev_server: true,
                ..AttemptScript::default()
            },
        )
        .await;
    sim.follow_up_script(
        ok.session_id,
        "now add a second line",
        AttemptScript {
            normalized_entries: 12,
            replacements: 2,
            ..AttemptScript::default()
        },
    )
    .await;
    let failed_task = sim.add_task(project, "Task that should FAIL", None);
    let failed = sim
        .run_attempt_script(
            failed_task,
            AttemptScript {
                agent: AgentOutcome::Fail,
                ..AttemptScript::default()
            },
        )
        .await;
    let todo_task = sim.add_task(project, "Plain todo, nothing started", None);
    let bare_task = sim.add_task(project, "Attempt without a session", None);
    let bare_attempt = sim.create_bare_attempt(bare_task);
    let huge_task = sim.add_task(project, "Huge refactor", None);
    let huge = sim
        .run_attempt_script(
            huge_task,
            AttemptScript {
                files: files("demo", 600, 2),
                ..AttemptScript::default()
            },
        )
        .await;
    World {
        project,
        ok_task,
        ok_attempt: ok.attempt_id,
        ok_session: ok.session_id,
        failed_attempt: failed.attempt_id,
        todo_task,
        bare_task,
        bare_attempt,
        huge_attempt: huge.attempt_id,
    }
}

pub fn sim_attempt_of(truth: &Truth, pid: Uuid) -> Option<Uuid> {
    let session: Uuid = truth.processes.get(&pid)?["session_id"]
        .as_str()?
        .parse()
        .ok()?;
    truth.sessions.get(&session)?["workspace_id"]
        .as_str()?
        .parse()
        .ok()
}

/// The scripted world served by a daemon, converged, with a connected MCP client.
pub struct Served {
    pub sim: vk_observer_sim::Sim,
    pub dir: tempfile::TempDir,
    pub daemon: vk_observer_daemon::Daemon,
    pub w: World,
    pub truth: Truth,
    pub mcp: super::mcp::Mcp,
}

pub async fn serve_world() -> Served {
    let sim = super::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = super::daemon(&sim, dir.path()).await;
    let w = build_world(&sim).await;
    super::converge(
        &daemon.store,
        &sim,
        std::time::Duration::from_secs(30),
        "scripted world",
    )
    .await;
    let truth = sim.truth();
    let mcp = super::mcp::Mcp::connect(daemon.addr).await;
    Served {
        sim,
        dir,
        daemon,
        w,
        truth,
        mcp,
    }
}
