//! What a chunk of log entries will look up, read ahead in one range scan (issue 27): an entry at
//! or below the log's highest stored index is checked against the stored entry at its index, and
//! a normalized one against the approval record there — two tree lookups per entry. A history
//! page read newest first lands wholly below what the pages before it stored, so a catch-up made
//! those lookups for every entry (a fifth of the daemon's CPU in a 1 M-entry catch-up, all
//! misses). Reading the chunk's index span once answers them from the scan instead.

use serde_json::value::RawValue;
use uuid::Uuid;

use super::super::approvals::record_key;
use super::super::events::Channel;
use super::super::keys;
use super::{Pending, R};

/// A span wider than this many indexes per entry below the max (plus `SPAN_SLACK`) is read
/// key by key: its scan could read far more stored entries than the chunk looks up.
const SPAN_PER_ENTRY: u64 = 2;
const SPAN_SLACK: u64 = 64;

impl Pending<'_, '_> {
    /// Read ahead the stored entries (and, on the normalized channel, approval records) at the
    /// indexes of `entries` that are not above `max`, when those indexes are dense enough.
    pub(super) fn read_ahead_logs(
        &mut self,
        attempt: Uuid,
        pid: Uuid,
        ch: Channel,
        entries: &[(u64, Box<RawValue>)],
        max: Option<u64>,
    ) -> R {
        let Some(max) = max else {
            return Ok(()); // nothing stored: every entry is new
        };
        let below = entries.iter().map(|e| e.0).filter(|i| *i <= max);
        let (mut lo, mut hi, mut count) = (u64::MAX, 0u64, 0u64);
        for i in below {
            (lo, hi, count) = (lo.min(i), hi.max(i), count + 1);
        }
        if count < 2 || hi == u64::MAX || hi - lo >= count * SPAN_PER_ENTRY + SPAN_SLACK {
            return Ok(());
        }
        self.ov
            .read_ahead(&keys::log_key(ch, pid, lo), &keys::log_key(ch, pid, hi + 1))?;
        if ch == Channel::Normalized {
            self.ov.read_ahead(
                &record_key(attempt, pid, lo),
                &record_key(attempt, pid, hi + 1),
            )?;
        }
        Ok(())
    }
}
