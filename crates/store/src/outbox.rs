//! The fleet outbox (design-notes §23): on a host daemon with `[fleet]` settings, the writer
//! puts each committed batch's replicable events under `OUTBOX ‖ token` in the same atomic
//! batch, so the publisher (crate `fleet`) replays exactly the commit order, survives restarts
//! and never holds the writer. The publisher's progress is a [`FleetCursor`] in a tree of its
//! own; the writer's retention pass drops outbox entries at or below it, and beyond
//! `max_backlog` entries drops the oldest and records how far (`meta::OUTBOX_DROPPED`), which
//! tells the publisher to send a snapshot instead.
//!
//! A batch that moved no token but wrote replicable facts (a meta-only batch: `LogsComplete`
//! alone, a branch status re-read) is kept too, after the batch of the token it follows:
//! `OUTBOX ‖ token ‖ meta` (meta 1, 2, …; the committed batch is `OUTBOX ‖ token`, which
//! sorts first), so the outbox's key order is still the order the writer applied them in.

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::events::{DomainEvent, FleetPosition};
use super::keys::{self, meta, table};
use super::reader::StoreReader;

/// The outbox settings the writer runs with.
#[derive(Debug, Clone, Copy)]
pub struct OutboxConfig {
    /// Entries kept unpublished before the oldest are dropped (then a snapshot is sent).
    pub max_backlog: u64,
}

/// Each event's JSON, `None` for the local meta that is never replicated; encoded before the
/// batch is applied (applying consumes the events).
pub(crate) fn encode_events(events: &[DomainEvent]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
    events
        .iter()
        .map(|e| {
            (!e.is_local_meta())
                .then(|| serde_json::to_vec(e).map_err(StoreError::Encode))
                .transpose()
        })
        .collect()
}

/// The JSON array of the events kept by `keep` (by index) among `encoded`, or `None` when none.
pub(crate) fn join_events(
    encoded: &[Option<Vec<u8>>],
    keep: impl Fn(usize) -> bool,
) -> Option<Vec<u8>> {
    let mut out = vec![b'['];
    for (i, json) in encoded.iter().enumerate() {
        let Some(json) = json.as_ref().filter(|_| keep(i)) else {
            continue;
        };
        if out.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(json);
    }
    (out.len() > 1).then(|| {
        out.push(b']');
        out
    })
}

/// A place in the outbox: a token, and 0 for its committed batch or the number of a
/// meta-only batch after it.
pub type OutboxAt = (u64, u32);

/// The key of the outbox entry at `at`.
pub(crate) fn entry_key((token, meta): OutboxAt) -> Vec<u8> {
    let mut k = keys::u64_key(table::OUTBOX, token).to_vec();
    if meta > 0 {
        k.extend_from_slice(&meta.to_be_bytes());
    }
    k
}

fn entry_at(key: &[u8]) -> Option<OutboxAt> {
    let token = keys::u64_at(key, 1)?;
    let meta = match key.get(9..13) {
        Some(m) => u32::from_be_bytes(m.try_into().ok()?),
        None => 0,
    };
    Some((token, meta))
}

/// One outbox entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub token: u64,
    /// 0: the committed batch of `token`; above: a meta-only batch after it.
    pub meta: u32,
    pub json: Vec<u8>,
}

/// The publisher's progress: the last batch JetStream acknowledged, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetCursor {
    /// The host store's epoch the cursor belongs to.
    pub epoch: u64,
    /// The last token acknowledged (batches at or below it are published).
    pub token: u64,
    /// The meta-only batch after `token` acknowledged last (0: the token's own batch).
    #[serde(default)]
    pub meta: u32,
    /// The stream sequence of that acknowledgement.
    pub stream_seq: u64,
    /// The stream's creation time as JetStream reported it (a recreated stream differs).
    pub stream_created: String,
}

const CURSOR_KEY: &[u8] = b"cursor";

/// The tree holding the publisher's cursor; written by the publisher alone.
#[derive(Clone)]
pub struct CursorTree {
    tree: sled::Tree,
}

impl CursorTree {
    pub(super) fn new(tree: sled::Tree) -> Self {
        CursorTree { tree }
    }

    pub fn get(&self) -> Option<FleetCursor> {
        let v = self.tree.get(CURSOR_KEY).ok()??;
        serde_json::from_slice(&v).ok()
    }

    /// Record (and flush) a new cursor.
    pub fn set(&self, cursor: &FleetCursor) -> Result<(), StoreError> {
        let v = serde_json::to_vec(cursor).map_err(StoreError::Encode)?;
        self.tree.insert(CURSOR_KEY, v)?;
        self.tree.flush()?;
        Ok(())
    }

    /// Record a new cursor without flushing it: sled's own periodic flush (every 500 ms)
    /// makes it durable. The publisher records each acknowledged step this way, off the path
    /// of the next publish; a cursor lost in a crash only makes the next session publish
    /// again what JetStream already has (dropped by its `Nats-Msg-Id` duplicate window, or
    /// skipped by the fleet node's token check).
    pub fn record(&self, cursor: &FleetCursor) -> Result<(), StoreError> {
        let v = serde_json::to_vec(cursor).map_err(StoreError::Encode)?;
        self.tree.insert(CURSOR_KEY, v)?;
        Ok(())
    }

    /// The place at or below which outbox entries may go.
    pub(super) fn acked(&self) -> OutboxAt {
        self.get().map_or((0, 0), |c| (c.token, c.meta))
    }
}

/// Retention of the outbox (run by the writer): drop what was acknowledged, then the oldest
/// entries beyond `max_backlog`, recording the highest dropped token.
pub(super) fn prune(
    tree: &sled::Tree,
    acked: OutboxAt,
    config: OutboxConfig,
) -> Result<(), StoreError> {
    let mut batch = sled::Batch::default();
    let mut remaining = Vec::new();
    for item in tree.scan_prefix([table::OUTBOX]) {
        let (k, _) = item?;
        match entry_at(&k) {
            Some(at) if at <= acked => batch.remove(k),
            Some(at) => remaining.push(at),
            None => {}
        }
    }
    let excess = remaining.len() as u64 - config.max_backlog.min(remaining.len() as u64);
    if excess > 0 {
        // A dropped meta-only batch after token t counts as t + 1: a cursor at t lacks it.
        let upto = match remaining[excess as usize - 1] {
            (t, 0) => t,
            (t, _) => t + 1,
        };
        for at in &remaining[..excess as usize] {
            batch.remove(entry_key(*at));
        }
        batch.insert(
            keys::meta_key(meta::OUTBOX_DROPPED),
            upto.to_be_bytes().to_vec(),
        );
        metrics::counter!(vk_observer_telemetry::fleet_metrics::FLEET_BACKLOG_DROPPED)
            .increment(excess);
        tracing::warn!(
            dropped = excess,
            upto,
            "fleet outbox over its bound: oldest batches dropped, a snapshot follows"
        );
    }
    tree.apply_batch(batch)?;
    Ok(())
}

impl StoreReader {
    /// Up to `limit` outbox entries after `after`, in the order they were written.
    pub fn outbox_after(
        &self,
        after: OutboxAt,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        // `OUTBOX ‖ t ‖ m+1` is above `OUTBOX ‖ t` and every meta entry up to m, below `t + 1`.
        let start = entry_key((after.0, after.1.saturating_add(1)));
        let mut out = Vec::new();
        for item in self.tree().range(start..).take(limit) {
            let (k, v) = item?;
            if k.first() != Some(&table::OUTBOX) {
                break;
            }
            if let Some((token, meta)) = entry_at(&k) {
                out.push(OutboxEntry {
                    token,
                    meta,
                    json: v.to_vec(),
                });
            }
        }
        Ok(out)
    }

    /// The last meta-only outbox entry written (`(0, 0)`: none).
    pub(crate) fn outbox_last_meta(&self) -> OutboxAt {
        let v = self
            .tree()
            .get(keys::meta_key(meta::OUTBOX_META))
            .ok()
            .flatten();
        v.and_then(|v| {
            let token = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
            let m = u32::from_be_bytes(v.get(8..12)?.try_into().ok()?);
            Some((token, m))
        })
        .unwrap_or((0, 0))
    }

    /// Entries after `at` (not acknowledged yet when `at` is the cursor's place).
    pub fn outbox_len_after(&self, at: OutboxAt) -> usize {
        let start = entry_key((at.0, at.1.saturating_add(1)));
        self.tree()
            .range(start..)
            .keys()
            .take_while(|k| k.as_ref().is_ok_and(|k| k.first() == Some(&table::OUTBOX)))
            .count()
    }

    /// Entries waiting in the outbox.
    pub fn outbox_len(&self) -> usize {
        self.tree().scan_prefix([table::OUTBOX]).count()
    }

    /// Outbox entries at or below this token were dropped unpublished (0: none).
    pub fn outbox_dropped(&self) -> u64 {
        self.tree()
            .get(keys::meta_key(meta::OUTBOX_DROPPED))
            .ok()
            .flatten()
            .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(0)
    }

    /// A fleet node's position in each host's stream.
    pub fn fleet_positions(&self) -> Result<Vec<(String, FleetPosition)>, StoreError> {
        let mut out = Vec::new();
        for item in self
            .tree()
            .scan_prefix(keys::meta_key(meta::FLEET_POSITION))
        {
            let (k, v) = item?;
            let host = &k[1 + meta::FLEET_POSITION.len()..];
            if let Ok(pos) = serde_json::from_slice(&v) {
                out.push((String::from_utf8_lossy(host).into_owned(), pos));
            }
        }
        Ok(out)
    }
}
