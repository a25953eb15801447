//! A data dir opens with the format it was created with (`disk_format`), whatever `[store]
//! compression` and `page_compression` are configured now: written with one setting, reopened
//! with another, the data is intact and the files keep their format; a data dir from before the
//! record opens uncompressed; a record from before entry compression keeps meaning sled's pages;
//! a new (or moved-aside) data dir takes the configured settings. And the sled fact that makes
//! the record necessary: sled refuses files written with the other page setting.

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

/// The four `[store]` settings: (entry compression, page compression).
const ALL: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

fn settings((compression, page_compression): (bool, bool)) -> StoreSettings {
    StoreSettings {
        compression,
        page_compression,
    }
}

fn format_of((entry_compression, page_compression): (bool, bool)) -> DiskFormat {
    DiskFormat {
        page_compression,
        entry_compression,
    }
}

fn open(dir: &std::path::Path, setting: (bool, bool)) -> StoreOwner {
    StoreOwner::open_with(dir, Retention::default(), settings(setting)).expect("store opens")
}

/// Are the stored log chunks packed by the store (`chunk`)?
fn entries_packed(owner: &StoreOwner) -> Vec<bool> {
    let tree = owner.store().tree().clone();
    tree.scan_prefix(super::keys::id_key(
        super::keys::table::LOG_CHUNKS_NORMALIZED,
        PROCESS,
    ))
    .map(|kv| kv.unwrap().1.first() == Some(&super::chunk::ZSTD_VOCABULARY_V1))
    .collect()
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
fn a_store_reopens_intact_with_another_setting_configured() {
    for created in ALL {
        let dir = tempfile::tempdir().unwrap();
        let mut owner = open(dir.path(), created);
        assert_eq!(owner.disk_format(), format_of(created));
        write(&mut owner, 0, 300);
        assert!(entries_packed(&owner).iter().all(|&p| p == created.0));
        drop(owner);

        for (step, configured) in ALL.into_iter().filter(|&s| s != created).enumerate() {
            let mut owner = open(dir.path(), configured);
            assert_eq!(
                owner.disk_format(),
                format_of(created),
                "kept, not the configured"
            );
            let n = 300 + step as u64 * 100;
            assert_intact(&owner, n);
            write(&mut owner, n, 100);
            assert!(entries_packed(&owner).iter().all(|&p| p == created.0));
        }
    }
}

#[test]
fn sled_refuses_files_written_with_the_other_page_setting() {
    for created in ALL {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path(), created));
        let direct = sled::Config::new()
            .path(dir.path())
            .use_compression(!created.1)
            .open();
        assert!(
            matches!(direct, Err(sled::Error::Unsupported(_))),
            "sled opened {created:?} files with the other page setting"
        );
    }
}

/// A session-8 build recorded `{"compression": <sled's pages>}`: it still means the pages, and
/// its entries are plain.
#[test]
fn a_record_from_before_entry_compression_keeps_its_page_setting() {
    for page in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut owner = open(dir.path(), (false, page));
        write(&mut owner, 0, 50);
        drop(owner);
        let old = format!(r#"{{"compression":{page}}}"#);
        std::fs::write(dir.path().join(RECORD_FILE), old).unwrap();

        let mut owner = open(dir.path(), (true, !page));
        assert_eq!(owner.disk_format(), format_of((false, page)));
        assert_intact(&owner, 50);
        write(&mut owner, 50, 10);
        assert!(entries_packed(&owner).iter().all(|&p| !p));
    }
}

#[test]
fn a_data_dir_from_before_the_record_opens_uncompressed_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = open(dir.path(), (false, false));
    write(&mut owner, 0, 50);
    drop(owner);
    std::fs::remove_file(dir.path().join(RECORD_FILE)).unwrap();

    let (format, origin) = disk_format::resolve(dir.path(), &settings((true, true))).unwrap();
    assert_eq!((format, origin), (DiskFormat::PLAIN, Origin::Legacy));
    let (_, origin) = disk_format::resolve(dir.path(), &settings((true, true))).unwrap();
    assert_eq!(origin, Origin::Recorded, "the legacy format was recorded");
    let owner = open(dir.path(), (true, true));
    assert_eq!(owner.disk_format(), DiskFormat::PLAIN);
    assert_intact(&owner, 50);
}

#[test]
fn a_moved_aside_data_dir_is_rebuilt_with_the_configured_setting() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    let mut owner = open(&dir, (false, false));
    write(&mut owner, 0, 20);
    drop(owner);
    std::fs::rename(&dir, root.path().join("data.old")).unwrap();

    let mut owner = open(&dir, (true, true));
    assert_eq!(owner.disk_format(), format_of((true, true)));
    assert_eq!(
        owner.store().read().log_count(PROCESS, Channel::Normalized),
        0
    );
    write(&mut owner, 0, 20);
    drop(owner);
    assert_intact(&open(&dir, (false, false)), 20);
    assert_intact(&open(&root.path().join("data.old"), (true, true)), 20);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Any sequence of configured settings across reopens, with writes between: the data dir
    /// keeps the first open's format and everything written so far.
    #[test]
    fn any_sequence_of_configured_settings_keeps_the_first_format(
        configured in prop::collection::vec((any::<bool>(), any::<bool>()), 1..5)
    ) {
        let dir = tempfile::tempdir().unwrap();
        for (step, &setting) in configured.iter().enumerate() {
            let mut owner = open(dir.path(), setting);
            prop_assert_eq!(owner.disk_format(), format_of(configured[0]));
            assert_intact(&owner, step as u64 * 40);
            write(&mut owner, step as u64 * 40, 40);
        }
    }
}
