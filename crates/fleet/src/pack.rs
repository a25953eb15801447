//! Several outbox batches in one host message (a *pack*), and the fleet node's way back to
//! each batch in it.
//!
//! Why: a replicated stream takes one publish at a time (`publisher::Publisher::window`), so
//! a host behind on its outbox would send one batch per round trip to the stream's quorum;
//! a pack sends everything that waits, up to [`MAX_BATCHES`] batches and a byte bound, in
//! one. A host that keeps up still sends each batch alone, at once: packing adds no delay.
//!
//! The payload stays what every message carries, one JSON array of domain events (the packed
//! batches' events in order), and `Vko-Token` / `Vko-Meta` / the message id are those of the
//! pack's LAST batch, so a node of an older build applies a pack whole, as one batch. A pack
//! of two or more batches adds `Vko-Pack`: each batch's `token:meta:events`, in order, comma
//! separated. With it a node skips exactly the batches it already applied when a pack
//! overlaps its position: a session that lost its acknowledgements republishes from its
//! cursor and may pack differently from the session before, so JetStream's deduplication by
//! message id cannot catch the overlap (tests: `pack_tests`).

use serde_json::value::RawValue;

use vk_observer_store::events::DomainEvent;
use vk_observer_store::outbox::{OutboxAt, OutboxEntry};

/// The header listing a pack's batches (module doc).
pub const HEADER_PACK: &str = "Vko-Pack";
/// Outbox batches one message carries at most.
pub(crate) const MAX_BATCHES: usize = 64;
/// Payload bytes a pack grows to at most (a single batch larger than this goes alone); also
/// at most half the server's `max_payload` (`Limits::for_server`).
pub(crate) const MAX_BYTES: usize = 512 * 1024;

/// One batch of a pack: its outbox place and how many of the payload's events are its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub at: OutboxAt,
    pub events: usize,
}

/// A message's worth of outbox batches.
#[derive(Debug)]
pub(crate) struct Pack {
    /// Never empty.
    pub parts: Vec<Part>,
    pub json: Vec<u8>,
}

impl Pack {
    /// The last batch's place: the message's token, meta and id.
    pub(crate) fn at(&self) -> OutboxAt {
        self.parts.last().map_or((0, 0), |p| p.at)
    }

    /// One outbox entry as it is, `events` its events' count.
    fn verbatim(entry: &OutboxEntry, events: usize) -> Pack {
        Pack {
            parts: vec![Part {
                at: (entry.token, entry.meta),
                events,
            }],
            json: entry.json.clone(),
        }
    }

    /// The `Vko-Pack` value, for a pack of more than one batch.
    pub(crate) fn header(&self) -> Option<String> {
        (self.parts.len() > 1).then(|| {
            let parts: Vec<String> = self
                .parts
                .iter()
                .map(|p| format!("{}:{}:{}", p.at.0, p.at.1, p.events))
                .collect();
            parts.join(",")
        })
    }
}

/// How large a pack may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub batches: usize,
    pub bytes: usize,
}

impl Limits {
    /// Packing on (`batches` = [`MAX_BATCHES`]) or off (one batch a message), bounded by the
    /// server's `max_payload` (0: not told).
    pub(crate) fn for_server(packing: bool, max_payload: usize) -> Limits {
        let bytes = match max_payload {
            0 => MAX_BYTES,
            n => MAX_BYTES.min(n / 2),
        };
        Limits {
            batches: if packing { MAX_BATCHES } else { 1 },
            bytes,
        }
    }
}

/// At most `limit` packs of `entries`, in order (a pack ends at `limits`); entries past the
/// last pack are left for the next read. An entry whose payload is not a JSON array (the
/// outbox only holds arrays the writer encoded) goes alone and verbatim, as every entry did
/// before packs, for the nodes to count as garbage.
pub(crate) fn pack(
    entries: &[OutboxEntry],
    limits: Limits,
    limit: usize,
) -> Result<Vec<Pack>, serde_json::Error> {
    let mut packs = Vec::new();
    let mut run: Vec<(&OutboxEntry, Vec<&RawValue>)> = Vec::new();
    let mut bytes = 0usize;
    for entry in entries {
        if packs.len() >= limit {
            break;
        }
        let events = serde_json::from_slice::<Vec<&RawValue>>(&entry.json).ok();
        let fits = events.is_some()
            && run.len() < limits.batches
            && (run.is_empty() || bytes + entry.json.len() <= limits.bytes);
        if !fits && !run.is_empty() {
            packs.push(close(std::mem::take(&mut run))?);
            bytes = 0;
            if packs.len() >= limit {
                break;
            }
        }
        match events {
            Some(events) => {
                bytes += entry.json.len();
                run.push((entry, events));
            }
            None => packs.push(Pack::verbatim(entry, 0)),
        }
    }
    if !run.is_empty() && packs.len() < limit {
        packs.push(close(run)?);
    }
    Ok(packs)
}

/// A run of entries as one message: a lone batch as it is, several with their events joined.
fn close(run: Vec<(&OutboxEntry, Vec<&RawValue>)>) -> Result<Pack, serde_json::Error> {
    if let [(entry, events)] = run.as_slice() {
        return Ok(Pack::verbatim(entry, events.len()));
    }
    let parts = run
        .iter()
        .map(|(entry, events)| Part {
            at: (entry.token, entry.meta),
            events: events.len(),
        })
        .collect();
    let joined: Vec<&RawValue> = run
        .iter()
        .flat_map(|(_, events)| events.iter().copied())
        .collect();
    Ok(Pack {
        parts,
        json: serde_json::to_vec(&joined)?,
    })
}

/// Why a `Vko-Pack` header was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadPack {
    #[error("Vko-Pack {0:?} is not a list of token:meta:events")]
    Syntax(String),
    #[error("Vko-Pack's batches are not in order or do not end at the message's token")]
    Order,
    #[error("Vko-Pack counts {counted} events, the payload holds {held}")]
    Count { counted: usize, held: usize },
}

/// A message's batches: those `Vko-Pack` lists, checked against the message's own place
/// `at` and its `events`, or the one batch `at` when there is no header.
pub(crate) fn parts_of(
    header: Option<&str>,
    at: OutboxAt,
    events: &[DomainEvent],
) -> Result<Vec<Part>, BadPack> {
    let Some(header) = header else {
        return Ok(vec![Part {
            at,
            events: events.len(),
        }]);
    };
    let parts = header
        .split(',')
        .map(|p| parse_part(p).ok_or_else(|| BadPack::Syntax(header.to_string())))
        .collect::<Result<Vec<Part>, BadPack>>()?;
    let ordered = parts.windows(2).all(|w| w[0].at < w[1].at);
    if !ordered || parts.last().map(|p| p.at) != Some(at) {
        return Err(BadPack::Order);
    }
    let counted: usize = parts.iter().map(|p| p.events).sum();
    if counted != events.len() {
        return Err(BadPack::Count {
            counted,
            held: events.len(),
        });
    }
    Ok(parts)
}

fn parse_part(text: &str) -> Option<Part> {
    let mut fields = text.trim().split(':');
    let token = fields.next()?.parse().ok()?;
    let meta = fields.next()?.parse().ok()?;
    let events = fields.next()?.parse().ok()?;
    fields.next().is_none().then_some(Part {
        at: (token, meta),
        events,
    })
}

/// How many of a message's leading events belong to batches at or below `applied` (already
/// applied: skipped), and how many of its batches those are.
pub(crate) fn applied_prefix(parts: &[Part], applied: OutboxAt) -> (usize, usize) {
    let batches = parts.iter().take_while(|p| p.at <= applied).count();
    let events = parts[..batches].iter().map(|p| p.events).sum();
    (batches, events)
}

#[cfg(test)]
#[path = "pack_tests.rs"]
mod pack_tests;
