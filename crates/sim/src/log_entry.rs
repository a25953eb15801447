//! One stored log entry: VK's JSON value and its bytes, encoded once when the entry is written.
//! A real VK keeps log entries as serialized JSON (its in-memory message store and its DB rows)
//! and streams those bytes; history pages and log WebSocket frames here likewise embed the bytes
//! written at append time instead of serializing the value again for every reader (a 1 M-entry
//! catch-up spent most of the simulator's CPU doing that, issue 27).

use std::ops::Deref;
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

/// A stored entry, shared: a board of millions of identical-looking entries (the scale board's
/// processes all carry the same sequence) holds each distinct entry once.
#[derive(Debug, Clone)]
pub(crate) struct LogEntry(Arc<Encoded>);

#[derive(Debug)]
struct Encoded {
    value: Value,
    /// `serde_json::to_string(&value)`: the bytes serializing `value` would write.
    json: Box<RawValue>,
}

impl LogEntry {
    pub(crate) fn new(value: Value) -> Self {
        let text = serde_json::to_string(&value).unwrap_or_else(|_| "null".into());
        let json = RawValue::from_string(text).unwrap_or_else(|_| null());
        LogEntry(Arc::new(Encoded { value, json }))
    }

    /// The entry's JSON as VK sends it (compact, the value's own key order).
    pub(crate) fn json(&self) -> &RawValue {
        &self.0.json
    }
}

fn null() -> Box<RawValue> {
    RawValue::from_string("null".into()).expect("null is JSON")
}

impl Deref for LogEntry {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0.value
    }
}

impl AsRef<Value> for LogEntry {
    fn as_ref(&self) -> &Value {
        &self.0.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_stored_bytes_are_the_values_serialization() {
        let v = json!({"type": "NORMALIZED_ENTRY", "content": {"z": [1, null, 1.5],
            "a": "quote \" and \u{e9}\n\u{1}", "m": {"y": true, "b": {}}}});
        let e = LogEntry::new(v.clone());
        assert_eq!(e.json().get(), serde_json::to_string(&v).unwrap());
        assert_eq!(*e, v);
    }
}
