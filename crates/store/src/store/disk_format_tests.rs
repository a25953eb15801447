//! A data dir opens with the format it was created with (`disk_format`), whatever `[store]
//! compression` is configured now: written with one setting, reopened with the other, the data
//! is intact and the files keep their format; a data dir from before the record opens
//! uncompressed; a new (or moved-aside) data dir takes the configured setting. And the sled fact
//! that makes the record necessary: sled refuses files written with the other setting.

use proptest::prelude::*;
use serde_json::json;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::disk_format::{self, DiskFormat, Origin, RECORD_FILE};
use super::events::{Channel, DomainEvent};
use super::{Retention, StoreOwner, StoreSettings};

const PROJECT: Uuid = Uuid::from_u128(0x9000);
const PROCESS: Uuid = Uuid::from_u128(0x7000);
const ATTEMPT: Uuid = Uuid::from_u128(0x6000);

fn settings(compression: bool) -> StoreSettings {
    StoreSettings { compression }
}

fn open(dir: &std::path::Path, compression: bool) -> StoreOwner {
    StoreOwner::open_with(dir, Retention::default(), settings(compression)).expect("store opens")
}

/// Tasks `first..first + n` and one log entry per task (repetitive JSON, as VK's logs are), in
/// one batch; flushed so the next open reads them from sled's files.
fn write(owner: &mut StoreOwner, first: u64, n: u64) {
    let mut w = owner.take_writer().expect("the one writer");
    let tasks = (first..first + n).map(|i| DomainEvent::TaskUpserted {
        task: json!({ "id": Uuid::from_u128(i.into()), "project_id": PROJECT,
            "title": format!("task {i}: {}", "the same words again ".repeat(8)), "status": "todo" }),
    });
    let entries = (first..first + n)
        .map(|i| {
            let text = format!(
                r#"{{"type":"assistant_message","content":"entry {i} {}"}}"#,
                "lorem ipsum ".repeat(20)
            );
            (i, RawValue::from_string(text).expect("valid json"))
        })
        .collect();
    let log = DomainEvent::LogEntriesPut {
        attempt_id: ATTEMPT,
        process_id: PROCESS,
        channel: Channel::Normalized,
        entries,
    };
    w.apply(tasks.chain([log]).collect())
        .expect("batch applies");
    owner.flush().expect("flushed");
}

/// Every task and entry `0..n` is there, with its content.
fn assert_intact(owner: &StoreOwner, n: u64) {
    let r = owner.store().read();
    for i in 0..n {
        let t = r
            .task(Uuid::from_u128(i.into()))
            .unwrap()
            .expect("task kept");
        assert!(
            t.value["title"]
                .as_str()
                .unwrap()
                .starts_with(&format!("task {i}:"))
        );
        let e = r
            .log_entry(PROCESS, Channel::Normalized, i)
            .unwrap()
            .expect("entry kept");
        assert!(
            e.entry.get().contains(&format!("entry {i} ")),
            "{}",
            e.entry.get()
        );
    }
    assert_eq!(r.log_count(PROCESS, Channel::Normalized), n as usize);
}

#[test]
fn a_store_reopens_intact_with_the_other_setting_configured() {
    for created in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut owner = open(dir.path(), created);
        assert_eq!(
            owner.disk_format(),
            DiskFormat {
                compression: created
            }
        );
        write(&mut owner, 0, 300);
        drop(owner);

        let mut owner = open(dir.path(), !created);
        assert_eq!(
            owner.disk_format().compression,
            created,
            "kept, not the configured"
        );
        assert_intact(&owner, 300);
        write(&mut owner, 300, 100);
        drop(owner);

        for configured in [created, !created] {
            let owner = open(dir.path(), configured);
            assert_eq!(owner.disk_format().compression, created);
            assert_intact(&owner, 400);
        }
    }
}

#[test]
fn sled_refuses_files_written_with_the_other_setting() {
    for created in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path(), created));
        let direct = sled::Config::new()
            .path(dir.path())
            .use_compression(!created)
            .open();
        assert!(
            matches!(direct, Err(sled::Error::Unsupported(_))),
            "sled opened {created}-compressed files with the other setting"
        );
    }
}

#[test]
fn a_data_dir_from_before_the_record_opens_uncompressed_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = open(dir.path(), false);
    write(&mut owner, 0, 50);
    drop(owner);
    std::fs::remove_file(dir.path().join(RECORD_FILE)).unwrap();

    let (format, origin) = disk_format::resolve(dir.path(), &settings(true)).unwrap();
    assert_eq!((format.compression, origin), (false, Origin::Legacy));
    let (_, origin) = disk_format::resolve(dir.path(), &settings(true)).unwrap();
    assert_eq!(origin, Origin::Recorded, "the legacy format was recorded");
    let owner = open(dir.path(), true);
    assert_eq!(owner.disk_format().compression, false);
    assert_intact(&owner, 50);
}

#[test]
fn a_moved_aside_data_dir_is_rebuilt_with_the_configured_setting() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    let mut owner = open(&dir, false);
    write(&mut owner, 0, 20);
    drop(owner);
    std::fs::rename(&dir, root.path().join("data.old")).unwrap();

    let mut owner = open(&dir, true);
    assert_eq!(owner.disk_format().compression, true);
    assert_eq!(
        owner.store().read().log_count(PROCESS, Channel::Normalized),
        0
    );
    write(&mut owner, 0, 20);
    drop(owner);
    assert_intact(&open(&dir, false), 20);
    assert_intact(&open(&root.path().join("data.old"), true), 20);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Any sequence of configured settings across reopens, with writes between: the data dir
    /// keeps the first open's format and everything written so far.
    #[test]
    fn any_sequence_of_configured_settings_keeps_the_first_format(
        configured in prop::collection::vec(any::<bool>(), 1..5)
    ) {
        let dir = tempfile::tempdir().unwrap();
        for (step, &compression) in configured.iter().enumerate() {
            let mut owner = open(dir.path(), compression);
            prop_assert_eq!(owner.disk_format().compression, configured[0]);
            assert_intact(&owner, step as u64 * 40);
            write(&mut owner, step as u64 * 40, 40);
        }
    }
}
