//! Packs: how outbox batches are packed, and how a node finds them in a message again.

use super::*;

fn entry(token: u64, meta: u32, events: usize) -> OutboxEntry {
    let events: Vec<DomainEvent> = (0..events)
        .map(|i| DomainEvent::UpstreamSeq {
            seq: token * 1000 + u64::from(meta) * 100 + i as u64,
        })
        .collect();
    OutboxEntry {
        token,
        meta,
        json: serde_json::to_vec(&events).unwrap(),
    }
}

fn decode(pack: &Pack) -> Vec<DomainEvent> {
    serde_json::from_slice(&pack.json).unwrap()
}

#[test]
fn batches_are_packed_in_order_up_to_the_bounds() {
    let entries: Vec<OutboxEntry> = (1..=5).map(|t| entry(t, 0, t as usize)).collect();
    let limits = Limits {
        batches: 2,
        bytes: usize::MAX,
    };
    let packs = pack(&entries, limits, 10).unwrap();
    let places: Vec<Vec<OutboxAt>> = packs
        .iter()
        .map(|p| p.parts.iter().map(|q| q.at).collect())
        .collect();
    assert_eq!(
        places,
        vec![vec![(1, 0), (2, 0)], vec![(3, 0), (4, 0)], vec![(5, 0)]]
    );
    assert_eq!(packs[1].at(), (4, 0));
    // The payload is the batches' events in order, and the header lists them.
    let events = decode(&packs[1]);
    assert_eq!(events.len(), 7);
    assert_eq!(packs[1].header().as_deref(), Some("3:0:3,4:0:4"));
    assert_eq!(packs[2].header(), None, "a lone batch carries no Vko-Pack");
    // `limit` packs at most: the rest stays in the outbox for the next read.
    assert_eq!(pack(&entries, limits, 1).unwrap().len(), 1);
}

#[test]
fn a_pack_ends_at_its_byte_bound_and_a_large_batch_goes_alone() {
    let entries = vec![
        entry(1, 0, 1),
        entry(2, 0, 40),
        entry(3, 0, 1),
        entry(3, 1, 1),
    ];
    let small = entries[0].json.len();
    let limits = Limits {
        batches: 64,
        bytes: small * 3,
    };
    let packs = pack(&entries, limits, 10).unwrap();
    let counts: Vec<usize> = packs.iter().map(|p| p.parts.len()).collect();
    assert_eq!(
        counts,
        vec![1, 1, 2],
        "the large batch alone, then the two small ones"
    );
    assert_eq!(packs[2].at(), (3, 1));
}

#[test]
fn an_entry_that_is_not_an_array_goes_alone_and_verbatim() {
    let mut entries = vec![entry(1, 0, 1), entry(2, 0, 1), entry(3, 0, 1)];
    entries[1].json = b"not json".to_vec();
    let packs = pack(&entries, Limits::for_server(true, 0), 10).unwrap();
    assert_eq!(packs.len(), 3);
    assert_eq!(packs[1].json, b"not json");
    assert_eq!(packs[1].at(), (2, 0));
}

#[test]
fn packing_off_sends_one_batch_a_message_and_the_server_bounds_the_bytes() {
    assert_eq!(Limits::for_server(false, 0).batches, 1);
    assert_eq!(Limits::for_server(true, 0).bytes, MAX_BYTES);
    assert_eq!(Limits::for_server(true, 65536).bytes, 32768);
}

#[test]
fn a_node_reads_the_batches_back_and_refuses_a_header_that_lies() {
    let entries = vec![entry(4, 0, 2), entry(4, 1, 1), entry(6, 0, 3)];
    let packs = pack(&entries, Limits::for_server(true, 0), 10).unwrap();
    let events = decode(&packs[0]);
    let header = packs[0].header();
    let parts = parts_of(header.as_deref(), (6, 0), &events).unwrap();
    assert_eq!(parts, packs[0].parts);
    // Without the header a message is one batch at its own place.
    assert_eq!(
        parts_of(None, (6, 0), &events).unwrap(),
        vec![Part {
            at: (6, 0),
            events: 6
        }]
    );
    let refused = |h: &str| parts_of(Some(h), (6, 0), &events).unwrap_err();
    assert!(matches!(refused("4:0"), BadPack::Syntax(_)));
    assert!(matches!(refused("4:0:2,x:0:4"), BadPack::Syntax(_)));
    assert_eq!(refused("4:1:2,4:0:1,6:0:3"), BadPack::Order);
    assert_eq!(
        refused("4:0:2,4:1:1,5:0:3"),
        BadPack::Order,
        "must end at the message's place"
    );
    assert_eq!(
        refused("4:0:2,4:1:1,6:0:4"),
        BadPack::Count {
            counted: 7,
            held: 6
        }
    );
}

#[test]
fn a_pack_overlapping_what_was_applied_skips_exactly_those_batches() {
    let parts = [
        Part {
            at: (4, 0),
            events: 2,
        },
        Part {
            at: (4, 1),
            events: 1,
        },
        Part {
            at: (6, 0),
            events: 3,
        },
    ];
    assert_eq!(applied_prefix(&parts, (3, 0)), (0, 0));
    assert_eq!(applied_prefix(&parts, (4, 0)), (1, 2));
    assert_eq!(applied_prefix(&parts, (5, 0)), (2, 3));
    assert_eq!(applied_prefix(&parts, (6, 0)), (3, 6));
}
