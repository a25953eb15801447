//! The log reads of [`StoreReader`], over the log chunks (`store::chunk`).
//!
//! A chunk's header says which entries it holds and their tokens, so bounds, counts and "the
//! highest index below" read headers only; a read that returns entries decompresses just the
//! chunks holding them. No read assumes the writer's chunk size: the chunk that may hold index
//! `i` is the last one starting at or below `i`.

use serde_json::value::RawValue;
use sled::IVec;
use uuid::Uuid;

use super::StoreError;
use super::chunk::Head;
use super::events::Channel;
use super::keys::{self, ChannelKeys as _};
use super::reader::{StoreReader, StoredEntry};

type R<T> = Result<T, StoreError>;

impl StoreReader {
    /// The chunk that may hold `index`: the last one starting at or below it.
    /// Its start and value.
    fn chunk_at_or_before(&self, process: Uuid, ch: Channel, index: u64) -> R<Option<(u64, IVec)>> {
        let range = keys::chunk_key(ch, process, 0)..=keys::chunk_key(ch, process, index);
        let found = self.tree().range(range).next_back().transpose()?;
        Ok(found.and_then(|(k, v)| Some((keys::trailing_u64(&k)?, v))))
    }

    /// Entries with `from <= index < to`, ascending, at most `limit`.
    pub fn log_range(
        &self,
        process: Uuid,
        ch: Channel,
        from: u64,
        to: u64,
        limit: usize,
    ) -> R<Vec<StoredEntry>> {
        let mut out = Vec::new();
        if from >= to || limit == 0 {
            return Ok(out);
        }
        let first = keys::chunk_key(ch, process, 0)..=keys::chunk_key(ch, process, from);
        let first = self.tree().range(first).next_back();
        let rest = keys::chunk_key(ch, process, from + 1)..keys::chunk_key(ch, process, to);
        for item in first.into_iter().chain(self.tree().range(rest)) {
            let (k, v) = item?;
            let wanted = |i: u64| from <= i && i < to;
            push_entries(&k, &v, wanted, limit - out.len(), false, &mut out);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// The last `limit` entries with `index < before` (all when `before` is None), ascending.
    pub fn log_tail(
        &self,
        process: Uuid,
        ch: Channel,
        before: Option<u64>,
        limit: usize,
    ) -> R<Vec<StoredEntry>> {
        let mut out: Vec<StoredEntry> = Vec::with_capacity(limit.min(1024));
        if before == Some(0) || limit == 0 {
            return Ok(out);
        }
        let start = keys::chunk_key(ch, process, 0);
        let end = keys::chunk_key(ch, process, before.map_or(u64::MAX, |b| b - 1));
        for item in self.tree().range(start..=end).rev() {
            let (k, v) = item?;
            let wanted = |i: u64| before.is_none_or(|b| i < b);
            push_entries(&k, &v, wanted, limit - out.len(), true, &mut out);
            if out.len() >= limit {
                break;
            }
        }
        out.reverse();
        Ok(out)
    }

    /// Highest and lowest stored entry index of a process log.
    pub fn log_bounds(&self, process: Uuid, ch: Channel) -> R<Option<(u64, u64)>> {
        let prefix = keys::id_key(ch.table(), process);
        let first = self.tree().scan_prefix(prefix).next().transpose()?;
        let last = self.tree().scan_prefix(prefix).next_back().transpose()?;
        let index_of = |(k, v): &(IVec, IVec), last: bool| {
            let start = keys::trailing_u64(k)?;
            let head = Head::parse(v)?;
            let slot = if last {
                head.slots.last()
            } else {
                head.slots.first()
            };
            slot.map(|s| start + u64::from(s.offset))
        };
        Ok(match (first, last) {
            (Some(f), Some(l)) => Some((
                index_of(&f, false).unwrap_or(0),
                index_of(&l, true).unwrap_or(0),
            )),
            _ => None,
        })
    }

    /// The highest stored entry index below `below`, if any.
    pub fn highest_log_index_below(
        &self,
        process: Uuid,
        ch: Channel,
        below: u64,
    ) -> R<Option<u64>> {
        let range = keys::chunk_key(ch, process, 0)..keys::chunk_key(ch, process, below);
        for item in self.tree().range(range).rev() {
            let (k, v) = item?;
            let (Some(start), Some(head)) = (keys::trailing_u64(&k), Head::parse(&v)) else {
                continue;
            };
            let held = head.slots.iter().map(|s| start + u64::from(s.offset));
            if let Some(i) = held.filter(|&i| i < below).next_back() {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// How many entries of the log are stored (chunk headers only).
    pub fn log_count(&self, process: Uuid, ch: Channel) -> usize {
        self.tree()
            .scan_prefix(keys::id_key(ch.table(), process))
            .filter_map(|item| item.ok())
            .filter_map(|(_, v)| Head::count(&v))
            .sum()
    }

    pub fn log_entry(&self, process: Uuid, ch: Channel, index: u64) -> R<Option<StoredEntry>> {
        let Some((start, v)) = self.chunk_at_or_before(process, ch, index)? else {
            return Ok(None);
        };
        let (Some(head), Ok(offset)) = (Head::parse(&v), u8::try_from(index - start)) else {
            return Ok(None);
        };
        let Some(slot) = head.slot(offset) else {
            return Ok(None);
        };
        let Some(body) = head.body(&v) else {
            return Ok(None);
        };
        Ok(to_entry(index, slot.token, &body[slot.range()]))
    }
}

/// Push the chunk's entries that `wanted` accepts onto `out`, at most `room` (from its highest
/// index down when `backwards`), decompressing the body only when one is wanted.
fn push_entries(
    key: &[u8],
    value: &[u8],
    wanted: impl Fn(u64) -> bool,
    room: usize,
    backwards: bool,
    out: &mut Vec<StoredEntry>,
) {
    let (Some(start), Some(head)) = (keys::trailing_u64(key), Head::parse(value)) else {
        return;
    };
    let index = |s: &super::chunk::Slot| start + u64::from(s.offset);
    let slots: Vec<_> = head.slots.iter().filter(|s| wanted(index(s))).collect();
    if slots.is_empty() {
        return;
    }
    let Some(body) = head.body(value) else {
        return;
    };
    let take = |s: &&super::chunk::Slot| to_entry(index(s), s.token, &body[s.range()]);
    if backwards {
        out.extend(slots.iter().rev().filter_map(take).take(room));
    } else {
        out.extend(slots.iter().filter_map(take).take(room));
    }
}

fn to_entry(index: u64, token: u64, json: &[u8]) -> Option<StoredEntry> {
    let entry = serde_json::from_slice::<Box<RawValue>>(json).ok()?;
    Some(StoredEntry {
        index,
        token,
        entry,
    })
}
