//! Activity feeds (`tail_project_activity`, `tail_task_activity`, and the activity of a
//! project wait): pages of `store::feed` items in one of two directions.
//!
//! - **Forward** (`since_token`): items committed after the token, oldest first. A page never
//!   splits one commit (`StoreReader::activity_after`), and reads stop at the token published
//!   before the read, so `next_since_token` — the last item's token while more follow, the read's
//!   token once caught up — resumes with no gap and no duplicate, across restarts too (tokens
//!   and items are durable together). A token from another store epoch, from the future, or
//!   older than the retention floor has lost items: the page starts at the oldest item kept and
//!   says `token_reset`.
//! - **Backward** (`cursor`, or neither argument): newest first, older pages by an opaque
//!   key-based cursor (`paging`'s format, bound to the tool and scope).
//!
//! [`ActivityRequest::new`] is the one entry (tools and resources): it refuses both modes at
//! once (`invalid_argument`, reason `mixed_pagination`).

use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::detail::Detail;
use super::paging::{self, ListId, PAGE_DEFAULT, PAGE_MAX, Part};
use super::{Freshness, Query, Since};
use vk_observer_store::StoreReader;
use vk_observer_store::audit::{AuditEntry, AuditFilter};
use vk_observer_store::feed::{ActivityKind, FeedEntry, FeedScope};
use vk_observer_tool_error::ToolError;

/// Most audit entries one activity page carries.
const AUDIT_PER_PAGE: usize = 50;

/// Which feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivityScope {
    Project(Uuid),
    Task(Uuid),
}

impl ActivityScope {
    fn feed(self) -> FeedScope {
        match self {
            ActivityScope::Project(p) => FeedScope::Project(p),
            ActivityScope::Task(t) => FeedScope::Task(t),
        }
    }
    fn list(self) -> ListId {
        let (tool, scope) = match self {
            ActivityScope::Project(p) => ("tail_project_activity", p),
            ActivityScope::Task(t) => ("tail_task_activity", t),
        };
        ListId {
            tool,
            field: "cursor",
            scope: Some(scope),
        }
    }
}

/// Where a page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// The newest items, newest first.
    Newest,
    /// Items after this `since_token`, oldest first.
    After(String),
    /// Items older than this cursor, newest first.
    Before(String),
}

/// A validated feed request.
#[derive(Debug, Clone)]
pub struct ActivityRequest {
    pub scope: ActivityScope,
    pub position: Position,
    pub limit: usize,
    pub detail: Detail,
}

impl ActivityRequest {
    /// From a tool's (or resource's) arguments: at most one of `since_token` and `cursor`;
    /// `limit` is capped at 200 (default 50); `detail` 0 (the default) is compact items: kind,
    /// token, ids and status facts; 1 and 2 add titles, changed fields, commit time and change
    /// counts (items hold no VK objects, so 2 says no more than 1).
    pub fn new(
        scope: ActivityScope,
        since_token: Option<String>,
        cursor: Option<String>,
        limit: Option<u32>,
        detail: Option<Detail>,
    ) -> Result<ActivityRequest, ToolError> {
        let position = match (since_token, cursor) {
            (Some(_), Some(_)) => {
                return Err(ToolError::mixed_pagination(
                    &["since_token", "cursor"],
                    "Pass since_token (newer items, oldest first) or cursor (older items, newest first), not both.",
                ));
            }
            (Some(t), None) => Position::After(t),
            (None, Some(c)) => Position::Before(c),
            (None, None) => Position::Newest,
        };
        let limit = match limit {
            Some(0) => return Err(ToolError::invalid_field("limit", "limit must be 1–200.")),
            Some(n) => (n as usize).min(PAGE_MAX),
            None => PAGE_DEFAULT,
        };
        let detail = detail.unwrap_or_default();
        Ok(ActivityRequest {
            scope,
            position,
            limit,
            detail,
        })
    }
}

/// One thing that happened, at the token it was committed at.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ActivityItem {
    /// What happened: `task_created`, `task_updated`, `task_deleted`, `attempt_started`,
    /// `process_started`, `process_ended`, `follow_up_sent`, `change_summary_moved`,
    /// `approval_requested`, `approval_answered` or `branch_merged`.
    pub kind: ActivityKind,
    /// Token of the commit that made this change (opaque); pass the last item's token as
    /// `since_token` to continue after it.
    pub token: String,
    /// Project (UUID); absent when the task's project was not cached yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<Uuid>,
    /// Task (UUID).
    pub task_id: Uuid,
    /// Attempt (UUID) of attempt, process and change-summary items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<Uuid>,
    /// Execution process (UUID) of process and follow-up items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_process_id: Option<Uuid>,
    /// Session (UUID) of process and follow-up items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    /// Task items: the task's status now (`todo`, `inprogress`, `inreview`, `done`,
    /// `cancelled`); process items: the process status (`running`, `completed`, `failed`,
    /// `killed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// `task_updated` whose status moved: the status before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_status: Option<String>,
    /// Process items: why it ran (`codingagent`, `setupscript`, `cleanupscript`, `devserver`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_reason: Option<String>,
    /// `process_ended`: the exit code (absent for a killed process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Full detail, task items: the task's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Full detail, `task_updated`: the task fields that changed (VK's names), sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
    /// Full detail, `change_summary_moved`: files changed now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_count: Option<u64>,
    /// Full detail, `change_summary_moved`: lines added now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added: Option<u64>,
    /// Full detail, `change_summary_moved`: lines deleted now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<u64>,
    /// Full detail: when the daemon committed the change (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Approval items: the approval (answer it with respond_approval while pending).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// `approval_requested`: the tool the agent wants to run (e.g. `Bash`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// `branch_merged`: the repository (UUID).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_id: Option<Uuid>,
    /// `branch_merged`: the merge commit VK recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_commit: Option<String>,
}

/// Which way a page runs.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Items after `since_token`, oldest first.
    OldestFirst,
    /// The newest items (or those older than `cursor`), newest first.
    NewestFirst,
}

/// A page of an activity feed.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ActivityPage {
    /// The items, in `order`.
    pub items: Vec<ActivityItem>,
    /// `oldest_first` (with `since_token`) or `newest_first` (with `cursor` or neither).
    pub order: Order,
    /// Pass as `since_token` to get what happened after this page: the last item's token while
    /// `has_more` (oldest first), else the token this read covered.
    pub next_since_token: String,
    /// Oldest first: more items follow now (call again with `next_since_token`). Newest first:
    /// older items remain (call again with `next_cursor`).
    pub has_more: bool,
    /// Newest first: opaque cursor for the next OLDER page; null when none remain or oldest
    /// first.
    pub next_cursor: Option<String>,
    /// True when `since_token` was from another store generation, from the future, or older
    /// than the retention horizon: items may have been missed; this page starts at the oldest
    /// item kept.
    pub token_reset: bool,
    /// Store token of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
    /// Detail 1 and 2: the mutations callers asked of VK in this scope during the time this
    /// page's items span (up to now on the newest page), newest first, at most 50: who (token
    /// name), which tool, on which ids, the outcome and VK's time (`vk-observer audit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<Vec<AuditEntry>>,
}

fn item(token: String, e: FeedEntry, detail: Detail) -> ActivityItem {
    let i = e.item;
    let full = detail != Detail::Compact;
    let keep = |v| if full { v } else { None };
    ActivityItem {
        kind: i.kind,
        token,
        project_id: i.project,
        task_id: i.task,
        attempt_id: i.attempt,
        execution_process_id: i.process,
        session_id: i.session,
        status: i.status,
        previous_status: i.previous_status,
        run_reason: i.run_reason,
        exit_code: i.exit_code,
        title: keep(i.title),
        fields: if full { i.fields } else { None },
        file_count: if full { i.file_count } else { None },
        added: if full { i.added } else { None },
        deleted: if full { i.deleted } else { None },
        at: full
            .then(|| chrono::DateTime::from_timestamp_millis(i.at).map(vk_observer_vk::rfc3339))
            .flatten(),
        approval_id: i.approval_id,
        tool: i.tool,
        repo_id: i.repo,
        merge_commit: i.merge_commit,
    }
}

impl Query {
    /// One page of a feed (see the module doc).
    pub fn activity(&self, req: &ActivityRequest) -> Result<ActivityPage, ToolError> {
        let since = match &req.position {
            Position::After(raw) => Some(self.since(Some(raw), "since_token")?),
            _ => None,
        };
        self.activity_page(req, since)
    }

    /// The oldest-first page after `since` (`Since::None`: from the oldest item kept), for
    /// callers that judged the token already (`wait_for_attempt_change`'s `include_activity`).
    pub(crate) fn activity_after(
        &self,
        scope: ActivityScope,
        since: Since,
        limit: usize,
    ) -> Result<ActivityPage, ToolError> {
        let req = ActivityRequest {
            scope,
            position: Position::After(String::new()),
            limit,
            detail: Detail::Standard,
        };
        self.activity_page(&req, Some(since))
    }

    fn activity_page(
        &self,
        req: &ActivityRequest,
        since: Option<Since>,
    ) -> Result<ActivityPage, ToolError> {
        let cap = self.store.token();
        let reader = self.read();
        let freshness = self.freshness();
        self.check_activity_scope(&reader, req.scope)?;
        let after = since.clone().unwrap_or(Since::None);
        let mut page = match (&req.position, since) {
            (_, Some(since)) => forward(&reader, req, since, cap.seq)?,
            (Position::After(_), None) => unreachable_position()?,
            (Position::Newest, None) => backward(&reader, req, None, cap.seq)?,
            (Position::Before(c), None) => {
                let key = paging::decode(req.scope.list(), c)?;
                backward(&reader, req, Some(cursor_position(req, &key)?), cap.seq)?
            }
        };
        let next = page.next_since.unwrap_or(cap.seq);
        let newest = match page.order {
            Order::OldestFirst => !page.has_more,
            Order::NewestFirst => req.position == Position::Newest,
        };
        let print = self.token_printer();
        let audit = (req.detail != Detail::Compact)
            .then(|| self.audit_of_page(req.scope, &page.entries, newest))
            .transpose()?;
        Ok(ActivityPage {
            items: page
                .entries
                .drain(..)
                .map(|e| item(print(e.token), e, req.detail))
                .collect(),
            order: page.order,
            next_since_token: self.token_after(&after, next),
            has_more: page.has_more,
            next_cursor: page.next_cursor,
            token_reset: page.token_reset,
            token: self.token_after(&after, cap.seq),
            freshness,
            audit,
        })
    }

    /// The audit entries of a scope between a page's oldest item and its newest (or now).
    fn audit_of_page(
        &self,
        scope: ActivityScope,
        entries: &[FeedEntry],
        newest: bool,
    ) -> Result<Vec<AuditEntry>, ToolError> {
        let times = entries.iter().map(|e| e.item.at);
        let (Some(from), Some(to)) = (times.clone().min(), times.max()) else {
            return Ok(Vec::new());
        };
        let mut filter = AuditFilter {
            since_ms: Some(from),
            ..AuditFilter::default()
        };
        match scope {
            ActivityScope::Project(p) => filter.project = Some(p),
            ActivityScope::Task(t) => filter.task = Some(t),
        }
        let mut found = self
            .store
            .audit(&filter, AUDIT_PER_PAGE)
            .map_err(ToolError::internal)?;
        if !newest {
            found.retain(|e| e.at_ms <= to);
        }
        Ok(found)
    }

    /// An unknown scope is `not_found` unless its feed still holds items (a deleted task's or
    /// project's activity stays readable until the horizon).
    fn check_activity_scope(&self, r: &StoreReader, scope: ActivityScope) -> Result<(), ToolError> {
        let known = match scope {
            ActivityScope::Project(p) => r.project(p)?.is_some(),
            ActivityScope::Task(t) => r.task(t)?.is_some(),
        };
        if known || r.activity_exists(scope.feed())? {
            return Ok(());
        }
        Err(match scope {
            ActivityScope::Project(p) => ToolError::unknown_project(p),
            ActivityScope::Task(t) => ToolError::unknown_task(t),
        })
    }
}

/// `Position::After` always comes with its judged token; kept as an error, never a panic.
fn unreachable_position() -> Result<Found, ToolError> {
    Err(ToolError::internal(
        "an oldest-first page without its since_token",
    ))
}

fn forward(
    reader: &StoreReader,
    req: &ActivityRequest,
    since: Since,
    cap: u64,
) -> Result<Found, ToolError> {
    let floor = reader.activity_floor()?;
    let (after, token_reset) = match &since {
        Since::After(cut) if cut.floor() >= floor => (cut.floor(), false),
        Since::None => (floor, false),
        _ => (floor, true),
    };
    let unseen = |t| since.cut().is_none_or(|cut| !cut.saw(t));
    let (entries, has_more) =
        reader.activity_after_where(req.scope.feed(), after, cap, req.limit, unseen)?;
    let next_since = match entries.last() {
        Some(last) if has_more => Some(last.token),
        _ => None,
    };
    Ok(Found {
        entries,
        order: Order::OldestFirst,
        has_more,
        next_since,
        next_cursor: None,
        token_reset,
    })
}

/// What a read found, before rendering.
struct Found {
    entries: Vec<FeedEntry>,
    order: Order,
    has_more: bool,
    /// None: the read's token.
    next_since: Option<u64>,
    next_cursor: Option<String>,
    token_reset: bool,
}

fn backward(
    reader: &StoreReader,
    req: &ActivityRequest,
    before: Option<(u64, u32)>,
    cap: u64,
) -> Result<Found, ToolError> {
    let (entries, has_more) = reader.activity_before(req.scope.feed(), before, cap, req.limit)?;
    let next_cursor = match entries.last() {
        Some(last) if has_more => Some(paging::encode(
            req.scope.list(),
            vec![Part::Int(last.token as i64), Part::Int(last.seq as i64)],
        )),
        _ => None,
    };
    Ok(Found {
        entries,
        order: Order::NewestFirst,
        has_more,
        next_since: None,
        next_cursor,
        token_reset: false,
    })
}

fn cursor_position(req: &ActivityRequest, key: &[Part]) -> Result<(u64, u32), ToolError> {
    match key {
        [Part::Int(t), Part::Int(s)] if *t >= 0 && *s >= 0 && *s <= u32::MAX as i64 => {
            Ok((*t as u64, *s as u32))
        }
        _ => Err(ToolError::invalid_field(
            "cursor",
            format!(
                "Malformed cursor. Pass `next_cursor` from the previous {} answer unchanged.",
                req.scope.list().tool
            ),
        )),
    }
}
