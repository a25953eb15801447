//! Schema 4 → 5: a data dir with one value per log entry, as the schema-4 writer left it (plain
//! `token ‖ JSON` and packed `token ‖ 0x01 ‖ zstd frame` values, keys `0x08|0x09 ‖ process ‖
//! index`), opens with every entry and token readable from chunks and no old key left; killed
//! after some of its batches, the next open finishes it.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::chunk_migrate;
use super::codec::{EntryPacker, encode};
use super::events::Channel;
use super::keys::{self, ChannelKeys as _, meta, table};
use super::{Retention, SCHEMA_VERSION, StoreOwner, StoreSettings};

const PROCESSES: [Uuid; 3] = [
    Uuid::from_u128(0x7301),
    Uuid::from_u128(0x7302),
    Uuid::from_u128(0x7303),
];

type Logs = BTreeMap<(Uuid, u8), BTreeMap<u64, (u64, String)>>;

fn open(dir: &std::path::Path, compression: bool) -> StoreOwner {
    let settings = StoreSettings {
        compression,
        page_compression: false,
    };
    StoreOwner::open_with(dir, Retention::default(), settings).expect("store opens")
}

/// sled's files opened directly (as an older build's open would), once the store dropped just
/// before has let go of its lock (sled's flusher thread releases it a moment later).
fn open_sled(dir: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match sled::Config::new().path(dir).open() {
            Ok(db) => return db,
            Err(e) if std::time::Instant::now() > deadline => panic!("sled opens: {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(25)),
        }
    }
}

fn channel(byte: u8) -> Channel {
    if byte == 0 {
        Channel::Normalized
    } else {
        Channel::Raw
    }
}

/// A schema-4 data dir: a new store, its schema set back to 4 and its log entries written as the
/// schema-4 writer wrote them (packed or plain, alternating), with holes; what it holds.
fn schema_4_dir(dir: &std::path::Path, compression: bool) -> Logs {
    let owner = open(dir, compression);
    let tree = owner.store().tree().clone();
    let mut packer = EntryPacker::default();
    let mut logs = Logs::new();
    for (n, &p) in PROCESSES.iter().enumerate() {
        for ch in [0u8, 1] {
            let count = [100u64, 7, 70][n];
            for i in (0..count).filter(|i| i % 11 != 3) {
                let json = format!(
                    r#"{{"type":"NORMALIZED_ENTRY","content":{{"entry_type":{{"type":"assistant_message"}},"content":"process {n} channel {ch} entry {i}"}}}}"#
                );
                let token = 1000 + i * 3 + u64::from(ch);
                let value = if i % 2 == 0 {
                    packer.encode(token, json.as_bytes())
                } else {
                    encode(token, json.as_bytes())
                };
                tree.insert(keys::log_key(channel(ch), p, i), value)
                    .unwrap();
                logs.entry((p, ch)).or_default().insert(i, (token, json));
            }
        }
    }
    tree.insert(keys::meta_key(meta::SCHEMA), 4u32.to_be_bytes().to_vec())
        .unwrap();
    owner.flush().unwrap();
    logs
}

fn assert_migrated(owner: &StoreOwner, logs: &Logs) {
    let tree = owner.store().tree().clone();
    let schema = tree.get(keys::meta_key(meta::SCHEMA)).unwrap().unwrap();
    assert_eq!(schema.as_ref(), SCHEMA_VERSION.to_be_bytes());
    for old in [table::LOGS_NORMALIZED, table::LOGS_RAW] {
        assert_eq!(
            tree.scan_prefix([old]).count(),
            0,
            "old keys left in 0x{old:02X}"
        );
    }
    let r = owner.store().read();
    for ((p, ch), entries) in logs {
        let ch = channel(*ch);
        assert_eq!(r.log_count(*p, ch), entries.len());
        let all = r.log_range(*p, ch, 0, u64::MAX, usize::MAX).unwrap();
        let got: Vec<_> = all
            .into_iter()
            .map(|e| (e.index, e.token, e.entry.get().to_string()))
            .collect();
        let want: Vec<_> = entries
            .iter()
            .map(|(&i, (t, j))| (i, *t, j.clone()))
            .collect();
        assert_eq!(got, want);
        for (&i, (t, _)) in entries {
            assert_eq!(r.log_entry(*p, ch, i).unwrap().map(|e| e.token), Some(*t));
        }
    }
}

#[test]
fn a_schema_4_data_dir_opens_with_its_entries_in_chunks() {
    for compression in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let logs = schema_4_dir(dir.path(), compression);
        let mut owner = open(dir.path(), compression);
        assert_migrated(&owner, &logs);
        let packed = owner
            .store()
            .tree()
            .scan_prefix([Channel::Normalized.table()])
            .values()
            .all(|v| v.unwrap()[0] == super::chunk::ZSTD_VOCABULARY_V1);
        assert_eq!(
            packed, compression,
            "chunks written as the data dir's entries"
        );
        // The writer goes on from the migrated chunks: an append lands beside them.
        let mut w = owner.take_writer().unwrap();
        let e = serde_json::value::RawValue::from_string(r#"{"a":1}"#.into()).unwrap();
        w.apply(vec![super::events::DomainEvent::LogEntriesPut {
            attempt_id: Uuid::from_u128(1),
            process_id: PROCESSES[0],
            channel: Channel::Normalized,
            entries: vec![(100, e)],
        }])
        .unwrap();
        let r = owner.store().read();
        assert_eq!(
            r.log_bounds(PROCESSES[0], Channel::Normalized).unwrap(),
            Some((0, 100))
        );
    }
}

#[test]
fn a_migration_killed_midway_is_finished_by_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let logs = schema_4_dir(dir.path(), true);
    {
        // What a killed open left: two small batches committed, the schema still 4.
        let db = open_sled(dir.path());
        let tree = db.open_tree("projections").unwrap();
        let mut packer = EntryPacker::default();
        for ch in [Channel::Normalized, Channel::Raw] {
            let n = chunk_migrate::migrate_some(&tree, ch, Some(&mut packer), 40).unwrap();
            assert!((40..40 + 32).contains(&n), "whole chunks: {n}");
        }
        assert!(tree.scan_prefix([table::LOGS_NORMALIZED]).count() > 0);
        // A chunk already there is merged into: a stray old key of a moved chunk.
        let (p, i) = (PROCESSES[0], 1u64);
        let (token, json) = &logs[&(p, 0)][&i];
        tree.insert(
            keys::log_key(Channel::Normalized, p, i),
            encode(*token, json.as_bytes()),
        )
        .unwrap();
        let schema = tree.get(keys::meta_key(meta::SCHEMA)).unwrap().unwrap();
        assert_eq!(schema.as_ref(), 4u32.to_be_bytes());
        db.flush().unwrap();
    }
    let owner = open(dir.path(), true);
    assert_migrated(&owner, &logs);
}

#[test]
fn a_schema_3_data_dir_goes_through_4_to_5() {
    let dir = tempfile::tempdir().unwrap();
    let logs = schema_4_dir(dir.path(), false);
    {
        let db = open_sled(dir.path());
        let tree = db.open_tree("projections").unwrap();
        tree.insert(keys::meta_key(meta::SCHEMA), 3u32.to_be_bytes().to_vec())
            .unwrap();
        db.flush().unwrap();
    }
    let owner = open(dir.path(), false);
    assert_migrated(&owner, &logs);
}
