//! Task versions and hosts on the real [`Writer`]: a task version older than the stored one
//! (a late tasks snapshot) changes nothing, on a single host and on a fleet node; and on a
//! fleet node a task or attempt id several hosts report keeps every such host in `hosts`, a
//! host that drops it takes only itself off, and it goes once no host reports it.

use serde_json::{Value, json};
use uuid::Uuid;

use super::events::DomainEvent;
use super::feed::{ActivityKind, FeedScope};
use super::writer::Writer;
use super::{Retention, Store, StoreOwner};

const PROJECT: Uuid = Uuid::from_u128(0x7000);
const TASK: Uuid = Uuid::from_u128(0x7001);

fn temporary() -> (Store, Writer) {
    let mut owner = StoreOwner::open_temporary(Retention::default()).expect("store opens");
    let writer = owner.take_writer().expect("the one writer");
    (owner.store(), writer)
}

fn version(status: &str, updated_at: &str) -> Value {
    json!({"id": TASK, "project_id": PROJECT, "title": "t", "status": status,
           "updated_at": updated_at, "has_in_progress_attempt": false})
}

fn task_items(store: &Store) -> Vec<ActivityKind> {
    let read = store.read();
    let (items, _) = read
        .activity_after(FeedScope::Task(TASK), 0, u64::MAX, 100)
        .unwrap();
    items.into_iter().map(|e| e.item.kind).collect()
}

fn stored_task(store: &Store) -> Option<Value> {
    store.read().task(TASK).unwrap().map(|t| t.value)
}

#[test]
fn an_older_task_version_from_a_late_snapshot_changes_nothing() {
    let (store, mut w) = temporary();
    let v1 = version("todo", "2026-11-22T13:08:00.100000000Z");
    let v2 = version("inprogress", "2026-11-22T13:08:00.200000000Z");
    w.apply(vec![DomainEvent::TaskUpserted { task: v1.clone() }])
        .unwrap();
    w.apply(vec![DomainEvent::TaskUpserted { task: v2.clone() }])
        .unwrap();
    let token = store.current_token();
    // A tasks snapshot read before v2 and applied after it: v1 again.
    let late = DomainEvent::TasksSnapshot {
        project_id: PROJECT,
        tasks: vec![v1],
    };
    assert_eq!(w.apply(vec![late]).unwrap().token, None, "no change");
    assert_eq!(store.current_token(), token);
    assert_eq!(stored_task(&store).unwrap()["status"], "inprogress");
    assert_eq!(
        task_items(&store),
        [ActivityKind::TaskCreated, ActivityKind::TaskUpdated],
        "no second task_updated for the old version"
    );
    // The same time with other content (VK's attempt-status fields keep `updated_at`) applies.
    let mut same_time = v2.clone();
    same_time["has_in_progress_attempt"] = json!(true);
    w.apply(vec![DomainEvent::TaskUpserted { task: same_time }])
        .unwrap();
    assert_eq!(
        stored_task(&store).unwrap()["has_in_progress_attempt"],
        true
    );
    // A newer one applies; a version without a time is never older.
    let v3 = version("done", "2026-11-22T13:08:00.300000000Z");
    w.apply(vec![DomainEvent::TaskUpserted { task: v3 }])
        .unwrap();
    assert_eq!(stored_task(&store).unwrap()["status"], "done");
    let mut untimed = version("cancelled", "");
    untimed.as_object_mut().unwrap().remove("updated_at");
    w.apply(vec![DomainEvent::TaskUpserted { task: untimed }])
        .unwrap();
    assert_eq!(stored_task(&store).unwrap()["status"], "cancelled");
}

fn tagged(host: &str, mut v: Value) -> Value {
    v["host"] = json!(host);
    v
}

fn upserted(host: &str, v: Value) -> DomainEvent {
    DomainEvent::HostTaskUpserted {
        host: host.into(),
        task: tagged(host, v),
    }
}

fn hosts(store: &Store) -> Option<(Value, Value)> {
    stored_task(store).map(|t| (t["host"].clone(), t["hosts"].clone()))
}

#[test]
fn a_task_two_hosts_report_names_both_and_goes_only_when_neither_does() {
    let (store, mut w) = temporary();
    let v1 = version("todo", "2026-11-22T13:08:00.100000000Z");
    let projects = |host: &str| DomainEvent::HostProjectsSnapshot {
        host: host.into(),
        projects: vec![tagged(host, json!({"id": PROJECT, "name": "p"}))],
    };
    w.apply(vec![
        projects("a"),
        projects("b"),
        upserted("a", v1.clone()),
    ])
    .unwrap();
    assert_eq!(
        hosts(&store),
        Some((json!("a"), Value::Null)),
        "one host: no hosts"
    );
    // b's copy, unchanged: b joins; the row keeps a's version and name.
    w.apply(vec![upserted("b", v1.clone())]).unwrap();
    assert_eq!(hosts(&store), Some((json!("a"), json!(["a", "b"]))));
    let token = store.current_token();
    w.apply(vec![upserted("a", v1.clone()), upserted("b", v1.clone())])
        .unwrap();
    assert_eq!(store.current_token(), token, "reports again: no change");
    // b changes it: the row shows b's newer version; a's older one, sent late, does not undo it.
    let v2 = version("inprogress", "2026-11-22T13:08:00.200000000Z");
    w.apply(vec![upserted("b", v2)]).unwrap();
    w.apply(vec![DomainEvent::HostTasksSnapshot {
        host: "a".into(),
        project_id: PROJECT,
        tasks: vec![tagged("a", v1)],
    }])
    .unwrap();
    let row = stored_task(&store).unwrap();
    assert_eq!(
        (&row["status"], &row["host"]),
        (&json!("inprogress"), &json!("b"))
    );
    assert_eq!(row["hosts"], json!(["a", "b"]));
    // b's list omits it: only b goes.
    w.apply(vec![DomainEvent::HostTasksSnapshot {
        host: "b".into(),
        project_id: PROJECT,
        tasks: vec![],
    }])
    .unwrap();
    assert_eq!(hosts(&store), Some((json!("a"), Value::Null)));
    // b deleting it again changes nothing; a deleting it removes it.
    let removed = |host: &str| DomainEvent::HostTaskRemoved {
        host: host.into(),
        task_id: TASK,
    };
    assert_eq!(w.apply(vec![removed("b")]).unwrap().token, None);
    w.apply(vec![removed("a")]).unwrap();
    assert_eq!(stored_task(&store), None);
    assert_eq!(task_items(&store).last(), Some(&ActivityKind::TaskDeleted));
}

#[test]
fn an_attempt_two_hosts_report_keeps_both_and_a_hosts_list_drops_only_its_own() {
    let (store, mut w) = temporary();
    let (shared, only_b) = (Uuid::from_u128(0x7101), Uuid::from_u128(0x7102));
    let attempt = |id: Uuid| json!({"id": id, "task_id": TASK, "branch": "vk/x"});
    let list = |host: &str, ids: &[Uuid]| DomainEvent::HostAttemptsSnapshot {
        host: host.into(),
        task_id: TASK,
        attempts: ids.iter().map(|id| tagged(host, attempt(*id))).collect(),
    };
    let v1 = version("todo", "2026-11-22T13:08:00.100000000Z");
    w.apply(vec![upserted("a", v1.clone()), upserted("b", v1)])
        .unwrap();
    w.apply(vec![list("a", &[shared]), list("b", &[shared, only_b])])
        .unwrap();
    let hosts_of = |id: Uuid| {
        store
            .read()
            .attempt(id)
            .unwrap()
            .map(|a| a.value["hosts"].clone())
    };
    assert_eq!(hosts_of(shared), Some(json!(["a", "b"])));
    // a's list again: b's own attempt stays.
    w.apply(vec![list("a", &[shared])]).unwrap();
    assert_eq!(hosts_of(only_b), Some(Value::Null), "b's alone");
    assert_eq!(
        store.read().attempt(only_b).unwrap().unwrap().value["host"],
        "b"
    );
    // b deletes the task: b leaves it and its attempts; b's own attempt goes with it.
    w.apply(vec![DomainEvent::HostTaskRemoved {
        host: "b".into(),
        task_id: TASK,
    }])
    .unwrap();
    assert_eq!(hosts(&store), Some((json!("a"), Value::Null)));
    assert_eq!(hosts_of(shared), Some(Value::Null));
    assert_eq!(hosts_of(only_b), None);
}

#[test]
fn a_host_that_drops_a_shared_project_leaves_its_tasks() {
    let (store, mut w) = temporary();
    let list = |host: &str, listed: bool| DomainEvent::HostProjectsSnapshot {
        host: host.into(),
        projects: if listed {
            vec![tagged(host, json!({"id": PROJECT, "name": "p"}))]
        } else {
            vec![]
        },
    };
    let v1 = version("todo", "2026-11-22T13:08:00.100000000Z");
    w.apply(vec![
        list("a", true),
        list("b", true),
        upserted("a", v1.clone()),
        upserted("b", v1),
    ])
    .unwrap();
    w.apply(vec![list("b", false)]).unwrap();
    assert_eq!(hosts(&store), Some((json!("a"), Value::Null)));
    w.apply(vec![list("a", false)]).unwrap();
    assert_eq!(stored_task(&store), None);
}
