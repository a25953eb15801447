//! The fleet outbox (design-notes §23): on a host daemon with `[fleet]` settings, the writer
//! puts each committed batch's replicable events under `OUTBOX ‖ token` in the same atomic
//! batch, so the publisher (crate `fleet`) replays exactly the commit order, survives restarts
//! and never holds the writer. The publisher's progress is a [`FleetCursor`] in a tree of its
//! own; the writer's retention pass drops outbox entries at or below it, and beyond
//! `max_backlog` entries drops the oldest and records how far (`meta::OUTBOX_DROPPED`), which
//! tells the publisher to send a snapshot instead.

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

/// The JSON of a batch's replicable events, or `None` when it has none.
pub fn encode_batch(events: &[DomainEvent]) -> Result<Option<Vec<u8>>, StoreError> {
    let kept: Vec<&DomainEvent> = events.iter().filter(|e| !e.is_local_meta()).collect();
    if kept.is_empty() {
        return Ok(None);
    }
    serde_json::to_vec(&kept)
        .map(Some)
        .map_err(StoreError::Encode)
}

/// The publisher's progress: the last batch JetStream acknowledged, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetCursor {
    /// The host store's epoch the cursor belongs to.
    pub epoch: u64,
    /// The last token acknowledged (batches at or below it are published).
    pub token: u64,
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

    /// The token at or below which outbox entries may go.
    pub(super) fn acked_token(&self) -> u64 {
        self.get().map_or(0, |c| c.token)
    }
}

/// Retention of the outbox (run by the writer): drop what was acknowledged, then the oldest
/// entries beyond `max_backlog`, recording the highest dropped token.
pub(super) fn prune(tree: &sled::Tree, acked: u64, config: OutboxConfig) -> Result<(), StoreError> {
    let mut batch = sled::Batch::default();
    let mut remaining = Vec::new();
    for item in tree.scan_prefix([table::OUTBOX]) {
        let (k, _) = item?;
        match keys::u64_at(&k, 1) {
            Some(t) if t <= acked => batch.remove(k),
            Some(t) => remaining.push(t),
            None => {}
        }
    }
    let excess = remaining.len() as u64 - config.max_backlog.min(remaining.len() as u64);
    if excess > 0 {
        let upto = remaining[excess as usize - 1];
        for t in &remaining[..excess as usize] {
            batch.remove(keys::u64_key(table::OUTBOX, *t).to_vec());
        }
        batch.insert(
            keys::meta_key(meta::OUTBOX_DROPPED),
            upto.to_be_bytes().to_vec(),
        );
        metrics::counter!(crate::telemetry_fleet::FLEET_BACKLOG_DROPPED).increment(excess);
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
    /// Up to `limit` outbox entries after `token`, in token order.
    pub fn outbox_after(
        &self,
        token: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let start = keys::u64_key(table::OUTBOX, token.saturating_add(1));
        let mut out = Vec::new();
        for item in self.tree().range(start..).take(limit) {
            let (k, v) = item?;
            if k.first() != Some(&table::OUTBOX) {
                break;
            }
            if let Some(t) = keys::u64_at(&k, 1) {
                out.push((t, v.to_vec()));
            }
        }
        Ok(out)
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
