//! Key layout of the projection tree.
//!
//! Everything the writer maintains lives in ONE sled tree, each table behind a one-byte prefix,
//! so that one `apply_batch` covers a whole event batch atomically (sled batches are atomic only
//! within a tree). Ids are 16-byte UUIDs and numbers big-endian `u64`, so byte order equals the
//! order of the tuples and range scans come out sorted.

use uuid::Uuid;

/// One-byte table prefixes. Never renumber: they are on disk.
pub(crate) mod table {
    pub(crate) const META: u8 = 0x00;
    pub(crate) const EVENTS: u8 = 0x01;
    pub(crate) const PROJECTS: u8 = 0x02;
    pub(crate) const REPOS: u8 = 0x03; // project ‖ repo
    pub(crate) const TASKS: u8 = 0x04;
    pub(crate) const ATTEMPTS: u8 = 0x05;
    pub(crate) const SESSIONS: u8 = 0x06;
    pub(crate) const PROCESSES: u8 = 0x07;
    /// process ‖ entry_index -> one entry: schema ≤ 4 only, rewritten into `LOG_CHUNKS_*` on
    /// open (`chunk_migrate`).
    pub(crate) const LOGS_NORMALIZED: u8 = 0x08;
    /// As `LOGS_NORMALIZED`, the raw channel: schema ≤ 4 only.
    pub(crate) const LOGS_RAW: u8 = 0x09;
    pub(crate) const CHANGES: u8 = 0x0A; // attempt
    pub(crate) const ATTEMPT_TOKENS: u8 = 0x0B; // attempt -> u64
    pub(crate) const PROCESS_ATTEMPT: u8 = 0x0C; // process -> attempt
    pub(crate) const REPLACED: u8 = 0x0D; // channel ‖ process ‖ token ‖ entry_index
    pub(crate) const LOGS_COMPLETE: u8 = 0x0E; // channel ‖ process: the log is final and fully stored
    pub(crate) const SERVER: u8 = 0x0F; // name -> facts about the VK server (executors, diff guard)
    pub(crate) const IDX_PROJECT_TASKS: u8 = 0x10; // project ‖ task
    pub(crate) const IDX_TASK_ATTEMPTS: u8 = 0x11; // task ‖ attempt
    pub(crate) const IDX_ATTEMPT_SESSIONS: u8 = 0x12; // attempt ‖ session
    pub(crate) const IDX_ATTEMPT_PROCESSES: u8 = 0x13; // attempt ‖ process
    pub(crate) const ATTEMPT_REPOS: u8 = 0x14; // attempt ‖ repo -> repo JSON with target_branch
    /// channel ‖ process -> u64 BE: VK lost this log's entries below that index before the
    /// cache had them all. Additive (old stores simply have none), so no schema bump.
    pub(crate) const LOGS_HISTORY_LOST: u8 = 0x15;
    /// attempt -> VK's branch status list (`GET /branch-status`), token-stamped like entities.
    /// Additive (an old store has none: the first read fetches it), so no schema bump.
    pub(crate) const BRANCH_STATUS: u8 = 0x1A;
    /// attempt -> i64 BE: unix ms when VK answered the stored branch status (meta only: a
    /// re-read that finds the same status moves no token but renews this).
    pub(crate) const BRANCH_STATUS_READ: u8 = 0x1B;
    /// project ‖ token ‖ seq (u32) -> activity item JSON (`store::feed`). Additive.
    pub(crate) const ACTIVITY_PROJECT: u8 = 0x18;
    /// task ‖ token ‖ seq (u32) -> activity item JSON (`store::feed`). Additive.
    pub(crate) const ACTIVITY_TASK: u8 = 0x19;
    /// attempt ‖ process ‖ entry_index -> approval record (`store::approvals`). Additive.
    pub(crate) const APPROVALS: u8 = 0x16;
    /// approval id -> its `APPROVALS` key. Additive.
    pub(crate) const APPROVAL_IDS: u8 = 0x17;
    /// token -> the batch's replicable events as JSON (`store::outbox`; fleet hosts only).
    pub(crate) const OUTBOX: u8 = 0x1C;
    /// process ‖ chunk_start (u64) -> a chunk of normalized log entries (`store::chunk`).
    /// Schema 5.
    pub(crate) const LOG_CHUNKS_NORMALIZED: u8 = 0x1D;
    /// process ‖ chunk_start (u64) -> a chunk of raw log entries (`store::chunk`). Schema 5.
    pub(crate) const LOG_CHUNKS_RAW: u8 = 0x1E;
    /// process -> the token usage and cost a coding agent's raw stdout reported
    /// (`store::usage`), token-stamped like entities. Additive (an old store has none), so no
    /// schema bump.
    pub(crate) const PROCESS_USAGE: u8 = 0x1F;
    /// A fleet node's clock in its hosts' coordinates (`store::fleet_clock`). Additive.
    pub(crate) const FLEET_CLOCK: u8 = 0x20;
}

/// Names of the `META` entries.
pub mod meta {
    pub(crate) const EPOCH: &[u8] = b"epoch";
    pub(crate) const TOKEN: &[u8] = b"token";
    /// Tokens up to this value may have been published; a restart continues above it.
    pub(crate) const TOKEN_RESERVED: &[u8] = b"token_reserved";
    pub const SCHEMA: &[u8] = b"schema";
    pub(crate) const SSE_SEQ: &[u8] = b"sse_seq";
    pub(crate) const VK_INCARNATION: &[u8] = b"vk_incarnation";
    /// Activity items at or below this token were dropped by retention (`store::feed`).
    pub(crate) const ACTIVITY_FLOOR: &[u8] = b"activity_floor";
    /// Outbox entries at or below this token were dropped unpublished (`store::outbox`).
    pub(crate) const OUTBOX_DROPPED: &[u8] = b"outbox_dropped";
    /// The last meta-only outbox entry: `token ‖ meta` (`store::outbox`).
    pub(crate) const OUTBOX_META: &[u8] = b"outbox_meta";
    /// Prefix of a fleet node's position in one host's stream (`fleet_pos.<host>` → JSON).
    pub(crate) const FLEET_POSITION: &[u8] = b"fleet_pos.";
}

/// Which log of a process (VK's vocabulary); its on-disk table and byte are below.
pub use vk_observer_vk::Channel;

/// Where a log channel lives on disk: its table and its key byte. Store knowledge about
/// vk's `Channel`, so an extension trait (another crate's type takes no inherent methods).
pub(crate) trait ChannelKeys {
    /// The table of its log chunks.
    fn table(self) -> u8;
    /// The table of its one-entry values (schema ≤ 4; `chunk_migrate` reads it).
    fn entry_table(self) -> u8;
    fn byte(self) -> u8;
}

impl ChannelKeys for Channel {
    fn table(self) -> u8 {
        match self {
            Channel::Normalized => table::LOG_CHUNKS_NORMALIZED,
            Channel::Raw => table::LOG_CHUNKS_RAW,
        }
    }
    fn entry_table(self) -> u8 {
        match self {
            Channel::Normalized => table::LOGS_NORMALIZED,
            Channel::Raw => table::LOGS_RAW,
        }
    }
    fn byte(self) -> u8 {
        match self {
            Channel::Normalized => 0,
            Channel::Raw => 1,
        }
    }
}

/// Key of the one `SERVER` entry: the trimmed `/api/info` facts.
pub(crate) const SERVER_INFO_KEY: &[u8] = &[table::SERVER, b'i'];
/// Prefix of a fleet node's per-host `SERVER` entries (`host_server_info_key`).
pub(crate) const HOST_SERVER_INFO_PREFIX: &[u8] = &[table::SERVER, b'h'];

/// Key of one host's `/api/info` facts on a fleet node: the prefix, then the host name.
pub(crate) fn host_server_info_key(host: &str) -> Vec<u8> {
    [HOST_SERVER_INFO_PREFIX, host.as_bytes()].concat()
}

pub fn meta_key(name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(table::META);
    k.extend_from_slice(name);
    k
}

pub(crate) fn id_key(table: u8, id: Uuid) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = table;
    k[1..].copy_from_slice(id.as_bytes());
    k
}

pub(crate) fn pair_key(table: u8, a: Uuid, b: Uuid) -> [u8; 33] {
    let mut k = [0u8; 33];
    k[0] = table;
    k[1..17].copy_from_slice(a.as_bytes());
    k[17..].copy_from_slice(b.as_bytes());
    k
}

pub(crate) fn u64_key(table: u8, n: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = table;
    k[1..].copy_from_slice(&n.to_be_bytes());
    k
}

/// `chunk table ‖ process ‖ chunk_start`: the chunk starting at `start` (`store::chunk`).
pub(crate) fn chunk_key(channel: Channel, process: Uuid, start: u64) -> [u8; 25] {
    let mut k = [0u8; 25];
    k[0] = channel.table();
    k[1..17].copy_from_slice(process.as_bytes());
    k[17..].copy_from_slice(&start.to_be_bytes());
    k
}

/// `entry table ‖ process ‖ entry_index`: one entry's key in a schema ≤ 4 store.
pub fn log_key(channel: Channel, process: Uuid, index: u64) -> [u8; 25] {
    let mut k = [0u8; 25];
    k[0] = channel.entry_table();
    k[1..17].copy_from_slice(process.as_bytes());
    k[17..].copy_from_slice(&index.to_be_bytes());
    k
}

/// `REPLACED ‖ channel ‖ process ‖ token ‖ entry_index`: which entries a batch replaced in place.
pub(crate) fn replaced_key(channel: Channel, process: Uuid, token: u64, index: u64) -> [u8; 34] {
    let mut k = [0u8; 34];
    k[0] = table::REPLACED;
    k[1] = channel.byte();
    k[2..18].copy_from_slice(process.as_bytes());
    k[18..26].copy_from_slice(&token.to_be_bytes());
    k[26..].copy_from_slice(&index.to_be_bytes());
    k
}

/// The value of a `REPLACED` record: `[1]` when the replacement kept the tool call it rewrote
/// (`vk::entry::same_tool_call`: only the call's outcome changed), empty otherwise (and in
/// stores written before this mark existed, which read as "the entry may have changed").
pub(crate) fn replaced_value(same_call: bool) -> Vec<u8> {
    if same_call { vec![1] } else { Vec::new() }
}

/// Whether a `REPLACED` record's value says the tool call was kept.
pub(crate) fn replaced_kept_call(value: &[u8]) -> bool {
    value == [1]
}

pub(crate) fn complete_key(channel: Channel, process: Uuid) -> [u8; 18] {
    let mut k = [0u8; 18];
    k[0] = table::LOGS_COMPLETE;
    k[1] = channel.byte();
    k[2..].copy_from_slice(process.as_bytes());
    k
}

/// `LOGS_HISTORY_LOST ‖ channel ‖ process`.
pub(crate) fn history_lost_key(channel: Channel, process: Uuid) -> [u8; 18] {
    let mut k = complete_key(channel, process);
    k[0] = table::LOGS_HISTORY_LOST;
    k
}

pub(crate) fn replaced_prefix(channel: Channel, process: Uuid) -> [u8; 18] {
    let mut k = [0u8; 18];
    k[0] = table::REPLACED;
    k[1] = channel.byte();
    k[2..].copy_from_slice(process.as_bytes());
    k
}

/// Decode the trailing big-endian `u64` of a key.
pub(crate) fn trailing_u64(key: &[u8]) -> Option<u64> {
    let n = key.len();
    if n < 8 {
        return None;
    }
    Some(u64::from_be_bytes(key[n - 8..].try_into().ok()?))
}

/// Decode a 16-byte UUID at `at`.
pub(crate) fn uuid_at(key: &[u8], at: usize) -> Option<Uuid> {
    key.get(at..at + 16).and_then(|b| Uuid::from_slice(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn log_keys_sort_like_tuples(a in any::<u128>(), b in any::<u128>(), i in any::<u64>(), j in any::<u64>()) {
            let (pa, pb) = (Uuid::from_u128(a), Uuid::from_u128(b));
            let ka = log_key(Channel::Normalized, pa, i);
            let kb = log_key(Channel::Normalized, pb, j);
            prop_assert_eq!(ka.cmp(&kb), (pa, i).cmp(&(pb, j)));
            prop_assert_eq!(trailing_u64(&ka), Some(i));
            prop_assert_eq!(uuid_at(&ka, 1), Some(pa));
        }

        #[test]
        fn replaced_keys_sort_by_token_then_index(t1 in any::<u64>(), t2 in any::<u64>(), i in any::<u64>(), j in any::<u64>()) {
            let p = Uuid::from_u128(7);
            let ka = replaced_key(Channel::Raw, p, t1, i);
            let kb = replaced_key(Channel::Raw, p, t2, j);
            prop_assert_eq!(ka.cmp(&kb), (t1, i).cmp(&(t2, j)));
        }
    }
}

/// The `META` name of a fleet node's position in one host's stream.
pub(crate) fn fleet_position_name(host: &str) -> Vec<u8> {
    let mut k = meta::FLEET_POSITION.to_vec();
    k.extend_from_slice(host.as_bytes());
    k
}

/// Decode a big-endian u64 at `at`.
pub(crate) fn u64_at(key: &[u8], at: usize) -> Option<u64> {
    key.get(at..at + 8)?.try_into().ok().map(u64::from_be_bytes)
}
