//! `get_attempt_changes`: the cached change summary of an attempt with VK's diff guard applied
//! here (docs/vk-contract.md §6.1). Ingest caches VK's answer with the guard bypassed, so `force`
//! needs no upstream call: the file list is already in the store.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use serde_json::Map;

use super::detail::{Detail, Rules};
use super::{Freshness, Query, View};
use vk_observer_tool_error::ToolError;

/// Totals over every repository of the attempt.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ChangeSummary {
    /// Number of changed files.
    pub file_count: u64,
    /// Lines added.
    pub added: u64,
    /// Lines deleted.
    pub deleted: u64,
    /// Total bytes of the changed files' contents.
    pub total_bytes: u64,
}

/// Lines added and deleted in one changed file.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct FileStat {
    /// The file, as in `files` (`<repo>/<path>`).
    pub path: String,
    /// Lines added.
    pub added: u64,
    /// Lines deleted.
    pub deleted: u64,
}

/// The thresholds in force (VK's `diff_preview_guard` preset).
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct Guard {
    /// `SAFE`, `BALANCED`, `RELAXED` or `OFF`.
    pub preset: String,
    /// More files than this blocks the file list (null with `OFF`).
    pub max_files: Option<u64>,
    /// More added+deleted lines than this blocks the file list (null with `OFF`).
    pub max_lines: Option<u64>,
    /// More bytes than this blocks the file list (null with `OFF`).
    pub max_bytes: Option<u64>,
}

/// Answer of `get_attempt_changes`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ChangesPage {
    /// The attempt (UUID).
    pub attempt_id: Uuid,
    /// False while no change summary of the attempt is cached yet (a new or idle attempt:
    /// VK is asked when a process of the attempt ends, and while its coding agent runs):
    /// `summary` is then all zeros and `files` empty. Detail 0 shows it only when false (absent
    /// means ready, as an absent `freshness` means current); 1 and 2 always.
    pub ready: bool,
    /// Totals; always filled, even when blocked (zeros while not `ready`).
    pub summary: ChangeSummary,
    /// True when the file list is withheld (see `blocked_reason`).
    pub blocked: bool,
    /// `threshold_exceeded` (pass `force: true` to get the list anyway), `summary_failed`
    /// (VK could not diff the workspace; `force` does not help) or `too_many_files` (forced,
    /// but more files than the absolute ceiling of 5000: read paths with get_attempt_patch);
    /// null when not blocked.
    pub blocked_reason: Option<String>,
    /// True when the guard was bypassed by `force`.
    pub forced: bool,
    /// What to do about a block, or while not `ready`; null otherwise.
    pub hint: Option<String>,
    /// Changed paths, prefixed with the repository name (`<repo>/<path>`), sorted; empty when
    /// blocked. No contents: use get_attempt_patch or get_attempt_file for those.
    pub files: Vec<String>,
    /// Detail 1 and 2: lines added and deleted per file of `files`, read from VK's patch with
    /// the summary. Empty when `files` is, when the change is over 100 files or 20,000 lines
    /// (read get_attempt_patch for those), or when VK gave no patch.
    pub file_stats: Vec<FileStat>,
    /// The guard thresholds applied.
    pub guard: Guard,
    /// Token of the change summary in the cache (opaque); the summary is refreshed when a
    /// process of the attempt finishes and, while its coding agent runs, shortly after each of
    /// the agent's tool calls. Null while not `ready`.
    pub changes_token: Option<String>,
    /// When the cache last read a *different* summary from VK (RFC 3339, UTC); re-reads that
    /// find the same summary keep this time, so it means "unchanged since". Null for a summary
    /// cached by an older version of the daemon.
    pub as_of: Option<String>,
    /// True while a coding agent of the attempt runs: the cache re-reads the summary within
    /// about a second of each of the agent's tool calls (lag measured in docs/performance.md),
    /// so the summary follows the work. False: the summary is final until the next run.
    pub live: bool,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

pub(crate) fn guard(preset: &str) -> Guard {
    let (files, lines, mib) = match preset {
        "SAFE" => (Some(200), Some(10_000), Some(20)),
        "RELAXED" => (Some(1_000), Some(60_000), Some(150)),
        "OFF" => (None, None, None),
        _ => (Some(500), Some(25_000), Some(50)),
    };
    let preset = match preset {
        "SAFE" | "RELAXED" | "OFF" => preset,
        _ => "BALANCED",
    };
    Guard {
        preset: preset.to_string(),
        max_files: files,
        max_lines: lines,
        max_bytes: mib.map(|m: u64| m * 1024 * 1024),
    }
}

/// Files a forced list may hold at most, whatever the guard: beyond it the list is withheld
/// with `too_many_files` (seed 003: force bypasses the thresholds, not an absolute ceiling).
pub(crate) const FORCED_FILES_MAX: u64 = 5_000;

/// What each detail level shows of `get_attempt_changes`: seed 002's totals, `blocked`,
/// `blocked_reason` and files at 0 (false, null and empty included); the
/// per-file counts, the guard's thresholds and the summary's token from 1.
/// At level 0 `ready` is shown only when false (where false is otherwise left out: here it is
/// the news), and left out when true (the usual case, so the default answer does not grow).
pub const CHANGES_RULES: Rules = Rules {
    finish: Some(keep_not_ready),
    kept: &["summary", "blocked", "blocked_reason", "files"],
    standard: &["guard", "changes_token", "file_stats"],
    verbatim: &[],
    nested: &[],
};

fn keep_not_ready(m: &mut Map<String, Value>, detail: Detail) {
    if detail != Detail::Compact {
        return;
    }
    match m.remove("ready") {
        Some(Value::Bool(true)) => {}
        _ => {
            m.insert("ready".into(), Value::Bool(false));
        }
    }
}

fn exceeded(s: &ChangeSummary, g: &Guard) -> bool {
    g.max_files.is_some_and(|m| s.file_count > m)
        || g.max_lines.is_some_and(|m| s.added + s.deleted > m)
        || g.max_bytes.is_some_and(|m| s.total_bytes > m)
}

fn num(v: &Value, f: &str) -> u64 {
    v.get(f).and_then(Value::as_u64).unwrap_or(0)
}

impl Query {
    pub fn attempt_changes(&self, attempt: Uuid, force: bool) -> Result<ChangesPage, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        let host = super::target::attempt(&reader, attempt)?
            .value
            .get(vk_observer_store::events::HOST_FIELD)
            .and_then(Value::as_str)
            .map(str::to_owned);
        let preset = preset_of(&reader, host.as_deref())?;
        let Some(stored) = reader.changes(attempt)? else {
            return Ok(ChangesPage {
                attempt_id: attempt,
                ready: false,
                summary: summary_of(&Value::Null),
                blocked: false,
                blocked_reason: None,
                forced: false,
                hint: Some(self.not_ready_hint().to_string()),
                files: Vec::new(),
                file_stats: Vec::new(),
                guard: guard(&preset),
                changes_token: None,
                as_of: None,
                live: agent_running(&reader, attempt),
                token,
                freshness,
            });
        };
        let v = &stored.value;
        let summary = summary_of(v);
        let guard = guard(&preset);
        let over = exceeded(&summary, &guard);
        let blocked_reason = blocked_reason(v, &summary, over, force);
        let files = if blocked_reason.is_some() {
            Vec::new()
        } else {
            listed_files(v)
        };
        let file_stats = file_stats(v, &files);
        let hint = blocked_reason.map(hint_for);
        Ok(ChangesPage {
            attempt_id: attempt,
            ready: true,
            summary,
            hint,
            blocked: blocked_reason.is_some(),
            blocked_reason: blocked_reason.map(str::to_owned),
            forced: force && over && blocked_reason.is_none(),
            files,
            file_stats,
            guard,
            changes_token: Some(self.token_at(stored.token)),
            as_of: v
                .get(vk_observer_store::events::CHANGES_AS_OF)
                .and_then(Value::as_str)
                .map(str::to_owned),
            live: agent_running(&reader, attempt),
            token,
            freshness,
        })
    }
}

impl super::Query {
    /// What a not-`ready` answer says to do: wait on the fork; on VK 0.1.x, which gives the
    /// daemon no change summary, where else to look.
    fn not_ready_hint(&self) -> &'static str {
        match self.health.dialect().dialect.as_str() {
            "workspaces" => NOT_ON_VK_01_HINT,
            _ => NOT_READY_HINT,
        }
    }
}

/// The not-`ready` hint on VK 0.1.x (docs/agent-guide.md "Which VK").
const NOT_ON_VK_01_HINT: &str = "VK 0.1.x gives the daemon no change summary (its only view of a workspace's changes is a diff WebSocket the daemon does not follow): run `git diff --stat` in the workspace's worktree, or see get_attempt_branch_status for the commits ahead.";

/// What a not-`ready` answer says to do.
const NOT_READY_HINT: &str = "No change summary yet: it is read when a process of the attempt ends and while its coding agent works. Call wait_for_attempt_change with this attempt in `attempt_ids`, then get_attempt_changes again.";

/// VK's `diff_preview_guard` preset as the cache holds it (BALANCED, VK's default, before
/// VK's info is read); on a fleet node, that of the attempt's `host`.
fn preset_of(
    reader: &vk_observer_store::StoreReader,
    host: Option<&str>,
) -> Result<String, ToolError> {
    Ok(reader
        .server_info_for(host)?
        .and_then(|i| i.get("diff_preview_guard")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "BALANCED".to_string()))
}

/// VK's totals in a stored summary (camelCase, as VK sends them).
fn summary_of(v: &Value) -> ChangeSummary {
    let s = v.get("summary").cloned().unwrap_or_default();
    ChangeSummary {
        file_count: num(&s, "fileCount"),
        added: num(&s, "added"),
        deleted: num(&s, "deleted"),
        total_bytes: num(&s, "totalBytes"),
    }
}

/// Why the file list is withheld, if it is: VK's `summary_failed` (kept even when forced: no
/// workspace to diff), the guard's thresholds unless forced, or the absolute ceiling.
fn blocked_reason(
    v: &Value,
    summary: &ChangeSummary,
    over: bool,
    force: bool,
) -> Option<&'static str> {
    let upstream_failed = v.get("blocked").and_then(Value::as_bool) == Some(true)
        && v.get("blockedReason").and_then(Value::as_str) == Some("summary_failed");
    if upstream_failed {
        Some("summary_failed")
    } else if !force && over {
        Some("threshold_exceeded")
    } else if summary.file_count > FORCED_FILES_MAX {
        Some("too_many_files")
    } else {
        None
    }
}

/// The stored summary's paths, sorted and without repeats.
fn listed_files(v: &Value) -> Vec<String> {
    let mut f = vk_observer_vk::strings(v.get("files"));
    f.sort();
    f.dedup();
    f
}

/// What to do about a withheld list.
fn hint_for(reason: &str) -> String {
    match reason {
        "threshold_exceeded" => "The change is over the diff guard's thresholds: call get_attempt_changes again with force: true, or get_attempt_patch with a few paths.".to_string(),
        "too_many_files" => format!("The change touches more than {FORCED_FILES_MAX} files, too many to list even when forced: use the summary, or get_attempt_patch with the paths you care about."),
        _ => "VK could not diff this workspace (e.g. its worktree is gone); force does not help. Check get_attempt_status.".to_string(),
    }
}

/// The cached per-file counts (`CHANGES_FILE_STATS`) of `files`, in their order; empty
/// unless every listed file has its counts (a partial set would read as a smaller change).
fn file_stats(stored: &Value, files: &[String]) -> Vec<FileStat> {
    let Some(all) = stored
        .get(vk_observer_store::events::CHANGES_FILE_STATS)
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    let stats: Option<Vec<FileStat>> = files
        .iter()
        .map(|path| {
            let s = all.get(path)?;
            Some(FileStat {
                path: path.clone(),
                added: s.get("added")?.as_u64()?,
                deleted: s.get("deleted")?.as_u64()?,
            })
        })
        .collect();
    stats.unwrap_or_default()
}

/// Does a coding agent of the attempt run (the cache then re-reads its changes as it works)?
fn agent_running(reader: &vk_observer_store::StoreReader, attempt: Uuid) -> bool {
    reader
        .processes_of_attempt(attempt)
        .unwrap_or_default()
        .iter()
        .filter_map(|p| vk_observer_vk::ProcessFacts::from_value(&p.value))
        .any(|f| f.is_running() && f.run_reason == vk_observer_vk::RunReason::CodingAgent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_is_strictly_greater_than() {
        let g = guard("BALANCED");
        let at = ChangeSummary {
            file_count: 500,
            added: 20_000,
            deleted: 5_000,
            total_bytes: 50 << 20,
        };
        assert!(!exceeded(&at, &g));
        let over = ChangeSummary {
            file_count: 501,
            ..at.clone()
        };
        assert!(exceeded(&over, &g));
        assert!(!exceeded(&over, &guard("OFF")));
        assert_eq!(guard("nonsense").preset, "BALANCED");
    }
}
