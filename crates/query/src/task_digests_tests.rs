//! The writer's task digests (`store::task_digest`) against the full rows: for any sequence of
//! task upserts and removals, attempt, session and process snapshots, upserts and removals
//! (unknown run reasons and statuses, `dropped` of any type, equal and missing times, fields of
//! the wrong type), with restarts of the store in between, every task's kept summary equals the
//! one computed from its full JSON rows (`task_summary_from_values`, the independent reference),
//! and `list_tasks` — walked page by page through its cursors, with and without `status`, `q`
//! and `updated_since` — lists exactly what a full scan of the project's rows gives.
//! An attempt id belongs to one task only, a session and a process to one attempt (VK never
//! moves them; the digest follows an attempt's own `task_id`).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};
use uuid::Uuid;

use super::task_summary_tests::{REASONS, STATUSES, dropped, time};
use crate::Query;
use crate::paging::PageArgs;
use crate::task_summary::{kept_task_summary, task_summary_from_values};
use crate::tasks::{TaskFilter, TaskStatus, TaskSummary};
use vk_observer_store::StoreReader;
use vk_observer_store::events::DomainEvent;
use vk_observer_store::{Retention, StoreOwner};
use vk_observer_telemetry::health::Health;
use vk_observer_vk::{self as vk, newest_first};

const PROJECT: Uuid = Uuid::from_u128(0x5_0A4E);
const TASKS: u8 = 4;
const TASK_STATUSES: [TaskStatus; 3] = [TaskStatus::Todo, TaskStatus::Inprogress, TaskStatus::Done];

fn task_id(t: u8) -> Uuid {
    Uuid::from_u128(0x100 + t as u128)
}

/// Attempt `k` of task `t` (ids never shared between tasks).
fn attempt_id(t: u8, k: u8) -> Uuid {
    Uuid::from_u128(0x1000 + t as u128 * 16 + k as u128)
}

fn session_id(t: u8, k: u8, s: u8) -> Uuid {
    Uuid::from_u128(0x10_0000 + (t as u128 * 16 + k as u128) * 16 + s as u128)
}

fn process_id(t: u8, k: u8, p: u8) -> Uuid {
    Uuid::from_u128(0x20_0000 + (t as u128 * 16 + k as u128) * 16 + p as u128)
}

#[derive(Debug, Clone)]
enum Step {
    /// Task `t` with a title, status, description, created and updated times.
    Task(u8, u8, u8, bool, u8, u8),
    TaskGone(u8),
    /// Task `t`'s attempts: (k, created, branch).
    Attempts(u8, Vec<(u8, u8, Option<bool>)>),
    /// Attempt (t, k)'s sessions: (s, created, executor).
    Sessions(u8, u8, Vec<(u8, u8, bool)>),
    /// Process p of attempt (t, k): reason, status, created, dropped, an unrelated field.
    Process(u8, u8, u8, usize, usize, u8, u8, u8),
    ProcessGone(u8, u8, u8),
    /// One of task t's stored processes (picked by k and p) re-sent with one field changed: its status (read
    /// by the summary) or its exit code (not read).
    ProcessField(u8, u8, u8, usize, bool),
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    let t = 0u8..TASKS;
    prop_oneof![
        2 => (t.clone(), 0u8..3, 0u8..4, any::<bool>(), 0u8..7, 0u8..7)
            .prop_map(|(t, title, st, d, c, u)| Step::Task(t, title, st, d, c, u)),
        1 => t.clone().prop_map(Step::TaskGone),
        3 => (t.clone(), proptest::collection::vec((0u8..3, 0u8..7, proptest::option::of(any::<bool>())), 0..3))
            .prop_map(|(t, a)| Step::Attempts(t, a)),
        2 => (t.clone(), 0u8..3, proptest::collection::vec((0u8..3, 0u8..7, any::<bool>()), 0..3))
            .prop_map(|(t, k, s)| Step::Sessions(t, k, s)),
        4 => (t.clone(), 0u8..3, 0u8..4, 0usize..6, 0usize..6, 0u8..7, 0u8..4, 0u8..3)
            .prop_map(|(t, k, p, r, s, c, d, x)| Step::Process(t, k, p, r, s, c, d, x)),
        1 => (t.clone(), 0u8..3, 0u8..4).prop_map(|(t, k, p)| Step::ProcessGone(t, k, p)),
        4 => (t, 0u8..3, 0u8..4, 0usize..6, any::<bool>())
            .prop_map(|(t, k, p, s, exit)| Step::ProcessField(t, k, p, s, exit)),
        1 => Just(Step::Restart),
    ]
}

fn task_json(t: u8, title: u8, status: u8, described: bool, created: u8, updated: u8) -> Value {
    let status = ["todo", "inprogress", "done", "someday"][status as usize % 4];
    json!({"id": task_id(t), "project_id": PROJECT, "title": format!("Fix bug {title}"),
           "description": if described { json!(format!("the Parser {t}")) } else { Value::Null },
           "status": status, "created_at": time(created), "updated_at": time(updated)})
}

fn event(s: &Step, reader: &StoreReader) -> Option<DomainEvent> {
    Some(match s {
        Step::ProcessField(t, k, p, status, exit) => {
            // One of the task's stored processes (any attempt), so the step always lands.
            let stored: Vec<_> = (0..3)
                .flat_map(|k| reader.processes_of_attempt(attempt_id(*t, k)).unwrap())
                .collect();
            let pick = stored.get((*k as usize * 4 + *p as usize) % stored.len().max(1))?;
            let attempt = (0..3).map(|k| attempt_id(*t, k)).find(|a| {
                reader
                    .processes_of_attempt(*a)
                    .unwrap()
                    .iter()
                    .any(|x| x.id == pick.id)
            })?;
            let mut process = pick.value.clone();
            if *exit {
                process["exit_code"] = json!(process["exit_code"].as_i64().unwrap_or(0) + 1);
            } else {
                process["status"] = json!(STATUSES[*status]);
            }
            DomainEvent::ProcessUpserted {
                attempt_id: attempt,
                process,
            }
        }
        Step::Task(t, title, st, d, c, u) => DomainEvent::TaskUpserted {
            task: task_json(*t, *title, *st, *d, *c, *u),
        },
        Step::TaskGone(t) => DomainEvent::TaskRemoved {
            task_id: task_id(*t),
        },
        Step::Attempts(t, attempts) => DomainEvent::AttemptsSnapshot {
            task_id: task_id(*t),
            attempts: attempts
                .iter()
                .map(|(k, created, branch)| {
                    let branch = match branch {
                        Some(true) => json!(format!("vk/{k}")),
                        Some(false) => json!(7),
                        None => Value::Null,
                    };
                    json!({"id": attempt_id(*t, *k), "task_id": task_id(*t), "branch": branch,
                           "created_at": time(*created)})
                })
                .collect(),
        },
        Step::Sessions(t, k, sessions) => DomainEvent::SessionsSnapshot {
            attempt_id: attempt_id(*t, *k),
            sessions: sessions
                .iter()
                .map(|(s, created, executor)| {
                    json!({"id": session_id(*t, *k, *s), "workspace_id": attempt_id(*t, *k),
                           "executor": if *executor { json!("CLAUDE_CODE") } else { Value::Null },
                           "created_at": time(*created)})
                })
                .collect(),
        },
        Step::Process(t, k, p, reason, status, created, d, other) => {
            let mut process = json!({"id": process_id(*t, *k, *p),
                "run_reason": REASONS[*reason], "status": STATUSES[*status],
                "created_at": time(*created), "exit_code": other,
                "executor_action": {"typ": {"prompt": "a long prompt ".repeat(8)}}});
            if let Some(d) = dropped(*d) {
                process["dropped"] = d;
            }
            DomainEvent::ProcessUpserted {
                attempt_id: attempt_id(*t, *k),
                process,
            }
        }
        Step::ProcessGone(t, k, p) => DomainEvent::ProcessRemoved {
            attempt_id: attempt_id(*t, *k),
            process_id: process_id(*t, *k, *p),
        },
        Step::Restart => return None,
    })
}

/// What a full scan of the project's rows answers: the matching tasks newest first, each
/// summarized from its full JSON rows.
fn full_scan(q: &Query, filter: &TaskFilter) -> Vec<TaskSummary> {
    let reader = q.read();
    let mut rows: Vec<_> = reader
        .tasks_of_project(PROJECT)
        .unwrap()
        .into_iter()
        .filter(|t| {
            filter
                .status
                .is_none_or(|s| vk::str_of(&t.value, "status") == Some(s.as_str()))
                && filter.updated_since.is_none_or(|since| {
                    vk::ts_of(&t.value, "updated_at").is_some_and(|u| u >= since)
                })
                && filter.q.as_deref().is_none_or(|n| {
                    ["title", "description"].iter().any(|f| {
                        vk::str_of(&t.value, f)
                            .is_some_and(|s| s.to_lowercase().contains(&n.to_lowercase()))
                    })
                })
        })
        .collect();
    rows.sort_by(newest_first);
    rows.iter()
        .map(|t| task_summary_from_values(&reader, t).unwrap())
        .collect()
}

/// Every page of `list_tasks` through its cursors, concatenated; checks `total` and `count`.
fn walk(q: &Query, filter: &TaskFilter, limit: usize) -> Result<Vec<TaskSummary>, TestCaseError> {
    let (mut out, mut cursor) = (Vec::new(), None);
    loop {
        let page = q
            .list_tasks(PROJECT, filter, &PageArgs { cursor, limit })
            .unwrap();
        prop_assert_eq!(page.count, page.tasks.len());
        prop_assert!(page.count <= limit);
        out.extend(page.tasks);
        prop_assert!(out.len() <= page.total);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => {
                prop_assert_eq!(out.len(), page.total, "the walk ended early");
                return Ok(out);
            }
        }
    }
}

fn filters() -> Vec<TaskFilter> {
    let since: DateTime<Utc> = "2026-02-01T00:00:02Z".parse().unwrap();
    let mut out = vec![TaskFilter::default()];
    out.extend(TASK_STATUSES.map(|s| TaskFilter {
        status: Some(s),
        ..TaskFilter::default()
    }));
    for q in ["bug 1", "PARSER", "nothing"] {
        out.push(TaskFilter {
            q: Some(q.into()),
            ..TaskFilter::default()
        });
        out.push(TaskFilter {
            q: Some(q.into()),
            status: Some(TaskStatus::Todo),
            ..TaskFilter::default()
        });
    }
    out.push(TaskFilter {
        updated_since: Some(since),
        ..TaskFilter::default()
    });
    out
}

fn check(q: &Query, limit: usize, after: &Step) -> Result<(), TestCaseError> {
    let reader = q.read();
    for t in 0..TASKS {
        match reader.task(task_id(t)).unwrap() {
            Some(task) => {
                let kept = kept_task_summary(&reader, &task).unwrap();
                let full = task_summary_from_values(&reader, &task).unwrap();
                prop_assert!(reader.task_digest(task_id(t)).unwrap().is_some());
                prop_assert_eq!(kept, full, "task {} after {:?}", t, after);
            }
            None => prop_assert!(reader.task_digest(task_id(t)).unwrap().is_none()),
        }
    }
    for f in filters() {
        prop_assert_eq!(
            walk(q, &f, limit)?,
            full_scan(q, &f),
            "{:?} after {:?}",
            f,
            after
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn kept_digests_equal_the_summary_of_the_full_rows(
        steps in proptest::collection::vec(step(), 1..28),
        limit in 1usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let open = || StoreOwner::open(dir.path(), Retention::default()).unwrap();
        let mut owner = open();
        let mut w = owner.take_writer().unwrap();
        w.apply(vec![DomainEvent::ProjectsSnapshot {
            projects: vec![json!({"id": PROJECT, "name": "p"})],
        }]).unwrap();
        // Every task exists at the start (a step may remove it), each with an attempt.
        for t in 0..TASKS {
            w.apply(vec![
                event(&Step::Task(t, t % 3, t, t % 2 == 0, t + 2, t + 2), &owner.store().read()).unwrap(),
                event(&Step::Attempts(t, vec![(0, 2, Some(true))]), &owner.store().read()).unwrap(),
            ]).unwrap();
        }
        let query = |o: &StoreOwner| Query::new(o.store(), Arc::new(Health::new()));
        let mut q = query(&owner);
        for s in &steps {
            let ev = event(s, &q.read());
            match (s, ev) {
                (_, Some(ev)) => {
                    w.apply(vec![ev]).unwrap();
                }
                (Step::ProcessField(..), None) => {}
                (_, None) => {
                    drop((w, q));
                    drop(owner);
                    owner = open();
                    w = owner.take_writer().unwrap();
                    q = query(&owner);
                }
            }
            check(&q, limit, s)?;
        }
    }
}

/// A process whose status alone changes restates its task's digest.
#[test]
fn a_status_change_alone_restates_the_digest() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let mut w = owner.take_writer().unwrap();
    w.apply(vec![DomainEvent::ProjectsSnapshot {
        projects: vec![json!({"id": PROJECT, "name": "p"})],
    }])
    .unwrap();
    for s in [
        Step::Task(0, 0, 0, false, 2, 2),
        Step::Attempts(0, vec![(0, 2, Some(true))]),
        Step::Process(0, 0, 0, 0, 0, 2, 0, 0),
    ] {
        w.apply(vec![event(&s, &owner.store().read()).unwrap()])
            .unwrap();
    }
    let digest = |o: &StoreOwner| o.store().read().task_digest(task_id(0)).unwrap().unwrap();
    assert!(digest(&owner).facts.has_in_progress_attempt);
    let done = Step::ProcessField(0, 0, 0, 1, false);
    w.apply(vec![event(&done, &owner.store().read()).unwrap()])
        .unwrap();
    assert!(!digest(&owner).facts.has_in_progress_attempt);
}
