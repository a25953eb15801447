//! Group commit (`Writer::apply_group`): batches queued together keep their own atomic batch and
//! token, in order; one that changes nothing consumes none; every token is published once the
//! group returns, and what it wrote survives a reopen.

use serde_json::json;
use uuid::Uuid;

use super::events::DomainEvent;
use super::{Retention, StoreOwner};

const PROJECT: Uuid = Uuid::from_u128(0x9100);

fn new_task(n: u128, title: &str) -> Vec<DomainEvent> {
    let task = json!({ "id": Uuid::from_u128(n), "project_id": PROJECT, "title": title, "status": "todo" });
    vec![DomainEvent::TaskUpserted { task }]
}

#[test]
fn a_group_keeps_each_batch_its_own_token_in_order_and_publishes_them_all() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut owner = StoreOwner::open(dir.path(), Retention::default()).expect("store opens");
        let mut w = owner.take_writer().expect("the one writer");
        let first = w.apply_group(vec![new_task(1, "a")]);
        assert_eq!(first[0].as_ref().unwrap().token, Some(1));
        let results = w.apply_group(vec![
            new_task(2, "b"),
            new_task(1, "a"), // identical re-send: no token
            new_task(3, "c"),
            new_task(1, "a, renamed"),
        ]);
        let tokens: Vec<Option<u64>> = results.iter().map(|r| r.as_ref().unwrap().token).collect();
        assert_eq!(tokens, vec![Some(2), None, Some(3), Some(4)]);
        let store = owner.store();
        assert_eq!(store.current_token(), 4);
        assert_eq!(
            store.hub().current(),
            4,
            "the group's last token is published"
        );
        assert_eq!(
            store
                .read()
                .task(Uuid::from_u128(3))
                .unwrap()
                .unwrap()
                .token,
            3
        );
    }
    // Everything the groups wrote is there after a reopen.
    let owner = StoreOwner::open(dir.path(), Retention::default()).expect("store reopens");
    let read = owner.store().read();
    for n in 1..=3 {
        assert!(read.task(Uuid::from_u128(n)).unwrap().is_some(), "task {n}");
    }
    assert_eq!(read.task(Uuid::from_u128(1)).unwrap().unwrap().token, 4);
}
