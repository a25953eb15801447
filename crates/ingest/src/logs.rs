//! Follower of one process log (normalized or raw), one explicit state machine run by the
//! driver: `Connecting → Streaming → Done`, with a backoff after a drop while the process runs
//! and `Backfill` (log history v2, cursor paging over everything VK still has) when the process has
//! ended (VK closes with 4404) or the socket keeps failing. Entries are written in chunks; the
//! writer dedups identical re-sends, so replays after a reconnect cost nothing but a compare.
//!
//! **Ordering.** The store keeps the last content written for an index, so no older read of an
//! entry may be written after a newer one. VK's frames carry no version, so this rests on reads
//! being sequential: one follower per (process, channel) at a time (the coordinator starts the
//! next only after `LogDone`), reading frames in socket order and each history page only after
//! the previous write committed. Every write therefore carries content at least as new as the
//! one before it, and a rewrite (`replace`) is never undone by a replay or a page.
//!
//! **Completeness.** VK never changes a log after the process ends (`finished` is the last frame
//! and VK persists nothing after it), so a log is complete only after a read that began once the
//! process had ended: the `finished` frame itself, or a history pass that started when the store
//! already knew the process had ended. A pass that started while the process ran is a snapshot
//! of a moving log: if the process ended meanwhile, one more pass reads the final log; if it
//! still runs, the follower ends incomplete and a later process change starts another (or, when
//! the end was stored just as the follower ended, the coordinator starts one on `LogDone`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::value::RawValue;
use uuid::Uuid;

use super::Context;
use super::backoff::Reconnect;
use super::driver::{Follower, Step};
use super::error::{IngestError, IngestResult};
use super::pulse::Pulse;
use super::signal::Signal;
use super::usage::UsageTap;
use vk_observer_store::StoreError;
use vk_observer_store::events::{Channel, DomainEvent};
use vk_observer_store::writer::Queued;
use vk_observer_telemetry::UpstreamStream;
use vk_observer_upstream::wire::LogFrame;
use vk_observer_upstream::ws::{self, WsEnd};
use vk_observer_vk::ProcessFacts;

/// The follower's states; backoff and cancellation belong to the driver (`driver.rs`).
pub(crate) enum State {
    /// About to open the log socket (after three failed opens in a row: `Backfill` instead).
    Connecting,
    /// Reading frames (history replay first, then live) until `finished` or a drop.
    Streaming(Box<ws::WsStream>),
    /// Paging through the log history REST (the process ended, or its socket keeps failing).
    Backfill,
}

/// How a log follower ends: `complete` when every entry of the ended process is stored;
/// `gave_up` when it stopped after repeated upstream failures (not because the process ran).
pub(crate) struct Done {
    pub complete: bool,
    pub gave_up: bool,
}

impl Done {
    const COMPLETE: Done = Done {
        complete: true,
        gave_up: false,
    };
    /// The process still ran at the follower's last look: a later process change restarts it.
    const STILL_RUNNING: Done = Done {
        complete: false,
        gave_up: false,
    };
    const GAVE_UP: Done = Done {
        complete: false,
        gave_up: true,
    };
}

pub(crate) struct LogFollower {
    pub process_id: Uuid,
    pub attempt_id: Uuid,
    pub channel: Channel,
    pub ctx: Context,
    /// The store knew the process had ended when the follower was started: its log is read from
    /// history at once (VK's socket of an ended process only closes with 4404).
    pub ended: bool,
    /// A coding agent's token usage read from its raw stdout, as entries are queued
    /// (`ingest::usage`; `UsageTap::for_channel`).
    pub usage: std::sync::Mutex<UsageTap>,
}

type Chunk = Vec<(u64, Box<RawValue>)>;

/// Chunks of one follower on their way to the store: at most one commits while the next is
/// read or fetched (parsing and sled writes overlap on two cores). Queued in read order to the
/// single writer, so they commit in read order (see "Ordering").
struct Outbox<'a> {
    follower: &'a LogFollower,
    committing: Option<Queued>,
}

impl<'a> Outbox<'a> {
    fn new(follower: &'a LogFollower) -> Self {
        Outbox {
            follower,
            committing: None,
        }
    }

    /// Wait for the chunk before (a failed write ends the stream), then queue this one.
    async fn send(&mut self, chunk: &mut Chunk) -> Result<(), StoreError> {
        self.send_page(chunk, None).await
    }

    /// Like `send`, plus VK's word that history below `lost_below` is gone, in the same batch
    /// as the page's entries so the writer judges the loss against what the cache then holds.
    async fn send_page(
        &mut self,
        chunk: &mut Chunk,
        lost_below: Option<u64>,
    ) -> Result<(), StoreError> {
        if chunk.is_empty() && lost_below.is_none() {
            return Ok(());
        }
        self.settle().await?;
        self.committing = self.follower.queue(chunk, lost_below).await?;
        Ok(())
    }

    /// Wait until everything queued is committed.
    async fn settle(&mut self) -> Result<(), StoreError> {
        match self.committing.take() {
            Some(q) => q.committed().await.map(|_| ()).inspect_err(|e| {
                tracing::error!(error = %e, "cannot store log entries");
            }),
            None => Ok(()),
        }
    }
}

impl LogFollower {
    fn path(&self) -> String {
        vk_observer_upstream::routes::log_ws(self.process_id, self.channel)
    }
}

impl Follower for LogFollower {
    type State = State;
    type End = Done;

    fn backoff(&self) -> (Duration, Duration) {
        (self.ctx.cfg.reconnect_min, self.ctx.cfg.reconnect_max)
    }

    fn initial(&self) -> State {
        if self.ended {
            State::Backfill
        } else {
            State::Connecting
        }
    }

    async fn step(&self, state: State, reconnect: &mut Reconnect) -> Step<State, Done> {
        match state {
            State::Connecting => match ws::connect(&self.ctx.client, &self.path()).await {
                Ok(ws) => Step::Next(State::Streaming(Box::new(ws))),
                Err(e) if reconnect.failures >= 3 => {
                    tracing::debug!(pid = %self.process_id, error = %e, "log socket keeps failing: reading history instead");
                    Step::Next(State::Backfill)
                }
                Err(_) => Step::Backoff(State::Connecting),
            },
            State::Streaming(mut ws) => self.stream(&mut ws, reconnect).await,
            State::Backfill => {
                // Sampled before the first page: see "Completeness" above.
                let ended_before = !self.still_running();
                // Closed only when ingest stops.
                let Ok(_permit) = self.ctx.backfills.acquire().await else {
                    return Step::End(Done::GAVE_UP);
                };
                match self.backfill().await {
                    Ok(()) if ended_before => Step::End(Done::COMPLETE),
                    Ok(()) if !self.still_running() => Step::Next(State::Backfill),
                    Ok(()) => Step::End(Done::STILL_RUNNING),
                    Err(e) if e.is_retryable() && reconnect.failures < 6 => {
                        tracing::warn!(pid = %self.process_id, error = %e, "log history backfill failed; retrying");
                        Step::Backoff(State::Backfill)
                    }
                    Err(e) => {
                        tracing::error!(pid = %self.process_id, error = %e, "giving up on log history for now");
                        Step::End(Done::GAVE_UP)
                    }
                }
            }
        }
    }

    async fn finish(&self, Done { complete, gave_up }: Done) {
        if complete {
            let _ = self
                .ctx
                .writer
                .write(vec![DomainEvent::LogsComplete {
                    process_id: self.process_id,
                    channel: self.channel,
                    attempt_id: Some(self.attempt_id),
                }])
                .await;
        }
        let _ = self.ctx.signals.send(Signal::LogDone {
            process_id: self.process_id,
            channel: self.channel,
            complete,
            gave_up,
        });
    }
}

impl LogFollower {
    /// Read frames until the log ends or the socket drops; write entries in chunks.
    async fn stream(&self, ws: &mut ws::WsStream, reconnect: &mut Reconnect) -> Step<State, Done> {
        let mut out = Outbox::new(self);
        let step = self.stream_into(ws, reconnect, &mut out).await;
        // Whatever ends the stream, what was read is committed before the next state.
        match (out.settle().await, step) {
            (Err(_), Step::End(_)) => Step::Next(State::Backfill),
            (_, step) => step,
        }
    }

    async fn stream_into(
        &self,
        ws: &mut ws::WsStream,
        reconnect: &mut Reconnect,
        out: &mut Outbox<'_>,
    ) -> Step<State, Done> {
        let mut chunk: Chunk = Vec::new();
        let flush_every = self.ctx.cfg.log_flush_interval;
        let pulse = Pulse::new(self.ctx.health.clone());
        let beat = || pulse.beat();
        let stall_after = self.ctx.cfg.ws_stall_after;
        let mut frames = 0usize;
        let mut gap_checked = false;
        loop {
            let read = pulse.or_stall(stall_after, ws::next_text(ws, &beat));
            let next = if chunk.is_empty() {
                Ok(read.await)
            } else {
                tokio::time::timeout(flush_every, read).await
            };
            let frame = match next {
                Ok(Err(_stalled)) => Err(WsEnd::Dropped(format!(
                    "nothing, not even a ping, for {stall_after:?}"
                ))),
                Ok(Ok(frame)) => frame,
                Err(_) => {
                    if out.send(&mut chunk).await.is_err() {
                        return Step::Backoff(State::Connecting);
                    }
                    continue;
                }
            };
            match frame {
                Ok(text) => {
                    // A replay of a long log arrives faster than it is parsed: take part in
                    // tokio's cooperative budget so the HTTP server and other streams keep
                    // being served meanwhile (measured: /healthz unanswered for 13.7 s while a
                    // 1 M-entry log replayed).
                    tokio::task::consume_budget().await;
                    frames += 1;
                    if frames == 1 {
                        reconnect.reset();
                    }
                    match LogFrame::parse(&text) {
                        Ok(LogFrame::Entry { entry_index, entry }) => {
                            if !gap_checked {
                                gap_checked = true;
                                if let Err(e) = self.fill_below(entry_index, out).await {
                                    tracing::warn!(pid = %self.process_id, error = %e, "could not read the log below the socket's window; reconnecting");
                                    return Step::Backoff(State::Connecting);
                                }
                            }
                            self.note_tool_use(&entry);
                            chunk.push((entry_index, entry));
                            if chunk.len() >= self.ctx.cfg.log_chunk
                                && out.send(&mut chunk).await.is_err()
                            {
                                return Step::Backoff(State::Connecting);
                            }
                        }
                        Ok(LogFrame::Finished) => {
                            if out.send(&mut chunk).await.is_err() {
                                return Step::Next(State::Backfill);
                            }
                            return Step::End(Done::COMPLETE);
                        }
                        Err(e) => self
                            .ctx
                            .health
                            .garbage(UpstreamStream::Logs, &format!("{e}: {text}")),
                    }
                }
                Err(end) => {
                    let _ = out.send(&mut chunk).await;
                    return self.after_drop(end);
                }
            }
        }
    }

    /// Where a follower goes once its socket ended without `finished`.
    fn after_drop(&self, end: WsEnd) -> Step<State, Done> {
        if end.is_gone() {
            return Step::Next(State::Backfill);
        }
        tracing::debug!(pid = %self.process_id, ?end, "log socket dropped");
        if self.still_running() {
            self.ctx.health.reconnected(UpstreamStream::Logs);
            Step::Backoff(State::Connecting)
        } else {
            Step::Next(State::Backfill)
        }
    }

    /// Queue a chunk (and VK's history loss, if any) to the writer, not waiting for its commit.
    async fn queue(
        &self,
        chunk: &mut Chunk,
        lost_below: Option<u64>,
    ) -> Result<Option<Queued>, StoreError> {
        let entries = std::mem::take(chunk);
        self.ctx
            .health
            .log_entries_received
            .fetch_add(entries.len() as u64, Ordering::Relaxed);
        let mut events = Vec::with_capacity(3);
        let usage = self.usage_read(&entries);
        if !entries.is_empty() {
            events.push(DomainEvent::LogEntriesPut {
                attempt_id: self.attempt_id,
                process_id: self.process_id,
                channel: self.channel,
                entries,
            });
        }
        events.extend(
            lost_below.map(|oldest_available| DomainEvent::LogHistoryLost {
                attempt_id: self.attempt_id,
                process_id: self.process_id,
                channel: self.channel,
                oldest_available,
            }),
        );
        events.extend(usage);
        if events.is_empty() {
            return Ok(None);
        }
        self.ctx
            .writer
            .queue(events)
            .await
            .map(Some)
            .inspect_err(|e| tracing::error!(error = %e, "cannot store log entries"))
    }

    /// The usage event to write with `entries`, when they changed the coding agent's usage.
    fn usage_read(&self, entries: &[(u64, Box<RawValue>)]) -> Option<DomainEvent> {
        let (attempt, process) = (self.attempt_id, self.process_id);
        UsageTap::observe_locked(&self.usage, &self.ctx.store, attempt, process, entries)
    }

    /// A live `tool_use` entry may mean changed files: tell the coordinator, which re-reads the
    /// change summary if this is a running coding agent (`fresh_changes`).
    fn note_tool_use(&self, entry: &RawValue) {
        if self.channel == Channel::Normalized && super::fresh_changes::is_tool_use(entry) {
            let _ = self.ctx.signals.send(Signal::ToolUseLogged {
                attempt_id: self.attempt_id,
                process_id: self.process_id,
            });
        }
    }

    fn still_running(&self) -> bool {
        self.ctx
            .store
            .read()
            .process(self.process_id)
            .ok()
            .flatten()
            .and_then(|p| ProcessFacts::from_value(&p.value))
            .is_some_and(|f| f.is_running())
    }

    /// Page through VK's log history, newest first, writing every page (the next page is
    /// fetched while the previous one is being written).
    async fn backfill(&self) -> IngestResult<()> {
        let mut out = Outbox::new(self);
        let read = self.page_down(None, 0, &mut out).await;
        let written = out.settle().await.map_err(IngestError::from);
        read.and(written)
    }

    /// Pages of history newest first, from below `before` (None: the newest) down to `floor`.
    async fn page_down(
        &self,
        before: Option<u64>,
        floor: u64,
        out: &mut Outbox<'_>,
    ) -> IngestResult<()> {
        let mut cursor = before;
        let mut pages = 0;
        loop {
            let page = self
                .ctx
                .client
                .log_history(self.process_id, self.channel, 1000, cursor)
                .await?;
            pages += 1;
            // VK no longer has what lies below its oldest entry (u64::MAX: it has none).
            let lost_below = page.history_truncated.then(|| {
                tracing::warn!(pid = %self.process_id, "VK truncated this log's history: older entries are only what the daemon streamed live");
                page.entries.first().map_or(u64::MAX, |e| e.entry_index)
            });
            let mut entries: Chunk = page
                .entries
                .into_iter()
                .filter(|e| before.is_none_or(|b| e.entry_index < b))
                .map(|e| (e.entry_index, e.entry))
                .collect();
            let smallest = entries.first().map(|e| e.0);
            out.send_page(&mut entries, lost_below).await?;
            match (page.has_more, page.next_cursor.or(smallest)) {
                (true, Some(c)) if c > floor && Some(c) != cursor && pages < 10_000 => {
                    cursor = Some(c)
                }
                _ => return Ok(()),
            }
        }
    }

    /// VK replays only its in-memory window of a log on connect (`VK_LOG_HISTORY_MAX_ENTRIES`,
    /// 5,000 by default): when the first entry a socket sends is above what the store holds,
    /// the entries in between come from history pages (docs/vk-contract.md §4.2, "Retention
    /// hole"). Entries below the highest stored index under `first` were filled the same way
    /// on earlier connections, so only `(that index, first)` is read; never below the store's
    /// own per-log cap.
    async fn fill_below(&self, first: u64, out: &mut Outbox<'_>) -> IngestResult<()> {
        let known =
            self.ctx
                .store
                .read()
                .highest_log_index_below(self.process_id, self.channel, first)?;
        let cap = self.ctx.store.retention().max_entries_per_process;
        let floor = known.map_or(0, |m| m + 1).max(if cap > 0 {
            first.saturating_sub(cap)
        } else {
            0
        });
        if floor >= first {
            return Ok(());
        }
        tracing::debug!(pid = %self.process_id, first, floor, "log socket starts above the cache: reading the gap from history");
        self.page_down(Some(first), floor, out).await
    }
}
