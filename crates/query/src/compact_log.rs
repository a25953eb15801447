//! Log entries below detail 2: VK's nested entry (`{"type":"NORMALIZED_ENTRY","content":
//! {"entry_type":{…},"content":…,"metadata":…}}`) reduced to what an agent reads to follow the
//! work: the entry's `kind` (VK's `NormalizedEntryType` tag, passed through as VK names it, so
//! a kind VK adds later still shows), its `text` clipped at [`TEXT_CLIP`] characters (level 0)
//! or [`TEXT_CLIP_STANDARD`] (level 1) with `clipped: true`, and for tool uses `tool`: name,
//! action, command / path / target, status, exit status and approval state. Raw-channel entries
//! become `{kind: stdout|stderr, text}` lines. An entry whose shape is not VK's known one keeps
//! its whole JSON as `text` (clipped), so nothing is silently dropped.
//!
//! What an agent needs is never lost: every entry keeps its index, kind and tool call; only text
//! is clipped, and the whole entry is one call away (`tail_attempt_logs` with
//! `after_entry_index: i - 1, limit: 1, detail: 2`).
//!
//! VK's vocabulary (executors-core `logs/mod.rs`): kinds `user_message`, `user_feedback`
//! (`denied_tool`), `assistant_message`, `tool_use` (`tool_name`, `action_type`, `status`),
//! `system_message`, `error_message` (`error_type`), `thinking`, `loading`, `next_action`
//! (`failed`, `needs_setup`); tool statuses `created`, `success`, `failed`, `denied`
//! (`reason`), `pending_approval` (`approval_id`, `requested_at`, `timeout_at`), `timed_out`;
//! exit statuses `{type: exit_code, code}` / `{type: success, success}`.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::detail::{Detail, clip};
use vk_observer_store::keys::Channel;

/// Characters of `text` kept at detail 0.
pub(crate) const TEXT_CLIP: usize = 500;
/// Characters of `text` kept at detail 1.
pub(crate) const TEXT_CLIP_STANDARD: usize = 4000;
/// Characters kept of a tool's target (command, path, arguments) at detail 0.
pub(crate) const TARGET_CLIP: usize = 300;
/// Characters kept of a command's output (detail 1 only).
pub(crate) const OUTPUT_CLIP: usize = 500;

/// A log entry below detail 2.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct CompactEntry {
    /// Detail 0/1: what the entry is. Normalized: VK's entry type (`assistant_message`,
    /// `user_message`, `tool_use`, `thinking`, `error_message`, `system_message`,
    /// `user_feedback`, `loading`, `next_action`, or any newer VK type as VK names it). Raw:
    /// `stdout` or `stderr`.
    pub kind: String,
    /// Detail 0/1: the entry's text (for tool uses only when it says more than `tool`), clipped
    /// at 500 characters (detail 0) or 4000 (detail 1). Absent when empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Detail 0/1: true when `text` was clipped; read the whole entry with tail_attempt_logs
    /// `after_entry_index` = this index − 1, `limit` 1, `detail` 2.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub clipped: bool,
    /// Detail 0/1, tool uses: the call in brief.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolCall>,
    /// Detail 0/1, `error_message`: `setup_required` when the executor needs setting up first
    /// (VK's other error type, `other`, is left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// Detail 0/1, `user_feedback`: the tool the user denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied_tool: Option<String>,
    /// Detail 0/1, `next_action`: true when the run failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<bool>,
    /// Detail 0/1, `next_action`: true when the executor needs its setup first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_setup: Option<bool>,
    /// Detail 1: when VK stamped the entry (RFC 3339), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// A tool use in brief.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ToolCall {
    /// The tool's name as the agent called it (e.g. `Bash`, `Edit`, `Read`).
    pub name: String,
    /// VK's action: `command_run`, `file_read`, `file_edit`, `search`, `web_fetch`, `tool`,
    /// `task_create`, `plan_presentation`, `todo_management` or `other`. Absent (with the
    /// command, path and target) in a detail-0 `replaced` entry whose call only got its
    /// outcome: you hold the call at that index already.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// `command_run`: the command line (clipped at 300 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `file_read` / `file_edit`: the file's path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Other actions: the query, URL, arguments (JSON text) or description (clipped at 300).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `created` (issued, no result yet), `success`, `failed`, `denied`, `pending_approval`
    /// or `timed_out`. A pending approval waits for an answer (see `approval_id`).
    pub status: String,
    /// `command_run` with a result: the exit code, when VK recorded one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// `command_run` with a result: VK's success flag, when it recorded one instead of a code
    /// and `status` does not already say it (left out with `success` + true, `failed` + false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// `pending_approval`: the approval's id (answer it to let the agent go on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// `pending_approval`: when the approval times out (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_timeout_at: Option<String>,
    /// `denied`: the reason given, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied_reason: Option<String>,
    /// Detail 1, `command_run`: the command's output (clipped at 500 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// A rewrite of a tool call the client already holds, when the rewrite kept the call (the
/// store's `replaced_since` says so): at detail 0 just the entry's kind and `tool` {name,
/// status, exit code / success, approval, denial}, without the action, command / path / target
/// and text the client has at that index. Other entries are returned whole.
pub(crate) fn outcome_only(mut e: CompactEntry) -> CompactEntry {
    if let Some(t) = &mut e.tool {
        t.action.clear();
        (t.command, t.path, t.target) = (None, None, None);
        (e.text, e.clipped) = (None, false);
    }
    e
}

/// `raw` (VK's entry bytes) as `detail` shows it: `Err(raw)` at detail 2 (verbatim), else the
/// compact entry.
pub(crate) fn compact(
    raw: Box<RawValue>,
    channel: Channel,
    detail: Detail,
) -> Result<CompactEntry, Box<RawValue>> {
    if detail == Detail::Verbatim {
        return Err(raw);
    }
    let v: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
    let limit = match detail {
        Detail::Compact => TEXT_CLIP,
        _ => TEXT_CLIP_STANDARD,
    };
    Ok(match channel {
        Channel::Raw => raw_line(&v, raw.get(), limit),
        Channel::Normalized => normalized(&v, raw.get(), limit, detail),
    })
}

fn bare(kind: String) -> CompactEntry {
    CompactEntry {
        kind,
        text: None,
        clipped: false,
        tool: None,
        error_type: None,
        denied_tool: None,
        failed: None,
        needs_setup: None,
        timestamp: None,
    }
}

/// An entry of `kind` that is only text (e.g. a turn's prompt), clipped at `limit`.
pub(crate) fn text_entry(kind: &str, text: &str, limit: usize) -> CompactEntry {
    with_text(bare(kind.to_string()), text, limit)
}

fn with_text(mut e: CompactEntry, text: &str, limit: usize) -> CompactEntry {
    if !text.is_empty() {
        let (t, clipped) = clip(text, limit);
        e.text = Some(t);
        e.clipped = clipped;
    }
    e
}

/// A shape this module does not know: its whole JSON as text, so nothing is lost.
fn unknown(v: &Value, raw: &str, limit: usize) -> CompactEntry {
    let kind = v
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_lowercase)
        .unwrap_or_else(|| "unknown".to_string());
    with_text(bare(kind), raw, limit)
}

fn raw_line(v: &Value, raw: &str, limit: usize) -> CompactEntry {
    match (
        v.get("type").and_then(Value::as_str),
        v.get("content").and_then(Value::as_str),
    ) {
        (Some(t @ ("STDOUT" | "STDERR")), Some(text)) => {
            with_text(bare(t.to_lowercase()), text, limit)
        }
        _ => unknown(v, raw, limit),
    }
}

fn normalized(v: &Value, raw: &str, limit: usize, detail: Detail) -> CompactEntry {
    let (Some(c), Some(kind)) = (
        v.get("content"),
        v.pointer("/content/entry_type/type")
            .and_then(Value::as_str),
    ) else {
        return unknown(v, raw, limit);
    };
    let et = &c["entry_type"];
    let text = c.get("content").and_then(Value::as_str).unwrap_or_default();
    let mut e = bare(kind.to_string());
    let s = |k: &str| et.get(k).and_then(Value::as_str).map(str::to_owned);
    match kind {
        "tool_use" => {
            let tool = tool_call(et, detail);
            let says_more = !text.is_empty()
                && text != tool.name
                && [&tool.command, &tool.path, &tool.target]
                    .iter()
                    .all(|t| t.as_deref() != Some(text));
            e.tool = Some(tool);
            if says_more {
                e = with_text(e, text, limit);
            }
        }
        "error_message" => {
            e.error_type = et
                .pointer("/error_type/type")
                .and_then(Value::as_str)
                .filter(|t| *t != "other")
                .map(str::to_owned);
            e = with_text(e, text, limit);
        }
        "user_feedback" => {
            e.denied_tool = s("denied_tool");
            e = with_text(e, text, limit);
        }
        "next_action" => {
            e.failed = et.get("failed").and_then(Value::as_bool);
            e.needs_setup = et.get("needs_setup").and_then(Value::as_bool);
            e = with_text(e, text, limit);
        }
        _ => e = with_text(e, text, limit),
    }
    if detail == Detail::Standard {
        e.timestamp = c
            .get("timestamp")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    e
}

/// The tool call of a `tool_use` entry type.
fn tool_call(et: &Value, detail: Detail) -> ToolCall {
    let at = &et["action_type"];
    let action = at.get("action").and_then(Value::as_str).unwrap_or("other");
    let field = |k: &str| {
        at.get(k)
            .and_then(Value::as_str)
            .map(|s| clip(s, TARGET_CLIP).0)
    };
    let (command, path, target) = match action {
        "command_run" => (field("command"), None, None),
        "file_read" | "file_edit" => (None, field("path"), None),
        "search" => (None, None, field("query")),
        "web_fetch" => (None, None, field("url")),
        "task_create" | "other" => (None, None, field("description")),
        "plan_presentation" => (None, None, field("plan")),
        "todo_management" => (None, None, field("operation")),
        "tool" => {
            let args = at
                .get("arguments")
                .filter(|a| !a.is_null())
                .map(|a| clip(&a.to_string(), TARGET_CLIP).0);
            (None, None, args)
        }
        _ => (None, None, None),
    };
    let st = &et["status"];
    let status = st
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("created");
    let exit = at.pointer("/result/exit_status");
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    ToolCall {
        name: et
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        action: action.to_string(),
        command,
        path,
        target,
        status: status.to_string(),
        exit_code: exit
            .filter(|x| x["type"] == "exit_code")
            .and_then(|x| x["code"].as_i64()),
        success: exit
            .filter(|x| x["type"] == "success")
            .and_then(|x| x["success"].as_bool())
            .filter(|ok| !says_the_same(status, *ok)),
        approval_id: text(st.get("approval_id")),
        approval_timeout_at: text(st.get("timeout_at")),
        denied_reason: (status == "denied")
            .then(|| text(st.get("reason")))
            .flatten(),
        output: (detail == Detail::Standard)
            .then(|| {
                at.pointer("/result/output")
                    .and_then(Value::as_str)
                    .map(|o| clip(o, OUTPUT_CLIP).0)
            })
            .flatten(),
    }
}

/// A success flag `status` already states (`success` with true, `failed` with false).
fn says_the_same(status: &str, ok: bool) -> bool {
    matches!((status, ok), ("success", true) | ("failed", false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: &Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    fn at(v: &Value, ch: Channel, d: Detail) -> Value {
        serde_json::to_value(compact(raw(v), ch, d).expect("compact below detail 2")).unwrap()
    }

    /// Every entry kind and tool status VK defines, built from VK's types.
    #[test]
    fn every_vk_entry_kind_has_its_compact_form() {
        let f: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/compact/vk_entry_kinds.json"
        ))
        .unwrap();
        for case in f["cases"].as_array().unwrap() {
            assert_eq!(
                at(&case["entry"], Channel::Normalized, Detail::Compact),
                case["compact"],
                "{}",
                case["entry"]
            );
        }
    }

    /// The recorded VK entries: kind, text and tool calls survive; the text VK repeats in
    /// `metadata` does not.
    #[test]
    fn recorded_entries_keep_kind_text_and_tool() {
        let mut seen = std::collections::BTreeSet::new();
        for page in [
            include_str!(
                "../../../tests/fixtures/vk-wire/samples/rest_normalized_history_page1.json"
            ),
            include_str!(
                "../../../tests/fixtures/vk-wire/samples/rest_normalized_history_page2.json"
            ),
            include_str!(
                "../../../tests/fixtures/vk-wire/samples/rest_normalized_history_while_running.json"
            ),
        ] {
            let page: Value = serde_json::from_str(page).unwrap();
            for e in page["response"]["data"]["entries"].as_array().unwrap() {
                let c = at(&e["entry"], Channel::Normalized, Detail::Compact);
                let content = &e["entry"]["content"];
                let kind = content["entry_type"]["type"].as_str().unwrap();
                assert_eq!(c["kind"], kind);
                seen.insert(kind.to_string());
                if kind == "tool_use" {
                    let t = &c["tool"];
                    assert_eq!(t["name"], content["entry_type"]["tool_name"]);
                    assert_eq!(t["action"], content["entry_type"]["action_type"]["action"]);
                    assert_eq!(t["status"], content["entry_type"]["status"]["status"]);
                    let target = t.get("command").or(t.get("path")).unwrap();
                    assert_eq!(
                        target, &content["content"],
                        "the command or path is the text"
                    );
                } else {
                    assert_eq!(c["text"], content["content"]);
                    assert!(c.get("tool").is_none());
                }
                let full = e["entry"].to_string().len();
                assert!(
                    c.to_string().len() < full,
                    "{c} is not smaller than {full} bytes"
                );
            }
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            [
                "assistant_message",
                "error_message",
                "system_message",
                "tool_use"
            ]
        );
        let ls = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
            "entry_type": {"type": "tool_use", "tool_name": "Bash", "action_type": {
                "action": "command_run", "command": "ls", "result": {
                    "exit_status": {"type": "success", "success": true}, "output": "demo"}},
                "status": {"status": "success"}}, "content": "ls"}});
        let brief = at(&ls, Channel::Normalized, Detail::Compact);
        assert_eq!(brief["tool"]["status"], "success");
        assert!(
            brief["tool"].get("success").is_none(),
            "the flag status already states is left out: {brief}"
        );
        let mut odd = ls.clone();
        odd["content"]["entry_type"]["action_type"]["result"]["exit_status"]["success"] =
            json!(false);
        assert_eq!(
            at(&odd, Channel::Normalized, Detail::Compact)["tool"]["success"],
            false,
            "a flag that says something status does not is kept"
        );
        let outcome = serde_json::to_value(outcome_only(
            compact(raw(&ls), Channel::Normalized, Detail::Compact).unwrap(),
        ))
        .unwrap();
        assert_eq!(
            outcome,
            json!({"kind": "tool_use", "tool": {"name": "Bash", "status": "success"}})
        );
        let standard = at(&ls, Channel::Normalized, Detail::Standard);
        assert_eq!(standard["tool"]["output"], "demo");
    }

    #[test]
    fn raw_entries_are_text_lines() {
        for f in [
            include_str!("../../../tests/fixtures/vk-wire/samples/rest_raw_history_setup.json"),
            include_str!(
                "../../../tests/fixtures/vk-wire/samples/rest_raw_history_failed_agent.json"
            ),
        ] {
            let page: Value = serde_json::from_str(f).unwrap();
            for e in page["response"]["data"]["entries"].as_array().unwrap() {
                let c = at(&e["entry"], Channel::Raw, Detail::Compact);
                assert_eq!(
                    c["kind"],
                    e["entry"]["type"].as_str().unwrap().to_lowercase()
                );
                let text = e["entry"]["content"].as_str().unwrap();
                if text.chars().count() <= TEXT_CLIP {
                    assert_eq!(c["text"], text);
                }
            }
        }
    }

    #[test]
    fn long_text_is_clipped_at_the_documented_length() {
        let long = "x".repeat(TEXT_CLIP_STANDARD + 10);
        let e = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": "2026-11-22T10:00:00Z",
            "entry_type": {"type": "assistant_message"}, "content": long}});
        let c = at(&e, Channel::Normalized, Detail::Compact);
        assert_eq!(c["text"].as_str().unwrap().len(), TEXT_CLIP);
        assert_eq!(c["clipped"], true);
        assert!(c.get("timestamp").is_none());
        let s = at(&e, Channel::Normalized, Detail::Standard);
        assert_eq!(s["text"].as_str().unwrap().len(), TEXT_CLIP_STANDARD);
        assert_eq!(s["timestamp"], "2026-11-22T10:00:00Z");
        let short = json!({"type": "STDOUT", "content": "ok\n"});
        let c = at(&short, Channel::Raw, Detail::Compact);
        assert_eq!(c, json!({"kind": "stdout", "text": "ok\n"}));
        assert!(compact(raw(&short), Channel::Raw, Detail::Verbatim).is_err());
    }
}
