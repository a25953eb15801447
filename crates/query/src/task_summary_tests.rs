//! The typed task summary (`task_summary::task_summary`) always equals the summary built from
//! full JSON rows (`task_summary_from_values`, the previous code): for any tasks with any
//! attempts, sessions and processes (unknown run reasons and statuses, dropped flags of any type,
//! missing or equal times, hostile field types), after any sequence of snapshots, upserts and
//! removals. The summary is computed at read time from the rows, so a restart cannot change it.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::Query;
use crate::paging::PageArgs;
use crate::task_summary::{task_summary, task_summary_from_values};
use crate::tasks::TaskFilter;
use vk_observer_store::StoreOwner;
use vk_observer_store::events::DomainEvent;
use vk_observer_telemetry::health::Health;

const PROJECT: Uuid = Uuid::from_u128(0x5_0A4D);
const TASKS: u128 = 3;
const ATTEMPTS: u128 = 4;

fn task_id(n: u128) -> Uuid {
    Uuid::from_u128(0x100 + n % TASKS)
}

fn attempt_id(n: u128) -> Uuid {
    Uuid::from_u128(0x200 + n % ATTEMPTS)
}

/// A time from a small set (equal times happen), or null, or a value of the wrong type.
pub(super) fn time(t: u8) -> Value {
    match t {
        0 => Value::Null,
        1 => json!(17),
        t => json!(format!("2026-02-01T00:00:{:02}Z", t % 4)),
    }
}

pub(super) const REASONS: [&str; 6] = [
    "codingagent",
    "setupscript",
    "cleanupscript",
    "devserver",
    "newkind",
    "",
];
pub(super) const STATUSES: [&str; 6] = ["running", "completed", "failed", "killed", "paused", ""];

pub(super) fn dropped(d: u8) -> Option<Value> {
    match d {
        0 => None,
        1 => Some(json!(true)),
        2 => Some(json!(false)),
        _ => Some(json!("true")),
    }
}

/// One write of the event sequence, drawn from small id spaces so they overlap.
#[derive(Debug, Clone)]
enum Step {
    Attempts(u128, Vec<(u128, u8, Option<bool>)>),
    Sessions(u128, Vec<(u128, u8, bool)>),
    Process(u128, u128, usize, usize, u8, u8),
    ProcessGone(u128, u128),
}

fn step() -> impl Strategy<Value = Step> {
    let attempt = (0u128..8, 0u8..7, proptest::option::of(any::<bool>()));
    prop_oneof![
        (0u128..TASKS, proptest::collection::vec(attempt, 0..3))
            .prop_map(|(t, a)| Step::Attempts(t, a)),
        (
            0u128..ATTEMPTS,
            proptest::collection::vec((0u128..3, 0u8..7, any::<bool>()), 0..3)
        )
            .prop_map(|(a, s)| Step::Sessions(a, s)),
        (
            0u128..ATTEMPTS,
            0u128..6,
            0usize..6,
            0usize..6,
            0u8..7,
            0u8..4
        )
            .prop_map(|(a, p, r, s, t, d)| Step::Process(a, p, r, s, t, d)),
        (0u128..ATTEMPTS, 0u128..6).prop_map(|(a, p)| Step::ProcessGone(a, p)),
    ]
}

fn event(s: &Step) -> DomainEvent {
    match s {
        Step::Attempts(t, attempts) => DomainEvent::AttemptsSnapshot {
            task_id: task_id(*t),
            attempts: attempts
                .iter()
                .map(|(a, created, branch)| {
                    let branch = match branch {
                        Some(true) => json!(format!("vk/{a}")),
                        Some(false) => json!(7),
                        None => Value::Null,
                    };
                    json!({"id": attempt_id(*a), "task_id": task_id(*t), "branch": branch,
                           "created_at": time(*created)})
                })
                .collect(),
        },
        Step::Sessions(a, sessions) => DomainEvent::SessionsSnapshot {
            attempt_id: attempt_id(*a),
            sessions: sessions
                .iter()
                .map(|(s, created, executor)| {
                    json!({"id": Uuid::from_u128(0x300 + *a * 8 + s), "workspace_id": attempt_id(*a),
                           "executor": if *executor { json!("CLAUDE_CODE") } else { Value::Null },
                           "created_at": time(*created)})
                })
                .collect(),
        },
        Step::Process(a, p, reason, status, created, d) => {
            let mut process = json!({"id": Uuid::from_u128(0x400 + *a * 8 + p),
                "run_reason": REASONS[*reason], "status": STATUSES[*status],
                "created_at": time(*created),
                "executor_action": {"typ": {"prompt": "a long prompt ".repeat(8)}}});
            if let Some(d) = dropped(*d) {
                process["dropped"] = d;
            }
            DomainEvent::ProcessUpserted {
                attempt_id: attempt_id(*a),
                process,
            }
        }
        Step::ProcessGone(a, p) => DomainEvent::ProcessRemoved {
            attempt_id: attempt_id(*a),
            process_id: Uuid::from_u128(0x400 + *a * 8 + p),
        },
    }
}

fn board() -> Vec<DomainEvent> {
    let tasks = (0..TASKS)
        .map(|n| {
            json!({"id": task_id(n), "project_id": PROJECT, "title": format!("t{n}"),
                   "description": null, "status": "todo",
                   "created_at": format!("2026-01-01T00:00:0{n}Z"),
                   "updated_at": "2026-01-02T00:00:00Z"})
        })
        .collect();
    vec![
        DomainEvent::ProjectsSnapshot {
            projects: vec![json!({"id": PROJECT, "name": "p"})],
        },
        DomainEvent::TasksSnapshot {
            project_id: PROJECT,
            tasks,
        },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn typed_summary_equals_the_full_json_summary(
        steps in proptest::collection::vec(step(), 0..24),
    ) {
        let mut owner = StoreOwner::open_temporary(Default::default()).unwrap();
        let mut w = owner.take_writer().unwrap();
        w.apply(board()).unwrap();
        let q = Query::new(owner.store(), Arc::new(Health::new()));
        for s in &steps {
            w.apply(vec![event(s)]).unwrap();
            let reader = q.read();
            for n in 0..TASKS {
                let task = reader.task(task_id(n)).unwrap().unwrap();
                let typed = task_summary(&reader, &task).unwrap();
                let full = task_summary_from_values(&reader, &task).unwrap();
                prop_assert_eq!(typed, full, "after {:?}", s);
            }
        }
        // And through the tool's path: the same page either way.
        let args = PageArgs { cursor: None, limit: 50 };
        let f = TaskFilter::default();
        let typed = q.list_tasks_summarized_by(PROJECT, &f, &args, task_summary).unwrap();
        let full = q.list_tasks_summarized_by(PROJECT, &f, &args, task_summary_from_values).unwrap();
        prop_assert_eq!(typed.tasks, full.tasks);
    }
}
