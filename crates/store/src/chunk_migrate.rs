//! Schema 4 → 5 on open: a data dir's log entries, one sled value each (`LOGS_NORMALIZED`,
//! `LOGS_RAW`: `token ‖ JSON` or `token ‖ 0x01 ‖ zstd frame`), rewritten into log chunks
//! (`store::chunk`), before the writer starts.
//!
//! Bounded and crash-safe: each sled batch moves whole chunks' worth of entries (about
//! [`BATCH_ENTRIES`], never a chunk split across two batches): the chunks written and the old
//! keys removed atomically together. Killed in the middle, the data dir still says schema 4 and
//! holds every entry exactly once (moved or not), so the next open goes on from what is left
//! (a chunk already there is merged into, not overwritten). The schema is bumped only once no old
//! key is left. Each entry keeps its token; chunks are compressed as the data dir's entries are
//! (`disk_format`'s `entry_compression`).

use sled::IVec;
use uuid::Uuid;

use super::StoreError;
use super::chunk::{CHUNK, Chunk};
use super::codec::{EntryPacker, decode};
use super::events::Channel;
use super::keys::{self, ChannelKeys as _};

/// The schema whose log entries are chunks.
pub(super) const CHUNKED_SCHEMA: u32 = 5;

/// Old entries moved per sled batch (rounded up to whole chunks): a few MB in memory.
pub(crate) const BATCH_ENTRIES: usize = 8192;

type R<T> = Result<T, StoreError>;

/// Move every one-value entry into its chunk, then record schema 5. The entries moved.
pub(super) fn migrate(tree: &sled::Tree, entry_compression: bool) -> R<u64> {
    let mut packer = entry_compression.then(EntryPacker::default);
    let mut moved = 0u64;
    for ch in [Channel::Normalized, Channel::Raw] {
        loop {
            let n = migrate_some(tree, ch, packer.as_mut(), BATCH_ENTRIES)?;
            if n == 0 {
                break;
            }
            moved += n as u64;
        }
    }
    tree.insert(
        keys::meta_key(keys::meta::SCHEMA),
        CHUNKED_SCHEMA.to_be_bytes().to_vec(),
    )?;
    tree.flush()?;
    if moved > 0 {
        tracing::info!(
            entries = moved,
            "log entries rewritten into chunks (schema 5)"
        );
    }
    Ok(moved)
}

/// One old entry: its key, index and stored value.
type Old = (IVec, u64, IVec);

/// One sled batch: at least `limit` old entries of `ch` (whole chunks), moved. How many were
/// taken (0: none left).
pub(super) fn migrate_some(
    tree: &sled::Tree,
    ch: Channel,
    mut packer: Option<&mut EntryPacker>,
    limit: usize,
) -> R<usize> {
    let mut groups: Vec<((Uuid, u64), Vec<Old>)> = Vec::new();
    let mut batch = sled::Batch::default();
    let mut taken = 0;
    for item in tree.scan_prefix([ch.entry_table()]) {
        let (k, v) = item?;
        taken += 1;
        let (Some(pid), Some(index)) = (keys::uuid_at(&k, 1), keys::trailing_u64(&k)) else {
            batch.remove(k); // not a key of ours: unreadable before, dropped now
            continue;
        };
        let group = (pid, index - index % CHUNK);
        match groups.last_mut() {
            Some((g, members)) if *g == group => members.push((k, index, v)),
            _ if taken > limit => {
                taken -= 1;
                break;
            }
            _ => groups.push((group, vec![(k, index, v)])),
        }
    }
    for ((pid, start), members) in groups {
        let key = keys::chunk_key(ch, pid, start);
        let mut chunk = tree
            .get(key)?
            .and_then(|v| Chunk::decode(&v))
            .unwrap_or_default();
        for (old_key, index, value) in members {
            if let Some((token, json)) = decode(&value) {
                chunk.put((index - start) as u8, token, &json);
            }
            batch.remove(old_key);
        }
        if !chunk.is_empty() {
            batch.insert(key.to_vec(), chunk.encode(packer.as_deref_mut()));
        }
    }
    tree.apply_batch(batch)?;
    Ok(taken)
}
