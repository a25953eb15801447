//! Token usage and cost through a real MCP client against the simulator, whose coding agent
//! writes Claude Code's stream-json to its raw log (an `init` line, assistant lines with usage,
//! a `result` line with the run's totals, one line split across two chunks): the attempt's sum
//! in `get_attempt_status` at detail 0 (absent when the agent wrote none), the task's in
//! `list_tasks` from detail 1, `get_usage` over a task, a project and attempt ids with its
//! breakdowns and time window, the rows across a daemon restart (a run that ended while the
//! daemon was down included), and the same on VK 0.1.x's dialect.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::{AgentOutcome, AttemptScript, Faults, Sim, sim_run_usage};

fn script(raw_entries: usize, agent: AgentOutcome) -> AttemptScript {
    AttemptScript {
        raw_entries,
        agent,
        ..AttemptScript::default()
    }
}

/// Polls `get_attempt_status` (detail 0) until its `usage` satisfies `done`.
async fn usage_until(mcp: &Mcp, attempt: Uuid, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = mcp
            .call_as_is("get_attempt_status", json!({"attempt_id": attempt}))
            .await
            .ok();
        if let Some(usage) = status.get("usage").filter(|u| done(u)) {
            return usage.clone();
        }
        assert!(Instant::now() < deadline, "usage never came: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn complete(u: &Value) -> bool {
    u["complete"] == true
}

/// The attempt's usage equals these runs' `result` totals (a run of `raw_entries` entries).
fn assert_totals(usage: &Value, runs: &[usize]) {
    let totals: Vec<_> = runs
        .iter()
        .map(|n| sim_run_usage(*n, AgentOutcome::Succeed).unwrap())
        .collect();
    let sum = |f: fn(&vk_observer_sim::SimRunUsage) -> u64| totals.iter().map(f).sum::<u64>();
    assert_eq!(usage["input_tokens"], sum(|t| t.input_tokens), "{usage}");
    assert_eq!(usage["output_tokens"], sum(|t| t.output_tokens), "{usage}");
    assert_eq!(
        usage["cache_creation_input_tokens"],
        sum(|t| t.cache_creation_input_tokens)
    );
    assert_eq!(
        usage["cache_read_input_tokens"],
        sum(|t| t.cache_read_input_tokens)
    );
    assert_eq!(usage["num_turns"], sum(|t| t.num_turns));
    let cost: f64 = totals.iter().map(|t| t.cost_usd).sum();
    let got = usage["cost_usd"].as_f64().unwrap();
    assert!((got - cost).abs() < 1e-9, "cost {got} vs {cost}");
    assert_eq!(usage["models"], json!([vk_observer_sim::SIM_MODEL]));
    assert_eq!(usage["runs"], runs.len());
}

async fn get_usage(mcp: &Mcp, args: Value) -> Value {
    mcp.call_as_is("get_usage", args).await.ok()
}

/// The fork's world: task A (two finished runs), then `between`, task B (a killed run),
/// task C (an agent that wrote no stdout).
struct Runs {
    project: Uuid,
    task_a: Uuid,
    task_c: Uuid,
    a: Uuid,
    b: Uuid,
    c: Uuid,
    between: chrono::DateTime<chrono::Utc>,
}

async fn run_world(sim: &Sim) -> Runs {
    let project = sim.add_project("Costs", &["demo"]);
    let task_a = sim.add_task(project, "Two runs", None);
    let a = sim
        .run_attempt_script(task_a, script(6, AgentOutcome::Succeed))
        .await;
    sim.follow_up_script(a.session_id, "and more", script(9, AgentOutcome::Succeed))
        .await;
    let between = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let task_b = sim.add_task(project, "Stopped run", None);
    let b = sim
        .run_attempt_script(task_b, script(6, AgentOutcome::Killed))
        .await;
    let task_c = sim.add_task(project, "No stdout", None);
    let c = sim
        .run_attempt_script(task_c, script(1, AgentOutcome::Succeed))
        .await;
    Runs {
        project,
        task_a,
        task_c,
        a: a.attempt_id,
        b: b.attempt_id,
        c: c.attempt_id,
        between,
    }
}

/// `get_attempt_status` at detail 0: (A's usage, B's usage).
async fn attempt_sums(mcp: &Mcp, w: &Runs) -> (Value, Value) {
    // The attempt's sum: both runs' result totals.
    let a_usage = usage_until(mcp, w.a, |u| complete(u) && u["runs"] == 2).await;
    assert_totals(&a_usage, &[6, 9]);
    // A killed run wrote no result line: its assistant messages' sum, not complete.
    let b_usage = usage_until(mcp, w.b, |u| u["runs"] == 1).await;
    assert_eq!(b_usage["complete"], false, "{b_usage}");
    assert_eq!(b_usage["output_tokens"], 4 * 40);
    assert!(b_usage.get("cost_usd").is_none(), "{b_usage}");
    // An agent that wrote no usage has none, at any detail: absent, never zeros.
    for detail in [0, 2] {
        let s = mcp
            .call_as_is(
                "get_attempt_status",
                json!({"attempt_id": w.c, "detail": detail}),
            )
            .await
            .ok();
        assert!(s.get("usage").is_none(), "detail {detail}: {s}");
    }
    (a_usage, b_usage)
}

/// `get_usage` over a task, the project (with its breakdowns) and attempt ids.
async fn scope_sums(mcp: &Mcp, w: &Runs, a_usage: &Value) {
    let by_task = get_usage(mcp, json!({"task_id": w.task_a})).await;
    assert_eq!(&by_task["usage"], a_usage);
    assert!(
        by_task.get("attempts").is_none(),
        "from detail 1: {by_task}"
    );
    let by_project = get_usage(mcp, json!({"project_id": w.project, "detail": 1})).await;
    let total = &by_project["usage"];
    assert_eq!(total["runs"], 3);
    assert_eq!(total["complete"], false, "the killed run: {total}");
    let a_output = a_usage["output_tokens"].as_u64().unwrap();
    assert_eq!(total["output_tokens"], a_output + 160);
    assert_eq!(by_project["by_executor"][0]["key"], "CLAUDE_CODE");
    assert_eq!(by_project["by_executor"][0]["runs"], 3);
    assert_eq!(by_project["by_model"][0]["key"], vk_observer_sim::SIM_MODEL);
    assert!(by_project.get("by_host").is_none(), "not a fleet node");
    let attempts = by_project["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "attempts with usage: {by_project}");
    let of_a = attempts.iter().find(|x| x["attempt_id"] == json!(w.a));
    assert_eq!(of_a.unwrap()["sessions"].as_array().unwrap().len(), 1);

    let unknown = Uuid::from_u128(77);
    let ids = json!({"attempt_ids": [w.a, w.c, unknown, w.a]});
    let picked = get_usage(mcp, ids).await;
    // The agent of `c` reported nothing: the same numbers, not complete.
    let mut expected = a_usage.clone();
    expected["complete"] = json!(false);
    assert_eq!(picked["usage"], expected);
    assert_eq!(picked["not_found"], json!([unknown]));
}

/// The window: runs that started in [since, until).
async fn window_sums(mcp: &Mcp, w: &Runs, a_usage: &Value, b_usage: &Value) {
    let between = w.between.to_rfc3339();
    let after = get_usage(mcp, json!({"project_id": w.project, "since": between})).await;
    assert_eq!(
        &after["usage"], b_usage,
        "only the run started after: {after}"
    );
    let before = get_usage(mcp, json!({"project_id": w.project, "until": between})).await;
    assert_eq!(&before["usage"], a_usage);
    let now = chrono::Utc::now().to_rfc3339();
    let none = get_usage(mcp, json!({"project_id": w.project, "since": now})).await;
    assert!(
        none.get("usage").is_none() && none.get("by_model").is_none(),
        "{none}"
    );
}

/// `list_tasks` and `get_task`: the task's sum from detail 1.
async fn task_sums(mcp: &Mcp, w: &Runs, a_usage: &Value) {
    let list = |detail: u8| {
        mcp.call_as_is(
            "list_tasks",
            json!({"project_id": w.project, "detail": detail}),
        )
    };
    let row = |l: &Value, t: Uuid| {
        let tasks = l["tasks"].as_array().unwrap();
        tasks
            .iter()
            .find(|x| x["task_id"] == json!(t))
            .cloned()
            .unwrap()
    };
    let listed = list(1).await.ok();
    assert_eq!(&row(&listed, w.task_a)["usage"], a_usage);
    assert!(row(&listed, w.task_c).get("usage").is_none());
    let compact = list(0).await.ok();
    let a_row = row(&compact, w.task_a);
    assert!(a_row.get("usage").is_none(), "detail 0 leaves it out");
    let task = mcp
        .call_as_is("get_task", json!({"task_id": w.task_a, "detail": 1}))
        .await
        .ok();
    assert_eq!(&task["task"]["usage"], a_usage);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_read_summed_windowed_and_kept_across_a_restart() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let w = run_world(&sim).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "runs").await;

    let (a_usage, b_usage) = attempt_sums(&mcp, &w).await;
    scope_sums(&mcp, &w, &a_usage).await;
    window_sums(&mcp, &w, &a_usage, &b_usage).await;
    task_sums(&mcp, &w, &a_usage).await;

    // A restart keeps the rows; a run that ended while the daemon was down is read from its
    // history.
    daemon.shutdown().await;
    let task_d = sim.add_task(w.project, "While the daemon was down", None);
    let d = sim
        .run_attempt_script(task_d, script(7, AgentOutcome::Fail))
        .await;
    let daemon = support::daemon_reopen(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let converged = Duration::from_secs(30);
    support::converge(&daemon.store, &sim, converged, "after restart").await;
    assert_eq!(usage_until(&mcp, w.a, complete).await, a_usage);
    let d_usage = usage_until(&mcp, d.attempt_id, complete).await;
    assert_eq!(d_usage["output_tokens"], 4 * 40, "a failed run: {d_usage}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_usage_refuses_an_unclear_target_or_window() {
    let sim = support::sim().await;
    let project = sim.add_project("Args", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let task = sim.add_task(project, "t", None);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "task").await;
    let err = |args: Value| {
        let mcp = &mcp;
        async move { mcp.call_as_is("get_usage", args).await.err() }
    };
    let none = err(json!({})).await;
    assert_eq!(none["code"], "invalid_argument");
    assert_eq!(none["details"]["reason"], "ambiguous_target");
    let both = err(json!({"project_id": project, "task_id": task})).await;
    assert_eq!(both["details"]["reason"], "ambiguous_target");
    let bad_time = err(json!({"task_id": task, "since": "yesterday"})).await;
    assert_eq!(bad_time["code"], "invalid_argument");
    let backwards = err(json!({"task_id": task, "since": "2026-01-02T00:00:00Z",
                               "until": "2026-01-01T00:00:00Z"}))
    .await;
    assert_eq!(backwards["code"], "invalid_argument");
    let unknown = err(json!({"task_id": Uuid::from_u128(5)})).await;
    assert_eq!(unknown["code"], "not_found");
    // A task with no run: an answer without `usage`.
    let empty = get_usage(&mcp, json!({"task_id": task})).await;
    assert!(empty.get("usage").is_none(), "{empty}");
    daemon.shutdown().await;
}

/// VK 0.1.x: its log sockets replay from entry 0 and the daemon numbers entries itself; the
/// usage is read the same way, and a daemon restart continues from what the store holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_on_vk_0_1_x_and_across_a_restart() {
    let sim: Sim = support::workspaces::sim().await;
    let project = sim.add_project("Costs", &["alpha"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::workspaces::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    let task = sim.add_task(project, "A run on 0.1.x", None);
    let a = sim
        .run_attempt_script(task, script(8, AgentOutcome::Succeed))
        .await;
    support::workspaces::converge(&daemon.store, &sim, Duration::from_secs(30), "run").await;
    let usage = usage_until(&mcp, a.attempt_id, complete).await;
    assert_totals(&usage, &[8]);
    // The workspace is its own task on 0.1.x.
    let by_task = get_usage(&mcp, json!({"task_id": a.attempt_id})).await;
    assert_eq!(by_task["usage"], usage);

    daemon.shutdown().await;
    sim.follow_up_script(a.session_id, "more", script(6, AgentOutcome::Succeed))
        .await;
    let daemon = support::daemon_reopen(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    support::workspaces::converge(&daemon.store, &sim, Duration::from_secs(30), "restart").await;
    let both = usage_until(&mcp, a.attempt_id, |u| complete(u) && u["runs"] == 2).await;
    assert_totals(&both, &[8, 6]);
    daemon.shutdown().await;
}

/// VK's log cap: VK keeps only the newer half of a log (its history answers
/// `history_truncated`; no live socket). The `result` line is the newest, so the run's totals
/// are still read whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_survives_vk_dropping_the_older_half_of_a_log() {
    let sim = support::sim().await;
    let project = sim.add_project("Capped", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let mcp = Mcp::connect(daemon.addr).await;
    sim.set_faults(Faults {
        skip_history: true,
        refuse_log_ws: true,
        ..Faults::default()
    });
    let run = sim
        .run_attempt_script(
            sim.add_task(project, "capped", None),
            script(40, AgentOutcome::Succeed),
        )
        .await;
    let usage = usage_until(&mcp, run.attempt_id, complete).await;
    assert_totals(&usage, &[40]);
    let raw = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": run.attempt_id, "channel": "raw"}),
        )
        .await
        .ok();
    assert_eq!(
        raw["history_truncated"], true,
        "VK did drop the older half: {raw}"
    );
    daemon.shutdown().await;
}
