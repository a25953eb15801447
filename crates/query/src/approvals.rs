//! Tool approvals as read models: the `pending_approvals` of an attempt's status (the agent is
//! blocked on them) and `list_approvals` (per attempts or per project, filtered by status,
//! paged). Everything comes from the store's approvals index (`store::approvals`), which the
//! writer keeps in step with the log entries, so these reads never go upstream.
//!
//! An approval VK still holds `pending` blocks the agent only while its process runs: VK's
//! stdout reader waits for the answer, and a stopped or restarted process never asks again. So
//! `pending_approvals` (and `agent_waiting` in the list) count only approvals of running
//! processes; the list still shows the others as VK records them (`pending`).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::paging::{self, ListId, PageArgs, Part, SortKey};
use super::rows::ProcessRow;
use super::{Freshness, Query, View};
use vk_observer_store::StoreReader;
use vk_observer_store::approvals::{ApprovalRecord, ApprovalState};
use vk_observer_tool_error::ToolError;
use vk_observer_vk::ProcessStatus;

/// One approval the agent is waiting for.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct PendingApproval {
    /// Approval id (UUID string): pass it to respond_approval.
    pub approval_id: String,
    /// The execution process (UUID) whose tool call waits.
    pub execution_process_id: Uuid,
    /// The tool asking, as the agent names it (e.g. `Bash`, `Edit`).
    pub tool_name: String,
    /// What the tool would do: its command, path, query or url, on one line, at most 160
    /// characters.
    pub summary: String,
    /// When VK asked (RFC 3339, as VK wrote it).
    pub requested_at: Option<String>,
    /// When VK gives up and records `timed_out` (RFC 3339; VK waits 1 hour).
    pub timeout_at: Option<String>,
    /// Milliseconds since VK asked (now − `requested_at`); absent when VK wrote no time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// Milliseconds left until VK times it out (`timeout_at` − now), 0 once past; absent
    /// when VK gives no expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
}

impl PendingApproval {
    fn of(r: &ApprovalRecord) -> Self {
        let clock = Clock::of(r, Utc::now());
        PendingApproval {
            age_ms: clock.age_ms,
            expires_in_ms: clock.expires_in_ms,
            approval_id: r.approval_id.clone(),
            execution_process_id: r.execution_process_id,
            tool_name: r.tool_name.clone(),
            summary: r.summary.clone(),
            requested_at: r.requested_at.clone(),
            timeout_at: r.timeout_at.clone(),
        }
    }
}

/// The times an orchestrator decides on: how long an approval has waited and how long VK
/// still waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Clock {
    age_ms: Option<u64>,
    expires_in_ms: Option<u64>,
}

impl Clock {
    /// `expires_in_ms` only while the approval is pending: once answered VK no longer times it
    /// out. Both are clamped at 0 (a clock skewed ahead of VK's never gives a negative age).
    fn of(r: &ApprovalRecord, now: DateTime<Utc>) -> Self {
        let ms = |from: DateTime<Utc>, to: DateTime<Utc>| {
            u64::try_from((to - from).num_milliseconds()).unwrap_or(0)
        };
        let at = |t: &Option<String>| {
            t.as_deref()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc))
        };
        Clock {
            age_ms: at(&r.requested_at).map(|t| ms(t, now)),
            expires_in_ms: (r.state == ApprovalState::Pending)
                .then(|| at(&r.timeout_at).map(|t| ms(now, t)))
                .flatten(),
        }
    }
}

/// Running processes among an attempt's process rows.
fn running(processes: &[(Uuid, ProcessRow)]) -> BTreeSet<Uuid> {
    processes
        .iter()
        .filter(|(_, p)| ProcessStatus::Running.is(p.status()))
        .map(|(id, _)| *id)
        .collect()
}

/// The approvals the attempt's agent is blocked on (pending, process running), oldest first.
pub(crate) fn waiting_approvals(
    reader: &StoreReader,
    attempt: Uuid,
    processes: &[(Uuid, ProcessRow)],
) -> Result<Vec<PendingApproval>, ToolError> {
    let live = running(processes);
    let mut out: Vec<_> = reader
        .approvals_of_attempt(attempt)?
        .iter()
        .filter(|r| r.state == ApprovalState::Pending && live.contains(&r.execution_process_id))
        .map(PendingApproval::of)
        .collect();
    out.sort_by(|a, b| a.requested_at.cmp(&b.requested_at));
    Ok(out)
}

/// What an attempt is waiting for, when that is not just its process running.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WaitingFor {
    /// The agent is blocked until a pending approval is answered (respond_approval) or VK
    /// times it out.
    Approval,
}

/// Which approvals `list_approvals` returns.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum StatusFilter {
    /// Not answered yet (VK's `pending`), the default.
    #[default]
    Pending,
    /// Approved (the tool ran or is running).
    Approved,
    /// Denied, with the reason if one was given.
    Denied,
    /// VK stopped waiting (1 hour) and denied the tool.
    TimedOut,
    /// Approved, denied or timed out.
    Answered,
    /// Every approval.
    All,
}

impl StatusFilter {
    fn keeps(self, s: ApprovalState) -> bool {
        match self {
            StatusFilter::Pending => s == ApprovalState::Pending,
            StatusFilter::Approved => s == ApprovalState::Approved,
            StatusFilter::Denied => s == ApprovalState::Denied,
            StatusFilter::TimedOut => s == ApprovalState::TimedOut,
            StatusFilter::Answered => s != ApprovalState::Pending,
            StatusFilter::All => true,
        }
    }
    fn as_str(self) -> &'static str {
        match self {
            StatusFilter::Pending => "pending",
            StatusFilter::Approved => "approved",
            StatusFilter::Denied => "denied",
            StatusFilter::TimedOut => "timed_out",
            StatusFilter::Answered => "answered",
            StatusFilter::All => "all",
        }
    }
}

/// One approval in `list_approvals`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ApprovalItem {
    /// Approval id (UUID string): pass it to respond_approval.
    pub approval_id: String,
    /// Attempt (UUID) whose agent asked.
    pub attempt_id: Uuid,
    /// Execution process (UUID) whose tool call asked.
    pub execution_process_id: Uuid,
    /// The tool asking (e.g. `Bash`).
    pub tool_name: String,
    /// Its command, path, query or url, on one line, at most 160 characters.
    pub summary: String,
    /// `pending`, `approved`, `denied` or `timed_out`, as VK recorded it in the log.
    pub status: String,
    /// The reason given with a denial; null otherwise.
    pub reason: Option<String>,
    /// True when the agent is blocked on it now (pending and its process running).
    pub agent_waiting: bool,
    /// When VK asked (RFC 3339).
    pub requested_at: Option<String>,
    /// When VK stops waiting (RFC 3339).
    pub timeout_at: Option<String>,
    /// Milliseconds since VK asked (now − `requested_at`); absent when VK wrote no time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// Milliseconds left until VK times it out (`timeout_at` − now), 0 once past; only on a
    /// pending approval that has an expiry (an answered one no longer times out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
}

/// Answer of `list_approvals`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ApprovalList {
    /// The approvals of this page, oldest request first.
    pub approvals: Vec<ApprovalItem>,
    /// Number of approvals on this page.
    pub count: usize,
    /// Approvals matching the filter on all pages.
    pub total: usize,
    /// True when more pages follow.
    pub has_more: bool,
    /// Pass as `cursor` (with the same arguments) for the next page; null on the last page.
    pub next_cursor: Option<String>,
    /// Requested attempt ids the cache does not know.
    pub not_found: Vec<Uuid>,
    /// Store token of this read (pass to wait_for_attempt_change as since_token).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// Whose approvals to list.
#[derive(Debug, Clone)]
pub enum ApprovalScope {
    Attempts(Vec<Uuid>),
    Project(Uuid),
}

impl ApprovalScope {
    /// The cursor scope: bound to the ids and the filter, so a cursor of another list is refused.
    fn list_scope(&self, filter: StatusFilter) -> Uuid {
        let mut text = filter.as_str().to_string();
        match self {
            ApprovalScope::Attempts(ids) => {
                let set: BTreeSet<_> = ids.iter().collect();
                set.iter().for_each(|id| text.push_str(&id.to_string()));
            }
            ApprovalScope::Project(p) => text.push_str(&format!("project:{p}")),
        }
        Uuid::from_u64_pair(
            fnv1a(text.as_bytes(), 0xcbf2_9ce4_8422_2325),
            fnv1a(text.as_bytes(), 7),
        )
    }
}

/// FNV-1a over `bytes` from `seed`: a stable fingerprint (cursor scopes only, not security).
fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    bytes.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn item(r: &ApprovalRecord, live: &BTreeSet<Uuid>, now: DateTime<Utc>) -> ApprovalItem {
    let clock = Clock::of(r, now);
    ApprovalItem {
        age_ms: clock.age_ms,
        expires_in_ms: clock.expires_in_ms,
        approval_id: r.approval_id.clone(),
        attempt_id: r.attempt_id,
        execution_process_id: r.execution_process_id,
        tool_name: r.tool_name.clone(),
        summary: r.summary.clone(),
        status: r.state.as_str().to_string(),
        reason: r.reason.clone(),
        agent_waiting: r.state == ApprovalState::Pending && live.contains(&r.execution_process_id),
        requested_at: r.requested_at.clone(),
        timeout_at: r.timeout_at.clone(),
    }
}

fn sort_key(i: &ApprovalItem) -> SortKey {
    vec![
        Part::Text(i.requested_at.clone().unwrap_or_default()),
        Part::Text(i.approval_id.clone()),
    ]
}

impl Query {
    /// `list_approvals`: the approvals of the attempts (or of every attempt of the project)
    /// matching `filter`, oldest request first, in pages.
    pub fn list_approvals(
        &self,
        scope: ApprovalScope,
        filter: StatusFilter,
        args: &PageArgs,
    ) -> Result<ApprovalList, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        let (attempts, not_found) = attempts_in(&reader, &scope)?;
        let mut items = Vec::new();
        let now = Utc::now();
        for a in attempts {
            let processes = reader.processes_of_attempt_as::<ProcessRow>(a)?;
            let live = running(&processes);
            items.extend(
                reader
                    .approvals_of_attempt(a)?
                    .iter()
                    .filter(|r| filter.keeps(r.state))
                    .map(|r| item(r, &live, now)),
            );
        }
        let list = ListId {
            tool: "list_approvals",
            field: "cursor",
            scope: Some(scope.list_scope(filter)),
        };
        let page = paging::page(list, items, args, sort_key)?;
        Ok(ApprovalList {
            count: page.items.len(),
            approvals: page.items,
            total: page.total,
            has_more: page.has_more,
            next_cursor: page.next_cursor,
            not_found,
            token,
            freshness,
        })
    }
}

/// The cached attempts of the scope, and the requested attempt ids the cache lacks.
fn attempts_in(
    reader: &StoreReader,
    scope: &ApprovalScope,
) -> Result<(Vec<Uuid>, Vec<Uuid>), ToolError> {
    match scope {
        ApprovalScope::Attempts(ids) => {
            let (mut found, mut missing) = (Vec::new(), Vec::new());
            let mut seen = BTreeSet::new();
            for id in ids.iter().filter(|id| seen.insert(**id)) {
                match reader.attempt(*id)? {
                    Some(_) => found.push(*id),
                    None => missing.push(*id),
                }
            }
            Ok((found, missing))
        }
        ApprovalScope::Project(p) => {
            super::target::project(reader, *p)?;
            let mut out = Vec::new();
            for t in reader.tasks_of_project(*p)? {
                out.extend(reader.attempts_of_task(t.id)?.iter().map(|a| a.id));
            }
            Ok((out, Vec::new()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: ApprovalState, timeout_at: Option<&str>) -> ApprovalRecord {
        ApprovalRecord {
            approval_id: "a".into(),
            attempt_id: Uuid::nil(),
            execution_process_id: Uuid::nil(),
            entry_index: 0,
            tool_name: "Bash".into(),
            summary: String::new(),
            state,
            reason: None,
            requested_at: Some("2026-01-01T10:00:00.000Z".into()),
            timeout_at: timeout_at.map(str::to_string),
            token: 0,
        }
    }

    fn at(t: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn age_and_time_left_are_clamped_and_only_pending_expires() {
        let now = at("2026-01-01T10:00:30Z");
        let pending = record(ApprovalState::Pending, Some("2026-01-01T11:00:00Z"));
        let c = Clock::of(&pending, now);
        assert_eq!((c.age_ms, c.expires_in_ms), (Some(30_000), Some(3_570_000)));
        // Past the timeout (VK has not rewritten the entry yet): 0, never negative.
        let late = Clock::of(&pending, at("2026-01-01T12:00:00Z"));
        assert_eq!(late.expires_in_ms, Some(0));
        // A clock behind VK's: age 0.
        let early = Clock::of(&pending, at("2026-01-01T09:59:00Z"));
        assert_eq!(early.age_ms, Some(0));
        // No expiry from VK, or answered: absent.
        let none = Clock::of(&record(ApprovalState::Pending, None), now);
        assert_eq!(none.expires_in_ms, None);
        let answered = Clock::of(
            &record(ApprovalState::Approved, Some("2026-01-01T11:00:00Z")),
            now,
        );
        assert_eq!(
            (answered.age_ms, answered.expires_in_ms),
            (Some(30_000), None)
        );
        let mut unknown = pending.clone();
        unknown.requested_at = Some("t0".into());
        assert_eq!(Clock::of(&unknown, now).age_ms, None);
    }
}
