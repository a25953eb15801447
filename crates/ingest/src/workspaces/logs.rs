//! Follower of one process log of VK 0.1.x (normalized or raw), run by the driver:
//! `Connecting → Streaming → Done`. VK's v1 log sockets have no resume and no history pages:
//! every connection sends the log from `/entries/0`, live in the order its normalizers emit,
//! after the end (or a VK restart) re-normalized from the database, the same entries at other
//! indices (wire fact 8). The daemon's numbering is its own: a [`Renumberer`] built from what
//! the store already served maps each connection's ops onto it (design-notes §25), so a
//! reconnect, a replay and a daemon restart append only what is new and never move an index.
//!
//! **Completeness.** VK sends `{"finished":true}` once the process ended and its log is whole;
//! only then is the log marked complete. A socket that drops before it is opened again (a
//! running process: after a backoff; an ended one: at once, the replay is the final log).
//! Followers of ended processes read one at a time per `log_backfills` permit (a daemon
//! starting on a big VK has thousands of them).

use std::time::Duration;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use super::super::Context;
use super::super::backoff::Reconnect;
use super::super::driver::{Follower, Step};
use super::super::pulse::Pulse;
use super::super::renumber::{Renumberer, Write};
use super::super::usage::UsageTap;
use super::board::Msg;
use vk_observer_store::events::{Channel, DomainEvent};
use vk_observer_store::writer::Queued;
use vk_observer_telemetry::UpstreamStream;
use vk_observer_upstream::routes_v01 as routes;
use vk_observer_upstream::ws::{self, WsEnd};
use vk_observer_vk::ProcessStatus;

/// Failed opens in a row after which a follower gives up (VK refuses an unknown process at
/// the upgrade; the board starts another when the process changes).
const OPEN_TRIES: u32 = 4;

pub(crate) enum State {
    Connecting(Option<OwnedSemaphorePermit>),
    Streaming(Box<ws::WsStream>, Option<OwnedSemaphorePermit>),
}

/// Why a socket's reading stopped before `finished`.
pub(crate) enum Stop {
    Socket(WsEnd),
    Store,
}

/// How a follower ended: `complete` once `finished` came and everything is stored.
pub(crate) struct Done {
    pub complete: bool,
}

pub(crate) struct LogFollower {
    pub ctx: Context,
    pub workspace: Uuid,
    pub process: Uuid,
    pub channel: Channel,
    pub board: UnboundedSender<Msg>,
    /// The daemon's numbering, built from the store at the first connection (in this
    /// follower's task, not the board's).
    pub numbering: tokio::sync::Mutex<Option<Renumberer>>,
    /// A coding agent's token usage read from its raw stdout, as entries are queued
    /// (`ingest::usage`): the appended entries continue the daemon's numbering, so a tap that
    /// starts after a restart reads on from what the store holds.
    usage: std::sync::Mutex<UsageTap>,
}

impl LogFollower {
    pub(crate) fn new(
        ctx: Context,
        workspace: Uuid,
        process: Uuid,
        channel: Channel,
        board: UnboundedSender<Msg>,
    ) -> LogFollower {
        LogFollower {
            ctx,
            workspace,
            process,
            channel,
            board,
            numbering: tokio::sync::Mutex::new(None),
            usage: std::sync::Mutex::new(UsageTap::for_channel(channel)),
        }
    }

    /// The numbering of what the store already served of this log.
    fn served(&self) -> Renumberer {
        let reader = self.ctx.store.read();
        let served = reader
            .log_range(self.process, self.channel, 0, u64::MAX, usize::MAX)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|e| serde_json::from_str::<Value>(e.entry.get()).ok());
        Renumberer::new(served)
    }

    fn running(&self) -> bool {
        let stored = self.ctx.store.read().process(self.process).ok().flatten();
        stored.is_some_and(|p| ProcessStatus::Running.is(vk_observer_vk::status(&p.value)))
    }
}

impl Follower for LogFollower {
    type State = State;
    type End = Done;

    fn backoff(&self) -> (Duration, Duration) {
        (self.ctx.cfg.reconnect_min, self.ctx.cfg.reconnect_max)
    }

    fn initial(&self) -> State {
        State::Connecting(None)
    }

    async fn step(&self, state: State, reconnect: &mut Reconnect) -> Step<State, Done> {
        match state {
            State::Connecting(mut permit) => {
                if permit.is_none() && !self.running() {
                    let Ok(p) = self.ctx.backfills.clone().acquire_owned().await else {
                        return Step::End(Done { complete: false });
                    };
                    permit = Some(p);
                }
                let path = routes::log_ws(self.process, self.channel);
                match ws::connect(&self.ctx.client, &path).await {
                    Ok(ws) => {
                        let mut numbering = self.numbering.lock().await;
                        match numbering.as_mut() {
                            Some(n) => n.connect(),
                            None => *numbering = Some(self.served()),
                        }
                        Step::Next(State::Streaming(Box::new(ws), permit))
                    }
                    Err(e) if reconnect.failures + 1 >= OPEN_TRIES => {
                        tracing::debug!(pid = %self.process, error = %e, "VK 0.1.x log: giving up");
                        Step::End(Done { complete: false })
                    }
                    Err(_) => Step::Backoff(State::Connecting(permit)),
                }
            }
            State::Streaming(mut ws, permit) => match self.stream(&mut ws, reconnect).await {
                Ok(()) => Step::End(Done { complete: true }),
                Err(Stop::Socket(end)) => self.after_drop(end, permit),
                // The numbering holds entries the store may not: a new follower starts from
                // what the store holds.
                Err(Stop::Store) => Step::End(Done { complete: false }),
            },
        }
    }

    async fn finish(&self, Done { complete }: Done) {
        if complete {
            let done = DomainEvent::LogsComplete {
                process_id: self.process,
                channel: self.channel,
                attempt_id: Some(self.workspace),
            };
            let _ = self.ctx.writer.write(vec![done]).await;
        }
        let _ = self.board.send(Msg::LogEnded {
            workspace: self.workspace,
            process: self.process,
            channel: self.channel,
            complete,
        });
    }
}

impl LogFollower {
    /// Where a follower goes once its socket ended without `finished`.
    fn after_drop(&self, end: WsEnd, permit: Option<OwnedSemaphorePermit>) -> Step<State, Done> {
        tracing::debug!(pid = %self.process, ?end, "VK 0.1.x log socket dropped");
        self.ctx.health.reconnected(UpstreamStream::Logs);
        Step::Backoff(State::Connecting(permit))
    }

    /// Reads frames until `finished` (`Ok`) or the socket ends (`Err`); writes what the
    /// numbering answers, in chunks, each chunk queued once the one before committed.
    async fn stream(&self, ws: &mut ws::WsStream, reconnect: &mut Reconnect) -> Result<(), Stop> {
        let pulse = Pulse::new(self.ctx.health.clone());
        let beat = || pulse.beat();
        let (stall_after, flush_every) =
            (self.ctx.cfg.ws_stall_after, self.ctx.cfg.log_flush_interval);
        let mut chunk: Vec<(u64, Box<RawValue>)> = Vec::new();
        let mut committing: Option<Queued> = None;
        let mut first = true;
        loop {
            let pinged = ws::next_text_pinging(ws, &beat, stall_after / 3);
            let read = pulse.or_stall(stall_after, pinged);
            let next = if chunk.is_empty() {
                Ok(read.await)
            } else {
                tokio::time::timeout(flush_every, read).await
            };
            let text = match next {
                Err(_quiet) => {
                    self.flush(&mut chunk, &mut committing).await?;
                    continue;
                }
                Ok(Err(_stalled)) => Err(WsEnd::Dropped(format!("nothing for {stall_after:?}"))),
                Ok(Ok(read)) => read,
            };
            let text = match text {
                Ok(t) => t,
                Err(end) => {
                    self.flush(&mut chunk, &mut committing).await?;
                    settle(&mut committing).await?;
                    return Err(Stop::Socket(end));
                }
            };
            tokio::task::consume_budget().await;
            if std::mem::take(&mut first) {
                reconnect.reset();
            }
            let frame: Value = match serde_json::from_str(&text) {
                Ok(v) => v,
                Err(e) => {
                    self.ctx
                        .health
                        .garbage(UpstreamStream::Logs, &format!("{e}: {text}"));
                    continue;
                }
            };
            if frame.get("finished").and_then(Value::as_bool) == Some(true) {
                self.flush(&mut chunk, &mut committing).await?;
                return settle(&mut committing).await;
            }
            if !frame.get("JsonPatch").is_some_and(Value::is_array) {
                self.ctx.health.garbage(UpstreamStream::Logs, &text);
                continue;
            }
            let mut numbering = self.numbering.lock().await;
            let writes = numbering
                .get_or_insert_with(|| self.served())
                .apply_frame(&frame);
            drop(numbering);
            for w in writes {
                let (Write::Append { index, entry } | Write::Replace { index, entry }) = w;
                if let Ok(raw) = serde_json::value::to_raw_value(&entry) {
                    chunk.push((index, raw));
                }
            }
            if chunk.len() >= self.ctx.cfg.log_chunk {
                self.flush(&mut chunk, &mut committing).await?;
            }
        }
    }

    /// Queues `chunk` once the chunk before it committed; a failed write ends the follower.
    async fn flush(
        &self,
        chunk: &mut Vec<(u64, Box<RawValue>)>,
        committing: &mut Option<Queued>,
    ) -> Result<(), Stop> {
        if chunk.is_empty() {
            return Ok(());
        }
        settle(committing).await?;
        let entries = std::mem::take(chunk);
        self.ctx
            .health
            .log_entries_received
            .fetch_add(entries.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let usage = self.usage_read(&entries);
        let put = DomainEvent::LogEntriesPut {
            attempt_id: self.workspace,
            process_id: self.process,
            channel: self.channel,
            entries,
        };
        match self
            .ctx
            .writer
            .queue([put].into_iter().chain(usage).collect())
            .await
        {
            Ok(q) => {
                *committing = Some(q);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot store log entries");
                Err(Stop::Store)
            }
        }
    }
}

impl LogFollower {
    /// The usage event to write with `entries`, when they changed the coding agent's usage.
    fn usage_read(&self, entries: &[(u64, Box<RawValue>)]) -> Option<DomainEvent> {
        let (attempt, process) = (self.workspace, self.process);
        UsageTap::observe_locked(&self.usage, &self.ctx.store, attempt, process, entries)
    }
}

/// Waits for the queued chunk's commit.
async fn settle(committing: &mut Option<Queued>) -> Result<(), Stop> {
    match committing.take() {
        Some(q) => q.committed().await.map(|_| ()).map_err(|e| {
            tracing::error!(error = %e, "cannot store log entries");
            Stop::Store
        }),
        None => Ok(()),
    }
}
