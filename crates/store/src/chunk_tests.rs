use proptest::prelude::*;

use super::*;
use crate::codec::EntryPacker;

const A: &[u8] = br#"{"type":"NORMALIZED_ENTRY","content":{"timestamp":null,"entry_type":{"type":"assistant_message"},"content":"cargo test: ok. 3 passed"}}"#;
const B: &[u8] = br#"{"type":"NORMALIZED_ENTRY","content":{"timestamp":null,"entry_type":{"type":"assistant_message"},"content":"cargo test: ok. 4 passed"}}"#;

/// Two entries at offsets 0 and 5 (a hole between), tokens 7 and 300.
fn sample() -> Chunk {
    let mut c = Chunk::default();
    c.put(5, 300, B);
    c.put(0, 7, A);
    c
}

#[test]
fn a_chunk_round_trips_plain_and_packed() {
    for packed in [false, true] {
        let mut packer = EntryPacker::default();
        let v = sample().encode(packed.then_some(&mut packer));
        assert_eq!(v[0], if packed { ZSTD_VOCABULARY_V1 } else { PLAIN_V1 });
        assert_eq!(Head::count(&v), Some(2));
        let back = Chunk::decode(&v).expect("decodes");
        let got: Vec<_> = back.entries().map(|(o, t, j)| (o, t, j.to_vec())).collect();
        assert_eq!(got, vec![(0, 7, A.to_vec()), (5, 300, B.to_vec())]);
        let head = Head::parse(&v).unwrap();
        assert_eq!(head.slot(5).map(|s| s.token), Some(300));
        assert!(head.slot(1).is_none());
    }
}

#[test]
fn packing_two_similar_entries_beats_the_plain_body() {
    let mut packer = EntryPacker::default();
    let packed = sample().encode(Some(&mut packer));
    let plain = sample().encode(None);
    assert!(
        packed.len() * 2 < plain.len(),
        "{} vs {}",
        packed.len(),
        plain.len()
    );
}

#[test]
fn replacing_and_dropping_rewrite_the_body() {
    let mut c = sample();
    c.put(0, 9, B);
    assert!(c.drop_below(1));
    let back = Chunk::decode(&c.encode(None)).unwrap();
    let got: Vec<_> = back.entries().map(|(o, t, j)| (o, t, j.to_vec())).collect();
    assert_eq!(got, vec![(5, 300, B.to_vec())]);
}

#[test]
fn a_corrupt_or_foreign_value_does_not_decode() {
    let mut packer = EntryPacker::default();
    let mut v = sample().encode(Some(&mut packer));
    let end = v.len() - 3;
    v[end] ^= 0xFF;
    assert!(Chunk::decode(&v).is_none());
    assert!(
        Head::parse(&[0x01, 1, 0, 1, 1]).is_none(),
        "unknown format byte"
    );
    assert!(
        Head::parse(&[PLAIN_V1, 1, 0, 1, 5, b'x']).is_none(),
        "body shorter than said"
    );
    assert!(
        Head::parse(&[PLAIN_V1, 2, 3, 1, 0, 3, 1, 0]).is_none(),
        "offsets not ascending"
    );
    assert!(Head::parse(&[]).is_none());
}

/// `sample().encode(Some(&mut EntryPacker::default()))` of the first build that wrote chunks:
/// it must read forever, so neither the format bytes, the header's layout nor the dictionary
/// may change (a new layout takes a new format byte beside these).
#[test]
fn a_chunk_written_by_the_first_chunked_build_reads_forever() {
    let stored = hex(GOLDEN_PACKED_V1);
    let back = Chunk::decode(&stored).expect("decodes");
    let got: Vec<_> = back.entries().map(|(o, t, j)| (o, t, j.to_vec())).collect();
    assert_eq!(got, vec![(0, 7, A.to_vec()), (5, 300, B.to_vec())]);
    let plain = hex(GOLDEN_PLAIN_V1);
    assert_eq!(Chunk::decode(&plain), Some(back));
}

const GOLDEN_PACKED_V1: &str = concat!(
    "11020007870105ac02870128b52ffd600e00750100b8636172676f20746573743a206f6b2e20332070617373",
    "340700b00954588290510026d0f6e43510016404aa4d20"
);
/// `sample().encode(None)`: format byte, count, `00 07 87 01` (offset 0, token 7, 135 bytes),
/// `05 ac 02 87 01` (offset 5, token 300, 135 bytes), the two JSONs.
const GOLDEN_PLAIN_V1: &str = concat!(
    "10020007870105ac0287017b2274797065223a224e4f524d414c495a45445f454e545259222c22636f6e7465",
    "6e74223a7b2274696d657374616d70223a6e756c6c2c22656e7472795f74797065223a7b2274797065223a22",
    "617373697374616e745f6d657373616765227d2c22636f6e74656e74223a22636172676f20746573743a206f",
    "6b2e203320706173736564227d7d7b2274797065223a224e4f524d414c495a45445f454e545259222c22636f",
    "6e74656e74223a7b2274696d657374616d70223a6e756c6c2c22656e7472795f74797065223a7b2274797065",
    "223a22617373697374616e745f6d657373616765227d2c22636f6e74656e74223a22636172676f2074657374",
    "3a206f6b2e203420706173736564227d7d"
);

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
#[ignore = "prints the golden values; run once when a format is added"]
fn print_golden() {
    let to_hex = |v: Vec<u8>| v.iter().map(|b| format!("{b:02x}")).collect::<String>();
    println!(
        "packed {}",
        to_hex(sample().encode(Some(&mut EntryPacker::default())))
    );
    println!("plain {}", to_hex(sample().encode(None)));
}

proptest! {
    #[test]
    fn any_entries_round_trip(
        entries in proptest::collection::btree_map(0u8..128, (any::<u64>(), ".{0,300}"), 1..40),
        packed in any::<bool>(),
    ) {
        let mut c = Chunk::default();
        for (o, (t, text)) in &entries {
            c.put(*o, *t, text.as_bytes());
        }
        let mut packer = EntryPacker::default();
        let v = c.encode(packed.then_some(&mut packer));
        let back = Chunk::decode(&v).unwrap();
        let got: Vec<_> = back.entries().map(|(o, t, j)| (o, t, j.to_vec())).collect();
        let want: Vec<_> = entries.iter().map(|(o, (t, s))| (*o, *t, s.as_bytes().to_vec())).collect();
        prop_assert_eq!(got, want);
    }
}
