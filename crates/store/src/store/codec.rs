//! Value encoding of the projection tree: `token (u64 BE) ‖ JSON bytes`.
//!
//! Entities and log entries are stored as the JSON VK sent (so the cache can be compared field by
//! field with VK), prefixed with the token of the batch that last changed them.

use serde_json::Value;

pub fn encode(token: u64, json: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + json.len());
    v.extend_from_slice(&token.to_be_bytes());
    v.extend_from_slice(json);
    v
}

/// Split a stored value into its token and JSON bytes. `None` for a value too short to be ours.
pub fn decode(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let head: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(head), &bytes[8..]))
}

/// Does stored JSON mean the same as `new`? Bytes first (the common, cheap case), then
/// structurally, so a different key order or spacing is not a change.
pub fn same_json(stored: &[u8], new: &[u8]) -> bool {
    if stored == new {
        return true;
    }
    match (
        serde_json::from_slice::<Value>(stored),
        serde_json::from_slice::<Value>(new),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_structural_equality() {
        let v = encode(42, br#"{"a":1,"b":2}"#);
        let (t, j) = decode(&v).unwrap();
        assert_eq!(t, 42);
        assert!(same_json(j, br#"{ "b":2, "a":1 }"#));
        assert!(!same_json(j, br#"{"a":1,"b":3}"#));
        assert!(decode(b"short").is_none());
    }
}
