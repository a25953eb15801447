//! Field access and selection rules over VK's JSON objects as cached: which attempt is the
//! latest (created_at desc, id asc), which session, which execution process is "relevant"
//! (VK's `/status` rule: coding agent, setup or cleanup script, never a dev server or a dropped
//! process), and which process the log tools follow.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::store::reader::Stored;

pub fn str_of<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field)?.as_str()
}

pub fn string_of(v: &Value, field: &str) -> Option<String> {
    str_of(v, field).map(str::to_owned)
}

pub fn ts_of(v: &Value, field: &str) -> Option<DateTime<Utc>> {
    str_of(v, field)?.parse().ok()
}

pub fn uuid_of(v: &Value, field: &str) -> Option<Uuid> {
    str_of(v, field)?.parse().ok()
}

/// RFC 3339 with millisecond precision and `Z`, the form every tool returns.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn ts_string(v: &Value, field: &str) -> Option<String> {
    ts_of(v, field).map(rfc3339)
}

/// Newest first by `created_at`, then id ascending: VK's "latest" order for attempts.
pub fn newest_first(a: &Stored, b: &Stored) -> Ordering {
    ts_of(&b.value, "created_at")
        .cmp(&ts_of(&a.value, "created_at"))
        .then(a.id.cmp(&b.id))
}

/// The latest by [`newest_first`].
pub fn latest(items: &[Stored]) -> Option<&Stored> {
    items.iter().min_by(|a, b| newest_first(a, b))
}

/// Run reasons in VK's tie-break order for the relevant process.
pub const RELEVANT_REASONS: [&str; 3] = ["codingagent", "setupscript", "cleanupscript"];

pub fn run_reason(p: &Value) -> &str {
    str_of(p, "run_reason").unwrap_or("")
}

pub fn status(p: &Value) -> &str {
    str_of(p, "status").unwrap_or("")
}

pub fn is_dropped(p: &Value) -> bool {
    p.get("dropped").and_then(Value::as_bool).unwrap_or(false)
}

/// A process that counts for attempt state and logs: not a dev server, not dropped.
pub fn is_relevant(p: &Value) -> bool {
    RELEVANT_REASONS.contains(&run_reason(p)) && !is_dropped(p)
}

/// The newest process of one run reason.
fn newest_of_reason<'a>(processes: &'a [Stored], reason: &str) -> Option<&'a Stored> {
    processes
        .iter()
        .filter(|p| run_reason(&p.value) == reason && !is_dropped(&p.value))
        .max_by(|a, b| {
            ts_of(&a.value, "created_at")
                .cmp(&ts_of(&b.value, "created_at"))
                .then(b.id.cmp(&a.id))
        })
}

/// VK's `latest_execution_process_id`: per reason the newest, then the newest of those, ties
/// going to the earlier reason in [`RELEVANT_REASONS`].
pub fn status_process(processes: &[Stored]) -> Option<&Stored> {
    let mut best: Option<&Stored> = None;
    for reason in RELEVANT_REASONS {
        if let Some(p) = newest_of_reason(processes, reason) {
            let newer =
                best.is_none_or(|b| ts_of(&p.value, "created_at") > ts_of(&b.value, "created_at"));
            if newer {
                best = Some(p);
            }
        }
    }
    best
}

/// The process whose logs the tail tools follow: the latest coding agent, else the latest
/// setup/cleanup script (seed 001, decision 2).
pub fn log_process(processes: &[Stored]) -> Option<&Stored> {
    newest_of_reason(processes, "codingagent").or_else(|| {
        let setup = newest_of_reason(processes, "setupscript");
        let cleanup = newest_of_reason(processes, "cleanupscript");
        match (setup, cleanup) {
            (Some(s), Some(c)) => Some(
                if ts_of(&c.value, "created_at") > ts_of(&s.value, "created_at") {
                    c
                } else {
                    s
                },
            ),
            (s, c) => s.or(c),
        }
    })
}

/// Relevant processes, oldest first (for transcript and cross-process log reads).
pub fn relevant_oldest_first(processes: &[Stored]) -> Vec<&Stored> {
    let mut v: Vec<&Stored> = processes.iter().filter(|p| is_relevant(&p.value)).collect();
    v.sort_by(|a, b| {
        ts_of(&a.value, "created_at")
            .cmp(&ts_of(&b.value, "created_at"))
            .then(a.id.cmp(&b.id))
    });
    v
}

/// The prompt a coding-agent process was started with, if its action carries one.
pub fn prompt_of(p: &Value) -> Option<String> {
    p.get("executor_action")?
        .get("typ")?
        .get("prompt")?
        .as_str()
        .map(str::to_owned)
}

/// The executor named in a process's action (`executor_profile_id.executor`).
pub fn executor_of_process(p: &Value) -> Option<String> {
    p.get("executor_action")?
        .get("typ")?
        .get("executor_profile_id")?
        .get("executor")?
        .as_str()
        .map(str::to_owned)
}
