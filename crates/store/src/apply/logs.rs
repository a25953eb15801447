//! Log entries into their chunks (`store::chunk`), inside one pending batch.
//!
//! A batch's entries are grouped by the chunk they fall in; each touched chunk is read once
//! (through the overlay, so an earlier event of the same batch is seen), changed entry by entry
//! with the rules one value per entry had (an identical re-sent entry changes nothing; a
//! different one below the log's highest index is recorded in `REPLACED`), and written back once.
//! Which entries count as new is decided in arrival order first, so grouping changes no outcome.
//!
//! Within a batch a touched chunk stays decoded in [`ChunkCache`] and is encoded into the
//! overlay once, when the batch ends ([`Pending::flush_chunks`]; before any other log operation
//! reads chunks through the overlay): several events of one batch appending to one log (a fleet
//! node's batch of a host's messages) re-encode its chunk once, not once per event.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use uuid::Uuid;

use super::{Pending, R};
use crate::chunk::{Chunk, Head};
use crate::codec::same_json;
use crate::events::Channel;
use crate::keys::{self, ChannelKeys as _};

/// Which chunk of which log `put_chunk` writes, and the log's highest index before the event.
#[derive(Clone, Copy)]
struct ChunkAt {
    ch: Channel,
    pid: Uuid,
    start: u64,
    stored_max: Option<u64>,
}

/// Chunks a batch changed, decoded, by key; encoded into the overlay by [`Pending::flush_chunks`].
pub(crate) type ChunkCache = BTreeMap<[u8; 25], Chunk>;

impl Pending<'_, '_> {
    /// Encode the chunks this batch changed into the overlay.
    pub(crate) fn flush_chunks(&mut self) {
        for (key, chunk) in std::mem::take(&mut self.chunks) {
            if chunk.is_empty() {
                self.ov.remove(&key);
            } else {
                let value = chunk.encode(self.packer.as_deref_mut());
                self.ov.insert(&key, value);
            }
        }
    }

    /// The log's highest stored entry index (cached by the writer).
    pub(super) fn max_index(&mut self, pid: Uuid, ch: Channel) -> R<Option<u64>> {
        if let Some(m) = self.max_index.get(&(pid, ch)) {
            return Ok(*m);
        }
        let prefix = keys::id_key(ch.table(), pid);
        let last = match self.ov.last_key_with_prefix(&prefix)? {
            Some(k) => self
                .chunk_head(&k)?
                .and_then(|(start, head)| head.slots.last().map(|s| start + u64::from(s.offset))),
            None => None,
        };
        self.max_index.insert((pid, ch), last);
        Ok(last)
    }

    /// The chunk's start (from its key) and header, as the batch leaves it.
    fn chunk_head(&self, key: &[u8]) -> R<Option<(u64, Head)>> {
        let Some(start) = keys::trailing_u64(key) else {
            return Ok(None);
        };
        Ok(self
            .ov
            .get(key)?
            .and_then(|v| Head::parse(&v))
            .map(|h| (start, h)))
    }

    pub(super) fn put_logs(
        &mut self,
        attempt: Uuid,
        pid: Uuid,
        ch: Channel,
        entries: Vec<(u64, Box<RawValue>)>,
    ) -> R {
        let stored_max = self.max_index(pid, ch)?;
        let mut max = stored_max;
        // Freshness in arrival order (as one value per entry decided it), then by chunk.
        let mut fresh = Vec::with_capacity(entries.len());
        let mut by_chunk: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, (idx, _)) in entries.iter().enumerate() {
            let is_new = max.is_none_or(|m| *idx > m);
            if is_new {
                max = Some(*idx);
            }
            fresh.push(is_new);
            by_chunk
                .entry(idx - idx % self.chunk_entries)
                .or_default()
                .push(i);
        }
        let mut written = vec![false; entries.len()];
        let (mut appended, mut replaced) = (0usize, 0usize);
        for (start, members) in by_chunk {
            let at = ChunkAt {
                ch,
                pid,
                start,
                stored_max,
            };
            let (a, r) = self.put_chunk(at, &members, &entries, &fresh, &mut written)?;
            appended += a;
            replaced += r;
        }
        self.max_index.insert((pid, ch), max);
        if ch == Channel::Normalized {
            for (i, (idx, entry)) in entries.iter().enumerate() {
                if written[i] {
                    self.track_approval(attempt, pid, *idx, entry.get().as_bytes(), fresh[i])?;
                }
            }
        }
        if appended + replaced > 0 {
            self.changed = true;
            self.attempts.insert(attempt);
            self.note(format!("logs:{pid}:{}:+{appended}~{replaced}", ch.as_str()));
            if let Some(m) = max {
                self.enforce_entry_cap(pid, ch, m)?;
            }
        }
        Ok(())
    }

    /// The batch's entries `members` (indexes into `entries`) into the chunk `at`: read once
    /// (from this batch's cache, else through the overlay), changed entry by entry, kept in the
    /// cache. The entries (appended, replaced); `written` marks each one that was written.
    fn put_chunk(
        &mut self,
        at: ChunkAt,
        members: &[usize],
        entries: &[(u64, Box<RawValue>)],
        fresh: &[bool],
        written: &mut [bool],
    ) -> R<(usize, usize)> {
        let ChunkAt {
            ch,
            pid,
            start,
            stored_max,
        } = at;
        let key = keys::chunk_key(ch, pid, start);
        let cached = self.chunks.remove(&key);
        // Changed by an earlier event of this batch: put back whatever this one does.
        let mut dirty = cached.is_some();
        let mut chunk = match cached {
            Some(chunk) => chunk,
            // A chunk wholly above the stored max cannot hold anything yet.
            None if stored_max.is_some_and(|m| start <= m) => self
                .ov
                .get(&key)?
                .and_then(|v| Chunk::decode(&v))
                .unwrap_or_default(),
            None => Chunk::default(),
        };
        let (mut appended, mut replaced) = (0usize, 0usize);
        for &i in members {
            let (idx, entry) = &entries[i];
            let json = entry.get().as_bytes();
            let offset = (idx - start) as u8;
            match chunk.get(offset) {
                Some(old) if !fresh[i] => {
                    if same_json(old, json) {
                        continue;
                    }
                    let same_call = ch == Channel::Normalized
                        && vk_observer_vk::entry::same_tool_call(old, json);
                    self.ov.insert(
                        &keys::replaced_key(ch, pid, self.next, *idx),
                        keys::replaced_value(same_call),
                    );
                    replaced += 1;
                }
                // New above the max, or filling a hole below it.
                _ => appended += 1,
            }
            chunk.put(offset, self.next, json);
            dirty = true;
            written[i] = true;
        }
        if dirty {
            self.chunks.insert(key, chunk);
        }
        Ok((appended, replaced))
    }

    /// Mark the log as missing history when VK lost entries below `oldest` that the cache does
    /// not hold either (applied after the page's entries in the same batch, so it judges what
    /// the cache has once that page is in). Sticky: VK never gets lost entries back.
    pub(super) fn history_lost(&mut self, attempt: Uuid, pid: Uuid, ch: Channel, oldest: u64) -> R {
        let key = keys::history_lost_key(ch, pid);
        if self.ov.contains(&key)? {
            return Ok(());
        }
        self.flush_chunks();
        let mut held = 0u64;
        let chunks = self.ov.keys_in_range(
            &keys::chunk_key(ch, pid, 0),
            &keys::chunk_key(ch, pid, oldest),
        )?;
        for k in chunks {
            if let Some((start, head)) = self.chunk_head(&k)? {
                let below = head
                    .slots
                    .iter()
                    .filter(|s| start + u64::from(s.offset) < oldest);
                held += below.count() as u64;
            }
        }
        if held >= oldest {
            return Ok(());
        }
        self.ov.insert(&key, oldest.to_be_bytes().to_vec());
        self.changed = true;
        self.attempts.insert(attempt);
        self.note(format!("history_lost:{pid}:{}:<{oldest}", ch.as_str()));
        Ok(())
    }

    /// Keep at most `entry_cap` entries per process log (0 = no cap), dropping the oldest:
    /// chunks wholly below the floor go, the one across it is rewritten without them.
    pub(super) fn enforce_entry_cap(&mut self, pid: Uuid, ch: Channel, max: u64) -> R {
        if self.entry_cap == 0 || max < self.entry_cap {
            return Ok(());
        }
        let floor = max + 1 - self.entry_cap;
        self.flush_chunks();
        let start = keys::chunk_key(ch, pid, 0);
        let end = keys::chunk_key(ch, pid, floor);
        for k in self.ov.keys_in_range(&start, &end)? {
            let Some((chunk_start, head)) = self.chunk_head(&k)? else {
                continue;
            };
            let last = head.slots.last().map(|s| chunk_start + u64::from(s.offset));
            if last.is_none_or(|l| l < floor) {
                self.ov.remove(&k);
                continue;
            }
            if chunk_start + u64::from(head.slots[0].offset) >= floor {
                continue; // nothing of it below the floor
            }
            let Some(mut chunk) = self.ov.get(&k)?.and_then(|v| Chunk::decode(&v)) else {
                continue;
            };
            chunk.drop_below((floor - chunk_start) as u8);
            let value = chunk.encode(self.packer.as_deref_mut());
            self.ov.insert(&k, value);
        }
        Ok(())
    }

    /// A removed process's log chunks, markers and replacement records.
    pub(super) fn remove_logs(&mut self, id: Uuid) -> R {
        self.flush_chunks();
        for ch in [Channel::Normalized, Channel::Raw] {
            for k in self.ov.keys_with_prefix(&keys::id_key(ch.table(), id))? {
                self.ov.remove(&k);
                self.changed = true;
            }
            self.ov.remove(&keys::complete_key(ch, id));
            self.ov.remove(&keys::history_lost_key(ch, id));
            for k in self.ov.keys_with_prefix(&keys::replaced_prefix(ch, id))? {
                self.ov.remove(&k);
            }
            self.max_index.remove(&(id, ch));
        }
        Ok(())
    }
}
