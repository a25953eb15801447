//! The event-sourced cache in sled: projections of VK's objects and logs, a global change token,
//! an event record per batch, and the notify hub that wakes long-polls after each commit.
//!
//! Invariants: only [`writer::Writer`] mutates the projection tree; the token never decreases and
//! is persisted atomically with the data it stamps; readers see whole batches or nothing.
//!
//! **The one-writer rule, by type** (after kube-runtime's reflector `Writer`/`Store`):
//! [`StoreOwner`] opens the files and is held by the daemon alone (not `Clone`); it hands out
//! the one [`writer::Writer`] exactly once (`Writer::new` is private to this module) and the
//! idempotency records, and flushes at shutdown. Everyone else — ingest, query, HTTP, the CLI —
//! holds [`Store`], a cheap cloneable read handle: snapshot reads, token, epoch, notify hub, last
//! commit. Nothing outside `store/` can write a projection.

pub(crate) mod apply;
pub mod approvals;
#[cfg(test)]
mod approvals_tests;
pub mod audit;
pub(crate) mod chunk;
pub(crate) mod chunk_migrate;
#[cfg(test)]
mod chunk_migrate_tests;
pub mod codec;
#[cfg(test)]
mod codec_store_tests;
pub(crate) mod disk_format;
#[cfg(test)]
mod disk_format_tests;
pub mod events;
pub mod feed;
mod feed_derive;
#[cfg(test)]
mod feed_tests;
pub mod fleet_clock;
#[cfg(test)]
mod fleet_clock_tests;
pub mod keys;
pub mod list_index;
#[cfg(test)]
mod list_index_tests;
#[cfg(test)]
mod log_model_tests;
mod log_read;
#[cfg(test)]
mod moves_tests;
pub(crate) mod notify;
pub mod outbox;
#[cfg(test)]
mod outbox_tests;
pub(crate) mod overlay;
pub mod reader;
pub mod records;
pub mod rows;
pub mod task_digest;
pub mod task_handles;
#[cfg(test)]
mod task_hosts_tests;
#[cfg(test)]
mod tests;
pub mod token;
pub mod usage;
pub mod writer;
#[cfg(test)]
mod writer_group_tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use keys::{meta, meta_key};
use notify::NotifyHub;
pub use reader::StoreReader;
use token::{Epoch, Token};

/// On-disk layout version. Bump on any incompatible change to keys or values.
/// 2: the list indexes (`list_index`); 3: their entry counts (`list_index::INDEX_COUNTS`);
/// 4: the per-task digests (`task_digest`); 5: log entries in chunks (`chunk`). A version-1, -2
/// or -3 store is migrated on open to 4 (`list_index::migrate_to_current`), and a version-4 one
/// to 5 (`chunk_migrate`).
pub(crate) const SCHEMA_VERSION: u32 = chunk_migrate::CHUNKED_SCHEMA;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("cannot encode a value: {0}")]
    Encode(serde_json::Error),
    #[error("invalid event: {0}")]
    Invalid(&'static str),
    #[error(
        "the data dir {dir} holds schema version {found}, this build uses {SCHEMA_VERSION}; \
         move the directory aside (it is a cache: the daemon rebuilds it from VK)"
    )]
    Incompatible { dir: PathBuf, found: u32 },
    #[error(
        "the data dir {dir} is corrupted ({source}); move it aside and restart: \
         the daemon rebuilds the cache from VK"
    )]
    Corrupt { dir: PathBuf, source: sled::Error },
    #[error(
        "the data dir {dir} is in use by another process (a running daemon?): stop it, or pass \
         another --data-dir"
    )]
    Locked { dir: PathBuf },
    #[error("the store writer has stopped")]
    WriterGone,
}

/// How long `StoreOwner::open` waits for a data dir's lock to be released.
pub(crate) const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Retention settings: the `[retention]` section, declared with the other settings.
pub use vk_observer_config::{DEFAULT_ACTIVITY_HORIZON, Retention};

/// How a new data dir's files are written: the `[store]` section.
pub use vk_observer_config::StoreSettings;

/// The read handle: cheap to clone, cannot write projections.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// The owner of the store's files: held by the daemon only. Hands out the one writer once.
pub struct StoreOwner {
    store: Store,
    writer: Option<writer::Writer>,
    /// What the sled files are written with (a temporary store: the defaults).
    #[allow(dead_code, reason = "named by Debug output")]
    format: disk_format::DiskFormat,
}

struct Inner {
    db: sled::Db,
    tree: sled::Tree,
    idem: sled::Tree,
    /// The fleet publisher's cursor (`outbox::CursorTree`).
    fleet: sled::Tree,
    /// The audit trail (`audit`), written with the idempotency records.
    audit: sled::Tree,
    /// MCP task handles (`task_handles`).
    tasks: sled::Tree,
    epoch: Epoch,
    hub: NotifyHub,
    retention: Retention,
    last_commit_ms: AtomicI64,
    #[allow(dead_code, reason = "named by Debug output")]
    dir: Option<PathBuf>,
}

impl StoreOwner {
    /// Open (or create) the store in `dir` with the default `[store]` settings
    /// ([`StoreOwner::open_with`]).
    pub fn open(dir: &Path, retention: Retention) -> Result<StoreOwner, StoreError> {
        Self::open_with(dir, retention, StoreSettings::default())
    }

    /// Open (or create) the store in `dir`. An existing data dir opens with the format it was
    /// created with, whatever `settings` say (`disk_format`); a new one is created with
    /// `settings`. A lock still held is waited for up to [`LOCK_GRACE`]: a store just dropped
    /// releases its file lock only once sled's flusher thread lets go of it, and a restarted
    /// daemon may start while the old one is exiting.
    pub fn open_with(
        dir: &Path,
        retention: Retention,
        settings: StoreSettings,
    ) -> Result<StoreOwner, StoreError> {
        let deadline = std::time::Instant::now() + LOCK_GRACE;
        loop {
            match Self::open_once(dir, retention.clone(), &settings) {
                Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(25));
                }
                other => return other,
            }
        }
    }

    fn open_once(
        dir: &Path,
        retention: Retention,
        settings: &StoreSettings,
    ) -> Result<StoreOwner, StoreError> {
        let io = |e| StoreError::Sled(sled::Error::Io(e));
        std::fs::create_dir_all(dir).map_err(io)?;
        let (format, _) = disk_format::resolve(dir, settings).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                // The record is not ours to read: as corrupted as unreadable sled files.
                StoreError::Corrupt {
                    dir: dir.to_path_buf(),
                    source: sled::Error::Io(e),
                }
            } else {
                io(e)
            }
        })?;
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(retention.cache_mb.max(1) * 1024 * 1024)
            .flush_every_ms(Some(500))
            .use_compression(format.page_compression)
            .open()
            .map_err(|e| match e {
                // Anything but an I/O error means the files are not a usable sled database.
                sled::Error::Corruption { .. }
                | sled::Error::Unsupported(_)
                | sled::Error::ReportableBug(_) => StoreError::Corrupt {
                    dir: dir.to_path_buf(),
                    source: e,
                },
                // sled takes an exclusive file lock on its database and reports a taken lock only
                // in its message (sled 0.34 `Config::try_lock`): this is the one place that reads
                // it, so callers decide on `StoreError::Locked`, never on text.
                sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
                    StoreError::Locked {
                        dir: dir.to_path_buf(),
                    }
                }
                other => StoreError::Sled(other),
            })?;
        Self::from_db(db, retention, Some(dir.to_path_buf()), format)
    }

    /// A throwaway store (tests and benches).
    pub fn open_temporary(retention: Retention) -> Result<StoreOwner, StoreError> {
        let format = disk_format::DiskFormat::configured(&StoreSettings::default());
        let db = sled::Config::new()
            .temporary(true)
            .use_compression(format.page_compression)
            .open()?;
        Self::from_db(db, retention, None, format)
    }

    fn from_db(
        db: sled::Db,
        retention: Retention,
        dir: Option<PathBuf>,
        format: disk_format::DiskFormat,
    ) -> Result<StoreOwner, StoreError> {
        let store = Store::from_db(db, retention, dir, format.entry_compression)?;
        approvals::backfill(store.tree())?;
        Ok(StoreOwner {
            writer: Some(writer::Writer::new(store.clone(), format.entry_compression)),
            store,
            format,
        })
    }

    /// What this store's sled files are written with (kept from the data dir's creation).
    #[cfg(test)]
    pub(crate) fn disk_format(&self) -> disk_format::DiskFormat {
        self.format
    }

    /// A read handle.
    pub fn store(&self) -> Store {
        self.store.clone()
    }

    /// The one writer; `None` once taken.
    pub fn take_writer(&mut self) -> Option<writer::Writer> {
        self.writer.take()
    }

    /// Run the one writer as a task; `None` once the writer was taken.
    pub fn spawn_writer(&mut self) -> Option<(writer::WriterHandle, tokio::task::JoinHandle<()>)> {
        self.take_writer().map(writer::spawn_writer)
    }

    /// The request_id records of the mutating tools.
    pub fn idempotency_records(&self) -> records::IdempotencyRecords {
        records::IdempotencyRecords::new(
            self.store.inner.idem.clone(),
            self.store.inner.audit.clone(),
        )
    }

    /// Make the writer (not yet taken) keep a fleet outbox (`store::outbox`).
    pub fn enable_outbox(&mut self, config: outbox::OutboxConfig) {
        if let Some(w) = self.writer.as_mut() {
            w.enable_outbox(config);
        }
    }

    /// The fleet publisher's cursor, which the publisher alone writes.
    pub fn fleet_cursor(&self) -> outbox::CursorTree {
        self.store.fleet_cursor()
    }

    /// Force everything written so far to disk.
    pub fn flush(&self) -> Result<usize, StoreError> {
        self.store.flush()
    }

    pub async fn flush_async(&self) -> Result<usize, StoreError> {
        Ok(self.store.inner.db.flush_async().await?)
    }
}

impl Store {
    fn from_db(
        db: sled::Db,
        retention: Retention,
        dir: Option<PathBuf>,
        entry_compression: bool,
    ) -> Result<Store, StoreError> {
        let tree = db.open_tree("projections")?;
        let idem = db.open_tree("idempotency")?;
        let fleet = db.open_tree("fleet")?;
        let audit = db.open_tree("audit")?;
        let tasks = db.open_tree(task_handles::TREE)?;
        let schema = tree.get(meta_key(meta::SCHEMA))?;
        let epoch = match schema {
            None => {
                let epoch: u64 = rand::random();
                let mut b = sled::Batch::default();
                b.insert(
                    meta_key(meta::SCHEMA),
                    SCHEMA_VERSION.to_be_bytes().to_vec(),
                );
                b.insert(meta_key(meta::EPOCH), epoch.to_be_bytes().to_vec());
                b.insert(meta_key(meta::TOKEN), 0u64.to_be_bytes().to_vec());
                tree.apply_batch(b)?;
                db.flush()?;
                Epoch(epoch)
            }
            Some(v) => {
                let found = v.as_ref().try_into().map(u32::from_be_bytes).unwrap_or(0);
                if !(1..=SCHEMA_VERSION).contains(&found) {
                    return Err(StoreError::Incompatible {
                        dir: dir.clone().unwrap_or_default(),
                        found,
                    });
                }
                if found < list_index::INDEXED_SCHEMA {
                    list_index::migrate_to_current(&tree)?;
                }
                if found < SCHEMA_VERSION {
                    chunk_migrate::migrate(&tree, entry_compression)?;
                }
                Epoch(read_u64(&tree, meta::EPOCH)?.unwrap_or(0))
            }
        };
        // Never hand out a token a previous run may already have published (its last writes can
        // be lost in a crash, but the reservation was flushed before any token above it went out).
        let token = read_u64(&tree, meta::TOKEN)?
            .unwrap_or(0)
            .max(read_u64(&tree, meta::TOKEN_RESERVED)?.unwrap_or(0));
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                tree,
                idem,
                fleet,
                audit,
                tasks,
                epoch,
                hub: NotifyHub::new(token),
                retention,
                last_commit_ms: AtomicI64::new(0),
                dir,
            }),
        })
    }

    /// The MCP task handles: the proxy writes them, reads (`tasks/get`) use this same handle.
    pub fn task_handles(&self) -> task_handles::TaskHandles {
        task_handles::TaskHandles::new(self.inner.tasks.clone())
    }

    pub(crate) fn fleet_cursor(&self) -> outbox::CursorTree {
        outbox::CursorTree::new(self.inner.fleet.clone())
    }

    /// The fleet publisher's last acknowledged place, read-only (its heartbeat's backlog).
    pub fn fleet_acked(&self) -> Option<outbox::FleetCursor> {
        self.fleet_cursor().get()
    }

    /// The flushed token reservation (see the writer).
    pub(crate) fn reserved_token(&self) -> u64 {
        read_u64(&self.inner.tree, meta::TOKEN_RESERVED)
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    pub fn epoch(&self) -> Epoch {
        self.inner.epoch
    }

    /// The latest committed token number.
    pub fn current_token(&self) -> u64 {
        self.inner.hub.current()
    }

    pub fn token(&self) -> Token {
        Token {
            epoch: self.inner.epoch,
            seq: self.current_token(),
        }
    }

    pub fn hub(&self) -> &NotifyHub {
        &self.inner.hub
    }

    pub fn retention(&self) -> &Retention {
        &self.inner.retention
    }

    pub fn read(&self) -> StoreReader {
        StoreReader::new(self.inner.tree.clone())
    }

    pub(crate) fn tree(&self) -> &sled::Tree {
        &self.inner.tree
    }

    /// When the last batch that changed something was committed (unix ms; 0 = never since start).
    pub fn last_commit_ms(&self) -> i64 {
        self.inner.last_commit_ms.load(Ordering::Relaxed)
    }

    /// Bytes sled uses on disk.
    pub fn size_on_disk(&self) -> u64 {
        self.inner.db.size_on_disk().unwrap_or(0)
    }

    /// The projection tree's live entries and their key and value bytes, per table byte (a full
    /// scan: for benches and diagnosis, not for a request path).
    pub fn bytes_by_table(&self) -> Result<Vec<TableBytes>, StoreError> {
        let mut out: Vec<TableBytes> = Vec::new();
        for item in self.inner.tree.iter() {
            let (k, v) = item?;
            let table = k.first().copied().unwrap_or(0);
            if out.last().is_none_or(|t| t.table != table) {
                out.push(TableBytes {
                    table,
                    ..TableBytes::default()
                });
            }
            if let Some(t) = out.last_mut() {
                t.entries += 1;
                t.key_bytes += k.len() as u64;
                t.value_bytes += v.len() as u64;
            }
        }
        Ok(out)
    }

    /// Force everything written so far to disk (the writer's reservations, the owner).
    pub(crate) fn flush(&self) -> Result<usize, StoreError> {
        Ok(self.inner.db.flush()?)
    }

    /// Called by the writer after a commit: publish the token, then wake waiters.
    pub(crate) fn committed(&self, token: u64, attempts: &[uuid::Uuid], projects: &[uuid::Uuid]) {
        self.inner
            .last_commit_ms
            .store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
        self.inner.hub.publish(token, attempts, projects);
    }

    /// Wake the waits on these attempts and projects though no token moved.
    pub(crate) fn nudged(&self, attempts: &[uuid::Uuid], projects: &[uuid::Uuid]) {
        self.inner.hub.nudge(attempts, projects);
    }
}

/// What one table of the projection tree holds (`Store::bytes_by_table`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableBytes {
    pub table: u8,
    pub entries: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
}

fn read_u64(tree: &sled::Tree, name: &[u8]) -> Result<Option<u64>, StoreError> {
    Ok(tree
        .get(meta_key(name))?
        .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes)))
}
