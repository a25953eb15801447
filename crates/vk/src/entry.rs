//! VK's normalized log entries, the one fact several layers ask of them: whether a rewrite in
//! place kept the tool call it rewrote. VK replaces a `tool_use` entry when the call gets its
//! result (status, exit status, output: recorded in `ws_normalized_logs_live.jsonl`), but some
//! executors also rewrite what the call is (an ACP tool-call update can bring its path or
//! title later). The store marks each replacement with the answer, so a log tail can send a
//! client that holds the entry just the outcome, and the whole entry when the call changed.

use serde_json::Value;

/// True when `new` rewrites the same tool call as `old`: both are normalized `tool_use` entries
/// with the same tool name, the same action once its `result` is set aside, and the same text.
/// Anything else (another kind, unparsable JSON, a changed command or path) is false.
pub fn same_tool_call(old: &[u8], new: &[u8]) -> bool {
    // Most rewrites are of streamed messages (their text grows): not parsed at all.
    let tag = br#""tool_use""#;
    if memchr::memmem::find(new, tag).is_none() || memchr::memmem::find(old, tag).is_none() {
        return false;
    }
    let (Ok(old), Ok(new)) = (
        serde_json::from_slice::<Value>(old),
        serde_json::from_slice::<Value>(new),
    ) else {
        return false;
    };
    match (call_identity(&old), call_identity(&new)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// What names a tool call in a normalized entry: (tool name, action without its result, text).
fn call_identity(entry: &Value) -> Option<(&Value, Value, &Value)> {
    let content = entry.get("content")?;
    let et = content.get("entry_type")?;
    if et.get("type")?.as_str()? != "tool_use" {
        return None;
    }
    let mut action = et.get("action_type")?.clone();
    if let Value::Object(m) = &mut action {
        m.remove("result");
    }
    Some((
        et.get("tool_name").unwrap_or(&Value::Null),
        action,
        content.get("content").unwrap_or(&Value::Null),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bytes(v: &Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    /// The recorded Bash call (ws_normalized_logs_live.jsonl): created with metadata and no
    /// result, replaced with its result and no metadata.
    #[test]
    fn a_recorded_result_keeps_the_call() {
        let mut frames = Vec::new();
        for line in
            include_str!("../../../tests/fixtures/vk-wire/samples/ws_normalized_logs_live.jsonl")
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let f: Value = serde_json::from_str(line).unwrap();
            if f["data"]["entry_index"] == 4 {
                frames.push(f["data"]["entry"].clone());
            }
        }
        let [created, replaced] = frames.as_slice() else {
            panic!("the recording holds entry 4 twice: {frames:?}");
        };
        assert!(same_tool_call(&bytes(created), &bytes(replaced)));
    }

    #[test]
    fn a_changed_call_or_another_kind_is_not_the_same() {
        let call = |cmd: &str, status: &str| {
            json!({"type": "NORMALIZED_ENTRY", "content": {"entry_type": {"type": "tool_use",
                "tool_name": "Bash", "action_type": {"action": "command_run", "command": cmd,
                "result": null}, "status": {"status": status}}, "content": cmd}})
        };
        assert!(same_tool_call(
            &bytes(&call("ls", "created")),
            &bytes(&call("ls", "success"))
        ));
        assert!(!same_tool_call(
            &bytes(&call("ls", "created")),
            &bytes(&call("ls -la", "success"))
        ));
        let text = |t: &str| {
            json!({"type": "NORMALIZED_ENTRY", "content": {"entry_type": {"type":
                "assistant_message"}, "content": t}})
        };
        assert!(!same_tool_call(&bytes(&text("a")), &bytes(&text("a"))));
        assert!(!same_tool_call(b"{", &bytes(&call("ls", "created"))));
    }
}
