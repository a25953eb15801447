//! The `/api/events` consumer, one explicit state machine:
//! `Connecting → Streaming → (dropped | stalled) → Backoff → Connecting`.
//!
//! On each connect it compares VK's incarnation (`/api/config/status` `loaded_at_unix_ms`) with
//! the stored one: same VK with a stored seq → resume with `after_seq` = that seq, and nothing
//! else happens (VK replays what was missed; a reconnect costs no resync). Another VK (restart),
//! or no stored seq → connect with the watermark probe (`after_seq` past any watermark: VK
//! answers `invalidate_all` carrying its watermark, then streams live) and ask for a full
//! resync; the watermark becomes the resume point, so even an idle VK that never sends an event
//! can be resumed after the next drop. Event ids going backwards or an `invalidate_all` other
//! than the probe's answer also mean resync. Hints go to the coordinator, which persists the seq
//! once the hints before it are handled, so a crash never skips a hint.
//!
//! Liveness is any byte (see `pulse`): VK's keep-alive comments keep an idle stream alive.

use std::time::Duration;

use futures::StreamExt;

use super::Context;
use super::backoff::Reconnect;
use super::driver::{Follower, Step};
use super::error::{IngestError, IngestResult};
use super::pulse::Pulse;
use super::signal::Signal;
use vk_observer_store::events::DomainEvent;
use vk_observer_telemetry::health::UpstreamState;
use vk_observer_telemetry::{ResyncCause, UpstreamStream};
use vk_observer_upstream::sse;
use vk_observer_upstream::sse::SseEvents;
use vk_observer_upstream::wire::{InvalidateAll, InvalidateHints};

/// The follower's states; backoff and cancellation belong to the driver (`driver.rs`).
pub(crate) enum State {
    /// About to ask VK's incarnation and open the stream; `first` until one connect succeeded
    /// (the first connect of a daemon run resyncs even when it can resume).
    Connecting { first: bool },
    /// Reading events; `pulse` is beaten by every byte of this connection.
    Streaming {
        events: SseEvents,
        last_id: Option<u64>,
        pulse: Pulse,
    },
}

pub(crate) struct SseFollower {
    pub ctx: Context,
}

impl Follower for SseFollower {
    type State = State;
    /// The event stream is followed until the daemon stops.
    type End = std::convert::Infallible;

    fn backoff(&self) -> (Duration, Duration) {
        (self.ctx.cfg.reconnect_min, self.ctx.cfg.reconnect_max)
    }

    fn initial(&self) -> State {
        State::Connecting { first: true }
    }

    async fn step(&self, state: State, reconnect: &mut Reconnect) -> Step<State, Self::End> {
        match state {
            State::Connecting { first } => match self.connect(first).await {
                Ok((events, last_id, pulse)) => {
                    reconnect.reset();
                    self.ctx.health.set_state(UpstreamState::Connected);
                    Step::Next(State::Streaming {
                        events,
                        last_id,
                        pulse,
                    })
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot connect to VK's event stream");
                    // This failure is the backoff's next one.
                    let failures = reconnect.failures + 1;
                    self.ctx
                        .health
                        .set_state(if failures >= self.ctx.cfg.down_after_failures {
                            UpstreamState::Down
                        } else {
                            UpstreamState::Reconnecting
                        });
                    Step::Backoff(State::Connecting { first })
                }
            },
            State::Streaming {
                mut events,
                mut last_id,
                pulse,
            } => match pulse
                .or_stall(self.ctx.cfg.stall_after, events.next())
                .await
            {
                Err(_) => {
                    tracing::warn!(stall_after = ?self.ctx.cfg.stall_after, "VK's event stream sent nothing, not even a keep-alive; reconnecting");
                    self.lost()
                }
                Ok(None) => {
                    tracing::info!("VK's event stream ended; reconnecting");
                    self.lost()
                }
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "VK's event stream broke; reconnecting");
                    self.lost()
                }
                Ok(Some(Ok(ev))) => {
                    self.handle(ev, &mut last_id);
                    Step::Next(State::Streaming {
                        events,
                        last_id,
                        pulse,
                    })
                }
            },
        }
    }

    async fn finish(&self, end: Self::End) {
        match end {}
    }
}

impl SseFollower {
    fn lost(&self) -> Step<State, std::convert::Infallible> {
        self.ctx.health.reconnected(UpstreamStream::Sse);
        self.ctx.health.set_state(UpstreamState::Reconnecting);
        Step::After(
            self.ctx.cfg.reconnect_min,
            State::Connecting { first: false },
        )
    }

    /// Decide how to (re)connect: resume after the stored seq if VK is the same run, else probe
    /// VK's watermark and resync.
    async fn connect(&self, first: bool) -> IngestResult<(SseEvents, Option<u64>, Pulse)> {
        let incarnation = self
            .ctx
            .client
            .config_status()
            .await?
            .loaded_at_unix_ms
            .map(|ms| ms.to_string());
        let reader = self.ctx.store.read();
        let stored_incarnation = reader.upstream_incarnation()?;
        let stored_seq = reader.upstream_seq()?;
        let same_vk = incarnation.is_some() && incarnation == stored_incarnation;
        let resume = if same_vk { stored_seq } else { None };
        let pulse = Pulse::new(self.ctx.health.clone());
        // VK sends its headers with the first event or keep-alive (≤ 15 s); a connection that
        // says nothing for `stall_after` is as dead as a stalled stream: give up and retry.
        let events = tokio::time::timeout(
            self.ctx.cfg.stall_after,
            sse::connect(
                &self.ctx.client,
                Some(resume.unwrap_or(sse::WATERMARK_PROBE)),
                pulse.beater(),
            ),
        )
        .await
        .map_err(|_| IngestError::Silent(self.ctx.cfg.stall_after))??;
        if resume.is_none() {
            if let Some(id) = incarnation {
                let _ = self
                    .ctx
                    .writer
                    .write(vec![DomainEvent::UpstreamIncarnation { id }])
                    .await;
            }
            let reason = match (first, same_vk) {
                (true, _) => ResyncCause::Bootstrap,
                (false, false) => ResyncCause::VkRestarted,
                (false, true) => ResyncCause::NoResumePoint,
            };
            let _ = self.ctx.signals.send(Signal::ResyncAll {
                reason: reason.as_str().into(),
                watermark: None,
            });
        } else if first {
            // Resuming after a daemon restart: the coordinator still verifies the object streams
            // by snapshot (shallow: only attempts that changed are looked at more closely).
            let _ = self.ctx.signals.send(Signal::ResyncAll {
                reason: ResyncCause::Resume.as_str().into(),
                watermark: None,
            });
        }
        tracing::info!(?resume, "connected to VK's event stream");
        Ok((events, resume, pulse))
    }

    fn handle(&self, ev: sse_stream::Sse, last_id: &mut Option<u64>) {
        let id = ev.id.as_deref().and_then(|s| s.trim().parse::<u64>().ok());
        let name = ev.event.as_deref().unwrap_or("message");
        let data = ev.data.as_deref().unwrap_or("");
        match name {
            "invalidate" => match serde_json::from_str::<InvalidateHints>(data) {
                Ok(h) => {
                    if !h.task_ids.is_empty() {
                        let _ = self.ctx.signals.send(Signal::TaskHints {
                            task_ids: h.task_ids,
                        });
                    }
                }
                Err(e) => self
                    .ctx
                    .health
                    .garbage(UpstreamStream::Sse, &format!("{e}: {data}")),
            },
            "invalidate_all" => match serde_json::from_str::<InvalidateAll>(data) {
                Ok(all) if all.requested_after_seq == Some(sse::WATERMARK_PROBE) => {
                    // The answer to our own probe: the resume point for the next reconnect.
                    let watermark = all.watermark.or(id).unwrap_or(0);
                    tracing::debug!(watermark, "VK's event watermark");
                    let _ = self.ctx.signals.send(Signal::SseSeq { seq: watermark });
                    *last_id = Some(watermark);
                    return;
                }
                Ok(all) => {
                    tracing::warn!(reason = %all.reason, watermark = ?all.watermark, "VK cannot resume its event stream: resyncing");
                    let _ = self.ctx.signals.send(Signal::ResyncAll {
                        reason: all.reason,
                        watermark: all.watermark.or(id),
                    });
                    *last_id = all.watermark.or(id);
                    return;
                }
                Err(e) => self
                    .ctx
                    .health
                    .garbage(UpstreamStream::Sse, &format!("{e}: {data}")),
            },
            "json_patch" => {
                if serde_json::from_str::<json_patch::Patch>(data).is_err() {
                    self.ctx.health.garbage(UpstreamStream::Sse, data);
                }
            }
            _ => {
                if !(ev.event.is_none() && ev.data.is_none()) {
                    self.ctx.health.garbage(
                        UpstreamStream::Sse,
                        &format!("unknown event {name}: {data}"),
                    );
                }
            }
        }
        if let Some(id) = id {
            if last_id.is_some_and(|prev| id <= prev) {
                // Ids restart when VK restarts.
                tracing::warn!(id, prev = ?last_id, "VK's event ids went backwards: resyncing");
                let _ = self.ctx.signals.send(Signal::ResyncAll {
                    reason: ResyncCause::IdsRestarted.as_str().into(),
                    watermark: Some(id),
                });
            } else {
                let _ = self.ctx.signals.send(Signal::SseSeq { seq: id });
            }
            *last_id = Some(id);
        }
    }
}
