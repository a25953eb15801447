//! The fleet node (design-notes §23): finds every host stream (`VKO_*`) and follows each with a
//! `follower::Follower`. When NATS comes back after an outage, every follower starts over at
//! once from the position it committed (its ordered consumer died with the server, and would
//! find out only after two missed 15 s heartbeats). At each discovery it tells the daemon each
//! stream's last sequence, so the lag it shows counts what waits in a stream even while nothing
//! arrives.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::follower::{FollowedStream, Follower};
use super::wire;
use vk_observer_config::{FleetSettings, is_subject_token};
use vk_observer_store::Store;
use vk_observer_store::writer::WriterHandle;
use vk_observer_telemetry::fleet_metrics as m;

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
    /// A host's messages were applied up to stream sequence `seq`; `after` more were in its
    /// stream when the last of them was delivered.
    fn message(&self, host: &str, seq: u64, after: u64);
    /// A host stream's own last sequence (each discovery), and the sequence applied so far
    /// when a follow opens on it.
    fn stream(&self, host: &str, last_seq: u64, applied_seq: Option<u64>);
    /// A host's heartbeat arrived.
    fn heartbeat(&self, host: &str, beat: &super::heartbeat::Heartbeat);
}

/// A fleet node's follower of every host.
pub struct Node {
    settings: FleetSettings,
    store: Store,
    writer: WriterHandle,
    events: Arc<dyn NodeEvents>,
    pipelining: super::Pipelining,
}

/// A host stream as discovery lists it.
struct HostStream {
    created: String,
    last_seq: u64,
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
            pipelining: super::Pipelining::process_default(),
        }
    }

    /// Follow every host until `cancel`.
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
                let began = tokio::time::Instant::now();
                let mut followed = HashMap::new();
                let session = self.session(cancel.child_token(), &mut followed);
                if let Err(e) = session.await {
                    tracing::warn!(error = %e, "fleet node cannot reach NATS; serving the cache");
                }
                // The session's followers stop (each between messages, after its queued
                // batches committed) before the next session's read their positions.
                stop_all(&mut followed).await;
                self.events.connected(false);
                if cancel.is_cancelled() {
                    return;
                }
                pause = super::pause_after(pause, began.elapsed());
            }
        })
    }

    /// One connection: discover host streams and follow each new one (in `followed`, which the
    /// caller awaits once the session ended: `cancel`, a child of the node's, stops them then).
    /// While NATS is away the session lives on (the client reconnects by itself); once it is
    /// back, every follower starts over.
    async fn session(
        &self,
        cancel: CancellationToken,
        followed: &mut HashMap<String, Followed>,
    ) -> anyhow::Result<()> {
        let (client, mut link) =
            super::connect_watched(&self.settings, "vk-observer fleet node").await?;
        let heartbeats = tokio::spawn({
            let (client, events, stop) = (client.clone(), self.events.clone(), cancel.clone());
            async move { super::heartbeat::listen(&client, events, stop).await }
        });
        let _stop_heartbeats = AbortOnDrop(heartbeats);
        let stats = client.statistics();
        let mut connects = stats.connects.load(Ordering::Relaxed);
        let js = super::jetstream(client, &self.settings);
        self.events.connected(true);
        let _stop_followers = cancel.clone().drop_guard();
        let mut first = true;
        loop {
            match host_streams(&js).await {
                Ok(found) => {
                    let catching_up = self.follow_found(&js, &cancel, found, followed).await;
                    if std::mem::take(&mut first) {
                        for caught in catching_up {
                            let _ = caught.await;
                        }
                        self.events.caught_up();
                    }
                }
                Err(e) if *link.borrow() => return Err(e),
                Err(e) => tracing::debug!(error = %e, "fleet discovery while NATS is away"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                _ = tokio::time::sleep(DISCOVER_EVERY) => {}
                changed = link.changed() => {
                    changed?;
                    let up = *link.borrow_and_update();
                    self.events.connected(up);
                    let now = stats.connects.load(Ordering::Relaxed);
                    if up && now > connects {
                        connects = now;
                        metrics::counter!(m::FLEET_RESUBSCRIBES).increment(1);
                        tracing::info!("NATS is back: every host's consumer starts over");
                        stop_all(followed).await;
                    }
                }
            }
        }
    }

    /// Tell each listed stream's last sequence; stop followers that ended or whose stream was
    /// recreated, start one for each host not followed. Answers the catch-up signals of those
    /// started.
    async fn follow_found(
        &self,
        js: &jetstream::Context,
        cancel: &CancellationToken,
        found: HashMap<String, HostStream>,
        followed: &mut HashMap<String, Followed>,
    ) -> Vec<tokio::sync::oneshot::Receiver<()>> {
        for (host, stream) in &found {
            self.events.stream(host, stream.last_seq, None);
        }
        let mut stopping = Vec::new();
        followed.retain(|host, f| {
            let same = found.get(host).map(|s| &s.created) == Some(&f.created.get());
            let keep = !f.task.is_finished() && same;
            if !keep {
                f.stop.cancel();
                stopping.push(std::mem::replace(&mut f.task, tokio::spawn(async {})));
            }
            keep
        });
        wait_stopped(stopping).await;
        let mut catching_up = Vec::new();
        for (host, stream) in found {
            if followed.contains_key(&host) {
                continue;
            }
            let (done, caught) = tokio::sync::oneshot::channel();
            catching_up.push(caught);
            let following = FollowedStream::new(&stream.created);
            let follower = Follower {
                host: host.clone(),
                following: following.clone(),
                js: js.clone(),
                store: self.store.clone(),
                writer: self.writer.clone(),
                events: self.events.clone(),
                pipelining: self.pipelining,
            };
            let stop = cancel.child_token();
            let task = tokio::spawn(follower.run(stop.clone(), done));
            let entry = Followed {
                created: following,
                stop,
                task,
            };
            followed.insert(host, entry);
        }
        catching_up
    }
}

/// Aborts a task when the session that started it ends.
struct AbortOnDrop(tokio::task::JoinHandle<anyhow::Result<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Stop every follower and wait for each to end (the next discovery starts them again).
async fn stop_all(followed: &mut HashMap<String, Followed>) {
    let stopping = followed
        .drain()
        .map(|(_, f)| {
            f.stop.cancel();
            f.task
        })
        .collect();
    wait_stopped(stopping).await;
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

/// Every host stream (`VKO_<host>`) by host, with its creation time and last sequence.
async fn host_streams(js: &jetstream::Context) -> anyhow::Result<HashMap<String, HostStream>> {
    let mut streams = js.streams();
    let mut found = HashMap::new();
    while let Some(info) = streams.next().await {
        let info = info?;
        match info.config.name.strip_prefix(wire::STREAM_PREFIX) {
            Some(host) if is_subject_token(host) => {
                let stream = HostStream {
                    created: info.created.to_string(),
                    last_seq: info.state.last_sequence,
                };
                found.insert(host.to_owned(), stream);
            }
            _ => {}
        }
    }
    Ok(found)
}
