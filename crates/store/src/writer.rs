//! THE ONE WRITER. It owns every mutation of the projection tree: for each batch of domain
//! events it builds one pending batch, and if anything really changed it stamps the batch with
//! the next global token (persisted in the same atomic `apply_batch`), bumps the token of every
//! attempt touched, records a compact event, commits, and only then wakes waiters.
//!
//! Ingest talks to it through a [`WriterHandle`] (an mpsc queue), so writes are serialised
//! without locks and readers never see a half-applied batch.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::apply::{MaxIndexCache, Pending};
use super::codec::{EntryPacker, decode};
use super::events::DomainEvent;
use super::feed;
use super::keys::{self, table};
use super::outbox::{self, OutboxConfig};
use super::overlay::Overlay;
use super::{Retention, Store, StoreError};
use vk_observer_telemetry::catchup_metrics as catchup;
use vk_observer_vk::uuid_of;

/// What one committed batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The new global token, or `None` if nothing changed (no token consumed).
    pub token: Option<u64>,
    /// Attempts whose token moved.
    pub attempts: Vec<Uuid>,
}

/// A batch committed to sled whose token is not published yet (`Writer::apply_group`).
#[derive(Default)]
struct Staged {
    applied: Applied,
    /// Attempts whose waits this batch wakes: those whose token moved, and those nudged (a log
    /// read to its end moves no token).
    woken: Vec<Uuid>,
    /// Projects whose waits this batch wakes.
    projects: Vec<Uuid>,
    /// It wrote activity items: flush before publishing.
    fed: bool,
}

/// Batches the writer task takes from its queue at once (`Writer::apply_group`): enough to make
/// one flush serve a burst, few enough that the first batch's waiters are not held long.
const MAX_GROUP: usize = 64;

/// Tokens reserved per flush: a restart after a crash continues above the reservation, so a token
/// a client has seen is never handed out again even if the batch behind it was lost.
const TOKEN_RESERVATION: u64 = 100_000;

pub struct Writer {
    store: Store,
    token: u64,
    reserved: u64,
    max_index: MaxIndexCache,
    retention: Retention,
    /// Set on a fleet host: each committed batch is also written to the outbox.
    outbox: Option<OutboxConfig>,
    /// The last meta-only outbox entry (`store::outbox`): token and number after it.
    last_meta: outbox::OutboxAt,
    /// Compresses log entry values (`codec`), when the data dir was created with it.
    packer: Option<EntryPacker>,
    /// Entries per log chunk (`chunk::CHUNK`).
    chunk_entries: u64,
}

impl Writer {
    pub(super) fn new(store: Store, entry_compression: bool) -> Self {
        let token = store.current_token();
        let retention = store.retention().clone();
        let reserved = store.reserved_token();
        let last_meta = store.read().outbox_last_meta();
        Writer {
            store,
            token,
            reserved,
            max_index: MaxIndexCache::new(),
            retention,
            outbox: None,
            last_meta,
            packer: entry_compression.then(EntryPacker::default),
            chunk_entries: super::chunk::CHUNK,
        }
    }

    /// Benches only: write log chunks of `n` entries (1..=128) instead of `chunk::CHUNK`. A data
    /// dir must be written with one chunk size for life (readers cope with any, the writer finds
    /// an entry's chunk by its own size), so nothing but a bench on a fresh store may call this.
    #[doc(hidden)]
    pub fn set_chunk_entries_for_bench(&mut self, n: u64) {
        assert!((1..=128).contains(&n), "a chunk holds 1 to 128 entries");
        self.chunk_entries = n;
    }

    pub(super) fn enable_outbox(&mut self, config: OutboxConfig) {
        self.outbox = Some(config);
    }

    /// Apply one batch atomically. On error nothing is written and no token is consumed.
    pub fn apply(&mut self, events: Vec<DomainEvent>) -> Result<Applied, StoreError> {
        let mut results = self.apply_group(vec![events]);
        results.pop().unwrap_or(Err(StoreError::WriterGone))
    }

    /// Group commit: apply batches queued together, each its own atomic batch with its own
    /// token, in order; then one flush for all of them whose activity items must be durable
    /// (`store::feed`), and only then publish their tokens, in order. The durability rule holds
    /// (no token with activity is published before its flush) at one fsync per group instead of
    /// one per batch: a daemon catching up a big board writes tens of thousands of such batches
    /// (issue 27). A failed flush fails the whole group and publishes none of it.
    pub(crate) fn apply_group(
        &mut self,
        batches: Vec<Vec<DomainEvent>>,
    ) -> Vec<Result<Applied, StoreError>> {
        self.apply_group_chained(batches.into_iter().map(|b| (b, None)).collect())
    }

    /// [`Writer::apply_group`] with each batch's [`Chain`]: a batch whose chain broke (an
    /// earlier batch of it failed, in this group or before) is refused unapplied, and a batch
    /// that fails breaks its chain.
    pub(crate) fn apply_group_chained(
        &mut self,
        batches: Vec<(Vec<DomainEvent>, Option<Chain>)>,
    ) -> Vec<Result<Applied, StoreError>> {
        let started = std::time::Instant::now();
        metrics::counter!(catchup::STORE_GROUPS).increment(1);
        metrics::counter!(catchup::STORE_BATCHES).increment(batches.len() as u64);
        let chains: Vec<Option<Chain>> = batches.iter().map(|(_, c)| c.clone()).collect();
        let staged: Vec<Result<Staged, StoreError>> = batches
            .into_iter()
            .map(|(events, chain)| {
                if chain.as_ref().is_some_and(Chain::broken) {
                    return Err(StoreError::Invalid(
                        "an earlier batch of its chain failed; nothing was written",
                    ));
                }
                let result = self.apply_inner(events);
                if result.is_err() {
                    // The cache may describe writes that were never committed.
                    self.max_index.clear();
                    if let Some(chain) = &chain {
                        chain.break_off();
                    }
                }
                result
            })
            .collect();
        let fed = staged.iter().any(|s| s.as_ref().is_ok_and(|s| s.fed));
        let flush_started = std::time::Instant::now();
        metrics::counter!(catchup::STORE_APPLY_US)
            .increment((flush_started - started).as_micros() as u64);
        let flushed = if fed {
            let flushed = self.store.flush();
            metrics::counter!(catchup::STORE_FLUSHES).increment(1);
            metrics::counter!(catchup::STORE_FLUSH_US)
                .increment(flush_started.elapsed().as_micros() as u64);
            flushed.map(|_| ())
        } else {
            Ok(())
        };
        if let Err(e) = flushed {
            // None of the group is published: every chain in it is broken.
            chains.iter().flatten().for_each(Chain::break_off);
            let failed = e.to_string();
            return staged
                .into_iter()
                .map(|s| {
                    s.and_then(|_| {
                        Err(StoreError::Sled(sled::Error::Io(std::io::Error::other(
                            failed.clone(),
                        ))))
                    })
                })
                .collect();
        }
        staged
            .into_iter()
            .map(|s| {
                s.map(|s| {
                    match s.applied.token {
                        Some(token) => self.store.committed(token, &s.woken, &s.projects),
                        None if !s.woken.is_empty() => self.store.nudged(&s.woken, &s.projects),
                        None => {}
                    }
                    s.applied
                })
            })
            .collect()
    }

    /// One batch applied (committed to sled, tokens advanced) but not yet published.
    fn apply_inner(&mut self, events: Vec<DomainEvent>) -> Result<Staged, StoreError> {
        let tree = self.store.tree();
        let next = self.token + 1;
        let mut p = Pending {
            ov: Overlay::new(tree),
            next,
            changed: false,
            attempts: BTreeSet::new(),
            nudged: BTreeSet::new(),
            notes: Vec::new(),
            max_index: &mut self.max_index,
            packer: self.packer.as_mut(),
            entry_cap: self.retention.max_entries_per_process,
            chunk_entries: self.chunk_entries,
            chunks: Default::default(),
            feed: Vec::new(),
            fleet_mark: None,
        };
        let n_events = events.len();
        let encoded = match self.outbox {
            Some(_) => outbox::encode_events(&events)?,
            None => Vec::new(),
        };
        let mut entries = 0u64;
        // Which events wrote anything: a batch that moves no token replicates those.
        let mut wrote = Vec::new();
        for ev in events {
            if let DomainEvent::LogEntriesPut { entries: e, .. } = &ev {
                entries += e.len() as u64;
            }
            let before = (p.ov.writes(), p.chunks.len());
            p.apply(ev)?;
            wrote.push((p.ov.writes(), p.chunks.len()) != before);
        }
        p.flush_chunks();
        metrics::counter!(vk_observer_telemetry::EVENTS_APPLIED).increment(n_events as u64);
        metrics::counter!(vk_observer_telemetry::LOG_ENTRIES_RECEIVED).increment(entries);
        if !p.changed {
            let meta_only = outbox::join_events(&encoded, |i| wrote[i]);
            if let Some(json) = meta_only {
                self.last_meta = outbox_meta(&mut p.ov, self.token, self.last_meta, json);
            }
            let woken: Vec<Uuid> = p.nudged.iter().copied().collect();
            let projects = projects_of(&p.ov, tree, &woken);
            if !p.ov.is_empty() {
                tree.apply_batch(p.ov.into_batch())?; // meta only (upstream seq, logs complete)
            }
            return Ok(Staged {
                woken,
                projects,
                ..Staged::default()
            });
        }
        let replicated = outbox::join_events(&encoded, |_| true);
        super::list_index::restate(&mut p.ov)?;
        super::task_digest::restate(&mut p.ov)?;
        let attempts: Vec<Uuid> = p.attempts.iter().copied().collect();
        stamp(&mut p.ov, next, &attempts, n_events, &p.notes, replicated)?;
        if let Some((host, position)) = p.fleet_mark.take() {
            super::fleet_clock::mark(&mut p.ov, next, &host, &position);
        }
        let woken: Vec<Uuid> = p.attempts.union(&p.nudged).copied().collect();
        let mut projects = projects_of(&p.ov, tree, &woken);
        let fed = !p.feed.is_empty();
        for project in feed::write(&mut p.ov, next, &mut p.feed)? {
            if !projects.contains(&project) {
                projects.push(project); // wakes project waits that follow activity
            }
        }
        reserve_through(&self.store, &mut self.reserved, next)?;
        self.store.hub().applying(next);
        tree.apply_batch(p.ov.into_batch())?;
        self.token = next;
        Ok(Staged {
            applied: Applied {
                token: Some(next),
                attempts,
            },
            woken,
            projects,
            // An activity item a client can see must survive a crash (`store::feed`): flushed
            // before the token is published (`apply_group`).
            fed,
        })
    }

    /// Retention pass: drop finished attempts not touched for `finished_attempt_days` and event
    /// records beyond `events_kept`. Runs as an ordinary batch, so it moves tokens like any other
    /// removal.
    pub(crate) fn prune(
        &mut self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Applied, StoreError> {
        let mut removals = Vec::new();
        if self.retention.finished_attempt_days > 0 {
            let cutoff = now - chrono::Duration::days(self.retention.finished_attempt_days as i64);
            removals = self.store.read().expired_attempts(cutoff)?;
        }
        let tree = self.store.tree();
        if self.retention.events_kept > 0 && self.token > self.retention.events_kept {
            let end = keys::u64_key(table::EVENTS, self.token - self.retention.events_kept);
            let mut b = sled::Batch::default();
            for item in tree.range(keys::u64_key(table::EVENTS, 0)..end) {
                b.remove(item?.0);
            }
            tree.apply_batch(b)?;
            super::fleet_clock::prune(tree, self.token - self.retention.events_kept)?;
        }
        if !self.retention.activity_horizon.is_zero() {
            let horizon = chrono::Duration::from_std(self.retention.activity_horizon)
                .unwrap_or(chrono::Duration::MAX);
            let cutoff = now
                .checked_sub_signed(horizon)
                .map_or(i64::MIN, |t| t.timestamp_millis());
            feed::prune(tree, cutoff)?;
        }
        if let Some(config) = self.outbox {
            outbox::prune(tree, self.store.fleet_cursor().acked(), config)?;
        }
        if !self.retention.audit_horizon.is_zero() {
            let horizon = chrono::Duration::from_std(self.retention.audit_horizon)
                .unwrap_or(chrono::Duration::MAX);
            let cutoff = now
                .checked_sub_signed(horizon)
                .map_or(i64::MIN, |t| t.timestamp_millis());
            self.store.prune_audit(cutoff)?;
        }
        if removals.is_empty() {
            return Ok(Applied::default());
        }
        let events = removals
            .into_iter()
            .map(|(task_id, attempt)| {
                // Re-snapshot the task's attempts without the expired one.
                let keep = self
                    .store
                    .read()
                    .attempts_of_task(task_id)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|a| a.id != attempt)
                    .map(|a| a.value)
                    .collect();
                DomainEvent::AttemptsSnapshot {
                    task_id,
                    attempts: keep,
                }
            })
            .collect();
        self.apply(events)
    }
}

/// Tokens up to `next` must be reserved on disk before a batch with `next` is committed: a
/// crash then never reissues a token a client has seen.
fn reserve_through(store: &Store, reserved: &mut u64, next: u64) -> Result<(), StoreError> {
    if next > *reserved {
        let through = next + TOKEN_RESERVATION;
        store.tree().insert(
            keys::meta_key(keys::meta::TOKEN_RESERVED),
            through.to_be_bytes().to_vec(),
        )?;
        store.flush()?;
        *reserved = through;
    }
    Ok(())
}

/// A meta-only batch into the outbox after `token` (numbered on from `last` when it is at the
/// same token), and that number recorded in the same batch so a restart goes on from it.
fn outbox_meta(
    ov: &mut Overlay<'_>,
    token: u64,
    last: outbox::OutboxAt,
    json: Vec<u8>,
) -> outbox::OutboxAt {
    let meta = if last.0 == token { last.1 + 1 } else { 1 };
    ov.insert(&outbox::entry_key((token, meta)), json);
    let mut v = token.to_be_bytes().to_vec();
    v.extend_from_slice(&meta.to_be_bytes());
    ov.insert(&keys::meta_key(keys::meta::OUTBOX_META), v);
    (token, meta)
}

/// What every committed batch writes besides its changes: the touched attempts' tokens, the
/// event record, the store token, and (on a fleet host) the batch for the outbox.
fn stamp(
    ov: &mut Overlay<'_>,
    next: u64,
    attempts: &[Uuid],
    n_events: usize,
    notes: &[String],
    replicated: Option<Vec<u8>>,
) -> Result<(), StoreError> {
    for a in attempts {
        ov.insert(
            &keys::id_key(table::ATTEMPT_TOKENS, *a),
            next.to_be_bytes().to_vec(),
        );
    }
    let record = serde_json::json!({
        "at": chrono::Utc::now().to_rfc3339(),
        "events": n_events,
        "changes": notes,
    });
    ov.insert(
        &keys::u64_key(table::EVENTS, next),
        serde_json::to_vec(&record).map_err(StoreError::Encode)?,
    );
    ov.insert(
        &keys::meta_key(keys::meta::TOKEN),
        next.to_be_bytes().to_vec(),
    );
    if let Some(json) = replicated {
        ov.insert(&keys::u64_key(table::OUTBOX, next), json);
    }
    Ok(())
}

/// Projects owning the given attempts (attempt → task → project), read through the batch.
/// The projects of the touched attempts, as the batch leaves them or, for an attempt (or its
/// task) the batch removes, as they were before it: a deletion wakes its project's waits too.
fn projects_of(ov: &Overlay<'_>, before: &sled::Tree, attempts: &[Uuid]) -> Vec<Uuid> {
    let mut out = BTreeSet::new();
    let read = |key: &[u8]| read_json(ov, key).or_else(|| read_committed(before, key));
    for a in attempts {
        let task = read(&keys::id_key(table::ATTEMPTS, *a)).and_then(|v| uuid_of(&v, "task_id"));
        let project = task
            .and_then(|t| read(&keys::id_key(table::TASKS, t)))
            .and_then(|v| uuid_of(&v, "project_id"));
        if let Some(p) = project {
            out.insert(p);
        }
    }
    out.into_iter().collect()
}

fn read_json(ov: &Overlay<'_>, key: &[u8]) -> Option<serde_json::Value> {
    let v = ov.get(key).ok()??;
    let (_, j) = decode(&v)?;
    serde_json::from_slice(&j).ok()
}

/// A value as committed before the batch (the overlay is not applied yet).
fn read_committed(tree: &sled::Tree, key: &[u8]) -> Option<serde_json::Value> {
    let v = tree.get(key).ok()??;
    let (_, j) = decode(&v)?;
    serde_json::from_slice(&j).ok()
}

/// A request to the writer task.
pub(crate) struct WriteRequest {
    pub events: Vec<DomainEvent>,
    pub done: Option<oneshot::Sender<Result<Applied, StoreError>>>,
    /// The chain the batch belongs to, if any (`WriterHandle::queue_chained`).
    pub chain: Option<Chain>,
}

/// Batches queued one after another that must commit as a prefix: once one of them fails, every
/// later one of the chain is refused unapplied (a fleet follower's batches each carry the position
/// after their messages, which must never pass the messages of a failed earlier batch).
#[derive(Clone, Default)]
pub struct Chain(Arc<std::sync::atomic::AtomicBool>);

impl Chain {
    /// Whether a batch of the chain failed.
    pub(crate) fn broken(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    fn break_off(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// The sending side ingest holds. Cloneable; the writer task ends when every handle is dropped.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<WriteRequest>,
}

/// A batch queued to the writer; await `committed` for its result. Batches commit in the order
/// they were queued, whoever queued them.
pub struct Queued(oneshot::Receiver<Result<Applied, StoreError>>);

impl Queued {
    pub async fn committed(self) -> Result<Applied, StoreError> {
        self.0.await.map_err(|_| StoreError::WriterGone)?
    }
}

impl WriterHandle {
    /// Queue a batch and wait until it is committed (or failed).
    pub async fn write(&self, events: Vec<DomainEvent>) -> Result<Applied, StoreError> {
        self.queue(events).await?.committed().await
    }

    /// Queue a batch without waiting for its commit (waits only for room in the queue), so
    /// the caller can prepare the next batch while this one is written.
    pub async fn queue(&self, events: Vec<DomainEvent>) -> Result<Queued, StoreError> {
        self.send(events, None).await
    }

    /// [`WriterHandle::queue`] in `chain`: committed only if every batch queued before it in the
    /// chain was (see [`Chain`]).
    pub async fn queue_chained(
        &self,
        events: Vec<DomainEvent>,
        chain: &Chain,
    ) -> Result<Queued, StoreError> {
        self.send(events, Some(chain.clone())).await
    }

    async fn send(
        &self,
        events: Vec<DomainEvent>,
        chain: Option<Chain>,
    ) -> Result<Queued, StoreError> {
        let (done, rx) = oneshot::channel();
        self.tx
            .send(WriteRequest {
                events,
                done: Some(done),
                chain,
            })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        Ok(Queued(rx))
    }
}

/// Start the writer task. Also runs the retention pass every `retention.prune_every`.
pub(super) fn spawn_writer(mut writer: Writer) -> (WriterHandle, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<WriteRequest>(256);
    let prune_every = writer.store.retention().prune_every;
    let task = tokio::task::spawn_blocking(move || {
        let mut last_prune = std::time::Instant::now();
        while let Some(first) = rx.blocking_recv() {
            // Whatever else is already queued joins this group (never waits for more).
            let mut group = vec![first];
            while group.len() < MAX_GROUP
                && let Ok(req) = rx.try_recv()
            {
                group.push(req);
            }
            let (batches, dones): (Vec<_>, Vec<_>) = group
                .into_iter()
                .map(|r| ((r.events, r.chain), r.done))
                .unzip();
            let kinds: Vec<Vec<&'static str>> = batches
                .iter()
                .map(|(b, _)| b.iter().map(|e| e.kind()).collect())
                .collect();
            let results = writer.apply_group_chained(batches);
            for ((result, done), kinds) in results.into_iter().zip(dones).zip(kinds) {
                if let Err(e) = &result {
                    tracing::error!(error = %e, ?kinds, "store batch failed; nothing was written");
                    metrics::counter!(vk_observer_telemetry::STORE_BATCH_ERRORS).increment(1);
                }
                if let Some(done) = done {
                    let _ = done.send(result);
                }
            }
            if last_prune.elapsed() >= prune_every {
                last_prune = std::time::Instant::now();
                if let Err(e) = writer.prune(chrono::Utc::now()) {
                    tracing::warn!(error = %e, "retention pass failed");
                }
                writer.store.hub().collect_garbage();
            }
        }
        let _ = writer.store.flush();
    });
    (WriterHandle { tx }, task)
}

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Writer>();
    is_send::<Arc<Store>>();
}
