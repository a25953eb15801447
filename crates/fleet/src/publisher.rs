//! The host side (design-notes §23): publishes the store's outbox to the host's JetStream
//! stream in token order, records JetStream's acknowledgements in the fleet cursor, and
//! publishes a snapshot when the stream cannot be resumed. Runs as its own task: NATS down
//! grows the outbox (`vk_observer_fleet_backlog_batches`), ingest and queries never wait.

use std::time::Duration;

use async_nats::jetstream::context::PublishError;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::pack;
use super::wire::{self, Kind};
use vk_observer_config::FleetSettings;
use vk_observer_store::Store;
use vk_observer_store::outbox::{CursorTree, FleetCursor, OutboxAt};
use vk_observer_telemetry::fleet_metrics as m;

/// Outbox batches read and published in one step.
const GROUP: usize = 64;
/// Batches published and not yet acknowledged, at most (the window of `follow_outbox`), on a
/// stream of one replica. A replicated stream takes one at a time (`Publisher::window`).
const WINDOW: usize = 64;
/// How often an idle publisher looks at the outbox without a commit: meta-only batches (which
/// move no token, so wake nothing) are published within it.
const META_TICK: Duration = Duration::from_millis(250);
/// How often an idle publisher looks at its stream (deleted, recreated or purged).
const IDLE_TICK: Duration = Duration::from_secs(5);

/// Outbox batches read at most in one step: enough for [`GROUP`] messages of one batch, or
/// for a few packs (`pack`).
const READ_AT_MOST: usize = 256;

/// A publish's place in the outbox (its last batch's), how many batches it carries, and
/// JetStream's answer.
type Acked = std::pin::Pin<
    Box<dyn Future<Output = ((OutboxAt, usize), Result<PublishAck, PublishError>)> + Send>,
>;

/// Move the cursor to an acknowledged publish (acknowledgements come in publish order); a
/// refused one ends the session, which resumes after the last acknowledged one (`follow_outbox`
/// records the cursor however the session ends).
fn record_ack(
    cursor: &mut FleetCursor,
    ((at, batches), ack): ((OutboxAt, usize), Result<PublishAck, PublishError>),
) -> Ended {
    let ack = ack?;
    (cursor.token, cursor.meta) = at;
    cursor.stream_seq = ack.sequence;
    metrics::counter!(m::FLEET_PUBLISHED).increment(batches as u64);
    Ok(())
}

/// An idle publisher's look at its stream: one deleted, recreated or purged below the cursor
/// ends the session, so the next one republishes (a snapshot) without waiting for a commit.
async fn check_stream(stream: &mut stream::Stream, cursor: &FleetCursor) -> Ended {
    let info = stream.info().await?;
    if info.created.to_string() != cursor.stream_created
        || info.state.last_sequence < cursor.stream_seq
    {
        anyhow::bail!("stream {} was recreated or purged", info.config.name);
    }
    Ok(())
}

/// An existing stream brought to what the settings ask, keeping every other limit an operator
/// set on it: its subjects (a stream of an older build held `vko.<host>.>`, which would swallow
/// RPC requests) and `[fleet] replicas` (changed since the stream was created). Replicas that
/// JetStream will not change (e.g. 3 on a server without a cluster) are logged with its reason and
/// the stream is used as it is.
async fn reconcile_stream(
    js: &jetstream::Context,
    stream: &stream::Stream,
    wanted: &stream::Config,
) -> Ended {
    let have = &stream.cached_info().config;
    if have.subjects != wanted.subjects {
        let mut update = have.clone();
        update.subjects = wanted.subjects.clone();
        js.update_stream(&update).await?;
    }
    if have.num_replicas.max(1) != wanted.num_replicas.max(1) {
        let mut update = have.clone();
        update.subjects = wanted.subjects.clone();
        update.num_replicas = wanted.num_replicas;
        match js.update_stream(&update).await {
            Ok(_) => {
                tracing::info!(stream = %wanted.name, from = have.num_replicas, to = wanted.num_replicas, "fleet stream replicas changed")
            }
            Err(e) => tracing::warn!(
                stream = %wanted.name, has = have.num_replicas, wanted = wanted.num_replicas, error = %e,
                "[fleet] replicas cannot be applied to the existing stream; it keeps its replicas \
                 (does the NATS cluster have that many servers with JetStream?)"
            ),
        }
    }
    Ok(())
}

/// How far a session published (acknowledged or not): the outbox place of its last publish and
/// that message's id, which the next publish is chained to.
struct Published {
    at: OutboxAt,
    last_id: Option<String>,
    /// How large a message may grow (`pack`), by the server this session speaks to.
    limits: pack::Limits,
}

/// A host's publisher.
pub struct Publisher {
    settings: FleetSettings,
    store: Store,
    cursor: CursorTree,
    pipelining: super::Pipelining,
}

/// Why a publishing session ended (the task then reconnects after a pause).
type Ended = anyhow::Result<()>;

impl Publisher {
    pub fn new(settings: FleetSettings, store: Store, cursor: CursorTree) -> Self {
        Publisher {
            settings,
            store,
            cursor,
            pipelining: super::Pipelining::process_default(),
        }
    }

    /// Publish with another [`super::Pipelining`] than the default (benches/fleet/main.rs).
    pub fn with_pipelining(mut self, pipelining: super::Pipelining) -> Self {
        self.pipelining = pipelining;
        self
    }

    /// Publish until `cancel`; reconnects with a growing pause while NATS is unreachable.
    pub fn spawn(self, cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
        m::register_fleet();
        super::certs::spawn_expiry_watch(self.settings.clone(), cancel.child_token());
        tokio::spawn(async move {
            let mut pause = Duration::ZERO;
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(pause) => {}
                }
                self.set_backlog_gauge();
                let began = tokio::time::Instant::now();
                let session = tokio::select! {
                    _ = cancel.cancelled() => return,
                    ended = self.session() => ended,
                };
                if let Err(e) = session {
                    metrics::counter!(m::FLEET_PUBLISH_ERRORS).increment(1);
                    tracing::warn!(error = %e, host = %self.settings.host, "fleet publishing paused; the outbox keeps the backlog");
                }
                pause = super::pause_after(pause, began.elapsed());
            }
        })
    }

    fn set_backlog_gauge(&self) {
        metrics::gauge!(m::FLEET_BACKLOG).set(self.store.read().outbox_len() as f64);
    }

    /// One connection: make sure of the stream, resume or snapshot, then follow the outbox.
    async fn session(&self) -> Ended {
        let host = &self.settings.host;
        let client = super::connect(&self.settings, &format!("vk-observer host {host}")).await?;
        let js = super::jetstream(client, &self.settings);
        let config = stream::Config {
            name: wire::stream_name(host),
            subjects: wire::stream_subjects(host),
            storage: stream::StorageType::File,
            num_replicas: self.settings.replicas,
            ..Default::default()
        };
        let mut stream = js.get_or_create_stream(config.clone()).await?;
        reconcile_stream(&js, &stream, &config).await?;
        let info = stream.info().await?.clone();
        let created = info.created.to_string();
        let generation = super::identity::generation(&info);
        let epoch = self.store.epoch().0;
        let cursor = match self.resumable(&info, &created) {
            Some(cursor) => cursor,
            None => {
                self.publish_snapshot(&js, epoch, created, &generation)
                    .await?
            }
        };
        tracing::info!(host = %host, token = cursor.token, stream_seq = cursor.stream_seq, "fleet publishing");
        super::discovery::announce(&js.client(), host).await;
        self.follow_outbox(&js, &mut stream, (epoch, &generation), cursor)
            .await
    }

    /// Publish the outbox after `cursor` as commits come (`publish_window`) until the session
    /// ends, then record how far JetStream acknowledged. However the session ends (a refused
    /// publish, a lost acknowledgement, NATS gone), the acknowledgements that came before it
    /// count: the next session resumes after them, its first publish unchained. Before, a
    /// session ended by a refused chained publish (the stream's last message not this
    /// publisher's, e.g. another client's copy of a batch) dropped the acknowledgements it had
    /// just received: the next session resumed from the same older cursor, re-published the
    /// stored batches after it (dropped as duplicates, each chained to the one before), chained
    /// the refused batch to them again and was refused again — every session alike, the host's
    /// stream stuck for good (fleet fault seed 40; tests/fleet_publish_resume.rs).
    async fn follow_outbox(
        &self,
        js: &jetstream::Context,
        stream: &mut stream::Stream,
        stamp: (u64, &str),
        mut cursor: FleetCursor,
    ) -> Ended {
        let mut recorded = (cursor.token, cursor.meta);
        let ended = self
            .publish_window(js, stream, stamp, &mut cursor, &mut recorded)
            .await;
        if (cursor.token, cursor.meta) != recorded {
            self.cursor.set(&cursor)?;
        }
        ended
    }

    /// Publish the outbox after `cursor` as commits come, keeping up to [`WINDOW`] publishes
    /// unacknowledged: new batches go out while earlier acknowledgements are still on their
    /// way, and `cursor` moves (`record_ack`) as they come back, in order; `recorded` is where
    /// the cursor tree has it. Returns only when the session ends.
    async fn publish_window(
        &self,
        js: &jetstream::Context,
        stream: &mut stream::Stream,
        stamp: (u64, &str),
        cursor: &mut FleetCursor,
        recorded: &mut OutboxAt,
    ) -> Ended {
        let mut committed = self.store.hub().subscribe_global();
        let mut last_check = tokio::time::Instant::now();
        let mut published = Published {
            at: (cursor.token, cursor.meta),
            last_id: None,
            limits: pack::Limits::for_server(
                self.pipelining.pack_batches,
                js.client().server_info().max_payload,
            ),
        };
        let mut acks: FuturesOrdered<Acked> = FuturesOrdered::new();
        loop {
            let window = self.window(stream.cached_info());
            let room = window.saturating_sub(acks.len());
            let sent = self
                .publish_after(js, stamp, &mut published, room, &mut acks)
                .await?;
            if acks.is_empty() {
                let backlog = self.store.read().outbox_len_after(published.at);
                metrics::gauge!(m::FLEET_BACKLOG).set(backlog as f64);
                tokio::select! {
                    _ = committed.changed() => {}
                    // Meta-only batches move no token: the tick finds them; every
                    // IDLE_TICK the stream itself is looked at too.
                    _ = tokio::time::sleep(META_TICK) => {
                        if last_check.elapsed() >= IDLE_TICK {
                            last_check = tokio::time::Instant::now();
                            check_stream(stream, cursor).await?;
                        }
                    }
                }
                continue;
            }
            if !self.pipelining.publish_window {
                // The serial way: every acknowledgement of the group before the next read.
                while let Some(acked) = acks.next().await {
                    record_ack(cursor, acked)?;
                }
            } else if sent == 0 || acks.len() >= window {
                // Nothing more to send now: wait for the oldest acknowledgement or a commit.
                tokio::select! {
                    Some(acked) = acks.next() => record_ack(cursor, acked)?,
                    _ = committed.changed(), if acks.len() < window => {}
                }
            }
            while let Some(Some(acked)) = acks.next().now_or_never() {
                record_ack(cursor, acked)?;
            }
            if (cursor.token, cursor.meta) != *recorded {
                if self.pipelining.flush_cursor {
                    self.cursor.set(cursor)?;
                } else {
                    self.cursor.record(cursor)?;
                }
                *recorded = (cursor.token, cursor.meta);
            }
        }
    }

    /// How many publishes may await their acknowledgement at once. One on a replicated stream:
    /// with several chained publishes in flight, a change of the stream's leader can drop one
    /// while the next (chained to it) is kept, and nats-server 2.15.1 then fails that entry on
    /// every replica ("critical write error: last msgid mismatch") and leaves the stream
    /// without a leader for good (seen in tests/fleet_cluster_faults.rs). One at a time, a
    /// publish is sent only once the one it is chained to is stored.
    fn window(&self, stream: &stream::Info) -> usize {
        if self.settings.replicas.max(stream.config.num_replicas) > 1 {
            1
        } else {
            WINDOW
        }
    }

    /// Publish up to `room` messages of the outbox batches after `published` (without awaiting
    /// their acknowledgements, which go to `acks` in order), each a pack of the batches that
    /// wait (`pack`; one batch when the host keeps up) chained to the one before
    /// (`wire::chain_after`), moving `published`; how many were sent. `stamp`: the store's
    /// epoch and the stream's generation.
    async fn publish_after(
        &self,
        js: &jetstream::Context,
        (epoch, generation): (u64, &str),
        published: &mut Published,
        room: usize,
        acks: &mut FuturesOrdered<Acked>,
    ) -> anyhow::Result<usize> {
        if room == 0 {
            return Ok(0);
        }
        let host = &self.settings.host;
        let read = (room.min(GROUP) * published.limits.batches).min(READ_AT_MOST);
        let entries = self.store.read().outbox_after(published.at, read)?;
        let packs = pack::pack(&entries, published.limits, room.min(GROUP))?;
        drop(entries);
        let sent = packs.len();
        for pack in packs {
            let (token, meta) = pack.at();
            let mut headers = wire::batch_headers(host, epoch, token, meta);
            if let Some(parts) = pack.header() {
                headers.insert(pack::HEADER_PACK, parts.as_str());
            }
            super::identity::stamp(&mut headers, generation);
            let id = wire::chain_after(&mut headers, published.last_id.as_deref());
            let ack = js
                .publish_with_headers(
                    wire::subject(host, Kind::Batch),
                    headers,
                    Bytes::from(pack.json),
                )
                .await?;
            published.at = (token, meta);
            published.last_id = Some(id);
            let place = ((token, meta), pack.parts.len());
            acks.push_back(Box::pin(async move { (place, ack.await) }));
        }
        Ok(sent)
    }

    /// The cursor to resume from, or `None` when the stream cannot be resumed: no cursor yet
    /// (a store the outbox did not follow from its start), another store epoch, a recreated
    /// stream, one purged below the cursor, or outbox entries dropped unpublished.
    fn resumable(&self, info: &stream::Info, created: &str) -> Option<FleetCursor> {
        let cursor = self.cursor.get();
        let reader = self.store.read();
        // The outbox has every batch since the store's first (token 1) when it was on from
        // the start and nothing was dropped.
        let from_birth = reader.outbox_dropped() == 0
            && (self.store.current_token() == 0
                || reader
                    .outbox_after((0, 0), 1)
                    .ok()
                    .and_then(|b| b.first().map(|e| e.token))
                    .is_some_and(|t| t <= 1));
        let Some(cursor) = cursor else {
            return from_birth.then(|| FleetCursor {
                epoch: self.store.epoch().0,
                stream_created: created.to_owned(),
                ..FleetCursor::default()
            });
        };
        let state = &info.state;
        let gone = cursor.stream_created != created
            || state.last_sequence < cursor.stream_seq
            || (cursor.stream_seq > 0 && state.messages == 0);
        let dropped = reader.outbox_dropped() > cursor.token;
        (cursor.epoch == self.store.epoch().0 && !gone && !dropped).then_some(cursor)
    }

    /// Publish the whole store at the current token, then record it as the cursor.
    async fn publish_snapshot(
        &self,
        js: &jetstream::Context,
        epoch: u64,
        created: String,
        generation: &str,
    ) -> anyhow::Result<FleetCursor> {
        let host = &self.settings.host;
        let token = self.store.current_token();
        let reader = self.store.read();
        let parts = tokio::task::spawn_blocking(move || super::snapshot::build(&reader)).await??;
        let mut stream_seq = 0;
        let count = parts.len();
        for (i, events) in parts.into_iter().enumerate() {
            let mut headers = wire::headers(host, epoch, token, Some(i as u32));
            super::identity::stamp(&mut headers, generation);
            let payload = Bytes::from(serde_json::to_vec(&events)?);
            let ack = js
                .publish_with_headers(wire::subject(host, Kind::Snapshot), headers, payload)
                .await?
                .await?;
            stream_seq = ack.sequence;
        }
        // Meta-only batches after `token` are published again after it: applying them twice
        // changes nothing.
        let cursor = FleetCursor {
            epoch,
            token,
            meta: 0,
            stream_seq,
            stream_created: created,
        };
        self.cursor.set(&cursor)?;
        metrics::counter!(m::FLEET_SNAPSHOTS).increment(1);
        tracing::info!(host = %host, token, parts = count, "fleet snapshot published");
        Ok(cursor)
    }
}
