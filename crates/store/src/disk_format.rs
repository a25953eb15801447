//! The format a data dir's sled files and values were written with, recorded beside them in
//! `disk-format.json`, and the rule that opens a data dir with it.
//!
//! sled records `use_compression` in its own `conf` file and refuses (`Error::Unsupported`) to
//! open files written with the other setting; the store would report that as a corrupted data
//! dir. So the store never opens a data dir with the configured `[store]` setting alone: an
//! existing data dir is opened with the format it was created with, whatever is configured now.
//! The store's own entry compression (`codec::EntryPacker`) follows the same rule, though a
//! reader would read either kind of value: a data dir keeps writing what it was created with.
//!
//! The rule ([`resolve`]): a data dir with sled files and a record opens with the record; one
//! with sled files and no record was written by a build before the record existed, which never
//! compressed (sled's `compression` feature was off), so it opens uncompressed and the record is
//! written; a data dir without sled files (new, or moved aside for a rebuild) takes the
//! configured settings, recorded before sled writes a byte. A configured setting that differs
//! from the kept one is logged once at open, saying it applies to a new data dir.
//!
//! The record's fields: `page_compression` (sled's pages; a record written before the store
//! compressed entries calls it `compression`, read as this) and `entry_compression` (the store's
//! own, `[store] compression`; absent in those records: their entries are plain).

use std::path::Path;

use serde::{Deserialize, Serialize};

use vk_observer_config::StoreSettings;

/// The record's file name, beside sled's files in the data dir.
pub(crate) const RECORD_FILE: &str = "disk-format.json";

/// sled's own configuration file: present once sled has created its files in a directory.
const SLED_CONF_FILE: &str = "conf";

/// What a data dir's sled files and values were created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiskFormat {
    /// sled's `use_compression` (zstd on pages; `[store] page_compression`).
    #[serde(alias = "compression")]
    pub page_compression: bool,
    /// The writer compresses log entry values itself (`codec::EntryPacker`; `[store]
    /// compression`).
    #[serde(default)]
    pub entry_compression: bool,
}

impl DiskFormat {
    /// Every build before the record existed: nothing compressed.
    pub(crate) const PLAIN: DiskFormat = DiskFormat {
        page_compression: false,
        entry_compression: false,
    };

    /// What a new data dir is created with under `settings`.
    pub(crate) fn configured(settings: &StoreSettings) -> DiskFormat {
        DiskFormat {
            page_compression: settings.page_compression,
            entry_compression: settings.compression,
        }
    }
}

/// Where the kept format came from (for the log line and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A new data dir: the configured setting, now recorded.
    New,
    /// The data dir's record.
    Recorded,
    /// Sled files without a record: written before the record existed (never compressed).
    Legacy,
}

/// The format to open `dir` with, given the configured settings; records it when the data dir
/// has no record yet. Logs when the configured setting differs from the kept one.
pub(crate) fn resolve(dir: &Path, wanted: &StoreSettings) -> std::io::Result<(DiskFormat, Origin)> {
    let record = dir.join(RECORD_FILE);
    let has_sled_files = dir.join(SLED_CONF_FILE).exists();
    let (format, origin) = match (has_sled_files, read_record(&record)?) {
        (true, Some(kept)) => (kept, Origin::Recorded),
        (true, None) => (DiskFormat::PLAIN, Origin::Legacy),
        (false, _) => (DiskFormat::configured(wanted), Origin::New),
    };
    if origin != Origin::Recorded {
        write_record(&record, &format)?;
    }
    let configured = DiskFormat::configured(wanted);
    if format != configured {
        tracing::info!(
            data_dir = %dir.display(),
            kept = ?format,
            configured = ?configured,
            "the data dir keeps the format it was created with ({format:?}); the configured \
             [store] settings ({configured:?}) apply to a new data dir: move this one aside to \
             rebuild it from VK with them"
        );
    }
    Ok((format, origin))
}

fn read_record(path: &Path) -> std::io::Result<Option<DiskFormat>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Written to a temporary file and renamed over the record, so a crash leaves the old record or
/// the new one.
fn write_record(path: &Path, format: &DiskFormat) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec(format).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
