//! The activity feed: what each committed batch changed, as items a client can follow in
//! commit order (`tail_project_activity`, `tail_task_activity`).
//!
//! **Why a feed is gapless and duplicate-free.** Items are derived by the writer from the real
//! differences a batch made (`apply::Pending` calls [`FeedItem`] constructors only where an
//! upsert or removal actually changed the cache), and written in the SAME atomic batch as the
//! change, under the batch's token: `ACTIVITY_PROJECT ‖ project ‖ token ‖ seq` and
//! `ACTIVITY_TASK ‖ task ‖ token ‖ seq`. Tokens strictly increase and are never reissued, so a
//! scan of one scope comes out in commit order, and "items after token t" is a key range that
//! no later commit can insert into. A batch that wrote feed items is flushed to disk before its
//! token is published, and readers stop at the published token, so an item a client has seen
//! survives a crash (a re-derived copy would otherwise appear under a new token). Pages forward
//! never split one commit, so the token of a page's last item is a complete resume point.
//!
//! **Retention.** The writer's retention pass drops items older than
//! `Retention::activity_horizon` and records the highest token it dropped as the feed's floor
//! (`meta::ACTIVITY_FLOOR`); a `since_token` below the floor has lost items: `token_reset`.
//!
//! New kinds (approvals, branch delivery) are one [`ActivityKind`] variant plus the hook that
//! builds them; readers render every kind the same way.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::StoreError;
use super::keys::{self, meta, table};
use super::overlay::Overlay;
use super::reader::StoreReader;

/// What happened. Stored and answered in snake_case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActivityKind {
    /// A task appeared in the cache (created in VK, or first seen).
    TaskCreated,
    /// A task's fields changed (`fields`; `previous_status` → `status` when the status moved).
    TaskUpdated,
    /// A task was deleted.
    TaskDeleted,
    /// An attempt (VK workspace) of a task appeared.
    AttemptStarted,
    /// An execution process appeared (`run_reason`, `status`).
    ProcessStarted,
    /// An execution process ended (`status`, `exit_code`, `run_reason`).
    ProcessEnded,
    /// A follow-up prompt started a coding agent in a session that already had one.
    FollowUpSent,
    /// The attempt's change summary changed (`file_count`, `added`, `deleted`).
    ChangeSummaryMoved,
    /// The coding agent asked for a tool approval (`approval_id`, `tool`).
    ApprovalRequested,
    /// A pending approval was answered or timed out (`status`: approved, denied, timed_out).
    ApprovalAnswered,
    /// VK recorded a merge of the attempt branch (`repo_id`, `merge_commit`), read from its
    /// branch status.
    BranchMerged,
}

impl ActivityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActivityKind::TaskCreated => "task_created",
            ActivityKind::TaskUpdated => "task_updated",
            ActivityKind::TaskDeleted => "task_deleted",
            ActivityKind::AttemptStarted => "attempt_started",
            ActivityKind::ProcessStarted => "process_started",
            ActivityKind::ProcessEnded => "process_ended",
            ActivityKind::FollowUpSent => "follow_up_sent",
            ActivityKind::ChangeSummaryMoved => "change_summary_moved",
            ActivityKind::ApprovalRequested => "approval_requested",
            ActivityKind::ApprovalAnswered => "approval_answered",
            ActivityKind::BranchMerged => "branch_merged",
        }
    }
}

/// One stored feed item (the token is in its key). Facts a kind does not have are absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedItem {
    pub kind: ActivityKind,
    /// Commit time, unix milliseconds.
    pub at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<Uuid>,
    pub task: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_commit: Option<String>,
    /// An item of the task feed committed before the task's project was known, copied into the
    /// project feed when the task arrives (never written to the task feed again).
    #[serde(skip)]
    pub adopted: bool,
    /// An item of this batch derived before its task's project was known, whose task arrived
    /// later in the same batch: written to the task feed only, where it stands; its adopted
    /// copy carries it to the project feed after `task_created`, as if the two had been
    /// committed apart (a fleet node merges a host's batches and must list what the host did).
    #[serde(skip)]
    pub task_feed_only: bool,
}

impl FeedItem {
    /// An item of `kind` about `task` with no other facts yet.
    pub(crate) fn new(kind: ActivityKind, task: Uuid, project: Option<Uuid>) -> Self {
        FeedItem {
            kind,
            at: 0,
            project,
            task,
            attempt: None,
            process: None,
            session: None,
            title: None,
            fields: None,
            status: None,
            previous_status: None,
            run_reason: None,
            exit_code: None,
            file_count: None,
            added: None,
            deleted: None,
            approval_id: None,
            tool: None,
            repo: None,
            merge_commit: None,
            adopted: false,
            task_feed_only: false,
        }
    }
}

/// A feed item with the token it was committed at.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEntry {
    pub token: u64,
    pub seq: u32,
    pub item: FeedItem,
}

/// Which feed: a project's or a task's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedScope {
    Project(Uuid),
    Task(Uuid),
}

impl FeedScope {
    fn table(self) -> u8 {
        match self {
            FeedScope::Project(_) => table::ACTIVITY_PROJECT,
            FeedScope::Task(_) => table::ACTIVITY_TASK,
        }
    }
    fn id(self) -> Uuid {
        match self {
            FeedScope::Project(id) | FeedScope::Task(id) => id,
        }
    }
    /// `table ‖ scope`: every key of this feed starts with it.
    pub(crate) fn prefix(self) -> [u8; 17] {
        keys::id_key(self.table(), self.id())
    }
    /// The key of item `seq` committed at `token` in this feed.
    pub(crate) fn key(self, token: u64, seq: u32) -> [u8; 29] {
        let mut k = [0u8; 29];
        k[..17].copy_from_slice(&self.prefix());
        k[17..25].copy_from_slice(&token.to_be_bytes());
        k[25..].copy_from_slice(&seq.to_be_bytes());
        k
    }
}

/// `(token, seq)` of a feed key.
pub(crate) fn position_of(key: &[u8]) -> Option<(u64, u32)> {
    let token = u64::from_be_bytes(key.get(17..25)?.try_into().ok()?);
    let seq = u32::from_be_bytes(key.get(25..29)?.try_into().ok()?);
    Some((token, seq))
}

/// Write a batch's items under `token`, in derivation order, into the task feed and (when the
/// project is known) the project feed. Returns the projects whose feed grew.
pub(super) fn write(
    ov: &mut Overlay<'_>,
    token: u64,
    items: &mut [FeedItem],
) -> Result<Vec<Uuid>, StoreError> {
    let at = chrono::Utc::now().timestamp_millis();
    let mut projects = Vec::new();
    for (seq, item) in items.iter_mut().enumerate() {
        item.at = at;
        let seq = seq as u32;
        let json = serde_json::to_vec(item).map_err(StoreError::Encode)?;
        if !item.adopted {
            ov.insert(&FeedScope::Task(item.task).key(token, seq), json.clone());
        }
        if let Some(p) = item.project.filter(|_| !item.task_feed_only) {
            ov.insert(&FeedScope::Project(p).key(token, seq), json);
            if !projects.contains(&p) {
                projects.push(p);
            }
        }
    }
    Ok(projects)
}

/// Retention: drop every item committed at or below the highest token of an item older than
/// `cutoff_ms`, in both feeds, and raise the floor to it. Returns the floor (unchanged when
/// nothing expired). A time horizon, enforced by token, so a scope never keeps an older item
/// than another scope's dropped one.
pub(super) fn prune(tree: &sled::Tree, cutoff_ms: i64) -> Result<u64, StoreError> {
    #[derive(Deserialize)]
    struct At {
        at: i64,
    }
    let floor_key = keys::meta_key(meta::ACTIVITY_FLOOR);
    let old_floor = read_floor(tree)?;
    let mut floor = old_floor;
    for t in [table::ACTIVITY_PROJECT, table::ACTIVITY_TASK] {
        for item in tree.scan_prefix([t]) {
            let (k, v) = item?;
            let Some((token, _)) = position_of(&k) else {
                continue;
            };
            let at = serde_json::from_slice::<At>(&v).map_or(i64::MIN, |a| a.at);
            if at < cutoff_ms && token > floor {
                floor = token;
            }
        }
    }
    if floor == old_floor {
        return Ok(floor);
    }
    let mut b = sled::Batch::default();
    for t in [table::ACTIVITY_PROJECT, table::ACTIVITY_TASK] {
        for item in tree.scan_prefix([t]) {
            let (k, _) = item?;
            if position_of(&k).is_some_and(|(token, _)| token <= floor) {
                b.remove(k);
            }
        }
    }
    b.insert(floor_key.clone(), floor.to_be_bytes().to_vec());
    tree.apply_batch(b)?;
    Ok(floor)
}

fn read_floor(tree: &sled::Tree) -> Result<u64, StoreError> {
    Ok(tree
        .get(keys::meta_key(meta::ACTIVITY_FLOOR))?
        .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes))
        .unwrap_or(0))
}

fn entry(k: &[u8], v: &[u8]) -> Option<FeedEntry> {
    let (token, seq) = position_of(k)?;
    Some(FeedEntry {
        token,
        seq,
        item: serde_json::from_slice(v).ok()?,
    })
}

impl StoreReader {
    /// Items dropped by retention had tokens at or below this (0: none dropped yet).
    pub fn activity_floor(&self) -> Result<u64, StoreError> {
        read_floor(self.tree())
    }

    /// Items of `scope` with tokens in `(after, upto]`, oldest first; stops at the first commit
    /// that would take the page past `limit` items (a first commit larger than `limit` comes
    /// whole, so a page never splits one commit). The flag: more items follow in the range.
    pub fn activity_after(
        &self,
        scope: FeedScope,
        after: u64,
        upto: u64,
        limit: usize,
    ) -> Result<(Vec<FeedEntry>, bool), StoreError> {
        self.activity_after_where(scope, after, upto, limit, |_| true)
    }

    /// [`StoreReader::activity_after`] of the items whose token `keep` keeps (a fleet node's
    /// reading of another node's token: the items of the hosts' messages the client had not
    /// seen); items left out count for nothing.
    pub fn activity_after_where(
        &self,
        scope: FeedScope,
        after: u64,
        upto: u64,
        limit: usize,
        keep: impl Fn(u64) -> bool,
    ) -> Result<(Vec<FeedEntry>, bool), StoreError> {
        let start = scope.key(after.saturating_add(1), 0);
        let end = scope.key(upto.saturating_add(1), 0);
        let mut out: Vec<FeedEntry> = Vec::new();
        for item in self.tree().range(start..end) {
            let (k, v) = item?;
            let Some(e) = entry(&k, &v) else { continue };
            if !keep(e.token) {
                continue;
            }
            if out.len() >= limit && out.last().is_some_and(|l| l.token != e.token) {
                return Ok((out, true));
            }
            out.push(e);
        }
        Ok((out, false))
    }

    /// Items of `scope` at or below `upto` and strictly before `before` ((token, seq); None:
    /// from the newest), newest first, at most `limit`. The flag: older items remain.
    pub fn activity_before(
        &self,
        scope: FeedScope,
        before: Option<(u64, u32)>,
        upto: u64,
        limit: usize,
    ) -> Result<(Vec<FeedEntry>, bool), StoreError> {
        let start = scope.key(0, 0);
        let top = scope.key(upto.saturating_add(1), 0);
        let end = match before {
            Some((t, s)) => scope.key(t, s).min(top),
            None => top,
        };
        let mut out = Vec::new();
        for item in self.tree().range(start..end).rev() {
            let (k, v) = item?;
            let Some(e) = entry(&k, &v) else { continue };
            if out.len() >= limit {
                return Ok((out, true));
            }
            out.push(e);
        }
        Ok((out, false))
    }

    /// True when `scope` holds an item with a token above `after` (a cheap key probe).
    pub fn activity_since(&self, scope: FeedScope, after: u64) -> Result<bool, StoreError> {
        self.activity_since_where(scope, after, |_| true)
    }

    /// True when `scope` holds an item with a token above `after` that `keep` keeps.
    pub fn activity_since_where(
        &self,
        scope: FeedScope,
        after: u64,
        keep: impl Fn(u64) -> bool,
    ) -> Result<bool, StoreError> {
        let start = scope.key(after.saturating_add(1), 0);
        let end = scope.key(u64::MAX, u32::MAX);
        for item in self.tree().range(start..end) {
            let (k, v) = item?;
            if entry(&k, &v).is_some_and(|e| keep(e.token)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// True when `scope` has any item stored.
    pub fn activity_exists(&self, scope: FeedScope) -> Result<bool, StoreError> {
        Ok(self
            .tree()
            .scan_prefix(scope.prefix())
            .next()
            .transpose()?
            .is_some())
    }
}
