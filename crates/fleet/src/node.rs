//! The fleet node (design-notes §23): finds every host stream (`VKO_*`) and follows each with a
//! `follower::Follower`. When NATS comes back after an outage, every follower starts over at
//! once from the position it committed (its ordered consumer died with the server, and would
//! find out only after two missed 15 s heartbeats). At each discovery it tells the daemon each
//! stream's last sequence, so the lag it shows counts what waits in a stream even while nothing
//! arrives. It discovers every [`DISCOVER_EVERY`], and at once when a host announces its stream
//! (`discovery`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::discovery::{self, HostStream};
use super::follower::{CatchUp, FollowedStream, Follower};
use vk_observer_config::FleetSettings;
use vk_observer_store::Store;
use vk_observer_store::writer::WriterHandle;
use vk_observer_telemetry::fleet_metrics as m;

/// How often the node looks for new host streams.
const DISCOVER_EVERY: Duration = Duration::from_secs(2);
/// How long a follower may apply nothing while its stream holds more before it starts over:
/// an ordered consumer left on a server that lost the stream would otherwise wait out two
/// missed 15 s heartbeats and async-nats' retries (a minute and more, measured on a cluster).
const STALL_AFTER: Duration = Duration::from_secs(5);

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

/// Node events nobody listens to: for benches and tests that start a bare [`Node`].
pub struct Unheard;

impl NodeEvents for Unheard {
    fn connected(&self, _: bool) {}
    fn caught_up(&self) {}
    fn following(&self, _: &str, _: bool) {}
    fn message(&self, _: &str, _: u64, _: u64) {}
    fn stream(&self, _: &str, _: u64, _: Option<u64>) {}
    fn heartbeat(&self, _: &str, _: &super::heartbeat::Heartbeat) {}
}

/// A fleet node's follower of every host.
pub struct Node {
    settings: FleetSettings,
    store: Store,
    writer: WriterHandle,
    events: Arc<dyn NodeEvents>,
    pipelining: super::Pipelining,
    discover_every: Duration,
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
            discover_every: DISCOVER_EVERY,
        }
    }

    /// Discover every `every` instead of [`DISCOVER_EVERY`] (a test that must see a new host
    /// found through its announcement alone sets it past the test's length).
    pub fn discovering_every(mut self, every: Duration) -> Self {
        self.discover_every = every;
        self
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
    /// back, every follower starts over. A discovery JetStream refuses (a cluster without
    /// quorum) leaves the followers as they are and is tried again at the next one.
    async fn session(
        &self,
        cancel: CancellationToken,
        followed: &mut HashMap<String, Followed>,
    ) -> anyhow::Result<()> {
        let (client, mut link) =
            super::connect_watched(&self.settings, "vk-observer fleet node").await?;
        let heartbeats = tokio::spawn({
            let (client, events, stop) = (client.clone(), self.events.clone(), cancel.clone());
            async move {
                if let Err(e) = super::heartbeat::listen(&client, events, stop).await {
                    tracing::warn!(error = %e, "fleet heartbeats not followed in this session");
                }
            }
        });
        let _stop_heartbeats = AbortOnDrop(heartbeats);
        let mut announced = discovery::announcements(&client).await?;
        let stats = client.statistics();
        let mut connects = stats.connects.load(Ordering::Relaxed);
        let js = super::jetstream(client, &self.settings);
        self.events.connected(true);
        let _stop_followers = cancel.clone().drop_guard();
        // Catch-up signals handed back by followers that stopped before answering them.
        let mut unanswered = HashMap::new();
        let mut catch_up_watch = None;
        loop {
            match discovery::host_streams(&js).await {
                Ok(found) => {
                    let catching_up = self
                        .follow_found(&js, &cancel, found, followed, &mut unanswered)
                        .await;
                    if catch_up_watch.is_none() {
                        catch_up_watch = Some(self.report_caught_up(catching_up));
                    }
                }
                Err(e) if *link.borrow() => {
                    tracing::warn!(error = %e, "fleet discovery failed; the followers go on, tried again shortly");
                }
                Err(e) => tracing::debug!(error = %e, "fleet discovery while NATS is away"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                _ = tokio::time::sleep(self.discover_every) => {}
                // A host's stream is ready: look now (announcements that came meanwhile
                // are answered by the same discovery).
                Some(()) = announced.next() => {
                    while let Some(Some(())) = announced.next().now_or_never() {}
                }
                changed = link.changed() => {
                    changed?;
                    let up = *link.borrow_and_update();
                    self.events.connected(up);
                    let now = stats.connects.load(Ordering::Relaxed);
                    if up && now > connects {
                        connects = now;
                        metrics::counter!(m::FLEET_RESUBSCRIBES).increment(1);
                        tracing::info!("NATS is back: every host's consumer starts over");
                        unanswered.extend(stop_all(followed).await);
                    }
                }
            }
        }
    }

    /// Tell the daemon once every follower of the session's first discovery caught up (or
    /// ended for good), without holding discovery up meanwhile; dropped with the session.
    fn report_caught_up(&self, catching_up: Vec<CatchUpWait>) -> AbortOnDrop {
        let events = self.events.clone();
        AbortOnDrop(tokio::spawn(async move {
            for caught in catching_up {
                let _ = caught.await;
            }
            events.caught_up();
        }))
    }

    /// Tell each listed stream's last sequence; stop followers that ended, stalled, whose
    /// stream is gone or was recreated (a stream listed without its info keeps its follower);
    /// start one for each host not followed, with the catch-up signal a
    /// stopped one handed back (kept in `unanswered`) or a new one, whose waits are returned.
    async fn follow_found(
        &self,
        js: &jetstream::Context,
        cancel: &CancellationToken,
        found: HashMap<String, HostStream>,
        followed: &mut HashMap<String, Followed>,
        unanswered: &mut HashMap<String, CatchUp>,
    ) -> Vec<CatchUpWait> {
        for (host, stream) in &found {
            if let Some(at) = &stream.at {
                self.events.stream(host, at.last_seq, None);
            }
        }
        let now = tokio::time::Instant::now();
        let mut stopping = Vec::new();
        followed.retain(|host, f| {
            let listed = found.get(host);
            let at = listed.and_then(|s| s.at.as_ref());
            let same = listed.is_some() && at.is_none_or(|at| f.follows(&at.created));
            let stalled = at.is_some_and(|at| f.stalled(at.last_seq, now));
            if stalled {
                metrics::counter!(m::FLEET_STALLED_RESTARTS).increment(1);
                tracing::warn!(host = %host, applied = f.progress.load(Ordering::Relaxed), "fleet follower received nothing while its stream holds more; starting it over");
            }
            let keep = !f.task.is_finished() && same && !stalled;
            if !keep {
                f.stop.cancel();
                stopping.push((host.clone(), std::mem::replace(&mut f.task, tokio::spawn(async { None }))));
            }
            keep
        });
        unanswered.extend(wait_stopped(stopping).await);
        let mut catching_up = Vec::new();
        for (host, stream) in found {
            if followed.contains_key(&host) {
                continue;
            }
            let done = unanswered.remove(&host).unwrap_or_else(|| {
                let (done, caught) = tokio::sync::oneshot::channel();
                catching_up.push(caught);
                done
            });
            let entry = self.start_follower(js, cancel, &host, &stream, done);
            followed.insert(host, entry);
        }
        catching_up
    }

    fn start_follower(
        &self,
        js: &jetstream::Context,
        cancel: &CancellationToken,
        host: &str,
        stream: &HostStream,
        done: CatchUp,
    ) -> Followed {
        let created = stream.at.as_ref().map_or("", |at| at.created.as_str());
        let following = FollowedStream::new(created);
        let progress = Arc::new(AtomicU64::new(0));
        let follower = Follower {
            host: host.to_owned(),
            following: following.clone(),
            js: js.clone(),
            store: self.store.clone(),
            writer: self.writer.clone(),
            events: self.events.clone(),
            pipelining: self.pipelining,
            progress: progress.clone(),
        };
        let stop = cancel.child_token();
        let task = tokio::spawn(follower.run(stop.clone(), done));
        Followed {
            created: following,
            stop,
            task,
            progress,
            idle: None,
        }
    }
}

/// Aborts a task when the session that started it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Stop every follower and wait for each to end (the next discovery starts them again);
/// answers the catch-up signals they handed back.
async fn stop_all(followed: &mut HashMap<String, Followed>) -> HashMap<String, CatchUp> {
    let stopping = followed
        .drain()
        .map(|(host, f)| {
            f.stop.cancel();
            (host, f.task)
        })
        .collect();
    wait_stopped(stopping).await
}

/// Wait for stopped followers to end: a follower stops between messages, never inside a write,
/// so its last batch is committed before its successor reads the position it left. Answers
/// the catch-up signals they handed back, by host.
async fn wait_stopped(stopping: Vec<(String, FollowerTask)>) -> HashMap<String, CatchUp> {
    let mut unanswered = HashMap::new();
    for (host, task) in stopping {
        if let Ok(Some(done)) = task.await {
            unanswered.insert(host, done);
        }
    }
    unanswered
}

type FollowerTask = tokio::task::JoinHandle<Option<CatchUp>>;
type CatchUpWait = tokio::sync::oneshot::Receiver<()>;

/// A host stream being followed.
struct Followed {
    /// The creation time of the stream its follower follows now.
    created: FollowedStream,
    stop: CancellationToken,
    task: FollowerTask,
    /// The stream sequence its follower applied so far.
    progress: Arc<AtomicU64>,
    /// Since when the follower has been at the same sequence while its stream held more.
    idle: Option<(u64, tokio::time::Instant)>,
}

impl Followed {
    /// Whether it follows the stream created at `created` (or has not opened one yet: its
    /// stream was listed without its info).
    fn follows(&self, created: &str) -> bool {
        let followed = self.created.get();
        followed.is_empty() || followed == created
    }

    /// True once the follower has applied nothing for [`STALL_AFTER`] while its stream's last
    /// sequence (`last_seq`, as discovery listed it) is past what it applied.
    fn stalled(&mut self, last_seq: u64, now: tokio::time::Instant) -> bool {
        let applied = self.progress.load(Ordering::Relaxed);
        if last_seq <= applied {
            self.idle = None;
            return false;
        }
        match self.idle {
            Some((seen, since)) if seen == applied => now.duration_since(since) >= STALL_AFTER,
            _ => {
                self.idle = Some((applied, now));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_follower_is_stalled_only_when_more_waits_and_nothing_came_for_a_while() {
        let progress = Arc::new(AtomicU64::new(3));
        let mut f = Followed {
            created: FollowedStream::new("created"),
            stop: CancellationToken::new(),
            task: tokio::spawn(async { None }),
            progress: progress.clone(),
            idle: None,
        };
        let t0 = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        assert!(!f.stalled(3, t0), "applied all its stream holds");
        assert!(!f.stalled(5, t0), "more waits: the clock starts");
        assert!(!f.stalled(5, t0 + STALL_AFTER - ms(1)));
        progress.store(4, Ordering::Relaxed);
        assert!(
            !f.stalled(5, t0 + STALL_AFTER),
            "it moved: the clock starts over"
        );
        assert!(!f.stalled(5, t0 + STALL_AFTER * 2 - ms(1)));
        assert!(
            f.stalled(5, t0 + STALL_AFTER * 2),
            "nothing for STALL_AFTER"
        );
        progress.store(5, Ordering::Relaxed);
        assert!(!f.stalled(5, t0 + STALL_AFTER * 3), "caught up");
        assert!(
            !f.stalled(6, t0 + STALL_AFTER * 3),
            "a new wait starts afresh"
        );
    }
}
