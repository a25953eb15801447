//! The check a limited caller's every read pays before its handler (issue 26): placing the ids
//! it names (`query::owner`: attempt → task → project, a few sled key reads) and, for a
//! tokenless client inside a workspace, finding its attempt (`query::workspaces`, remembered per
//! directory) — against the scan of every cached attempt that finding it costs unremembered.
//! Measured over a cache of 2,000 tasks with one attempt each.
//!
//! Run: `cargo bench --bench read_limits`

use std::path::PathBuf;
use std::sync::Arc;

use divan::Bencher;
use serde_json::{Map, Value, json};
use uuid::Uuid;
use vk_observer_config::access::Scopes;
use vk_observer_mcp::access::{Grant, Limit};
use vk_observer_query::Query;
use vk_observer_store::events::DomainEvent;
use vk_observer_store::{Retention, StoreOwner};
use vk_observer_telemetry::health::Health;

const TASKS: usize = 2_000;

fn main() {
    divan::main();
}

/// A cache of one project with `TASKS` tasks, one attempt each in `/ws/<n>`; the middle one.
struct Cache {
    query: Query,
    project: Uuid,
    attempt: Uuid,
    dir: PathBuf,
    _owner: StoreOwner,
}

fn cache() -> Cache {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let mut writer = owner.take_writer().unwrap();
    let project = Uuid::new_v4();
    let mut events = vec![DomainEvent::ProjectsSnapshot {
        projects: vec![json!({"id": project, "name": "p"})],
    }];
    let mut middle = Uuid::nil();
    let tasks: Vec<(Uuid, Uuid)> = (0..TASKS)
        .map(|_| (Uuid::new_v4(), Uuid::new_v4()))
        .collect();
    events.push(DomainEvent::TasksSnapshot {
        project_id: project,
        tasks: tasks
            .iter()
            .map(|(t, _)| json!({"id": t, "project_id": project, "title": "t", "status": "inprogress"}))
            .collect(),
    });
    for (n, (task, attempt)) in tasks.iter().enumerate() {
        if n == TASKS / 2 {
            middle = *attempt;
        }
        events.push(DomainEvent::AttemptsSnapshot {
            task_id: *task,
            attempts: vec![
                json!({"id": attempt, "task_id": task, "container_ref": format!("/ws/{n}")}),
            ],
        });
    }
    writer.apply(events).unwrap();
    let query = Query::new(owner.store(), Arc::new(Health::default()));
    Cache {
        query,
        project,
        attempt: middle,
        dir: PathBuf::from(format!("/ws/{}/src", TASKS / 2)),
        _owner: owner,
    }
}

fn args(attempt: Uuid) -> Map<String, Value> {
    let Value::Object(m) = json!({"attempt_id": attempt}) else {
        unreachable!()
    };
    m
}

fn grant(limit: Limit) -> Grant {
    Grant {
        caller: "bench".into(),
        scopes: Scopes::all(),
        limit,
    }
}

#[divan::bench(sample_count = 50, sample_size = 100)]
fn project_limited_read_check(bencher: Bencher) {
    let c = cache();
    let (g, a) = (grant(Limit::Projects(vec![c.project])), args(c.attempt));
    bencher.bench_local(|| g.check("get_attempt_status", Some(&a), &c.query).unwrap());
}

#[divan::bench(sample_count = 50, sample_size = 100)]
fn own_attempt_read_check(bencher: Bencher) {
    let c = cache();
    let (g, a) = (grant(Limit::OwnAttempt(c.attempt)), args(c.attempt));
    bencher.bench_local(|| g.check("get_attempt_status", Some(&a), &c.query).unwrap());
}

#[divan::bench(sample_count = 50, sample_size = 100)]
fn workspace_attempt_remembered(bencher: Bencher) {
    let c = cache();
    assert_eq!(c.query.own_attempt_at(&c.dir).unwrap(), Some(c.attempt));
    bencher.bench_local(|| c.query.own_attempt_at(&c.dir).unwrap());
}

#[divan::bench(sample_count = 20, sample_size = 4)]
fn workspace_attempt_scanned(bencher: Bencher) {
    let c = cache();
    bencher.bench_local(|| c.query.attempt_at(&c.dir).unwrap());
}
