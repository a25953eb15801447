//! Which stream a host message belongs to (design-notes §23). A host's stream may be deleted and
//! recreated under the same name (`VKO_<host>`); async-nats' ordered consumer then goes on with
//! the *new* stream from the *old* sequence, and its later batches would be applied before its
//! snapshot. So the publisher stamps every message with its stream's generation (`Vko-Stream`:
//! the stream's creation time, unix nanoseconds in hex), and the fleet node's follower checks the
//! stamp of each message against the stream it started on *before* applying it: another stream
//! ends the follow at once and the follower starts over from the new stream's first message.

use async_nats::HeaderMap;
use async_nats::jetstream::stream;

use super::wire::HEADER_STREAM;

/// A stream's generation: its creation time in unix nanoseconds, hex (changes when the stream is
/// deleted and created again under the same name).
pub(crate) fn generation(info: &stream::Info) -> String {
    format!("{:x}", info.created.unix_timestamp_nanos())
}

/// Stamp a host message with the generation of the stream it is published to.
pub(crate) fn stamp(headers: &mut HeaderMap, generation: &str) {
    headers.insert(HEADER_STREAM, generation);
}

/// The generation a message was stamped with (none from a publisher of an older build).
pub(crate) fn stamp_of(headers: Option<&HeaderMap>) -> Option<&str> {
    headers
        .and_then(|h| h.get(HEADER_STREAM))
        .map(|v| v.as_str())
}

/// A follower's view of the stream it follows.
pub(crate) struct StreamIdentity {
    stream: stream::Stream,
    /// The generation of the stream when the follow started.
    generation: String,
    /// Stamps found to differ from the stream's generation while the stream itself had not
    /// changed (a publisher's session that began on a stream since recreated by someone else):
    /// asked about once, then accepted.
    stale_stamps: Vec<String>,
}

impl StreamIdentity {
    pub(crate) fn new(stream: stream::Stream, info: &stream::Info) -> Self {
        StreamIdentity {
            stream,
            generation: generation(info),
            stale_stamps: Vec::new(),
        }
    }

    /// Whether a message with these headers comes from another stream than the one the follow
    /// started on. A stamp of another generation is checked against the stream's current info:
    /// the stream was recreated (true), or the stamp is a stale one of an unchanged stream (false).
    pub(crate) async fn changed(&mut self, headers: Option<&HeaderMap>) -> anyhow::Result<bool> {
        let Some(stamp) = stamp_of(headers) else {
            return Ok(false);
        };
        if stamp == self.generation || self.stale_stamps.iter().any(|s| s == stamp) {
            return Ok(false);
        }
        let now = generation(self.stream.info().await?);
        if now != self.generation {
            return Ok(true);
        }
        tracing::debug!(stamp, generation = %self.generation, "fleet message stamped with an older stream's generation; its stream is unchanged");
        self.stale_stamps.push(stamp.to_owned());
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_round_trips_and_an_unstamped_message_has_none() {
        let mut h = HeaderMap::new();
        assert_eq!(stamp_of(Some(&h)), None);
        assert_eq!(stamp_of(None), None);
        stamp(&mut h, "187b2c3d4e5f6a7b");
        assert_eq!(stamp_of(Some(&h)), Some("187b2c3d4e5f6a7b"));
    }
}
