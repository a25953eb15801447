//! The writer's read-ahead of a log chunk's stored entries and approval records
//! (`apply/read_ahead.rs`, `Overlay::read_ahead`) changes no outcome: for any sequence of
//! chunks (pages below what is stored, replays, rewrites, the same index twice in a chunk,
//! approvals asked and answered), writing each chunk as one batch leaves the same entries,
//! replaced markers and approval records as writing the same entries one per batch (a chunk of
//! one entry is never read ahead), and a chunk moves a token exactly when one of its entries did.

use proptest::prelude::*;
use serde_json::json;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::events::{Channel, DomainEvent};
use super::writer::Writer;
use super::{Retention, Store, StoreOwner};

const ATTEMPT: Uuid = Uuid::from_u128(0xA);
const PROCESS: Uuid = Uuid::from_u128(0xB);

/// Entry contents an index can take: two texts, the first with another key order (the same
/// entry, other bytes), a tool call asking approval and the same call answered.
fn content(index: u64, variant: u8) -> String {
    let tool = |status: serde_json::Value| {
        json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null, "entry_type": {
            "type": "tool_use", "tool_name": "Bash",
            "action_type": {"action": "command_run", "command": format!("step {index}")},
            "status": status}, "content": format!("step {index}")}})
        .to_string()
    };
    match variant % 5 {
        0 => format!(r#"{{"type":"NORMALIZED_ENTRY","content":"note {index}"}}"#),
        1 => format!(r#"{{"content":"note {index}","type":"NORMALIZED_ENTRY"}}"#),
        2 => format!(r#"{{"type":"NORMALIZED_ENTRY","content":"other {index}"}}"#),
        3 => tool(json!({"status": "pending_approval",
            "approval_id": Uuid::from_u128(0x1000 + u128::from(index)).to_string(),
            "requested_at": "2026-11-24T01:00:00Z", "timeout_at": "2026-11-24T02:00:00Z"})),
        _ => tool(json!({"status": "success"})),
    }
}

fn put(w: &mut Writer, entries: &[(u64, u8)]) -> bool {
    let entries = entries
        .iter()
        .map(|(i, v)| (*i, RawValue::from_string(content(*i, *v)).expect("json")))
        .collect();
    let ev = DomainEvent::LogEntriesPut {
        attempt_id: ATTEMPT,
        process_id: PROCESS,
        channel: Channel::Normalized,
        entries,
    };
    w.apply(vec![ev]).expect("applies").token.is_some()
}

fn temporary() -> (Store, Writer) {
    let mut owner = StoreOwner::open_temporary(Retention::default()).expect("opens");
    let w = owner.take_writer().expect("writer");
    (owner.store(), w)
}

type Outcome = (Vec<(u64, String)>, Vec<(u64, bool)>, Vec<String>);

fn outcome(store: &Store) -> Outcome {
    let read = store.read();
    let ch = Channel::Normalized;
    let entries = read
        .log_range(PROCESS, ch, 0, u64::MAX, usize::MAX)
        .unwrap();
    let mut replaced = read.replaced_since(PROCESS, ch, 0).unwrap();
    replaced.sort();
    let approvals = read.approvals_of_attempt(ATTEMPT).unwrap();
    (
        entries
            .into_iter()
            .map(|e| (e.index, e.entry.get().to_string()))
            .collect(),
        replaced,
        approvals
            .into_iter()
            .map(|r| {
                format!(
                    "{} {} {} {:?}",
                    r.entry_index, r.approval_id, r.summary, r.state
                )
            })
            .collect(),
    )
}

/// A chunk: `len` entries from `start` up, or down (a history page is ascending, pages come
/// newest first), optionally with its first index again at its end.
fn chunk() -> impl Strategy<Value = Vec<(u64, u8)>> {
    (
        0u64..60,
        1usize..40,
        any::<bool>(),
        proptest::collection::vec(0u8..5, 40),
    )
        .prop_map(|(start, len, again, variants)| {
            let mut c: Vec<(u64, u8)> = (0..len).map(|k| (start + k as u64, variants[k])).collect();
            if again {
                c.push((start, variants[len % 40].wrapping_add(1)));
            }
            c
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn chunks_read_ahead_end_as_entries_one_by_one(chunks in proptest::collection::vec(chunk(), 1..8)) {
        let (whole, mut w_whole) = temporary();
        let (single, mut w_single) = temporary();
        for c in &chunks {
            let moved = put(&mut w_whole, c);
            let mut any = false;
            for e in c {
                any |= put(&mut w_single, std::slice::from_ref(e));
            }
            prop_assert_eq!(moved, any, "chunk {:?}", c);
        }
        prop_assert_eq!(outcome(&whole), outcome(&single));
    }
}

#[test]
fn a_page_below_the_stored_max_is_read_ahead_and_fills_its_hole() {
    let (store, mut w) = temporary();
    // The newest page first, then the page below it (a catch-up's history order).
    let top: Vec<(u64, u8)> = (100..200).map(|i| (i, 0)).collect();
    let below: Vec<(u64, u8)> = (0..100).map(|i| (i, if i == 7 { 3 } else { 0 })).collect();
    assert!(put(&mut w, &top));
    assert!(put(&mut w, &below));
    // The same page again moves nothing; the approval at 7 answered does.
    assert!(!put(&mut w, &below));
    assert!(put(&mut w, &[(6, 0), (7, 4), (8, 0)]));
    let (entries, replaced, approvals) = outcome(&store);
    assert_eq!(entries.len(), 200);
    assert_eq!(replaced, vec![(7, true)]);
    assert_eq!(approvals.len(), 1);
    assert!(approvals[0].ends_with("Approved"), "{approvals:?}");
}
