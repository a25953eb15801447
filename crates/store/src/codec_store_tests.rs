//! Log entries through the writer and back, with and without the store's entry compression:
//! any sequence of writes, overwrites and reopens reads back the JSON last written, byte for
//! byte (`codec`, `disk_format`).

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::events::{Channel, DomainEvent};
use super::{Retention, StoreOwner, StoreSettings};

const PROCESS: Uuid = Uuid::from_u128(0x7100);
const ATTEMPT: Uuid = Uuid::from_u128(0x6100);

#[derive(Debug, Clone)]
enum Op {
    /// Entries (index, text) in one batch: new ones, overwrites and holes filled.
    Put(Vec<(u64, String)>),
    /// Close the store and open it again with these `[store]` settings configured.
    Reopen(bool, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec((0u64..24, "[a-z \\n\"é]{0,120}"), 1..12).prop_map(Op::Put),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(e, p)| Op::Reopen(e, p)),
    ]
}

/// A normalized entry as VK writes it (compact), its content `text`.
fn entry(text: &str) -> String {
    let content = serde_json::to_string(text).unwrap();
    format!(
        r#"{{"type":"NORMALIZED_ENTRY","content":{{"timestamp":null,"entry_type":{{"type":"assistant_message"}},"content":{content}}}}}"#
    )
}

fn open(dir: &std::path::Path, compression: bool, page_compression: bool) -> StoreOwner {
    let settings = StoreSettings {
        compression,
        page_compression,
    };
    StoreOwner::open_with(dir, Retention::default(), settings).expect("store opens")
}

fn assert_reads(owner: &StoreOwner, model: &BTreeMap<u64, String>) -> Result<(), TestCaseError> {
    let r = owner.store().read();
    prop_assert_eq!(r.log_count(PROCESS, Channel::Normalized), model.len());
    for (&i, json) in model {
        let e = r.log_entry(PROCESS, Channel::Normalized, i).unwrap();
        let read = e.map(|e| e.entry.get().to_string());
        prop_assert_eq!(read.as_ref(), Some(json));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_writes_and_reopens_read_back_byte_identical(
        created in (any::<bool>(), any::<bool>()),
        ops in prop::collection::vec(op(), 1..10),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut owner = open(dir.path(), created.0, created.1);
        let mut writer = owner.take_writer().unwrap();
        let mut model = BTreeMap::new();
        for op in ops {
            match op {
                Op::Put(batch) => {
                    let entries = batch
                        .iter()
                        .map(|(i, text)| (*i, RawValue::from_string(entry(text)).unwrap()))
                        .collect();
                    writer
                        .apply(vec![DomainEvent::LogEntriesPut {
                            attempt_id: ATTEMPT,
                            process_id: PROCESS,
                            channel: Channel::Normalized,
                            entries,
                        }])
                        .unwrap();
                    model.extend(batch.iter().map(|(i, text)| (*i, entry(text))));
                }
                Op::Reopen(compression, page_compression) => {
                    owner.flush().unwrap();
                    drop((writer, owner));
                    owner = open(dir.path(), compression, page_compression);
                    writer = owner.take_writer().unwrap();
                    prop_assert_eq!(owner.disk_format().entry_compression, created.0);
                }
            }
            assert_reads(&owner, &model)?;
        }
    }
}
