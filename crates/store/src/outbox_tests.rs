//! The fleet's promises in the store (design-notes §23), on the real writer: a committed batch
//! lands in the outbox in token order with its local meta left out, a batch that changed
//! nothing leaves none, retention drops what the cursor acknowledged and bounds the rest
//! (recording how far it dropped), the events round-trip through their JSON, a host's project
//! list removes only that host's projects, a fleet position rides in the same batch, and a
//! batch of a chain commits only behind its chain's earlier ones.

use serde_json::{Value, json};
use uuid::Uuid;

use super::events::{DomainEvent, FleetPosition};
use super::outbox::{FleetCursor, OutboxConfig};
use super::{Retention, StoreOwner};

fn project(n: u128, host: Option<&str>) -> Value {
    let mut p = json!({"id": Uuid::from_u128(n), "name": format!("p{n}")});
    if let Some(h) = host {
        p["host"] = json!(h);
    }
    p
}

/// One host's whole project list, as a fleet node applies it.
fn snapshot(host: &str, projects: Vec<Value>) -> DomainEvent {
    DomainEvent::HostProjectsSnapshot {
        host: host.into(),
        projects,
    }
}

fn owner_with_outbox(max_backlog: u64) -> StoreOwner {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    owner.enable_outbox(OutboxConfig { max_backlog });
    owner
}

#[test]
fn committed_batches_fill_the_outbox_in_token_order() {
    let mut owner = owner_with_outbox(100);
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    let batch = vec![
        DomainEvent::ProjectsSnapshot {
            projects: vec![project(1, None)],
        },
        DomainEvent::UpstreamSeq { seq: 9 },
    ];
    assert_eq!(w.apply(batch.clone()).unwrap().token, Some(1));
    assert_eq!(w.apply(batch).unwrap().token, None, "nothing changed");
    w.apply(vec![DomainEvent::ProjectsSnapshot {
        projects: vec![project(1, None), project(2, None)],
    }])
    .unwrap();
    let outbox = store.read().outbox_after((0, 0), 10).unwrap();
    assert_eq!(outbox.iter().map(|e| e.token).collect::<Vec<_>>(), [1, 2]);
    let events: Vec<DomainEvent> = serde_json::from_slice(&outbox[0].json).unwrap();
    assert_eq!(events.len(), 1, "local meta is not replicated: {events:?}");
    assert_eq!(events[0].kind(), "projects_snapshot");
    assert_eq!(store.read().outbox_after((1, 0), 10).unwrap().len(), 1);
}

#[test]
fn meta_only_batches_follow_their_token_in_the_outbox() {
    let mut owner = owner_with_outbox(100);
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    w.apply(vec![DomainEvent::ProjectsSnapshot {
        projects: vec![project(1, None)],
    }])
    .unwrap();
    let complete = |n: u128| DomainEvent::LogsComplete {
        process_id: Uuid::from_u128(n),
        channel: super::events::Channel::Raw,
        attempt_id: None,
    };
    let seq = DomainEvent::UpstreamSeq { seq: 3 };
    assert_eq!(w.apply(vec![complete(7), seq.clone()]).unwrap().token, None);
    assert_eq!(w.apply(vec![seq]).unwrap().token, None, "local meta alone");
    w.apply(vec![complete(8)]).unwrap();
    w.apply(vec![DomainEvent::ProjectsSnapshot {
        projects: vec![project(1, None), project(2, None)],
    }])
    .unwrap();
    let at = |after| -> Vec<(u64, u32)> {
        let entries = store.read().outbox_after(after, 10).unwrap();
        entries.iter().map(|e| (e.token, e.meta)).collect()
    };
    assert_eq!(at((0, 0)), [(1, 0), (1, 1), (1, 2), (2, 0)]);
    assert_eq!(at((1, 1)), [(1, 2), (2, 0)]);
    let first: Vec<DomainEvent> =
        serde_json::from_slice(&store.read().outbox_after((1, 0), 1).unwrap()[0].json).unwrap();
    assert_eq!(first.len(), 1, "only what wrote, no local meta: {first:?}");
    assert_eq!(first[0].kind(), "logs_complete");
    assert_eq!(store.read().outbox_last_meta(), (1, 2));
}

#[test]
fn retention_drops_acknowledged_entries_and_bounds_the_backlog() {
    let mut owner = owner_with_outbox(2);
    let store = owner.store();
    let cursor = owner.fleet_cursor();
    let mut w = owner.take_writer().unwrap();
    for n in 1..=5 {
        let projects = (1..=n).map(|i| project(i, None)).collect();
        w.apply(vec![DomainEvent::ProjectsSnapshot { projects }])
            .unwrap();
    }
    cursor
        .set(&FleetCursor {
            token: 1,
            ..FleetCursor::default()
        })
        .unwrap();
    w.prune(chrono::Utc::now()).unwrap();
    let left: Vec<u64> = store
        .read()
        .outbox_after((0, 0), 10)
        .unwrap()
        .into_iter()
        .map(|e| e.token)
        .collect();
    assert_eq!(left, [4, 5], "1 acknowledged, 2 and 3 over the bound");
    assert_eq!(store.read().outbox_dropped(), 3);
}

#[test]
fn a_host_project_list_removes_only_that_hosts_projects() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    w.apply(vec![
        snapshot("a", vec![project(1, Some("a")), project(2, Some("a"))]),
        snapshot("b", vec![project(3, Some("b"))]),
    ])
    .unwrap();
    assert_eq!(store.read().projects().unwrap().len(), 3);
    w.apply(vec![snapshot("a", vec![project(2, Some("a"))])])
        .unwrap();
    let ids: Vec<Uuid> = store
        .read()
        .projects()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, [Uuid::from_u128(2), Uuid::from_u128(3)]);
}

#[test]
fn a_project_two_hosts_list_names_both_and_stays_until_neither_does() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    let hosts_of_shared = |store: &crate::Store| {
        let p = store.read().project(Uuid::from_u128(1)).unwrap();
        p.map(|p| (p.value["host"].clone(), p.value["hosts"].clone()))
    };
    // A row written before `hosts` was kept names its one host.
    w.apply(vec![snapshot("a", vec![project(1, Some("a"))])])
        .unwrap();
    w.apply(vec![snapshot(
        "b",
        vec![project(1, Some("b")), project(2, Some("b"))],
    )])
    .unwrap();
    assert_eq!(
        hosts_of_shared(&store),
        Some((json!("b"), json!(["a", "b"])))
    );
    // The same lists again change nothing.
    let token = store.current_token();
    w.apply(vec![snapshot(
        "b",
        vec![project(1, Some("b")), project(2, Some("b"))],
    )])
    .unwrap();
    assert_eq!(
        store.current_token(),
        token,
        "a repeated list is not a change"
    );
    // b drops it: it stays, named after a, the host that still lists it.
    w.apply(vec![snapshot("b", vec![project(2, Some("b"))])])
        .unwrap();
    assert_eq!(hosts_of_shared(&store), Some((json!("a"), json!(["a"]))));
    assert_eq!(store.read().projects().unwrap().len(), 2);
    // a drops it too: gone; b's other project untouched.
    w.apply(vec![snapshot("a", vec![])]).unwrap();
    assert_eq!(hosts_of_shared(&store), None);
    let ids: Vec<Uuid> = store
        .read()
        .projects()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, [Uuid::from_u128(2)]);
}

#[test]
fn a_fleet_position_is_meta_written_with_its_batch() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    let position = FleetPosition {
        meta: 0,
        stream_created: "then".into(),
        stream_seq: 7,
        epoch: 1,
        token: 5,
    };
    let applied = w
        .apply(vec![DomainEvent::FleetPosition {
            host: "a".into(),
            position: position.clone(),
        }])
        .unwrap();
    assert_eq!(applied.token, None, "a position alone moves no token");
    assert_eq!(
        store.read().fleet_positions().unwrap(),
        [("a".to_string(), position)]
    );
}

#[test]
fn a_host_task_list_removes_only_that_hosts_tasks_of_a_shared_project() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    let p = Uuid::from_u128(1);
    let task = |n: u128, host: &str| json!({"id": Uuid::from_u128(n), "project_id": p, "title": "t", "host": host});
    let snapshot = |host: &str, tasks: Vec<Value>| DomainEvent::HostTasksSnapshot {
        host: host.into(),
        project_id: p,
        tasks,
    };
    w.apply(vec![
        DomainEvent::HostProjectsSnapshot {
            host: "a".into(),
            projects: vec![project(1, Some("a"))],
        },
        snapshot("a", vec![task(10, "a"), task(11, "a")]),
        snapshot("b", vec![task(20, "b")]),
    ])
    .unwrap();
    assert_eq!(store.read().tasks_of_project(p).unwrap().len(), 3);
    w.apply(vec![snapshot("a", vec![task(11, "a")])]).unwrap();
    let ids: Vec<Uuid> = store
        .read()
        .tasks_of_project(p)
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids.len(), 2, "b's task stays: {ids:?}");
    assert!(ids.contains(&Uuid::from_u128(20)) && ids.contains(&Uuid::from_u128(11)));
}

/// A fleet follower queues its groups as one chain, each with the position after its messages:
/// once a batch fails, a later batch of the chain — already queued behind it — must not commit,
/// or its position would pass the failed batch's messages (issue 24's pipelined follower).
#[tokio::test]
async fn a_batch_queued_behind_a_failed_one_of_its_chain_is_refused_unapplied() {
    use super::writer::Chain;
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let (writer, _task) = owner.spawn_writer().unwrap();
    let position = |seq| DomainEvent::FleetPosition {
        host: "a".into(),
        position: FleetPosition {
            stream_seq: seq,
            ..FleetPosition::default()
        },
    };
    let task = |n: u128| DomainEvent::TaskUpserted {
        task: json!({"id": Uuid::from_u128(n), "project_id": Uuid::from_u128(9), "title": "t"}),
    };
    let chain = Chain::default();
    let first = writer
        .queue_chained(vec![task(1), position(1)], &chain)
        .await
        .unwrap();
    // Invalid (a task without an id): the writer refuses the batch.
    let failing = vec![
        DomainEvent::TaskUpserted {
            task: json!({"title": "no id"}),
        },
        position(2),
    ];
    let failed = writer.queue_chained(failing, &chain).await.unwrap();
    let behind = writer
        .queue_chained(vec![task(3), position(3)], &chain)
        .await
        .unwrap();
    let unchained = writer.queue(vec![task(4)]).await.unwrap();
    assert!(first.committed().await.unwrap().token.is_some());
    assert!(failed.committed().await.is_err());
    assert!(
        behind.committed().await.is_err(),
        "a batch behind a failed one of its chain committed"
    );
    assert!(chain.broken());
    assert!(unchained.committed().await.unwrap().token.is_some());
    let positions = store.read().fleet_positions().unwrap();
    assert_eq!(positions.len(), 1);
    assert_eq!(
        positions[0].1.stream_seq, 1,
        "the position passed a failed batch"
    );
    assert!(store.read().task(Uuid::from_u128(3)).unwrap().is_none());
}
