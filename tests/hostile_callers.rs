//! Hostile callers: every tool's arguments mutated from its own input schema by a seeded
//! generator — wrong types, nulls, missing and extra fields, huge strings, negative and huge
//! numbers, unknown enum values, traversal paths, random ids — sent through a real MCP client.
//! Each call must come back as a normal answer or the error envelope with a known code (never a
//! protocol error or a dead server), and the store must not move. `VK_HOSTILE_CASES` sets the
//! cases per tool (default 150), `VK_HOSTILE_SEED` the seed (printed on failure).

mod support;

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use support::mcp::{Mcp, Reply};
use uuid::Uuid;
use vk_observer_sim::AttemptScript;

const KNOWN_CODES: &[&str] = &[
    "invalid_argument",
    "not_found",
    "no_session_yet",
    "not_ready",
    "idempotency_conflict",
    "conflict",
    "upstream_unavailable",
    "upstream_error",
    "no_workspace_context",
    "too_many_waiters",
    "in_progress",
];

const MUTATING: &[&str] = &[
    "create_task",
    "update_task",
    "delete_task",
    "start_task_attempt",
    "follow_up",
    "stop_attempt",
];

fn hostile_value(rng: &mut StdRng, schema: &Value, real_ids: &[Uuid], mutating: bool) -> Value {
    let big = |n: usize| Value::String("A".repeat(n));
    match rng.random_range(0..16) {
        0 => Value::Null,
        1 => json!(-1),
        2 => json!(u64::MAX),
        3 => json!(1e300),
        4 => json!(true),
        5 => json!([1, "two", null]),
        6 => json!({"nested": {"deep": [1, 2, 3]}}),
        7 => big(if rng.random_bool(0.2) {
            512 * 1024
        } else {
            4096
        }),
        8 => json!("../../etc/passwd"),
        9 => json!("/etc/shadow"),
        10 => json!(Uuid::new_v4().to_string()),
        11 if !mutating && !real_ids.is_empty() => {
            json!(real_ids[rng.random_range(0..real_ids.len())].to_string())
        }
        12 => json!("not-an-enum-value"),
        13 => json!(""),
        14 => json!([Uuid::new_v4().to_string(), "x"]),
        _ => match schema.get("type").and_then(Value::as_str) {
            Some("integer") => json!(rng.random_range(0..10_000)),
            Some("boolean") => json!(rng.random_bool(0.5)),
            Some("array") => json!([Uuid::new_v4().to_string()]),
            _ => json!("\u{0}\u{202e}🙂 text"),
        },
    }
}

fn hostile_args(rng: &mut StdRng, tool: &str, schema: &Value, real_ids: &[Uuid]) -> Value {
    let mutating = MUTATING.contains(&tool);
    let mut args = Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            if rng.random_bool(0.25) {
                continue; // missing
            }
            args.insert(name.clone(), hostile_value(rng, p, real_ids, mutating));
        }
    }
    if rng.random_bool(0.3) {
        args.insert(
            format!("extra_{}", rng.random_range(0..100)),
            json!("surprise"),
        );
    }
    // One huge string per call at most: two would exceed the 1 MiB body cap, which is tested
    // separately (tests/exposure.rs) and answers 413 before MCP.
    let mut seen_big = false;
    for v in args.values_mut() {
        if v.as_str().is_some_and(|t| t.len() > 100_000) {
            if seen_big {
                *v = Value::String("B".repeat(4096));
            }
            seen_big = true;
        }
    }
    if tool == "wait_for_attempt_change" {
        // Keep parked waits short; the value may still be hostile in type.
        let t = if rng.random_bool(0.5) {
            json!(rng.random_range(1..30))
        } else {
            json!("soon")
        };
        args.insert("timeout_ms".into(), t);
    }
    Value::Object(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_survives_hostile_arguments_without_touching_the_store() {
    let cases: usize = std::env::var("VK_HOSTILE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let seed: u64 = std::env::var("VK_HOSTILE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let sim = support::sim().await;
    let project = sim.add_project("Hostile", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let task = sim.add_task(project, "Target", None);
    let ids = sim.run_attempt_script(task, AttemptScript::default()).await;
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(20),
        "hostile world",
    )
    .await;
    let real_ids = [project, task, ids.attempt_id, ids.session_id];
    let mcp = Mcp::connect(daemon.addr).await;
    let tools = mcp.client.peer().list_all_tools().await.unwrap();
    let token_before = daemon.store.current_token();
    let creations_before = sim.counters();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut answered, mut refused) = (0, 0);
    for t in &tools {
        let schema = Value::Object(t.input_schema.as_ref().clone());
        for case in 0..cases {
            let args = hostile_args(&mut rng, &t.name, &schema, &real_ids);
            let shown: String = args.to_string().chars().take(300).collect();
            match mcp.call(&t.name, args).await {
                Reply::Ok(_) => answered += 1,
                Reply::Err(e) => {
                    refused += 1;
                    let code = e["code"].as_str().unwrap_or("");
                    assert!(
                        KNOWN_CODES.contains(&code),
                        "seed {seed} tool {} case {case}: unknown code {code:?} for {shown}: {e}",
                        t.name
                    );
                    assert!(
                        e.to_string().len() < 4096,
                        "seed {seed} tool {} case {case}: the envelope echoes the input",
                        t.name
                    );
                }
            }
        }
    }
    assert!(
        refused > answered,
        "most hostile calls must be refused ({refused} refused, {answered} answered)"
    );
    // Still alive and unchanged.
    mcp.call("list_projects", json!({})).await.ok();
    assert_eq!(
        daemon.store.current_token(),
        token_before,
        "seed {seed}: hostile calls changed the store"
    );
    let after = sim.counters();
    assert_eq!(
        (
            after.task_creations,
            after.attempt_creations,
            after.follow_ups,
            after.task_updates,
            after.task_deletions
        ),
        (
            creations_before.task_creations,
            creations_before.attempt_creations,
            creations_before.follow_ups,
            creations_before.task_updates,
            creations_before.task_deletions
        ),
        "seed {seed}: a hostile call reached VK as a mutation"
    );
    eprintln!(
        "hostile callers: {} tools × {cases} cases, {answered} answered, {refused} refused (seed {seed})",
        tools.len()
    );
    daemon.shutdown().await;
}
