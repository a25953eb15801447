//! Log entries stored in chunks: several consecutive entries of one process log per sled value.
//!
//! Key: `LOG_CHUNKS_NORMALIZED|LOG_CHUNKS_RAW ‖ process ‖ chunk_start (u64 BE)`, where the writer
//! puts entry `index` in the chunk starting at `index - index % CHUNK` (`keys::chunk_key`). A
//! chunk holds only the entries the cache has (holes stay holes) and is removed once empty, so
//! every stored chunk holds at least one entry.
//!
//! Value (format byte first, so a later format can sit beside this one):
//!
//! ```text
//! format (u8: PLAIN_V1 | ZSTD_VOCABULARY_V1) ‖ count (u8, ≥ 1)
//! ‖ count × { offset in chunk (u8), token (LEB128 u64), JSON length (LEB128 u32) }   ascending offsets
//! ‖ body: the JSONs concatenated in offset order — as they are (PLAIN_V1), or ONE zstd frame
//!   of them primed by `codec::VOCABULARY_V1` (ZSTD_VOCABULARY_V1)
//! ```
//!
//! The header is never compressed, so bounds, counts, tokens and "is index i here?" need no
//! decompression; a read that wants entries decompresses the chunk's one frame. One frame per
//! chunk (not per entry) is what makes the chunk pay: zstd finds the repetition between
//! neighbouring entries (docs/performance.md, "Issue 27, lc: log entries in chunks"). The format
//! bytes and the dictionary are part of the disk format, pinned by `chunk_tests`.

use std::borrow::Cow;

use super::codec::{EntryPacker, unpack};

/// Entries per chunk, the writer's rule (`index - index % CHUNK` is its chunk's start). Part of
/// the disk format: a data dir's writer must keep it for life (a reader never assumes it).
pub(crate) const CHUNK: u64 = 32;

/// Format byte of a chunk whose body is the plain JSONs.
pub(crate) const PLAIN_V1: u8 = 0x10;
/// Format byte of a chunk whose body is one zstd frame primed with `codec::VOCABULARY_V1`.
pub(crate) const ZSTD_VOCABULARY_V1: u8 = 0x11;

/// Where one entry sits in a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// `index - chunk_start`.
    pub offset: u8,
    /// The token of the batch that last wrote the entry.
    pub token: u64,
    /// Its JSON in the (decompressed) body: `at..at + len`.
    pub at: u32,
    pub len: u32,
}

impl Slot {
    pub(crate) fn range(&self) -> std::ops::Range<usize> {
        self.at as usize..(self.at + self.len) as usize
    }
}

/// A chunk's header, read without touching its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub slots: Vec<Slot>,
    packed: bool,
    /// Where the body starts in the value.
    body_at: usize,
    /// The body's decompressed length (the JSON lengths added up).
    body_len: usize,
}

impl Head {
    /// Parse a stored chunk's header; `None` for a value that is not a chunk of a known format.
    pub(crate) fn parse(value: &[u8]) -> Option<Head> {
        let (&format, rest) = value.split_first()?;
        let packed = match format {
            PLAIN_V1 => false,
            ZSTD_VOCABULARY_V1 => true,
            _ => return None,
        };
        let (&count, mut rest) = rest.split_first()?;
        let mut slots = Vec::with_capacity(count as usize);
        let mut at = 0u32;
        for _ in 0..count {
            let (&offset, r) = rest.split_first()?;
            let (token, r) = read_varint(r)?;
            let (len, r) = read_varint(r)?;
            let len = u32::try_from(len).ok()?;
            if slots.last().is_some_and(|s: &Slot| s.offset >= offset) {
                return None;
            }
            slots.push(Slot {
                offset,
                token,
                at,
                len,
            });
            at = at.checked_add(len)?;
            rest = r;
        }
        let body_at = value.len() - rest.len();
        if !packed && rest.len() != at as usize {
            return None;
        }
        Some(Head {
            slots,
            packed,
            body_at,
            body_len: at as usize,
        })
    }

    /// How many entries a stored chunk holds, from its second byte alone.
    pub(crate) fn count(value: &[u8]) -> Option<usize> {
        match value {
            [PLAIN_V1 | ZSTD_VOCABULARY_V1, count, ..] => Some(*count as usize),
            _ => None,
        }
    }

    /// The slot at `offset`, if the chunk holds that entry.
    pub(crate) fn slot(&self, offset: u8) -> Option<&Slot> {
        self.slots
            .binary_search_by_key(&offset, |s| s.offset)
            .ok()
            .map(|i| &self.slots[i])
    }

    /// The body's bytes (decompressed when packed); `None` when a packed body does not decode.
    pub(crate) fn body<'v>(&self, value: &'v [u8]) -> Option<Cow<'v, [u8]>> {
        let raw = value.get(self.body_at..)?;
        if !self.packed {
            return Some(Cow::Borrowed(raw));
        }
        let body = unpack(raw)?;
        (body.len() == self.body_len).then_some(Cow::Owned(body))
    }
}

/// A chunk decoded for the writer: its entries' JSONs in one buffer, slots in offset order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Chunk {
    slots: Vec<Slot>,
    body: Vec<u8>,
}

impl Chunk {
    /// Decode a stored chunk (header and body); `None` when it does not decode.
    pub(crate) fn decode(value: &[u8]) -> Option<Chunk> {
        let head = Head::parse(value)?;
        let body = head.body(value)?.into_owned();
        Some(Chunk {
            slots: head.slots,
            body,
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The stored JSON at `offset`.
    pub(crate) fn get(&self, offset: u8) -> Option<&[u8]> {
        let i = self
            .slots
            .binary_search_by_key(&offset, |s| s.offset)
            .ok()?;
        Some(&self.body[self.slots[i].range()])
    }

    /// Entries in offset order: `(offset, token, json)`.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u8, u64, &[u8])> {
        self.slots
            .iter()
            .map(|s| (s.offset, s.token, &self.body[s.range()]))
    }

    /// Store `json` at `offset` with `token` (replacing what was there).
    pub(crate) fn put(&mut self, offset: u8, token: u64, json: &[u8]) {
        let at = self.body.len() as u32;
        self.body.extend_from_slice(json);
        let slot = Slot {
            offset,
            token,
            at,
            len: json.len() as u32,
        };
        match self.slots.binary_search_by_key(&offset, |s| s.offset) {
            Ok(i) => self.slots[i] = slot,
            Err(i) => self.slots.insert(i, slot),
        }
    }

    /// Drop every entry with an offset below `offset`; true if any was dropped.
    pub(crate) fn drop_below(&mut self, offset: u8) -> bool {
        let keep = self.slots.partition_point(|s| s.offset < offset);
        self.slots.drain(..keep).count() > 0
    }

    /// The stored value: the header, then the body, compressed as one frame with `packer` when
    /// given and when that makes it shorter.
    pub(crate) fn encode(&self, packer: Option<&mut EntryPacker>) -> Vec<u8> {
        let body = self.compact_body();
        let frame = packer.and_then(|p| p.compress(&body));
        let mut v = Vec::with_capacity(2 + 12 * self.slots.len() + body.len());
        v.push(match frame {
            Some(_) => ZSTD_VOCABULARY_V1,
            None => PLAIN_V1,
        });
        v.push(self.slots.len() as u8);
        for s in &self.slots {
            v.push(s.offset);
            write_varint(&mut v, s.token);
            write_varint(&mut v, u64::from(s.len));
        }
        v.extend_from_slice(frame.unwrap_or(&body));
        v
    }

    /// The JSONs in offset order (the buffer as it is when nothing was replaced or dropped).
    fn compact_body(&self) -> Cow<'_, [u8]> {
        let mut at = 0u32;
        let in_place = self.slots.iter().all(|s| {
            let ok = s.at == at;
            at += s.len;
            ok
        });
        if in_place {
            return Cow::Borrowed(&self.body[..at as usize]);
        }
        let mut body = Vec::with_capacity(at as usize);
        for s in &self.slots {
            body.extend_from_slice(&self.body[s.range()]);
        }
        Cow::Owned(body)
    }
}

fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn read_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut n = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        n |= u64::from(b & 0x7F).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some((n, &bytes[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
#[path = "chunk_tests.rs"]
mod tests;
