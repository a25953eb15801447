//! The value codec: plain and packed values round trip, every stored value from before packing
//! still reads, the dictionary's bytes are pinned by a value compressed with them.

use proptest::prelude::*;

use super::*;

#[test]
fn round_trip_and_structural_equality() {
    let v = encode(42, br#"{"a":1,"b":2}"#);
    let (t, j) = decode(&v).unwrap();
    assert_eq!(t, 42);
    assert!(same_json(&j, br#"{ "b":2, "a":1 }"#));
    assert!(!same_json(&j, br#"{"a":1,"b":3}"#));
    assert!(decode(b"short").is_none());
}

const ENTRY: &[u8] = br#"{"type":"NORMALIZED_ENTRY","content":{"timestamp":null,"entry_type":{"type":"tool_use","tool_name":"Bash","action_type":{"action":"command_run","command":"cargo test","result":{"exit_status":{"type":"exit_code","code":0},"output":"test result: ok. 3 passed"}},"status":{"status":"success"}},"content":"cargo test"}}"#;

#[test]
fn a_packed_entry_is_smaller_and_reads_back_byte_identical() {
    let mut packer = EntryPacker::default();
    let v = packer.encode(7, ENTRY);
    assert!(is_packed(&v));
    assert!(v.len() * 3 < ENTRY.len(), "{} of {}", v.len(), ENTRY.len());
    let (token, json) = decode(&v).unwrap();
    assert_eq!(token, 7);
    assert!(matches!(json, Cow::Owned(_)));
    assert_eq!(&*json, ENTRY);
}

#[test]
fn short_or_incompressible_json_stays_plain() {
    let mut packer = EntryPacker::default();
    let short = br#"{"a":1}"#;
    assert_eq!(packer.encode(1, short), encode(1, short));
    let noise: String = (0..200u32)
        .map(|i| char::from(b'a' + ((i.wrapping_mul(2654435761) >> 13) % 26) as u8))
        .collect();
    let json = format!(r#"["{noise}"]"#);
    let v = packer.encode(1, json.as_bytes());
    assert!(v.len() <= 8 + json.len());
    assert_eq!(&*decode(&v).unwrap().1, json.as_bytes());
}

#[test]
fn plain_values_of_older_stores_read_borrowed() {
    for json in [&br#"{"type":"STDOUT","content":"x"}"#[..], b"[1,2]", b""] {
        let v = encode(3, json);
        let (t, j) = decode(&v).unwrap();
        assert_eq!((t, &*j), (3, json));
        assert!(matches!(j, Cow::Borrowed(_)));
        assert!(!is_packed(&v));
    }
}

#[test]
fn a_corrupt_packed_body_does_not_decode() {
    let mut v = EntryPacker::default().encode(9, ENTRY);
    let end = v.len() - 3;
    v[end] ^= 0xFF;
    v.truncate(v.len() - 1);
    assert!(decode(&v).is_none());
    let mut head = 9u64.to_be_bytes().to_vec();
    head.extend_from_slice(&[ZSTD_VOCABULARY_V1, 0x28, 0xB5]);
    assert!(decode(&head).is_none());
}

/// A value packed by the first build that packed: it must read forever, so neither the
/// dictionary's bytes nor the marker's meaning may change.
#[test]
fn a_value_packed_with_vocabulary_v1_reads_forever() {
    let stored = hex(GOLDEN_V1);
    assert!(is_packed(&stored));
    assert_eq!(&*decode(&stored).unwrap().1, ENTRY);
}

/// `EntryPacker::encode(7, ENTRY)` of the first build that packed (level 1).
const GOLDEN_V1: &str = concat!(
    "00000000000000070128b52ffd603b00fd0100f0636172676f20746573743074657374203a206f6b2e20",
    "3320706173737d7d0a00163340f082803590133c1d14706c4b3c8b75914856e2040c204fd0620201"
);

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

proptest! {
    #[test]
    fn any_json_string_round_trips(text in ".{0,400}", token in any::<u64>()) {
        let json = serde_json::to_vec(&serde_json::json!({"type": "STDOUT", "content": text}))
            .unwrap();
        let v = EntryPacker::default().encode(token, &json);
        let (t, j) = decode(&v).unwrap();
        prop_assert_eq!(t, token);
        prop_assert_eq!(&*j, &json[..]);
    }
}
