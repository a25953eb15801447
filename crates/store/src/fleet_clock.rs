//! A fleet node's clock in its hosts' coordinates (design-notes §23, "tokens every node
//! understands"): for each local token that applied a host's message, which host and which
//! place in that host's stream (the stream's creation time and the message's sequence). Every
//! fleet node applies the same host messages in the same order per host, one writer batch per
//! message, so a place in a host's stream names the same changes on every node, while local
//! tokens interleave the hosts differently from node to node.
//!
//! Written by the writer in the batch that consumed the token (`mark`); read by `query` to
//! print a token as the place of every host (`marks_at`) and to judge another node's token
//! here (`cut_of`, `host_of`). Three indexes under table `FLEET_CLOCK`:
//!
//! - `'h' ‖ t` → host: the host whose message local token `t` applied;
//! - `'a' ‖ host ‖ 0 ‖ t` → `created ‖ 0 ‖ seq`: a host's places by local token;
//! - `'p' ‖ host ‖ 0 ‖ created ‖ 0 ‖ seq` → `t`: a host's local tokens by place.
//!
//! Host names are NATS subject tokens and creation times printed dates: neither holds a 0 byte.
//! Additive (a host daemon and an older fleet node have none), so no schema bump.

use super::StoreError;
use super::events::FleetPosition;
use super::keys::table;
use super::overlay::Overlay;
use super::reader::StoreReader;

const HOST_OF: u8 = b'h';
const BY_TOKEN: u8 = b'a';
const BY_PLACE: u8 = b'p';

/// A place in one host's stream: its generation (creation time) and a message's sequence.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct HostMark {
    pub host: String,
    pub created: String,
    pub seq: u64,
}

/// Where another node's place for a host stands in this node's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkCut {
    /// This node's tokens of that host at or below this one applied messages at or before the
    /// place; those above it, messages after it (0: none at or before).
    At(u64),
    /// The place is in a stream generation this node never applied.
    UnknownGeneration,
}

fn host_of_key(t: u64) -> Vec<u8> {
    let mut k = vec![table::FLEET_CLOCK, HOST_OF];
    k.extend_from_slice(&t.to_be_bytes());
    k
}

fn by_token_prefix(host: &str) -> Vec<u8> {
    let mut k = vec![table::FLEET_CLOCK, BY_TOKEN];
    k.extend_from_slice(host.as_bytes());
    k.push(0);
    k
}

fn by_place_prefix(host: &str, created: &str) -> Vec<u8> {
    let mut k = vec![table::FLEET_CLOCK, BY_PLACE];
    k.extend_from_slice(host.as_bytes());
    k.push(0);
    k.extend_from_slice(created.as_bytes());
    k.push(0);
    k
}

fn place_value(created: &str, seq: u64) -> Vec<u8> {
    let mut v = created.as_bytes().to_vec();
    v.push(0);
    v.extend_from_slice(&seq.to_be_bytes());
    v
}

fn decode_place(v: &[u8]) -> Option<(String, u64)> {
    let split = v.len().checked_sub(9)?;
    (v[split] == 0).then_some(())?;
    let seq = u64::from_be_bytes(v[split + 1..].try_into().ok()?);
    Some((String::from_utf8_lossy(&v[..split]).into_owned(), seq))
}

fn tail_u64(k: &[u8]) -> Option<u64> {
    let at = k.len().checked_sub(8)?;
    Some(u64::from_be_bytes(k[at..].try_into().ok()?))
}

/// Record, in the batch that consumed local token `t`, that it applied `host`'s message at
/// `position`.
pub(crate) fn mark(ov: &mut Overlay<'_>, t: u64, host: &str, position: &FleetPosition) {
    ov.insert(&host_of_key(t), host.as_bytes().to_vec());
    let mut by_token = by_token_prefix(host);
    by_token.extend_from_slice(&t.to_be_bytes());
    ov.insert(
        &by_token,
        place_value(&position.stream_created, position.stream_seq),
    );
    let mut by_place = by_place_prefix(host, &position.stream_created);
    by_place.extend_from_slice(&position.stream_seq.to_be_bytes());
    ov.insert(&by_place, t.to_be_bytes().to_vec());
}

/// Drop the clock's entries of tokens below `floor` (the event records' retention), keeping
/// each host's newest entry so the places of later tokens stay readable. One sled batch.
pub(crate) fn prune(tree: &sled::Tree, floor: u64) -> Result<(), StoreError> {
    let mut newest_per_host = std::collections::HashMap::new();
    let mut batch = sled::Batch::default();
    for item in tree.range(host_of_key(0)..host_of_key(floor)) {
        let (k, host) = item?;
        if let Some(t) = tail_u64(&k)
            && let Some(older) = newest_per_host.insert(host.to_vec(), t)
        {
            remove_entry(tree, &mut batch, older, &host)?;
        }
    }
    tree.apply_batch(batch)?;
    Ok(())
}

fn remove_entry(
    tree: &sled::Tree,
    batch: &mut sled::Batch,
    t: u64,
    host: &[u8],
) -> Result<(), StoreError> {
    let host = String::from_utf8_lossy(host);
    let mut by_token = by_token_prefix(&host);
    by_token.extend_from_slice(&t.to_be_bytes());
    if let Some(v) = tree.get(&by_token)?
        && let Some((created, seq)) = decode_place(&v)
    {
        let mut by_place = by_place_prefix(&host, &created);
        by_place.extend_from_slice(&seq.to_be_bytes());
        batch.remove(by_place);
    }
    batch.remove(by_token);
    batch.remove(host_of_key(t));
    Ok(())
}

impl StoreReader {
    /// The host whose message local token `t` applied (`None`: a token of this node's own, such
    /// as a retention pass, or one from before the clock existed).
    pub fn fleet_host_of(&self, t: u64) -> Result<Option<String>, StoreError> {
        Ok(self
            .tree()
            .get(host_of_key(t))?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Every host's place as of local token `t`: the last message of each that a token at or
    /// below `t` applied (a host none of whose messages had, left out).
    pub fn fleet_marks_at(&self, t: u64, hosts: &[String]) -> Result<Vec<HostMark>, StoreError> {
        let mut marks = Vec::with_capacity(hosts.len());
        for host in hosts {
            let prefix = by_token_prefix(host);
            let mut end = prefix.clone();
            end.extend_from_slice(&t.to_be_bytes());
            let last = self
                .tree()
                .range(prefix.as_slice()..=end.as_slice())
                .next_back();
            if let Some(item) = last {
                let (_, v) = item?;
                if let Some((created, seq)) = decode_place(&v) {
                    marks.push(HostMark {
                        host: host.clone(),
                        created,
                        seq,
                    });
                }
            }
        }
        Ok(marks)
    }

    /// Where `mark` (another node's place for its host) stands in this node's tokens: the last
    /// local token that applied a message of that host at or before it.
    pub fn fleet_cut_of(&self, mark: &HostMark) -> Result<MarkCut, StoreError> {
        let prefix = by_place_prefix(&mark.host, &mark.created);
        let mut end = prefix.clone();
        end.extend_from_slice(&mark.seq.to_be_bytes());
        if let Some(item) = self
            .tree()
            .range(prefix.as_slice()..=end.as_slice())
            .next_back()
        {
            let (_, v) = item?;
            return Ok(tail_u64(&v).map_or(MarkCut::UnknownGeneration, MarkCut::At));
        }
        // Nothing of the generation at or before the place: every message of it this node
        // applied is after the place, and so is everything of later generations; the cut is
        // the host's last token before the generation began.
        let Some(first) = self.tree().scan_prefix(&prefix).next() else {
            return Ok(MarkCut::UnknownGeneration);
        };
        let Some(first_t) = tail_u64(&first?.1) else {
            return Ok(MarkCut::UnknownGeneration);
        };
        let host_prefix = by_token_prefix(&mark.host);
        let mut before = host_prefix.clone();
        before.extend_from_slice(&first_t.to_be_bytes());
        let earlier = self
            .tree()
            .range(host_prefix.as_slice()..before.as_slice())
            .next_back()
            .transpose()?;
        Ok(MarkCut::At(
            earlier.and_then(|(k, _)| tail_u64(&k)).unwrap_or(0),
        ))
    }
}
