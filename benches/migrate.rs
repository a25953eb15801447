//! What the schema 4 → 5 migration (`store::chunk_migrate`: one sled value per log entry
//! rewritten into log chunks) costs at the first open of an upgraded data dir: a schema-4 data dir
//! is written as the schema-4 writer left it (keys `0x08|0x09 ‖ process ‖ index`, values
//! `token ‖ 0x01 ‖ zstd frame` — entry compression was schema 4's default — through sled
//! directly), then `StoreOwner::open` is timed; afterwards every process's entry count is checked
//! against what was written, so a fast open that moved nothing cannot pass for a migration.
//!
//! Run: `cargo bench --bench migrate` (1 M entries, 50 per process log, as the scale board's);
//! `VK_BENCH_MIGRATE_ENTRIES=N` for another size.

use std::path::Path;
use std::time::{Duration, Instant};

use uuid::Uuid;
use vk_observer_store::codec::EntryPacker;
use vk_observer_store::events::Channel;
use vk_observer_store::keys::{self, meta};
use vk_observer_store::{Retention, StoreOwner};

#[path = "shared/entry.rs"]
mod shared_entry;
use shared_entry::entry_json;

const PER_PROCESS: u64 = 50;
const SCHEMA_4: u32 = 4;

fn main() {
    let entries: u64 = std::env::var("VK_BENCH_MIGRATE_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    drop(StoreOwner::open(dir.path(), Retention::default()).unwrap());
    let written = Instant::now();
    let (processes, raw_bytes) = write_schema_4(dir.path(), entries);
    let before = dir_bytes(dir.path());
    println!(
        "schema-4 data dir: {entries} entries of {} processes, {:.1} MB raw JSON, {:.1} MB on disk, written in {:.1} s",
        processes.len(),
        raw_bytes as f64 / 1e6,
        before as f64 / 1e6,
        written.elapsed().as_secs_f64()
    );
    let opened = Instant::now();
    let owner = open_when_free(dir.path());
    let seconds = opened.elapsed().as_secs_f64();
    let reader = owner.store().read();
    for &p in &processes {
        let count = reader.log_count(p, Channel::Normalized) as u64;
        assert_eq!(count, PER_PROCESS.min(entries), "process {p}: entries lost");
    }
    drop(reader);
    owner.flush().unwrap();
    let after = dir_bytes(dir.path());
    println!(
        "{}",
        serde_json::json!({
            "entries": entries,
            "processes": processes.len(),
            "open_with_migration_s": seconds,
            "entries_per_s": entries as f64 / seconds,
            "data_dir_before_mb": before as f64 / 1e6,
            "data_dir_after_mb": after as f64 / 1e6,
            "raw_json_mb": raw_bytes as f64 / 1e6,
        })
    );
}

/// The store's tree as a schema-4 build left it; the processes written and the raw JSON bytes.
fn write_schema_4(dir: &Path, entries: u64) -> (Vec<Uuid>, u64) {
    let db = sled_when_free(dir);
    let tree = db.open_tree("projections").unwrap();
    let mut packer = EntryPacker::default();
    let mut processes = Vec::new();
    let mut raw = 0u64;
    let mut batch = sled::Batch::default();
    for i in 0..entries {
        let index = i % PER_PROCESS;
        if index == 0 {
            processes.push(Uuid::new_v4());
        }
        let json = entry_json(i);
        raw += json.len() as u64;
        let process = *processes.last().unwrap();
        let key = keys::log_key(Channel::Normalized, process, index);
        batch.insert(&key[..], packer.encode(i + 1, json.as_bytes()));
        if (i + 1) % 10_000 == 0 {
            tree.apply_batch(std::mem::take(&mut batch)).unwrap();
        }
    }
    tree.apply_batch(batch).unwrap();
    tree.insert(
        keys::meta_key(meta::SCHEMA),
        SCHEMA_4.to_be_bytes().to_vec(),
    )
    .unwrap();
    db.flush().unwrap();
    (processes, raw)
}

/// sled's files, once the store dropped just before let go of its lock (its flusher thread
/// releases it a moment later).
fn sled_when_free(dir: &Path) -> sled::Db {
    retry(|| sled::Config::new().path(dir).open().ok())
}

fn open_when_free(dir: &Path) -> StoreOwner {
    retry(|| StoreOwner::open(dir, Retention::default()).ok())
}

fn retry<T>(mut attempt: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = attempt() {
            return t;
        }
        assert!(Instant::now() < deadline, "the data dir stays locked");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
