//! What a host message looks like on NATS (design-notes §23): the stream and subjects of a
//! host, the headers every message carries, and the one decoder the fleet node trusts. A
//! message that does not decode is [`Garbage`]: counted, logged and skipped by the caller.

use async_nats::HeaderMap;
use bytes::Bytes;

use vk_observer_store::events::DomainEvent;

/// The host store's epoch, 16 hex digits.
pub(crate) const HEADER_EPOCH: &str = "Vko-Epoch";
/// The host store's token of the batch (of the snapshot's cut, for snapshot parts).
pub const HEADER_TOKEN: &str = "Vko-Token";
/// JetStream's de-duplication id.
pub const HEADER_MSG_ID: &str = "Nats-Msg-Id";
/// On a meta-only batch (one that moved no token, e.g. `LogsComplete` alone): its number
/// after the batch of `Vko-Token` (1, 2, …); absent on every other message.
pub(crate) const HEADER_META: &str = "Vko-Meta";

/// The generation of the stream the publisher published the message to (`fleet::identity`):
/// the fleet node applies no message of another stream than the one it follows.
pub(crate) const HEADER_STREAM: &str = "Vko-Stream";

/// Every host stream's name starts with this.
pub(crate) const STREAM_PREFIX: &str = "VKO_";

/// The stream holding one host's messages.
pub fn stream_name(host: &str) -> String {
    format!("{STREAM_PREFIX}{host}")
}

/// Every subject of a host: `vko.<host>.>`.
pub(crate) fn host_subjects(host: &str) -> String {
    format!("vko.{host}.>")
}

/// The inbox prefix of a host's connection: replies to its requests (JetStream's
/// acknowledgements, API answers) arrive under `_INBOX_<host>.`, so its NATS user may subscribe
/// to its own inboxes only and never sees another host's replies.
pub(crate) fn inbox_prefix(host: &str) -> String {
    format!("_INBOX_{host}")
}

/// The subjects a host's stream keeps: its batches and snapshots only. Its heartbeats and
/// its RPC subject are core NATS (a stream over `vko.<host>.>` would store every request and
/// answer it with an acknowledgement before the host could).
pub fn stream_subjects(host: &str) -> Vec<String> {
    [Kind::Batch, Kind::Snapshot]
        .into_iter()
        .map(|k| subject(host, k))
        .collect()
}

/// The subject a host daemon answers mutations on (`fleet::rpc`).
pub(crate) fn rpc_subject(host: &str) -> String {
    format!("vko.{host}.rpc")
}

/// The subject a host daemon publishes its heartbeats on (core NATS, not stored).
pub(crate) fn heartbeat_subject(host: &str) -> String {
    format!("vko.{host}.heartbeat")
}

/// Every host's heartbeats, for a fleet node.
pub(crate) const ALL_HEARTBEATS: &str = "vko.*.heartbeat";

/// What a message is, by the last token of its subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One committed batch.
    Batch,
    /// A part of a snapshot of the whole host store.
    Snapshot,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Batch => "batch",
            Kind::Snapshot => "snapshot",
        }
    }
}

pub fn subject(host: &str, kind: Kind) -> String {
    format!("vko.{host}.{}", kind.as_str())
}

/// The headers of a host message; `part` numbers a snapshot's parts.
pub(crate) fn headers(host: &str, epoch: u64, token: u64, part: Option<u32>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(HEADER_EPOCH, format!("{epoch:016x}").as_str());
    h.insert(HEADER_TOKEN, token.to_string().as_str());
    let id = match part {
        None => format!("{host}.{epoch:016x}.{token}"),
        Some(p) => format!("{host}.{epoch:016x}.s{token}.{p}"),
    };
    h.insert(HEADER_MSG_ID, id.as_str());
    h
}

/// The headers of a batch at `(token, meta)`: `meta` 0 is the committed batch of `token`,
/// above it the meta-only batches that followed it (`Vko-Meta`, message id `….<token>.m<meta>`).
pub fn batch_headers(host: &str, epoch: u64, token: u64, meta: u32) -> HeaderMap {
    if meta == 0 {
        return headers(host, epoch, token, None);
    }
    let mut h = HeaderMap::new();
    h.insert(HEADER_EPOCH, format!("{epoch:016x}").as_str());
    h.insert(HEADER_TOKEN, token.to_string().as_str());
    h.insert(HEADER_META, meta.to_string().as_str());
    let id = format!("{host}.{epoch:016x}.{token}.m{meta}");
    h.insert(HEADER_MSG_ID, id.as_str());
    h
}

/// JetStream stores a message carrying this only if the stream's last message has that id.
pub const HEADER_EXPECTED_LAST_MSG_ID: &str = "Nats-Expected-Last-Msg-Id";

/// Chain a batch publish to the one published before it in the same session: JetStream stores
/// it only while that one is the stream's last message (a re-publish of a stored message is
/// dropped as a duplicate before this check). Several publishes are in flight at once; without
/// the chain, one refused (a full stream) followed by a later one stored would put the refused
/// batch, published again, after the later one in the stream, where the fleet node skips it as
/// already applied (its token is below). With it, every publish after a refused one is refused
/// too, and the next session resumes from the last acknowledged one. Returns this message's id.
pub fn chain_after(headers: &mut HeaderMap, previous: Option<&str>) -> String {
    if let Some(previous) = previous {
        headers.insert(HEADER_EXPECTED_LAST_MSG_ID, previous);
    }
    headers
        .get(HEADER_MSG_ID)
        .map(|v| v.as_str().to_owned())
        .unwrap_or_default()
}

/// A host message the fleet node may apply.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub kind: Kind,
    pub epoch: u64,
    pub token: u64,
    /// 0, or the number of a meta-only batch after `token` (`Vko-Meta`).
    pub meta: u32,
    pub events: Vec<DomainEvent>,
    /// The outbox batches the events are of, in order (`pack`): one, at `(token, meta)`,
    /// unless the message is a pack.
    pub parts: Vec<super::pack::Part>,
}

/// Why a message was not applied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Garbage {
    #[error("subject {0:?} is not a message of host {1:?}")]
    ForeignSubject(String, String),
    #[error("header {0} missing or not a number")]
    BadHeader(&'static str),
    #[error("payload is not a batch of domain events: {0}")]
    BadPayload(serde_json::Error),
    #[error("an event of kind {0} may not come from a host")]
    ForbiddenEvent(&'static str),
    #[error(transparent)]
    BadPack(#[from] super::pack::BadPack),
}

/// Decode a message read from `host`'s stream.
pub(crate) fn decode(
    host: &str,
    subject: &str,
    headers: Option<&HeaderMap>,
    payload: &Bytes,
) -> Result<Incoming, Garbage> {
    let kind = if subject == self::subject(host, Kind::Batch) {
        Kind::Batch
    } else if subject == self::subject(host, Kind::Snapshot) {
        Kind::Snapshot
    } else {
        return Err(Garbage::ForeignSubject(subject.into(), host.into()));
    };
    let header = |name: &'static str, radix: u32| {
        headers
            .and_then(|h| h.get(name))
            .and_then(|v| u64::from_str_radix(v.as_str(), radix).ok())
            .ok_or(Garbage::BadHeader(name))
    };
    let epoch = header(HEADER_EPOCH, 16)?;
    let token = header(HEADER_TOKEN, 10)?;
    let meta = match headers.and_then(|h| h.get(HEADER_META)) {
        None => 0,
        Some(v) => v
            .as_str()
            .parse()
            .map_err(|_| Garbage::BadHeader(HEADER_META))?,
    };
    let events: Vec<DomainEvent> = serde_json::from_slice(payload).map_err(Garbage::BadPayload)?;
    if let Some(e) = events.iter().find(|e| {
        e.is_local_meta()
            || matches!(
                e,
                DomainEvent::HostProjectsSnapshot { .. }
                    | DomainEvent::HostTasksSnapshot { .. }
                    | DomainEvent::HostTaskUpserted { .. }
                    | DomainEvent::HostTaskRemoved { .. }
                    | DomainEvent::HostAttemptsSnapshot { .. }
            )
    }) {
        return Err(Garbage::ForbiddenEvent(e.kind()));
    }
    let pack = headers.and_then(|h| h.get(super::pack::HEADER_PACK));
    if pack.is_some() && kind == Kind::Snapshot {
        return Err(Garbage::BadHeader(super::pack::HEADER_PACK));
    }
    let parts = super::pack::parts_of(pack.map(|v| v.as_str()), (token, meta), &events)?;
    Ok(Incoming {
        kind,
        epoch,
        token,
        meta,
        events,
        parts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_round_trips_and_strangers_are_garbage() {
        let h = headers("box-1", 0xab, 7, None);
        assert_eq!(
            h.get(HEADER_MSG_ID).unwrap().as_str(),
            "box-1.00000000000000ab.7"
        );
        let events = vec![DomainEvent::TaskRemoved {
            task_id: uuid::Uuid::nil(),
        }];
        let payload = Bytes::from(serde_json::to_vec(&events).unwrap());
        let ok = decode("box-1", "vko.box-1.batch", Some(&h), &payload).unwrap();
        assert_eq!(
            (ok.kind, ok.epoch, ok.token, ok.events.len()),
            (Kind::Batch, 0xab, 7, 1)
        );
        assert!(matches!(
            decode("box-2", "vko.box-1.batch", Some(&h), &payload),
            Err(Garbage::ForeignSubject(..))
        ));
        assert!(matches!(
            decode("box-1", "vko.box-1.batch", None, &payload),
            Err(Garbage::BadHeader(_))
        ));
        let junk = Bytes::from_static(b"{not json");
        assert!(matches!(
            decode("box-1", "vko.box-1.batch", Some(&h), &junk),
            Err(Garbage::BadPayload(_))
        ));
        let meta = vec![DomainEvent::UpstreamSeq { seq: 1 }];
        let meta = Bytes::from(serde_json::to_vec(&meta).unwrap());
        assert!(matches!(
            decode("box-1", "vko.box-1.batch", Some(&h), &meta),
            Err(Garbage::ForbiddenEvent("upstream_seq"))
        ));
    }
}
