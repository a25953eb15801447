//! Rows that move (VK 0.1.x, issue 38): a task whose project changes leaves the old project's
//! list, and an attempt put under another task leaves the old task's list; in both cases the
//! old one's removal afterwards takes nothing of the moved row along (its sessions, processes
//! and logs stay).

use serde_json::json;
use serde_json::value::to_raw_value;
use uuid::Uuid;

use super::events::{Channel, DomainEvent};
use super::writer::Writer;
use super::{Retention, Store, StoreOwner};

const P1: Uuid = Uuid::from_u128(0x71);
const P2: Uuid = Uuid::from_u128(0x72);
const T1: Uuid = Uuid::from_u128(0x81);
const T2: Uuid = Uuid::from_u128(0x82);
const ATTEMPT: Uuid = Uuid::from_u128(0x91);
const PROCESS: Uuid = Uuid::from_u128(0x92);

fn temporary() -> (Store, Writer) {
    let mut owner = StoreOwner::open_temporary(Retention::default()).expect("store opens");
    let writer = owner.take_writer().expect("the one writer");
    (owner.store(), writer)
}

fn task(id: Uuid, project: Uuid) -> serde_json::Value {
    json!({"id": id, "project_id": project, "title": "t", "status": "todo",
           "updated_at": "2026-11-28T10:00:00Z"})
}

fn attempt_under(task: Uuid) -> DomainEvent {
    DomainEvent::AttemptsSnapshot {
        task_id: task,
        attempts: vec![json!({"id": ATTEMPT, "task_id": task, "branch": "vk/x"})],
    }
}

#[test]
fn a_task_moved_to_another_project_survives_the_old_projects_removal() {
    let (store, mut w) = temporary();
    let projects = |ids: &[Uuid]| DomainEvent::ProjectsSnapshot {
        projects: ids
            .iter()
            .map(|id| json!({"id": id, "name": "p"}))
            .collect(),
    };
    w.apply(vec![
        projects(&[P1]),
        DomainEvent::TaskUpserted { task: task(T1, P1) },
    ])
    .unwrap();
    w.apply(vec![
        DomainEvent::TaskUpserted { task: task(T1, P2) },
        projects(&[P2]),
    ])
    .unwrap();
    let read = store.read();
    assert_eq!(
        read.task(T1).unwrap().unwrap().value["project_id"],
        json!(P2)
    );
    assert!(read.tasks_of_project(P1).unwrap().is_empty());
    assert_eq!(read.tasks_of_project(P2).unwrap().len(), 1);
}

#[test]
fn an_attempt_moved_to_another_task_keeps_its_processes_and_logs() {
    let (store, mut w) = temporary();
    w.apply(vec![
        DomainEvent::TaskUpserted { task: task(T1, P1) },
        DomainEvent::TaskUpserted { task: task(T2, P1) },
        attempt_under(T1),
        DomainEvent::ProcessesSnapshot {
            attempt_id: ATTEMPT,
            processes: vec![json!({"id": PROCESS, "run_reason": "codingagent",
                "status": "completed"})],
        },
        DomainEvent::LogEntriesPut {
            attempt_id: ATTEMPT,
            process_id: PROCESS,
            channel: Channel::Normalized,
            entries: vec![(
                0,
                to_raw_value(&json!({"type": "NORMALIZED_ENTRY"})).unwrap(),
            )],
        },
    ])
    .unwrap();
    // Linked to T2, then T1 (the workspace's own task) goes.
    w.apply(vec![
        attempt_under(T2),
        DomainEvent::TaskRemoved { task_id: T1 },
    ])
    .unwrap();
    let read = store.read();
    let ids = |task| -> Vec<Uuid> {
        read.attempts_of_task(task)
            .unwrap()
            .into_iter()
            .map(|a| a.id)
            .collect()
    };
    assert_eq!(ids(T2), vec![ATTEMPT]);
    assert!(ids(T1).is_empty());
    assert!(read.task(T1).unwrap().is_none());
    assert_eq!(read.processes_of_attempt(ATTEMPT).unwrap().len(), 1);
    assert_eq!(read.log_count(PROCESS, Channel::Normalized), 1);
}
