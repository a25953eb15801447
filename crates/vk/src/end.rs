//! How VK records why a process ended, beyond its row (docs/vk-contract.md §11.1): the exit
//! code VK writes for a death by a signal it did not send, the raw stderr line of a process
//! that could not start, and the normalized `error_message` entries whose `error_type` says the
//! executor needs setting up. The row alone (`status`, `exit_code`) cannot tell a spawn
//! failure from a VK restart (both `failed` with no exit code); these texts can. VK's texts are
//! read here only, so a change of wording in VK is one edit.

use serde_json::Value;

/// `exit_code` of a process that died by a signal VK did not send (OOM killer, an external
/// `kill`, a crash): the OS gave no exit code and VK writes -1 (§11.1 #3).
pub const SIGNAL_EXIT: i64 = -1;

/// Start of the raw `STDERR` entry VK writes when a process could not be started (§11.1 #8).
const START_FAILURE: &str = "Failed to start execution";

/// What VK says a missing executable is in its `setup_required` entry (§11.1 #8).
const NOT_INSTALLED: &str = "is not installed";

/// The `error_type` of a normalized `error_message` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// `setup_required` saying an executable is not installed (a spawn failure).
    NotInstalled,
    /// Any other `setup_required` (a login missing, an executor to set up).
    SetupRequired,
    /// `other`: for Claude and most executors every stderr chunk (§11.1 #17), not a cause.
    Other,
}

/// A normalized log entry that is an `error_message`: its type and its trimmed text.
pub fn error_entry(entry: &Value) -> Option<(ErrorType, &str)> {
    let content = entry.get("content")?;
    let et = content.get("entry_type")?;
    if et.get("type")?.as_str()? != "error_message" {
        return None;
    }
    let text = content.get("content").and_then(Value::as_str).unwrap_or("");
    let text = text.trim();
    let kind = match et.pointer("/error_type/type").and_then(Value::as_str) {
        Some("setup_required") if text.contains(NOT_INSTALLED) => ErrorType::NotInstalled,
        Some("setup_required") => ErrorType::SetupRequired,
        _ => ErrorType::Other,
    };
    Some((kind, text))
}

/// The text of a raw `STDERR` entry.
pub fn stderr_text(entry: &Value) -> Option<&str> {
    if entry.get("type")?.as_str()? != "STDERR" {
        return None;
    }
    entry.get("content")?.as_str()
}

/// True for the raw entry VK writes when the process could not be started.
pub fn is_start_failure(entry: &Value) -> bool {
    stderr_text(entry).is_some_and(|t| t.trim_start().starts_with(START_FAILURE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error(kind: &str, text: &str) -> Value {
        json!({"type": "NORMALIZED_ENTRY", "content": {"entry_type": {"type": "error_message",
               "error_type": {"type": kind}}, "content": text}})
    }

    #[test]
    fn error_entries_are_typed_by_vk_words() {
        let missing = error(
            "setup_required",
            "The required executable `claude` is not installed.",
        );
        let login = error("setup_required", "Log in to the agent first.");
        let chunk = error("other", " some stderr \n");
        assert_eq!(error_entry(&missing).unwrap().0, ErrorType::NotInstalled);
        assert_eq!(error_entry(&login).unwrap().0, ErrorType::SetupRequired);
        assert_eq!(error_entry(&chunk), Some((ErrorType::Other, "some stderr")));
        let msg = json!({"type": "NORMALIZED_ENTRY", "content": {"entry_type": {"type": "assistant_message"},
                         "content": "fine"}});
        assert_eq!(error_entry(&msg), None);
    }

    #[test]
    fn start_failures_are_stderr_lines_of_vk() {
        let start = json!({"type": "STDERR",
            "content": "Failed to start execution: Executable `claude` not found in PATH"});
        let other = json!({"type": "STDERR", "content": "npm ERR! missing script"});
        let stdout = json!({"type": "STDOUT", "content": "Failed to start execution"});
        assert!(is_start_failure(&start));
        assert!(!is_start_failure(&other) && !is_start_failure(&stdout));
    }
}
