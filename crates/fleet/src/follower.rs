//! One host's stream into the fleet node's store (design-notes §23): an ordered consumer from
//! the stream sequence after the last one applied, the messages already received queued
//! together, one writer batch each with the position after it, two such groups in flight on
//! one `Chain`.
//! Duplicates (same host epoch, token not above the last applied) and garbage are skipped,
//! counted and recorded as read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_nats::jetstream::{self, consumer};
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::identity::StreamIdentity;
use super::node::NodeEvents;
use super::wire::{self, Incoming, Kind};
use vk_observer_store::Store;
use vk_observer_store::events::{DomainEvent, FleetPosition};
use vk_observer_store::writer::{Chain, WriterHandle};
use vk_observer_telemetry::fleet_metrics as m;

/// Payload bytes one group of messages takes at most (a single larger message is still taken).
const GROUP_BYTES: usize = 4 << 20;

/// A queued writer batch: resolves once committed to the last message's stream sequence and
/// the messages left in the stream after it.
type Committing = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<(u64, u64)>> + Send>>;

/// `first`, then every further message the consumer already holds (never waiting for one),
/// up to `max_messages` messages and [`GROUP_BYTES`] payload bytes (`size` of each): a
/// quiet stream gives groups of one (no added latency), a backlog gives full groups. An error
/// ends the group and is handed back after it, so the messages before it are still applied.
fn take_ready<T, E, S>(
    first: Result<T, E>,
    messages: &mut S,
    max_messages: usize,
    size: impl Fn(&T) -> usize,
) -> (Vec<T>, Option<E>)
where
    S: futures::Stream<Item = Result<T, E>> + Unpin,
{
    let mut group = Vec::new();
    let mut bytes = 0;
    let mut next = Some(first);
    while let Some(item) = next.take() {
        match item {
            Ok(message) => {
                bytes += size(&message);
                group.push(message);
            }
            Err(e) => return (group, Some(e)),
        }
        if group.len() >= max_messages || bytes >= GROUP_BYTES {
            break;
        }
        next = messages.next().now_or_never().flatten();
    }
    (group, None)
}

/// The bench's `batch_per_group` way: every message's events in one batch, the position of
/// the last message after them (each message's batch ends with its position).
fn one_batch(batches: Vec<Vec<DomainEvent>>) -> Vec<DomainEvent> {
    let n = batches.len();
    let mut all = Vec::new();
    for (i, mut events) in batches.into_iter().enumerate() {
        if i + 1 < n {
            events.pop();
        }
        all.append(&mut events);
    }
    all
}

/// The creation time of the stream a follower follows, shared with discovery: a follower that
/// found its stream recreated (`identity`) and started over on the new one is not restarted again.
#[derive(Clone)]
pub(crate) struct FollowedStream(Arc<std::sync::Mutex<String>>);

impl FollowedStream {
    pub(crate) fn new(created: &str) -> Self {
        FollowedStream(Arc::new(std::sync::Mutex::new(created.to_owned())))
    }

    pub(crate) fn get(&self) -> String {
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

/// A follow's opened stream: where it goes on from and what it reads.
struct Open {
    /// The position after the last message queued to the writer (committed or not yet).
    position: FleetPosition,
    /// The stream's last sequence when the follow started (caught up once committed past it).
    pending: u64,
    identity: StreamIdentity,
    messages: consumer::pull::Ordered,
}

/// One host's stream into the store.
pub(crate) struct Follower {
    pub(crate) host: String,
    pub(crate) following: FollowedStream,
    pub(crate) js: jetstream::Context,
    pub(crate) store: Store,
    pub(crate) writer: WriterHandle,
    pub(crate) events: Arc<dyn NodeEvents>,
    pub(crate) pipelining: super::Pipelining,
    /// The stream sequence applied so far (set when a follow opens and at each commit): the
    /// node restarts a follower that stops moving while its stream holds more.
    pub(crate) progress: Arc<AtomicU64>,
}

/// Answered once a follower has applied its stream as it stood when the follower started.
pub(crate) type CatchUp = tokio::sync::oneshot::Sender<()>;

impl Follower {
    /// Follow until `cancel` or an error; hands `caught_up` back if it was not answered yet,
    /// for the follower that takes over.
    pub(crate) async fn run(
        self,
        cancel: CancellationToken,
        caught_up: CatchUp,
    ) -> Option<CatchUp> {
        let mut caught_up = Some(caught_up);
        self.events.following(&self.host, true);
        let result = self
            .follow_across_recreations(&cancel, &mut caught_up)
            .await;
        self.events.following(&self.host, false);
        if let Err(e) = result {
            tracing::warn!(host = %self.host, error = %e, "fleet follower stopped; retried at the next discovery");
        }
        caught_up
    }

    /// Follow the host's stream; when it is found recreated, start over on the new one at once.
    async fn follow_across_recreations(
        &self,
        cancel: &CancellationToken,
        caught_up: &mut Option<CatchUp>,
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

    /// Follow the stream from the stored position until the session ends, the stream is found
    /// recreated or an error. Whichever ends it, every batch already handed to the writer is
    /// awaited before this returns: a successor reads the position only once no write of this
    /// follow can land after it.
    async fn follow(
        &self,
        cancel: &CancellationToken,
        caught_up: &mut Option<CatchUp>,
    ) -> anyhow::Result<FollowEnd> {
        // Nothing is queued yet: opening may be left at once.
        let mut open = tokio::select! {
            _ = cancel.cancelled() => return Ok(FollowEnd::Closed),
            open = self.open() => open?,
        };
        self.progress
            .store(open.position.stream_seq, Ordering::Relaxed);
        if open.pending <= open.position.stream_seq {
            caught_up.take().map(|c| c.send(()));
        }
        // Writer batches queued and not yet committed, oldest first: the next group is read,
        // decoded and queued while the writer commits the ones before it. One chain: a batch
        // commits only if every earlier one of this follow did, so the position a later batch
        // carries never passes the messages of a failed one.
        let mut committing = FuturesOrdered::new();
        let chain = Chain::default();
        let ended = self
            .pump(cancel, caught_up, &mut open, &chain, &mut committing)
            .await;
        let mut ended = ended;
        while let Some(done) = committing.next().await {
            match (done, &ended) {
                (Ok((seq, lag)), Ok(_)) => self.committed(seq, lag, open.pending, caught_up),
                (Err(e), Ok(_)) => ended = Err(e),
                _ => {}
            }
        }
        ended
    }

    /// Read groups and queue them (at most `in_flight` uncommitted) until the follow ends.
    /// Stopped only while waiting for a message or a commit, never while a group is queued.
    async fn pump(
        &self,
        cancel: &CancellationToken,
        caught_up: &mut Option<CatchUp>,
        open: &mut Open,
        chain: &Chain,
        committing: &mut FuturesOrdered<Committing>,
    ) -> anyhow::Result<FollowEnd> {
        loop {
            tokio::select! {
                biased;
                Some(done) = committing.next(), if !committing.is_empty() => {
                    let (seq, lag) = done?;
                    self.committed(seq, lag, open.pending, caught_up);
                }
                _ = cancel.cancelled() => return Ok(FollowEnd::Closed),
                first = open.messages.next(), if committing.len() < self.pipelining.in_flight => {
                    let Some(first) = first else { return Ok(FollowEnd::Closed) };
                    let (group, failed) = take_ready(
                        first,
                        &mut open.messages,
                        self.pipelining.group_messages,
                        |m: &jetstream::Message| m.payload.len(),
                    );
                    let (queued, changed) = self.queue_group(group, open, chain).await?;
                    if let Some(commit) = queued {
                        committing.push_back(commit);
                    }
                    if changed {
                        return Ok(FollowEnd::StreamChanged);
                    }
                    if let Some(e) = failed {
                        return Err(anyhow::anyhow!("{e}"));
                    }
                }
            }
        }
    }

    /// A batch committed up to stream sequence `seq`, `lag` messages after it.
    fn committed(&self, seq: u64, lag: u64, pending: u64, caught_up: &mut Option<CatchUp>) {
        self.progress.store(seq, Ordering::Relaxed);
        self.events.message(&self.host, seq, lag);
        if seq >= pending {
            caught_up.take().map(|c| c.send(()));
        }
    }

    /// The position to go on from, the stream's last sequence when the follower started, and
    /// an ordered consumer from the message after the position.
    async fn open(&self) -> anyhow::Result<Open> {
        let mut position = self.position();
        let mut stream = self.js.get_stream(wire::stream_name(&self.host)).await?;
        let info = stream.info().await?.clone();
        let created = info.created.to_string();
        self.following.set(&created);
        let identity = StreamIdentity::new(stream.clone(), &info);
        if position.stream_created != created {
            // Another stream than the one the position is in: read it from its start, and
            // apply all of it (idempotent) — its snapshot restates the host as of its cut, so
            // the batches after that cut must be applied again whatever was applied before.
            position.stream_seq = 0;
            position.token = 0;
            position.meta = 0;
            position.stream_created = created;
        }
        self.events.stream(
            &self.host,
            info.state.last_sequence,
            Some(position.stream_seq),
        );
        let deliver_policy = match position.stream_seq {
            0 => consumer::DeliverPolicy::All,
            seq => consumer::DeliverPolicy::ByStartSequence {
                start_sequence: seq + 1,
            },
        };
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: wire::host_subjects(&self.host),
                deliver_policy,
                ..Default::default()
            })
            .await?;
        Ok(Open {
            position,
            pending: info.state.last_sequence,
            identity,
            messages: consumer.messages().await?,
        })
    }

    /// A group of host messages, each ONE writer batch (its events, then the position after
    /// it), all queued in `chain` without waiting for their commits: the writer commits what is
    /// queued together with one flush, and each message keeps a token of its own, so a token
    /// of this node names a place in one host's stream that every node can read
    /// (`store::fleet_clock`). Each message is first checked to be of the followed stream
    /// (`identity`; one of another stream ends the group before it, and `true` says so), then
    /// admitted on its own (`admit`: duplicates and garbage skipped); the position is written
    /// in the same batch as the events it covers. Resolves to the last message's stream
    /// sequence and lag once all of them committed.
    async fn queue_group(
        &self,
        group: Vec<jetstream::Message>,
        open: &mut Open,
        chain: &Chain,
    ) -> anyhow::Result<(Option<Committing>, bool)> {
        let mut batches = Vec::with_capacity(group.len());
        let mut last = None;
        let mut changed = false;
        for message in &group {
            if open.identity.changed(message.headers.as_ref()).await? {
                changed = true;
                break;
            }
            let info = message.info().map_err(|e| anyhow::anyhow!("{e}"))?;
            let seq = info.stream_sequence;
            last = Some((seq, info.pending));
            let decoded = wire::decode(
                &self.host,
                message.subject.as_str(),
                message.headers.as_ref(),
                &message.payload,
            );
            let mut events = self.admit(decoded, seq, &mut open.position);
            events.push(DomainEvent::FleetPosition {
                host: self.host.clone(),
                position: open.position.clone(),
            });
            batches.push(events);
        }
        let Some((last_seq, lag)) = last else {
            return Ok((None, changed));
        };
        if self.pipelining.batch_per_group {
            batches = vec![one_batch(batches)];
        }
        let mut queued = Vec::with_capacity(batches.len());
        for events in batches {
            metrics::counter!(m::FLEET_WRITER_BATCHES).increment(1);
            queued.push(self.writer.queue_chained(events, chain).await?);
        }
        let commit: Committing = Box::pin(async move {
            for batch in queued {
                batch.committed().await?;
            }
            Ok((last_seq, lag))
        });
        Ok((Some(commit), changed))
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
        let applied = (position.token, position.meta);
        // A batch at or below the last applied (token, meta), or a snapshot cut below the last
        // applied token (a stale copy: a real snapshot of this epoch is cut at or above every
        // batch before it), is a duplicate; so are a pack's batches at or below it (`pack`).
        let stale = match incoming.kind {
            Kind::Batch => at <= applied,
            Kind::Snapshot => incoming.token < position.token,
        };
        if same_epoch && stale {
            metrics::counter!(m::FLEET_DUPLICATES).increment(1);
            return Vec::new();
        }
        let mut events = incoming.events;
        if same_epoch && incoming.kind == Kind::Batch {
            let (batches, skipped) = super::pack::applied_prefix(&incoming.parts, applied);
            if batches > 0 {
                metrics::counter!(m::FLEET_DUPLICATES).increment(batches as u64);
                events.drain(..skipped);
            }
        }
        (position.token, position.meta) = if same_epoch {
            (position.token, position.meta).max(at)
        } else {
            at
        };
        position.epoch = incoming.epoch;
        metrics::counter!(m::FLEET_APPLIED).increment(1);
        super::tag::tag(&self.host, events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_takes_what_is_ready_and_stops_at_its_bounds() {
        // Three ready, then a stream that would wait: one group of three, nothing waited for.
        let mut ready =
            futures::stream::iter(vec![Ok::<u32, ()>(2), Ok(3)]).chain(futures::stream::pending());
        let (group, failed) = take_ready(Ok(1), &mut ready, 64, |_| 1);
        assert_eq!((group, failed), (vec![1, 2, 3], None));
        // A backlog is cut at the message bound; the rest stays for the next group.
        let mut backlog = futures::stream::iter((1..200).map(Ok::<usize, ()>));
        let (group, _) = take_ready(Ok(0), &mut backlog, 64, |_| 1);
        assert_eq!(group.len(), 64);
        assert_eq!(futures::executor::block_on(backlog.next()), Some(Ok(64)));
        // Bytes bound: a large message closes its group.
        let mut big = futures::stream::iter(vec![Ok::<usize, ()>(GROUP_BYTES), Ok(1)]);
        let (group, _) = take_ready(Ok(1), &mut big, 64, |n| *n);
        assert_eq!(group, vec![1, GROUP_BYTES]);
        // An error ends the group and comes back after the messages before it.
        let mut failing = futures::stream::iter(vec![Err("gone"), Ok(9)]);
        let (group, failed) = take_ready(Ok(1), &mut failing, 64, |_| 1);
        assert_eq!((group, failed), (vec![1], Some("gone")));
    }
}
