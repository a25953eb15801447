//! `tail_attempt_logs`: pages of a process log read by key range from the cache. Three modes —
//! tail (newest page), `cursor` (the page below an index) and `after_entry_index` (what is newer
//! than what the client has) — each costing O(page), whatever the stored history. With the
//! previous page's token the answer also carries entries replaced in place since then and the
//! entries an earlier process of the attempt wrote after it (a follow-up switched processes).

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::compact_log::{CompactEntry, compact, outcome_only};
use super::detail::{Detail, Rules};
use super::target;
use super::{Freshness, Query, Since, View};
use vk_observer_store::StoreReader;
use vk_observer_store::keys::Channel;
use vk_observer_store::reader::{Stored, StoredEntry};
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{self as vk, relevant_oldest_first};

pub const LOG_PAGE_DEFAULT: usize = 50;
pub(crate) const LOG_PAGE_MAX: usize = 500;

/// One log entry: at detail 2 VK's entry verbatim (`entry`), below it the compact form
/// (`kind`, `text`, `tool`…; see `query::compact_log`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LogEntry {
    /// Index of the entry within its process log (0-based; raw and normalized are separate).
    pub entry_index: u64,
    /// Detail 2 only: VK's entry: normalized `{"type":"NORMALIZED_ENTRY","content":{timestamp,
    /// entry_type, content, metadata?}}` or raw `{"type":"STDOUT"|"STDERR","content":"…"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub entry: Option<Box<RawValue>>,
    /// Detail 0/1: the entry in brief.
    #[serde(flatten)]
    pub compact: Option<CompactEntry>,
}

/// An entry of another (earlier) process of the attempt.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ProcessLogEntry {
    /// The process that wrote it (UUID).
    pub execution_process_id: Uuid,
    /// Index within that process's log.
    pub entry_index: u64,
    /// Detail 2 only: VK's entry, as in `entries`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub entry: Option<Box<RawValue>>,
    /// Detail 0/1: the entry in brief.
    #[serde(flatten)]
    pub compact: Option<CompactEntry>,
}

/// An entry as `detail` shows it: (`entry`, `compact`), one of them set.
fn shown(
    raw: Box<RawValue>,
    channel: Channel,
    detail: Detail,
) -> (Option<Box<RawValue>>, Option<CompactEntry>) {
    match compact(raw, channel, detail) {
        Ok(c) => (None, Some(c)),
        Err(raw) => (Some(raw), None),
    }
}

fn log_entry(e: StoredEntry, channel: Channel, detail: Detail) -> LogEntry {
    let (entry, compact) = shown(e.entry, channel, detail);
    LogEntry {
        entry_index: e.index,
        entry,
        compact,
    }
}

/// How the page was selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    /// The newest `limit` entries.
    Tail,
    /// The `limit` entries just below this index (older history).
    Before(u64),
    /// Entries with a higher index than this one (incremental tailing).
    After(u64),
}

/// Answer of `tail_attempt_logs`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LogPage {
    /// The attempt (UUID).
    pub attempt_id: Uuid,
    /// The process whose log this is (UUID): the latest coding agent, else the latest
    /// setup/cleanup script; null when the attempt has no such process yet.
    pub execution_process_id: Option<Uuid>,
    /// `codingagent`, `setupscript` or `cleanupscript`; null with no process.
    pub run_reason: Option<String>,
    /// Status of that process (`running`, `completed`, `failed`, `killed`); null with no process.
    pub process_status: Option<String>,
    /// `normalized` or `raw`.
    pub channel: String,
    /// The page, oldest first.
    pub entries: Vec<LogEntry>,
    /// Highest entry index stored for this process and channel; null if the log is empty.
    pub latest_entry_index: Option<u64>,
    /// Tail and `cursor` pages: older entries exist below this page. `after_entry_index` pages:
    /// newer entries exist beyond this page (call again with the last index you got).
    pub has_more: bool,
    /// Pass as `cursor` to page older history; null when there is none (or in after mode).
    pub next_cursor: Option<u64>,
    /// With `since_token`: entries of this process at or below the page that were rewritten in
    /// place since that token (e.g. a tool call that got its result). Replace your copies; at
    /// detail 0 a tool call that only got its outcome carries `tool` {name, status, exit…}
    /// alone (update those fields of the call you hold at that index).
    pub replaced: Vec<LogEntry>,
    /// With `since_token`: entries earlier processes of the attempt wrote after that token
    /// (oldest first), so switching to a follow-up's process never loses the end of the last one.
    pub earlier_process_entries: Vec<ProcessLogEntry>,
    /// True when `earlier_process_entries` hit `limit` and holds only the newest of them: read
    /// the rest with `execution_process_id` plus `after_entry_index`.
    pub earlier_process_has_more: bool,
    /// True when, judged by `since_token`, this process is new to the client (a follow-up
    /// started it): the page then starts at its entry 0 whatever `after_entry_index` said.
    pub process_changed: bool,
    /// True once the process ended and its whole log is cached.
    pub log_complete: bool,
    /// True when older entries of this log are gone for good: VK dropped history before the
    /// cache saw it (its log history answered `history_truncated`), or the cache's per-log
    /// entry cap (`max_entries_per_process`) removed the oldest (the lowest stored index is
    /// above 0). Paging with `cursor` stops at what is left; do not retry for the rest.
    pub history_truncated: bool,
    /// Store token at the time of this read; pass it as `since_token` next time.
    pub token: String,
    /// True when `since_token` was from another store generation or the future; `replaced`
    /// and `earlier_process_entries` are then empty and the client should re-read from scratch.
    pub token_reset: bool,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// What each detail level shows of a log page's own fields (entries are built per level by
/// `compact_log`): seed 003's list at every level — the attempt, the process (null when none:
/// a changed `execution_process_id` tells the client to reset its highest seen index), the
/// channel, the entries, `has_more` and `history_truncated` even when empty or false; the
/// process's run reason from 1 (`process_changed` says when a follow-up switched processes).
pub const LOG_PAGE_RULES: Rules = Rules {
    finish: None,
    kept: &[
        "attempt_id",
        "execution_process_id",
        "channel",
        "entries",
        "has_more",
        "history_truncated",
    ],
    standard: &["run_reason"],
    verbatim: &[],
    nested: &[],
};

pub struct LogRequest {
    pub attempt: Uuid,
    pub channel: Channel,
    pub mode: LogMode,
    pub limit: usize,
    pub since: Since,
    pub process: Option<Uuid>,
    /// How entries are shown (the page's own fields are shaped in `mcp`).
    pub detail: Detail,
}

fn entries(v: Vec<StoredEntry>, req: &LogRequest) -> Vec<LogEntry> {
    v.into_iter()
        .map(|e| log_entry(e, req.channel, req.detail))
        .collect()
}

impl Query {
    pub fn tail_logs(&self, req: LogRequest) -> Result<LogPage, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view_after(&req.since);
        let attempt = target::attempt(&reader, req.attempt)?;
        // Every entry of an attempt is of one host: the client's cut is one local token here.
        let since = req.since.cut().map(|cut| {
            let host = attempt.value.get(vk_observer_store::events::HOST_FIELD);
            cut.for_host(host.and_then(serde_json::Value::as_str))
        });
        let processes = reader.processes_of_attempt(req.attempt)?;
        let process = target::log_process(&processes, req.process)?;
        let limit = req.limit.clamp(1, LOG_PAGE_MAX);
        let mut page = LogPage {
            attempt_id: req.attempt,
            execution_process_id: process.map(|p| p.id),
            run_reason: process.map(|p| vk::run_reason(&p.value).to_string()),
            process_status: process.map(|p| vk::status(&p.value).to_string()),
            channel: req.channel.as_str().to_string(),
            entries: Vec::new(),
            latest_entry_index: None,
            has_more: false,
            next_cursor: None,
            replaced: Vec::new(),
            earlier_process_entries: Vec::new(),
            earlier_process_has_more: false,
            process_changed: false,
            log_complete: false,
            history_truncated: false,
            token,
            token_reset: req.since.token_reset(),
            freshness,
        };
        let Some(process) = process else {
            return Ok(page);
        };
        let pid = process.id;
        let ch = req.channel;
        let bounds = reader.log_bounds(pid, ch)?;
        page.latest_entry_index = bounds.map(|(_, hi)| hi);
        page.history_truncated =
            bounds.is_some_and(|(lo, _)| lo > 0) || reader.log_history_lost(pid, ch)?;
        page.log_complete = reader.logs_complete(pid, ch)?;
        read_page(&reader, &mut page, pid, &req, since, limit)?;
        if let Some(since) = since {
            page.replaced = replaced_entries(&reader, &page, pid, &req, since, limit)?;
            let (earlier, more) =
                earlier_entries(&reader, &processes, process, &req, since, limit)?;
            page.earlier_process_entries = earlier;
            page.earlier_process_has_more = more;
        }
        Ok(page)
    }
}

/// Fill `entries`, `has_more`, `next_cursor` and `process_changed` of `page` for the mode
/// (`since`: the client's cut as one local token of the attempt's host).
fn read_page(
    reader: &StoreReader,
    page: &mut LogPage,
    pid: Uuid,
    req: &LogRequest,
    since: Option<u64>,
    limit: usize,
) -> Result<(), ToolError> {
    let ch = req.channel;
    match req.mode {
        LogMode::Tail | LogMode::Before(_) => {
            let before = match req.mode {
                LogMode::Before(c) => Some(c),
                _ => None,
            };
            let mut got = reader.log_tail(pid, ch, before, limit + 1)?;
            if got.len() > limit {
                got.remove(0);
                page.has_more = true;
            }
            page.next_cursor = if page.has_more {
                got.first().map(|e| e.index)
            } else {
                None
            };
            page.entries = entries(got, req);
        }
        LogMode::After(k) => {
            // A process none of whose entries existed at `since_token` is new to the client
            // (a follow-up started it): its `after_entry_index` belonged to the old process.
            let first = reader.log_range(pid, ch, 0, u64::MAX, 1)?;
            let new_process = since.is_some_and(|t| first.first().is_some_and(|e| e.token > t));
            page.process_changed = new_process;
            let from = if new_process { 0 } else { k.saturating_add(1) };
            let mut got = reader.log_range(pid, ch, from, u64::MAX, limit + 1)?;
            if got.len() > limit {
                got.pop();
                page.has_more = true;
            }
            page.entries = entries(got, req);
        }
    }
    Ok(())
}

/// Entries of this process replaced in place since `since` that the client holds (not on this
/// page, and at or below its `after_entry_index`), at most `limit`.
fn replaced_entries(
    reader: &StoreReader,
    page: &LogPage,
    pid: Uuid,
    req: &LogRequest,
    since: u64,
    limit: usize,
) -> Result<Vec<LogEntry>, ToolError> {
    let shown: std::collections::HashSet<u64> =
        page.entries.iter().map(|e| e.entry_index).collect();
    let ceiling = match req.mode {
        LogMode::After(k) if !page.process_changed => Some(k),
        _ => None,
    };
    let mut replaced = Vec::new();
    for (idx, kept_call) in reader.replaced_since(pid, req.channel, since)? {
        if replaced.len() >= limit {
            break;
        }
        if shown.contains(&idx) || ceiling.is_some_and(|k| idx > k) {
            continue;
        }
        if let Some(e) = reader.log_entry(pid, req.channel, idx)? {
            let mut entry = log_entry(e, req.channel, req.detail);
            if kept_call && req.detail == Detail::Compact {
                entry.compact = entry.compact.map(outcome_only);
            }
            replaced.push(entry);
        }
    }
    Ok(replaced)
}

/// Entries appended after `since` by relevant processes created before `current`, oldest process
/// first. Appends carry increasing tokens, so a backward scan stops at the first older entry.
fn earlier_entries(
    reader: &StoreReader,
    processes: &[Stored],
    current: &Stored,
    req: &LogRequest,
    since: u64,
    limit: usize,
) -> Result<(Vec<ProcessLogEntry>, bool), ToolError> {
    let ch = req.channel;
    let current_created = vk::ts_of(&current.value, "created_at");
    let mut out = Vec::new();
    let mut more = false;
    for p in relevant_oldest_first(processes) {
        if p.id == current.id || vk::ts_of(&p.value, "created_at") > current_created {
            continue;
        }
        let mut fresh = Vec::new();
        let mut before = None;
        'scan: loop {
            let chunk = reader.log_tail(p.id, ch, before, 64)?;
            if chunk.is_empty() {
                break;
            }
            before = chunk.first().map(|e| e.index);
            for e in chunk.into_iter().rev() {
                if e.token <= since {
                    break 'scan;
                }
                if fresh.len() >= limit {
                    more = true;
                    break 'scan;
                }
                fresh.push(e);
            }
        }
        fresh.reverse();
        out.extend(fresh.into_iter().map(|e| {
            let (entry, compact) = shown(e.entry, ch, req.detail);
            ProcessLogEntry {
                execution_process_id: p.id,
                entry_index: e.index,
                entry,
                compact,
            }
        }));
        if out.len() > limit {
            out.drain(..out.len() - limit);
            more = true;
        }
    }
    Ok((out, more))
}
