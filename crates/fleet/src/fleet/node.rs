//! The fleet node (design-notes §23): finds every host stream (`VKO_*`), follows each with an
//! ordered consumer from the stream sequence after the last one it applied, and writes each
//! host message through its own one writer, with its position in the same batch. Duplicates
//! (same host epoch, token not above the last applied) and garbage are skipped, counted and
//! recorded as read.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::identity::StreamIdentity;
use super::wire::{self, Incoming, Kind};
use crate::config::{FleetSettings, is_subject_token};
use crate::store::Store;
use crate::store::events::{DomainEvent, FleetPosition};
use crate::store::writer::WriterHandle;
use crate::telemetry_fleet as m;

/// How often the node looks for new host streams.
const DISCOVER_EVERY: Duration = Duration::from_secs(2);

/// What the node tells its caller as it goes (the daemon's health).
pub trait NodeEvents: Send + Sync + 'static {
    /// NATS answered (or stopped answering).
    fn connected(&self, up: bool);
    /// Every host stream found at start was read to its end.
    fn caught_up(&self);
    /// A host's stream is followed now, or no longer.
    fn following(&self, host: &str, following: bool);
    /// A host message was applied; `lag` more wait in its stream.
    fn message(&self, host: &str, lag: u64);
    /// A host's heartbeat arrived.
    fn heartbeat(&self, host: &str, beat: &super::heartbeat::Heartbeat);
}

/// A fleet node's follower of every host.
pub struct Node {
    settings: FleetSettings,
    store: Store,
    writer: WriterHandle,
    events: Arc<dyn NodeEvents>,
}

impl Node {
    pub fn new(
        settings: FleetSettings,
        store: Store,
        writer: WriterHandle,
        events: Arc<dyn NodeEvents>,
    ) -> Self {
        Node {
            settings,
            store,
            writer,
            events,
        }
    }

    /// Follow every host until `cancel`.
    pub fn spawn(self, cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
        m::register_fleet();
        tokio::spawn(async move {
            let mut pause = Duration::ZERO;
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(pause) => {}
                }
                let began = tokio::time::Instant::now();
                let session = self.session(cancel.child_token());
                if let Err(e) = session.await {
                    tracing::warn!(error = %e, "fleet node cannot reach NATS; serving the cache");
                }
                self.events.connected(false);
                if cancel.is_cancelled() {
                    return;
                }
                pause = super::pause_after(pause, began.elapsed());
            }
        })
    }

    /// One connection: discover host streams and follow each new one.
    async fn session(&self, cancel: CancellationToken) -> anyhow::Result<()> {
        let client = super::connect(&self.settings, "vk-observer fleet node").await?;
        let heartbeats = tokio::spawn({
            let (client, events, stop) = (client.clone(), self.events.clone(), cancel.clone());
            async move { super::heartbeat::listen(&client, events, stop).await }
        });
        let _stop_heartbeats = AbortOnDrop(heartbeats);
        let js = jetstream::new(client);
        self.events.connected(true);
        let _stop_followers = cancel.clone().drop_guard();
        let mut followed: HashMap<String, Followed> = HashMap::new();
        let mut first = true;
        loop {
            let found = host_streams(&js).await?;
            // A finished follower, or one of a stream since recreated, is started again.
            let mut stopping = Vec::new();
            followed.retain(|host, f| {
                let keep = !f.task.is_finished() && found.get(host) == Some(&f.created.get());
                if !keep {
                    f.stop.cancel();
                    stopping.push(std::mem::replace(&mut f.task, tokio::spawn(async {})));
                }
                keep
            });
            wait_stopped(stopping).await;
            let mut catching_up = Vec::new();
            for (host, created) in found {
                if followed.contains_key(&host) {
                    continue;
                }
                let (done, caught) = tokio::sync::oneshot::channel();
                catching_up.push(caught);
                let following = FollowedStream::new(&created);
                let follower = Follower {
                    host: host.clone(),
                    following: following.clone(),
                    js: js.clone(),
                    store: self.store.clone(),
                    writer: self.writer.clone(),
                    events: self.events.clone(),
                };
                let stop = cancel.child_token();
                let task = tokio::spawn(follower.run(stop.clone(), done));
                followed.insert(
                    host,
                    Followed {
                        created: following,
                        stop,
                        task,
                    },
                );
            }
            if first {
                first = false;
                for caught in catching_up {
                    let _ = caught.await;
                }
                self.events.caught_up();
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                _ = tokio::time::sleep(DISCOVER_EVERY) => {}
            }
        }
    }
}

/// Aborts a task when the session that started it ends.
struct AbortOnDrop(tokio::task::JoinHandle<anyhow::Result<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Wait for stopped followers to end: a follower stops between messages, never inside a write,
/// so its last batch is committed before its successor reads the position it left.
async fn wait_stopped(stopping: Vec<tokio::task::JoinHandle<()>>) {
    for task in stopping {
        let _ = task.await;
    }
}

/// A host stream being followed.
struct Followed {
    /// The creation time of the stream its follower follows now.
    created: FollowedStream,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// The creation time of the stream a follower follows, shared with discovery: a follower that
/// found its stream recreated (`identity`) and started over on the new one is not restarted again.
#[derive(Clone)]
struct FollowedStream(Arc<std::sync::Mutex<String>>);

impl FollowedStream {
    fn new(created: &str) -> Self {
        FollowedStream(Arc::new(std::sync::Mutex::new(created.to_owned())))
    }

    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, created: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = created.to_owned();
    }
}

/// How a follow of one stream ended without an error.
enum FollowEnd {
    /// The message stream closed (the session is ending).
    Closed,
    /// A message of another stream of the same name arrived (`identity`): follow it from its start.
    StreamChanged,
}

/// Every host stream (`VKO_<host>`) by host, with its creation time.
async fn host_streams(js: &jetstream::Context) -> anyhow::Result<HashMap<String, String>> {
    let mut streams = js.streams();
    let mut found = HashMap::new();
    while let Some(info) = streams.next().await {
        let info = info?;
        match info.config.name.strip_prefix(wire::STREAM_PREFIX) {
            Some(host) if is_subject_token(host) => {
                found.insert(host.to_owned(), info.created.to_string());
            }
            _ => {}
        }
    }
    Ok(found)
}

/// One host's stream into the store.
struct Follower {
    host: String,
    following: FollowedStream,
    js: jetstream::Context,
    store: Store,
    writer: WriterHandle,
    events: Arc<dyn NodeEvents>,
}

impl Follower {
    async fn run(self, cancel: CancellationToken, caught_up: tokio::sync::oneshot::Sender<()>) {
        let mut caught_up = Some(caught_up);
        self.events.following(&self.host, true);
        let result = self
            .follow_across_recreations(&cancel, &mut caught_up)
            .await;
        self.events.following(&self.host, false);
        if let Err(e) = result {
            tracing::warn!(host = %self.host, error = %e, "fleet follower stopped; retried at the next discovery");
        }
    }

    /// Follow the host's stream; when it is found recreated, start over on the new one at once.
    async fn follow_across_recreations(
        &self,
        cancel: &CancellationToken,
        caught_up: &mut Option<tokio::sync::oneshot::Sender<()>>,
    ) -> anyhow::Result<()> {
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            match self.follow(cancel, caught_up).await? {
                FollowEnd::Closed => return Ok(()),
                FollowEnd::StreamChanged => {
                    metrics::counter!(m::FLEET_STREAM_CHANGES).increment(1);
                    tracing::info!(host = %self.host, "fleet host stream recreated under its follower; following the new one from its start");
                }
            }
        }
    }

    fn position(&self) -> FleetPosition {
        let positions = self.store.read().fleet_positions().unwrap_or_default();
        positions
            .into_iter()
            .find(|(h, _)| *h == self.host)
            .map(|(_, p)| p)
            .unwrap_or_default()
    }

    async fn follow(
        &self,
        cancel: &CancellationToken,
        caught_up: &mut Option<tokio::sync::oneshot::Sender<()>>,
    ) -> anyhow::Result<FollowEnd> {
        let mut position = self.position();
        let mut stream = self.js.get_stream(wire::stream_name(&self.host)).await?;
        let info = stream.info().await?.clone();
        let created = info.created.to_string();
        self.following.set(&created);
        let mut identity = StreamIdentity::new(stream.clone(), &info);
        if position.stream_created != created {
            // Another stream than the one the position is in: read it from its start, and
            // apply all of it (idempotent) — its snapshot restates the host as of its cut, so
            // the batches after that cut must be applied again whatever was applied before.
            position.stream_seq = 0;
            position.token = 0;
            position.meta = 0;
            position.stream_created = created;
        }
        let deliver_policy = match position.stream_seq {
            0 => consumer::DeliverPolicy::All,
            seq => consumer::DeliverPolicy::ByStartSequence {
                start_sequence: seq + 1,
            },
        };
        let pending = info.state.last_sequence;
        if pending <= position.stream_seq {
            caught_up.take().map(|c| c.send(()));
        }
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: wire::host_subjects(&self.host),
                deliver_policy,
                ..Default::default()
            })
            .await?;
        let mut messages = consumer.messages().await?;
        // Stopped only while waiting for a message: a batch handed to the writer is committed
        // before the follower ends (a successor must not read a position a late write changes).
        while let Some(message) = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            m = messages.next() => m,
        } {
            let message = message?;
            if identity.changed(message.headers.as_ref()).await? {
                return Ok(FollowEnd::StreamChanged);
            }
            let info = message.info().map_err(|e| anyhow::anyhow!("{e}"))?;
            let (seq, lag) = (info.stream_sequence, info.pending);
            let decoded = wire::decode(
                &self.host,
                message.subject.as_str(),
                message.headers.as_ref(),
                &message.payload,
            );
            let events = self.admit(decoded, seq, &mut position);
            self.write(events, position.clone()).await?;
            self.events.message(&self.host, lag);
            if seq >= pending {
                caught_up.take().map(|c| c.send(()));
            }
        }
        Ok(FollowEnd::Closed)
    }

    /// The events to apply for one message (none for a duplicate or garbage), moving `position`.
    fn admit(
        &self,
        decoded: Result<Incoming, wire::Garbage>,
        seq: u64,
        position: &mut FleetPosition,
    ) -> Vec<DomainEvent> {
        position.stream_seq = seq;
        let incoming = match decoded {
            Ok(incoming) => incoming,
            Err(e) => {
                metrics::counter!(m::FLEET_GARBAGE).increment(1);
                tracing::warn!(host = %self.host, seq, error = %e, "fleet message skipped");
                return Vec::new();
            }
        };
        let same_epoch = incoming.epoch == position.epoch;
        let at = (incoming.token, incoming.meta);
        // A batch at or below the last applied (token, meta), or a snapshot cut below the last
        // applied token (a stale copy: a real snapshot of this epoch is cut at or above every
        // batch before it), is a duplicate.
        let stale = match incoming.kind {
            Kind::Batch => at <= (position.token, position.meta),
            Kind::Snapshot => incoming.token < position.token,
        };
        if same_epoch && stale {
            metrics::counter!(m::FLEET_DUPLICATES).increment(1);
            return Vec::new();
        }
        (position.token, position.meta) = if same_epoch {
            (position.token, position.meta).max(at)
        } else {
            at
        };
        position.epoch = incoming.epoch;
        metrics::counter!(m::FLEET_APPLIED).increment(1);
        super::tag::tag(&self.host, incoming.events)
    }

    /// One host message as one batch of the fleet's writer, with the position it reached.
    async fn write(
        &self,
        mut events: Vec<DomainEvent>,
        position: FleetPosition,
    ) -> anyhow::Result<()> {
        events.push(DomainEvent::FleetPosition {
            host: self.host.clone(),
            position,
        });
        self.writer.write(events).await?;
        Ok(())
    }
}
