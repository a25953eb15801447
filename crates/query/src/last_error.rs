//! Why an attempt's run ended badly: `result.last_error_code`, a closed set classified from
//! what VK's data can tell apart (docs/vk-contract.md §11), and `result.last_error`, the text
//! beside it. Read from the ended process's row and the tail of its logs, all under the
//! attempt token (so `status_memo` stays exact).
//!
//! The rules, first match wins (process = the latest relevant one, as VK's `/status`):
//!
//! | status   | exit code | run reason / log evidence                                   | code                     |
//! |----------|-----------|-------------------------------------------------------------|--------------------------|
//! | killed   | (null)    | —                                                           | `stopped`                |
//! | failed   | any       | setup script                                                | `setup_script_failed`    |
//! | failed   | any       | cleanup script                                              | `cleanup_script_failed`  |
//! | failed   | any       | `setup_required` error entry "… is not installed."          | `executor_not_found`     |
//! | failed   | any       | other `setup_required` error entry                          | `setup_required`         |
//! | failed   | -1        | —                                                           | `agent_killed_by_signal` |
//! | failed   | N         | —                                                           | `agent_exit_nonzero`     |
//! | failed   | null      | raw stderr "Failed to start execution: …"                   | `start_failed`           |
//! | failed   | null      | none of the above                                           | `vk_restarted`           |
//!
//! What VK cannot tell apart, so neither can these codes: who stopped a run (`stopped` is a
//! user's stop, VK's own graceful shutdown, an auto-retry or a deletion alike: VK writes the
//! same row); an agent that could not fetch its `npx` package from one that failed
//! (`agent_exit_nonzero` both); a crash that exits non-zero from a failure
//! (`agent_exit_nonzero`); a tool-install script from a setup script (`setup_script_failed`:
//! the daemon does not keep the process's executor action). Denied or timed-out approvals never
//! end a run (the agent is told and goes on), so they are no code.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::rows::ProcessRow;
use vk_observer_store::StoreReader;
use vk_observer_store::keys::Channel;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::end::{self, ErrorType};
use vk_observer_vk::{ProcessStatus, RunReason};

/// Log entries scanned backwards (bounds the cost of a status on a huge log; what ended a run
/// is near its end, a start failure is the whole log).
const ERROR_SCAN: usize = 200;
/// Characters kept of `last_error`.
const ERROR_CLIP: usize = 300;

/// Why the run ended badly, as far as VK's data tells (docs/agent-guide.md routes on it).
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum LastErrorCode {
    /// The coding agent exited with a non-zero code (`exit_code`): its own failure, a crash that
    /// exits non-zero, or an `npx` package it could not fetch.
    AgentExitNonzero,
    /// The coding agent died by a signal VK did not send (`exit_code` -1: out of memory, an
    /// external kill, a crash).
    AgentKilledBySignal,
    /// The setup script failed: the agent never had a usable workspace.
    SetupScriptFailed,
    /// The cleanup script failed after the agent's run.
    CleanupScriptFailed,
    /// The executor's program is not installed (VK's `setup_required` "… is not installed.").
    ExecutorNotFound,
    /// The executor needs setting up (VK's `setup_required`, e.g. a login), other than a missing
    /// program.
    SetupRequired,
    /// VK could not start the process ("Failed to start execution: …" on its stderr).
    StartFailed,
    /// The process was running when VK went away uncleanly: VK marks it failed, with no exit
    /// code and nothing in its log, when it starts again.
    VkRestarted,
    /// Stopped through VK (status `killed`): by a user, or by VK itself (its shutdown, a retry,
    /// a deletion); VK records them alike.
    Stopped,
}

impl LastErrorCode {
    /// Every code, in the order of the module's table.
    #[cfg(test)]
    pub(crate) const ALL: [LastErrorCode; 9] = [
        LastErrorCode::Stopped,
        LastErrorCode::SetupScriptFailed,
        LastErrorCode::CleanupScriptFailed,
        LastErrorCode::ExecutorNotFound,
        LastErrorCode::SetupRequired,
        LastErrorCode::AgentKilledBySignal,
        LastErrorCode::AgentExitNonzero,
        LastErrorCode::StartFailed,
        LastErrorCode::VkRestarted,
    ];

    /// The serialized string (stable: pinned by a table test).
    #[cfg(test)]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LastErrorCode::AgentExitNonzero => "agent_exit_nonzero",
            LastErrorCode::AgentKilledBySignal => "agent_killed_by_signal",
            LastErrorCode::SetupScriptFailed => "setup_script_failed",
            LastErrorCode::CleanupScriptFailed => "cleanup_script_failed",
            LastErrorCode::ExecutorNotFound => "executor_not_found",
            LastErrorCode::SetupRequired => "setup_required",
            LastErrorCode::StartFailed => "start_failed",
            LastErrorCode::VkRestarted => "vk_restarted",
            LastErrorCode::Stopped => "stopped",
        }
    }
}

/// What the ended process's logs say about its end.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Evidence {
    /// The last `error_message` entry's text, else the last non-empty stderr line.
    pub last_error: Option<String>,
    /// The most telling `setup_required` entry seen (not installed before the others).
    pub setup_required: Option<ErrorType>,
    /// VK's "Failed to start execution" line is in the raw log.
    pub start_failed: bool,
}

/// The code of an ended process; None unless it failed or was killed.
pub(crate) fn classify(p: &ProcessRow, ev: &Evidence) -> Option<LastErrorCode> {
    use LastErrorCode as C;
    match ProcessStatus::parse(p.status()) {
        ProcessStatus::Killed => return Some(C::Stopped),
        ProcessStatus::Failed => {}
        _ => return None,
    }
    Some(match RunReason::parse(p.reason()) {
        RunReason::SetupScript => C::SetupScriptFailed,
        RunReason::CleanupScript => C::CleanupScriptFailed,
        _ => match (ev.setup_required, p.exit_code) {
            (Some(ErrorType::NotInstalled), _) => C::ExecutorNotFound,
            (Some(_), _) => C::SetupRequired,
            (None, Some(end::SIGNAL_EXIT)) => C::AgentKilledBySignal,
            (None, Some(_)) => C::AgentExitNonzero,
            (None, None) if ev.start_failed => C::StartFailed,
            (None, None) => C::VkRestarted,
        },
    })
}

/// Reads the evidence from the tail of the process's logs: the normalized log always, the raw
/// log when the normalized one has no error text or when VK recorded no exit code (a start
/// failure is told by its raw line).
pub(crate) fn evidence(
    reader: &StoreReader,
    pid: Uuid,
    exit_code: Option<i64>,
) -> Result<Evidence, ToolError> {
    let mut ev = Evidence::default();
    for e in reader
        .log_tail(pid, Channel::Normalized, None, ERROR_SCAN)?
        .iter()
        .rev()
    {
        let Ok(v) = serde_json::from_str::<Value>(e.entry.get()) else {
            continue;
        };
        let Some((kind, text)) = end::error_entry(&v) else {
            continue;
        };
        if ev.last_error.is_none() && !text.is_empty() {
            ev.last_error = Some(text.to_string());
        }
        ev.setup_required = match (ev.setup_required, kind) {
            (_, ErrorType::NotInstalled) => Some(ErrorType::NotInstalled),
            (None, ErrorType::SetupRequired) => Some(ErrorType::SetupRequired),
            (seen, _) => seen,
        };
    }
    if ev.last_error.is_none() || exit_code.is_none() {
        let raw = reader.log_tail(pid, Channel::Raw, None, ERROR_SCAN)?;
        for e in raw.iter().rev() {
            let Ok(v) = serde_json::from_str::<Value>(e.entry.get()) else {
                continue;
            };
            ev.start_failed |= end::is_start_failure(&v);
            if ev.last_error.is_none() {
                ev.last_error = end::stderr_text(&v).and_then(last_line);
            }
        }
    }
    ev.last_error = ev
        .last_error
        .map(|t| vk_observer_tool_error::clip(&t, ERROR_CLIP));
    Ok(ev)
}

/// The last non-empty line of a text.
fn last_line(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stable strings: a renamed variant fails here before it reaches a client.
    #[test]
    fn codes_serialize_to_their_pinned_strings() {
        let table = [
            (LastErrorCode::AgentExitNonzero, "agent_exit_nonzero"),
            (LastErrorCode::AgentKilledBySignal, "agent_killed_by_signal"),
            (LastErrorCode::SetupScriptFailed, "setup_script_failed"),
            (LastErrorCode::CleanupScriptFailed, "cleanup_script_failed"),
            (LastErrorCode::ExecutorNotFound, "executor_not_found"),
            (LastErrorCode::SetupRequired, "setup_required"),
            (LastErrorCode::StartFailed, "start_failed"),
            (LastErrorCode::VkRestarted, "vk_restarted"),
            (LastErrorCode::Stopped, "stopped"),
        ];
        assert_eq!(table.len(), LastErrorCode::ALL.len());
        for (code, s) in table {
            assert_eq!(code.as_str(), s);
            assert_eq!(serde_json::to_value(code).unwrap(), Value::from(s));
            assert!(LastErrorCode::ALL.contains(&code));
        }
    }

    fn row(reason: &str, status: &str, exit: Option<i64>) -> ProcessRow {
        serde_json::from_value(serde_json::json!({
            "run_reason": reason, "status": status, "exit_code": exit}))
        .unwrap()
    }

    #[test]
    fn each_row_of_the_table_classifies() {
        use LastErrorCode as C;
        let none = Evidence::default();
        let with = |s: Option<ErrorType>, start: bool| Evidence {
            last_error: None,
            setup_required: s,
            start_failed: start,
        };
        let cases = [
            (row("codingagent", "killed", None), &none, Some(C::Stopped)),
            (row("setupscript", "killed", None), &none, Some(C::Stopped)),
            (
                row("setupscript", "failed", Some(127)),
                &none,
                Some(C::SetupScriptFailed),
            ),
            (
                row("cleanupscript", "failed", Some(2)),
                &none,
                Some(C::CleanupScriptFailed),
            ),
            (
                row("codingagent", "failed", None),
                &with(Some(ErrorType::NotInstalled), true),
                Some(C::ExecutorNotFound),
            ),
            (
                row("codingagent", "failed", Some(1)),
                &with(Some(ErrorType::SetupRequired), false),
                Some(C::SetupRequired),
            ),
            (
                row("codingagent", "failed", Some(-1)),
                &none,
                Some(C::AgentKilledBySignal),
            ),
            (
                row("codingagent", "failed", Some(1)),
                &none,
                Some(C::AgentExitNonzero),
            ),
            (
                row("codingagent", "failed", None),
                &with(None, true),
                Some(C::StartFailed),
            ),
            (
                row("codingagent", "failed", None),
                &none,
                Some(C::VkRestarted),
            ),
            (row("codingagent", "completed", Some(0)), &none, None),
            (row("codingagent", "running", None), &none, None),
        ];
        for (p, ev, want) in cases {
            assert_eq!(classify(&p, ev), want, "{p:?} {ev:?}");
        }
    }

    #[test]
    fn last_line_skips_blank_lines() {
        assert_eq!(
            last_line("first\nsecond line\n\n").as_deref(),
            Some("second line")
        );
        assert_eq!(last_line(" \n"), None);
    }
}
