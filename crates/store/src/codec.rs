//! Value encoding of the projection tree: `token (u64 BE) ‖ body`, where the body is the JSON
//! bytes VK sent or, for a log entry written by a schema-4 store with value compression, `0x01 ‖
//! a zstd frame` of them. Since schema 5 log entries live in chunks (`store::chunk`), whose one
//! frame per chunk [`EntryPacker::compress`] writes with the same dictionary; the per-entry
//! values below are what `chunk_migrate` reads from a schema-4 data dir.
//!
//! Entities and log entries are stored as the JSON VK sent (so the cache can be compared field by
//! field with VK), prefixed with the token of the batch that last changed them. A log entry's
//! JSON may be compressed by the writer ([`EntryPacker`]): each value on its own (a read of one
//! entry or a page decodes only those), with zstd primed by a fixed dictionary of VK's entry
//! vocabulary ([`VOCABULARY_V1`]: the keys and tags every normalized entry repeats, which a value
//! of a few hundred bytes cannot find in itself), with one compression context the one writer
//! keeps (sled's page compression builds a new one for every message, which cost the writer
//! 5×). JSON never starts with byte `0x01`, so plain values (every store before this, and every
//! value of a store without value compression) read as before: [`decode`] tells them apart by
//! the first body byte.
//!
//! The dictionary is part of the disk format: a value written with marker `0x01` is readable
//! only with exactly these bytes, so `codec_vocabulary_v1.txt` is never edited (a test pins a
//! value compressed with it); a better dictionary takes a new marker beside it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::OnceLock;

use serde_json::Value;
use zstd::dict::{DecoderDictionary, EncoderDictionary};
use zstd::zstd_safe;

/// The body marker of a value compressed with [`VOCABULARY_V1`]. Never reuse it for another
/// dictionary.
pub(crate) const ZSTD_VOCABULARY_V1: u8 = 0x01;

/// zstd's raw-content dictionary for marker `0x01`: VK's normalized and raw log entries as
/// `serde_json` writes them (keys in VK's field order, tags in snake case), the most common last.
pub(crate) const VOCABULARY_V1: &[u8] = include_bytes!("codec_vocabulary_v1.txt");

/// zstd level of [`EntryPacker`] (a level is not part of the format: any level decodes). On the
/// recorded real entries, each compressed alone with the dictionary, level 3 came out 0.6 %
/// smaller than level 1 (docs/performance.md, "Issue 27: log entries compressed by the store"),
/// not worth its writer time.
pub(crate) const PACK_LEVEL: i32 = 1;

/// JSON shorter than this is stored plain: a zstd frame's header and the marker take ~7 bytes.
const MIN_PACKED: usize = 24;

/// A value longer than this does not decode (a corrupt frame header, not an entry of ours).
const MAX_UNPACKED: u64 = 256 << 20;

pub(crate) fn encode(token: u64, json: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + json.len());
    v.extend_from_slice(&token.to_be_bytes());
    v.extend_from_slice(json);
    v
}

/// Split a stored value into its token and JSON bytes, decompressing a packed body. `None` for a
/// value too short to be ours or a packed body that does not decode.
pub(crate) fn decode(bytes: &[u8]) -> Option<(u64, Cow<'_, [u8]>)> {
    let head: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    let token = u64::from_be_bytes(head);
    let body = &bytes[8..];
    match body.first() {
        Some(&ZSTD_VOCABULARY_V1) => Some((token, Cow::Owned(unpack(&body[1..])?))),
        _ => Some((token, Cow::Borrowed(body))),
    }
}

/// Is this stored value's body compressed (tests and the benches' disk report)?
#[cfg(test)]
pub(crate) fn is_packed(bytes: &[u8]) -> bool {
    bytes.get(8) == Some(&ZSTD_VOCABULARY_V1)
}

fn encoder_dictionary() -> &'static EncoderDictionary<'static> {
    static DICT: OnceLock<EncoderDictionary<'static>> = OnceLock::new();
    DICT.get_or_init(|| EncoderDictionary::copy(VOCABULARY_V1, PACK_LEVEL))
}

fn decoder_dictionary() -> &'static DecoderDictionary<'static> {
    static DICT: OnceLock<DecoderDictionary<'static>> = OnceLock::new();
    DICT.get_or_init(|| DecoderDictionary::copy(VOCABULARY_V1))
}

thread_local! {
    /// One decompression context per reading thread, kept (creating one costs more than
    /// decoding a short entry).
    static DCTX: RefCell<zstd_safe::DCtx<'static>> = RefCell::new(zstd_safe::create_dctx());
}

/// A zstd frame primed with [`VOCABULARY_V1`], decompressed (`None`: it does not decode, or
/// claims more than a value of ours holds).
pub(super) fn unpack(frame: &[u8]) -> Option<Vec<u8>> {
    let size = zstd_safe::get_frame_content_size(frame);
    // CONTENTSIZE_UNKNOWN and _ERROR are u64::MAX and u64::MAX - 1: both above the limit.
    if size > MAX_UNPACKED {
        return None;
    }
    let mut out = Vec::with_capacity(size as usize);
    let n = DCTX
        .with(|d| {
            d.borrow_mut()
                .decompress_using_ddict(&mut out, frame, decoder_dictionary().as_ddict())
        })
        .ok()?;
    (n as u64 == size).then_some(out)
}

/// The writer's log entry encoder: compresses each entry's JSON with one kept zstd context.
pub struct EntryPacker {
    /// In a `Mutex` only so the writer (and the `StoreOwner` holding it) stays `Sync`: zstd's
    /// context is `Send` but not `Sync`; `&mut self` reaches it with `get_mut`, never locking.
    cctx: std::sync::Mutex<zstd_safe::CCtx<'static>>,
    /// The last frame, reused: its capacity grows to the largest entry seen.
    scratch: Vec<u8>,
}

impl Default for EntryPacker {
    fn default() -> Self {
        EntryPacker {
            cctx: std::sync::Mutex::new(zstd_safe::create_cctx()),
            scratch: Vec::new(),
        }
    }
}

impl EntryPacker {
    /// `token ‖ 0x01 ‖ zstd(json)`, or [`encode`]'s plain value when compressing does not make
    /// it shorter (short or incompressible JSON).
    pub fn encode(&mut self, token: u64, json: &[u8]) -> Vec<u8> {
        if json.len() < MIN_PACKED {
            return encode(token, json);
        }
        self.scratch.clear();
        self.scratch.reserve(zstd_safe::compress_bound(json.len()));
        let cctx = self.cctx.get_mut().unwrap_or_else(|e| e.into_inner());
        let packed =
            cctx.compress_using_cdict(&mut self.scratch, json, encoder_dictionary().as_cdict());
        match packed {
            Ok(n) if n + 1 < json.len() => {
                let mut v = Vec::with_capacity(9 + n);
                v.extend_from_slice(&token.to_be_bytes());
                v.push(ZSTD_VOCABULARY_V1);
                v.extend_from_slice(&self.scratch[..n]);
                v
            }
            _ => encode(token, json),
        }
    }

    /// `bytes` as one zstd frame primed with [`VOCABULARY_V1`] (a log chunk's body, `chunk`),
    /// or `None` when that is not shorter.
    pub(crate) fn compress(&mut self, bytes: &[u8]) -> Option<&[u8]> {
        if bytes.len() < MIN_PACKED {
            return None;
        }
        self.scratch.clear();
        self.scratch.reserve(zstd_safe::compress_bound(bytes.len()));
        let cctx = self.cctx.get_mut().unwrap_or_else(|e| e.into_inner());
        let packed =
            cctx.compress_using_cdict(&mut self.scratch, bytes, encoder_dictionary().as_cdict());
        match packed {
            Ok(n) if n < bytes.len() => Some(&self.scratch[..n]),
            _ => None,
        }
    }
}

/// Does stored JSON mean the same as `new`? Bytes first (the common, cheap case), then
/// structurally, so a different key order or spacing is not a change.
pub(crate) fn same_json(stored: &[u8], new: &[u8]) -> bool {
    if stored == new {
        return true;
    }
    match (
        serde_json::from_slice::<Value>(stored),
        serde_json::from_slice::<Value>(new),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
