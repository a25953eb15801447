//! `store::fleet_clock`: which host's place each local token applied, and another node's
//! places read back in this node's tokens.

use serde_json::json;
use uuid::Uuid;

use super::events::{DomainEvent, FleetPosition};
use super::fleet_clock::{HostMark, MarkCut};
use super::writer::Writer;
use super::{Retention, StoreOwner};

/// One host message as the fleet follower writes it: a changed project, then its position.
fn message(w: &mut Writer, host: &str, created: &str, seq: u64, name: &str) -> Option<u64> {
    let project = json!({"id": Uuid::from_u128(host.len() as u128), "name": name, "host": host});
    w.apply(vec![
        DomainEvent::HostProjectsSnapshot {
            host: host.into(),
            projects: vec![project],
        },
        DomainEvent::FleetPosition {
            host: host.into(),
            position: FleetPosition {
                stream_created: created.into(),
                stream_seq: seq,
                epoch: 1,
                token: seq,
                meta: 0,
            },
        },
    ])
    .unwrap()
    .token
}

fn mark(host: &str, created: &str, seq: u64) -> HostMark {
    HostMark {
        host: host.into(),
        created: created.into(),
        seq,
    }
}

#[test]
fn each_token_names_its_host_and_place_and_places_map_back_to_tokens() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    // Local order: a1, b1, a2, b2 (tokens 1..=4).
    let t_a1 = message(&mut w, "a", "g1", 1, "a1").unwrap();
    let t_b1 = message(&mut w, "bb", "g1", 1, "b1").unwrap();
    let t_a2 = message(&mut w, "a", "g1", 2, "a2").unwrap();
    let t_b2 = message(&mut w, "bb", "g1", 2, "b2").unwrap();
    let r = store.read();
    assert_eq!(r.fleet_host_of(t_b1).unwrap().as_deref(), Some("bb"));
    assert_eq!(r.fleet_host_of(t_a2).unwrap().as_deref(), Some("a"));
    assert_eq!(r.fleet_host_of(99).unwrap(), None);
    let hosts = ["a".to_string(), "bb".to_string()];
    assert_eq!(
        r.fleet_marks_at(t_a2, &hosts).unwrap(),
        [mark("a", "g1", 2), mark("bb", "g1", 1)]
    );
    assert_eq!(
        r.fleet_marks_at(t_a1, &hosts).unwrap(),
        [mark("a", "g1", 1)],
        "a host none of whose messages was applied yet is left out"
    );
    assert_eq!(
        r.fleet_cut_of(&mark("a", "g1", 1)).unwrap(),
        MarkCut::At(t_a1)
    );
    assert_eq!(
        r.fleet_cut_of(&mark("bb", "g1", 7)).unwrap(),
        MarkCut::At(t_b2),
        "a place past what this node applied cuts at its last token (the caller checks behind)"
    );
    assert_eq!(
        r.fleet_cut_of(&mark("bb", "g0", 1)).unwrap(),
        MarkCut::UnknownGeneration
    );
}

#[test]
fn a_place_before_a_generations_first_message_cuts_at_the_generation_before() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    let old = message(&mut w, "a", "g1", 4, "old").unwrap();
    let _new = message(&mut w, "a", "g2", 3, "new").unwrap();
    let r = store.read();
    assert_eq!(
        r.fleet_cut_of(&mark("a", "g2", 1)).unwrap(),
        MarkCut::At(old),
        "the new generation's messages from 3 on are after a place at 1"
    );
    let mut fresh = StoreOwner::open_temporary(Retention::default()).unwrap();
    let fresh_store = fresh.store();
    let mut fw = fresh.take_writer().unwrap();
    message(&mut fw, "a", "g2", 3, "new").unwrap();
    assert_eq!(
        fresh_store
            .read()
            .fleet_cut_of(&mark("a", "g2", 1))
            .unwrap(),
        MarkCut::At(0)
    );
}

#[test]
fn a_position_that_changes_nothing_marks_no_token() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    let t = message(&mut w, "a", "g1", 1, "same").unwrap();
    // The same message again (a duplicate the node did not skip): nothing changes.
    assert_eq!(message(&mut w, "a", "g1", 2, "same"), None);
    let r = store.read();
    assert_eq!(r.fleet_host_of(t + 1).unwrap(), None);
    assert_eq!(
        r.fleet_marks_at(t + 5, &["a".to_string()]).unwrap(),
        [mark("a", "g1", 1)]
    );
}

#[test]
fn pruning_keeps_each_hosts_newest_place_below_the_floor() {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let store = owner.store();
    let mut w = owner.take_writer().unwrap();
    let a1 = message(&mut w, "a", "g1", 1, "a1").unwrap();
    let b1 = message(&mut w, "bb", "g1", 1, "b1").unwrap();
    let a2 = message(&mut w, "a", "g1", 2, "a2").unwrap();
    let a3 = message(&mut w, "a", "g1", 3, "a3").unwrap();
    super::fleet_clock::prune(store.tree(), a3).unwrap();
    let r = store.read();
    assert_eq!(
        r.fleet_host_of(a1).unwrap(),
        None,
        "an older place of a is gone"
    );
    assert_eq!(
        r.fleet_host_of(a2).unwrap().as_deref(),
        Some("a"),
        "a's newest below the floor"
    );
    assert_eq!(r.fleet_host_of(b1).unwrap().as_deref(), Some("bb"));
    assert_eq!(r.fleet_cut_of(&mark("a", "g1", 1)).unwrap(), MarkCut::At(0));
    let hosts = ["a".to_string(), "bb".to_string()];
    assert_eq!(
        r.fleet_marks_at(a3, &hosts).unwrap(),
        [mark("a", "g1", 3), mark("bb", "g1", 1)]
    );
}
