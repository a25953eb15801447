//! Ingest throughput into sled: normalized log entries per second through the one writer, in
//! the batch size the log followers use (512), smaller ones, and one entry per batch (a live
//! process's appends, each re-encoding its log chunk: `store::chunk`). Entries are shaped like VK's
//! recorded normalized entries (tests/fixtures/vk-wire/samples/ws_normalized_logs_live.jsonl).
//!
//! Run: `cargo bench --bench ingest`

use divan::Bencher;
use divan::counter::ItemsCount;
use serde_json::value::RawValue;
use uuid::Uuid;
use vk_observer_store::events::{Channel, DomainEvent};
use vk_observer_store::writer::Writer;
use vk_observer_store::{Retention, StoreOwner, StoreSettings};

#[path = "shared/entry.rs"]
mod shared_entry;
use shared_entry::entry_json;

fn main() {
    divan::main();
}

fn entry(i: u64) -> Box<RawValue> {
    RawValue::from_string(entry_json(i)).unwrap()
}

#[divan::bench(args = [1, 64, 512], sample_count = 20, sample_size = 4)]
fn normalized_entries_into_sled(bencher: Bencher, chunk: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = StoreOwner::open(dir.path(), Retention::default()).unwrap();
    let mut writer = owner.take_writer().unwrap();
    write_chunks(bencher, &mut writer, chunk);
}

/// Batches of 512 into a fresh store with log chunks of 16, 32 (the format's) and 64 entries,
/// side by side in one run: what the chunk size costs the writer, and the data dir's size
/// against the raw JSON written (printed after the run).
#[divan::bench(args = [16, 32, 64], sample_count = 20, sample_size = 4)]
fn entries_by_chunk_size(bencher: Bencher, size: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = StoreOwner::open(dir.path(), Retention::default()).unwrap();
    let mut writer = owner.take_writer().unwrap();
    writer.set_chunk_entries_for_bench(size);
    let written = write_chunks(bencher, &mut writer, 512);
    drop(writer);
    owner.flush().unwrap();
    let raw: u64 = (0..written).map(|i| entry(i).get().len() as u64).sum();
    let disk = owner.store().size_on_disk();
    println!(
        "chunks of {size}: {written} entries, {:.1} MB raw JSON, {:.1} MB on disk: {:.2}x",
        raw as f64 / 1e6,
        disk as f64 / 1e6,
        disk as f64 / raw as f64
    );
}

/// Chunks of 512 into a fresh store written three ways, side by side in one run: `plain` (no
/// compression), `entries` (the store compresses each entry's JSON itself, `[store]
/// compression`, the default) and `pages` (sled's page compression, `[store] page_compression`):
/// what each costs the writer per entry.
#[divan::bench(args = ["plain", "entries", "pages"], sample_count = 20, sample_size = 4)]
fn entries_by_compression(bencher: Bencher, mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let settings = StoreSettings {
        compression: mode == "entries",
        page_compression: mode == "pages",
    };
    let mut owner = StoreOwner::open_with(dir.path(), Retention::default(), settings).unwrap();
    let mut writer = owner.take_writer().unwrap();
    write_chunks(bencher, &mut writer, 512);
}

/// One new entry per batch (a live process's appends) with chunks of 1 entry — one value per
/// entry, the schema-4 layout's writes — and of 32 (the format's: each append re-encodes its
/// chunk with up to 31 neighbours), side by side in one run.
#[divan::bench(args = [1, 32], sample_count = 20, sample_size = 16)]
fn live_appends_by_chunk_size(bencher: Bencher, size: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = StoreOwner::open(dir.path(), Retention::default()).unwrap();
    let mut writer = owner.take_writer().unwrap();
    writer.set_chunk_entries_for_bench(size);
    write_chunks(bencher, &mut writer, 1);
}

/// Times the writer taking `chunk` new normalized entries of one process per batch; the entries
/// written.
fn write_chunks(bencher: Bencher, writer: &mut Writer, chunk: u64) -> u64 {
    let (attempt, pid) = (Uuid::new_v4(), Uuid::new_v4());
    let mut next = 0u64;
    bencher
        .counter(ItemsCount::new(chunk))
        .with_inputs(|| {
            let entries: Vec<_> = (next..next + chunk).map(|i| (i, entry(i))).collect();
            next += chunk;
            entries
        })
        .bench_local_values(|entries| {
            writer
                .apply(vec![DomainEvent::LogEntriesPut {
                    attempt_id: attempt,
                    process_id: pid,
                    channel: Channel::Normalized,
                    entries,
                }])
                .unwrap()
        });
    next
}

/// The same entries sent again (a WS replay after reconnect): compare-only, no write.
#[divan::bench(sample_count = 20, sample_size = 4)]
fn replayed_entries_are_compared_not_written(bencher: Bencher) {
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let mut writer = owner.take_writer().unwrap();
    let (attempt, pid) = (Uuid::new_v4(), Uuid::new_v4());
    let batch = |n: u64| -> Vec<_> { (0..n).map(|i| (i, entry(i))).collect() };
    writer
        .apply(vec![DomainEvent::LogEntriesPut {
            attempt_id: attempt,
            process_id: pid,
            channel: Channel::Normalized,
            entries: batch(512),
        }])
        .unwrap();
    bencher
        .counter(ItemsCount::new(512u64))
        .with_inputs(|| batch(512))
        .bench_local_values(|entries| {
            let a = writer
                .apply(vec![DomainEvent::LogEntriesPut {
                    attempt_id: attempt,
                    process_id: pid,
                    channel: Channel::Normalized,
                    entries,
                }])
                .unwrap();
            assert!(a.token.is_none());
        });
}
