//! The approvals index's promises, on the real [`Writer`]: a record appears with the entry's
//! `pending_approval` replace and follows every later replace in the same batch (moving the
//! attempt token), re-sent entries change nothing, removing the process removes its records,
//! the index survives a reopen, and for any sequence of writes the pending set equals the
//! entries whose latest tool status is `pending_approval`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use uuid::Uuid;

use super::approvals::ApprovalState;
use super::events::{Channel, DomainEvent};
use super::writer::Writer;
use super::{Retention, Store, StoreOwner};

const ATTEMPT: Uuid = Uuid::from_u128(0xA);
const PROCESS: Uuid = Uuid::from_u128(0xB);

fn approval_id(n: u128) -> Uuid {
    Uuid::from_u128(0x1000 + n)
}

fn tool(status: Value) -> String {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null, "entry_type": {
        "type": "tool_use", "tool_name": "Bash",
        "action_type": {"action": "command_run", "command": "rm -rf build"},
        "status": status}, "content": "rm -rf build"}})
    .to_string()
}

fn pending(n: u128) -> String {
    tool(
        json!({"status": "pending_approval", "approval_id": approval_id(n).to_string(),
                "requested_at": "2026-11-24T01:00:00Z", "timeout_at": "2026-11-24T02:00:00Z"}),
    )
}

fn put(w: &mut Writer, index: u64, entry: &str) -> Option<u64> {
    let raw = RawValue::from_string(entry.to_string()).expect("json");
    let ev = DomainEvent::LogEntriesPut {
        attempt_id: ATTEMPT,
        process_id: PROCESS,
        channel: Channel::Normalized,
        entries: vec![(index, raw)],
    };
    w.apply(vec![ev]).expect("applies").token
}

fn temporary() -> (Store, Writer) {
    let mut owner = StoreOwner::open_temporary(Retention::default()).expect("opens");
    let w = owner.take_writer().expect("writer");
    (owner.store(), w)
}

fn states(store: &Store) -> Vec<(u64, ApprovalState)> {
    let recs = store.read().approvals_of_attempt(ATTEMPT).unwrap();
    recs.iter().map(|r| (r.entry_index, r.state)).collect()
}

#[test]
fn a_record_follows_its_entry_and_moves_the_attempt_token() {
    let (store, mut w) = temporary();
    put(&mut w, 0, &tool(json!({"status": "created"})));
    assert!(
        states(&store).is_empty(),
        "a created tool_use is not an approval"
    );
    let before = store.read().attempt_token(ATTEMPT).unwrap();

    put(&mut w, 0, &pending(1));
    let after_ask = store.read().attempt_token(ATTEMPT).unwrap();
    assert!(
        after_ask > before,
        "the pending replace moves the attempt token"
    );
    assert_eq!(states(&store), vec![(0, ApprovalState::Pending)]);
    let rec = store
        .read()
        .approval(approval_id(1))
        .unwrap()
        .expect("by id");
    assert_eq!(
        (rec.execution_process_id, rec.summary.as_str()),
        (PROCESS, "rm -rf build")
    );
    assert_eq!(rec.timeout_at.as_deref(), Some("2026-11-24T02:00:00Z"));

    assert_eq!(
        put(&mut w, 0, &pending(1)),
        None,
        "a re-sent entry moves nothing"
    );

    put(
        &mut w,
        0,
        &tool(json!({"status": "denied", "reason": "not now"})),
    );
    assert!(store.read().attempt_token(ATTEMPT).unwrap() > after_ask);
    let rec = store.read().approval(approval_id(1)).unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.reason.as_deref()),
        (ApprovalState::Denied, Some("not now"))
    );
    assert_eq!(rec.requested_at.as_deref(), Some("2026-11-24T01:00:00Z"));
}

#[test]
fn removing_the_process_removes_its_records() {
    let (store, mut w) = temporary();
    put(&mut w, 3, &pending(2));
    let snapshot = DomainEvent::ProcessesSnapshot {
        attempt_id: ATTEMPT,
        processes: vec![],
    };
    let process = json!({"id": PROCESS, "session_id": Uuid::from_u128(5), "status": "running"});
    w.apply(vec![DomainEvent::ProcessUpserted {
        attempt_id: ATTEMPT,
        process,
    }])
    .unwrap();
    w.apply(vec![snapshot]).unwrap();
    assert!(states(&store).is_empty());
    assert_eq!(store.read().approval(approval_id(2)).unwrap(), None);
}

#[test]
fn the_index_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut owner = StoreOwner::open(dir.path(), Retention::default()).expect("opens");
        let mut w = owner.take_writer().unwrap();
        put(&mut w, 1, &pending(3));
        owner.flush().unwrap();
    }
    let owner = StoreOwner::open(dir.path(), Retention::default()).expect("reopens");
    let rec = owner.store().read().approval(approval_id(3)).unwrap();
    assert_eq!(rec.map(|r| r.state), Some(ApprovalState::Pending));
}

#[test]
fn a_store_from_before_the_index_is_indexed_once_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut owner = StoreOwner::open(dir.path(), Retention::default()).expect("opens");
        let mut w = owner.take_writer().unwrap();
        let process = json!({"id": PROCESS, "session_id": Uuid::from_u128(5), "status": "running"});
        w.apply(vec![DomainEvent::ProcessUpserted {
            attempt_id: ATTEMPT,
            process,
        }])
        .unwrap();
        put(&mut w, 2, &pending(4));
        // As an older build left it: the entry stored, no index, no mark.
        let tree = owner.store().tree().clone();
        for table in [
            super::keys::table::APPROVALS,
            super::keys::table::APPROVAL_IDS,
        ] {
            for k in tree.scan_prefix([table]).keys() {
                tree.remove(k.unwrap()).unwrap();
            }
        }
        tree.remove(super::keys::meta_key(b"approvals_indexed"))
            .unwrap();
        owner.flush().unwrap();
    }
    let owner = StoreOwner::open(dir.path(), Retention::default()).expect("reopens");
    let rec = owner.store().read().approval(approval_id(4)).unwrap();
    assert_eq!(
        rec.map(|r| (r.entry_index, r.state)),
        Some((2, ApprovalState::Pending))
    );
}

/// One write of the property test: what lands at an index.
#[derive(Debug, Clone)]
enum Write {
    Ask(u128),
    Answer(&'static str),
    Other,
}

fn write_strategy() -> impl Strategy<Value = (u64, Write)> {
    let w = prop_oneof![
        (0u128..3).prop_map(Write::Ask),
        prop::sample::select(vec!["created", "success", "denied", "timed_out"])
            .prop_map(Write::Answer),
        Just(Write::Other),
    ];
    (0u64..4, w)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn pending_set_equals_entries_whose_latest_status_is_pending(writes in prop::collection::vec(write_strategy(), 1..24)) {
        let (store, mut w) = temporary();
        // Model: index -> (approval, latest state), only once an Ask landed there.
        let mut model: BTreeMap<u64, (u128, ApprovalState)> = BTreeMap::new();
        let mut last_ask: BTreeMap<u128, u64> = BTreeMap::new();
        let mut stored: BTreeMap<u64, String> = BTreeMap::new();
        for (index, write) in &writes {
            let entry = match write {
                Write::Ask(n) => pending(*n),
                Write::Answer(s) => tool(json!({"status": s})),
                Write::Other => json!({"type": "NORMALIZED_ENTRY", "content": {
                    "entry_type": {"type": "assistant_message"}, "content": "hi"}}).to_string(),
            };
            put(&mut w, *index, &entry);
            if stored.insert(*index, entry.clone()).as_ref() == Some(&entry) {
                continue; // re-sent as stored: nothing changes, by the store's first rule
            }
            match write {
                Write::Ask(n) => {
                    model.insert(*index, (*n, ApprovalState::Pending));
                    last_ask.insert(*n, *index);
                }
                Write::Answer(s) => if let Some(m) = model.get_mut(index) {
                    m.1 = match *s {
                        "denied" => ApprovalState::Denied,
                        "timed_out" => ApprovalState::TimedOut,
                        _ => ApprovalState::Approved,
                    };
                },
                Write::Other => {}
            }
        }
        let want: Vec<_> = model.iter().map(|(i, (_, s))| (*i, *s)).collect();
        prop_assert_eq!(states(&store), want);
        // The id index leads to where each id was asked last, while that record is still its.
        for (n, index) in &last_ask {
            let (held_by, state) = model[index];
            if held_by == *n {
                let rec = store.read().approval(approval_id(*n)).unwrap();
                prop_assert_eq!(rec.map(|r| (r.entry_index, r.state)), Some((*index, state)));
            }
        }
    }
}
