//! Followers of VK's object WebSockets (projects; tasks of a project; processes of an attempt),
//! each one explicit state machine: `Connecting → Live (materialising frames) → Backoff`.
//!
//! A socket that sends nothing at all (not even VK's 30 s ping) for `ws_stall_after` is
//! reconnected; pings count as life (see `pulse`).
//!
//! Every (re)connect starts from a fresh snapshot rather than `after_seq`: VK answers an
//! `after_seq` past its watermark with silence (e.g. after a restart), and a snapshot diffed by the
//! writer moves tokens only where something really changed, so a reconnect is always safe.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use super::Context;
use super::backoff::Reconnect;
use super::driver::{Follower, Step};
use super::materialize::{Change, Materializer};
use super::pulse::Pulse;
use super::signal::Signal;
use vk_observer_store::events::DomainEvent;
use vk_observer_telemetry::{ResyncCause, ResyncScope, UpstreamStream};
use vk_observer_upstream::routes;
use vk_observer_upstream::wire::PatchFrame;
use vk_observer_upstream::ws;
use vk_observer_vk::ProcessFacts;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ObjectStream {
    Projects,
    Tasks { project_id: Uuid },
    Processes { attempt_id: Uuid },
}

impl ObjectStream {
    fn path(&self) -> String {
        match self {
            ObjectStream::Projects => routes::PROJECTS_WS.into(),
            ObjectStream::Tasks { project_id } => routes::tasks_ws(*project_id),
            ObjectStream::Processes { attempt_id } => routes::processes_ws(*attempt_id),
        }
    }

    fn root(&self) -> &'static str {
        match self {
            ObjectStream::Projects => "projects",
            ObjectStream::Tasks { .. } => "tasks",
            ObjectStream::Processes { .. } => "execution_processes",
        }
    }

    /// The stream in the reconnect and garbage metrics.
    fn telemetry(&self) -> UpstreamStream {
        match self {
            ObjectStream::Projects => UpstreamStream::Projects,
            ObjectStream::Tasks { .. } => UpstreamStream::Tasks,
            ObjectStream::Processes { .. } => UpstreamStream::Processes,
        }
    }

    /// The scope a resync of this stream has in the resync metric.
    fn scope(&self) -> ResyncScope {
        match self {
            ObjectStream::Projects => ResyncScope::Projects,
            ObjectStream::Tasks { .. } => ResyncScope::Tasks,
            ObjectStream::Processes { .. } => ResyncScope::Processes,
        }
    }
}

/// The follower's states; backoff and cancellation belong to the driver (`driver.rs`).
pub(crate) enum State {
    /// About to open the socket (every open starts from VK's snapshot).
    Connecting,
    /// Connected: materialising frames into `doc`; `pulse` is beaten by every message.
    Live {
        ws: Box<ws::WsStream>,
        doc: Materializer,
        pulse: Pulse,
    },
}

/// How an object follower ends: VK closed with 4404 (the workspace is gone).
pub(crate) struct Gone;

pub(crate) struct ObjectFollower {
    pub stream: ObjectStream,
    pub ctx: Context,
}

impl Follower for ObjectFollower {
    type State = State;
    type End = Gone;

    fn backoff(&self) -> (Duration, Duration) {
        (self.ctx.cfg.reconnect_min, self.ctx.cfg.reconnect_max)
    }

    fn initial(&self) -> State {
        State::Connecting
    }

    async fn step(&self, state: State, reconnect: &mut Reconnect) -> Step<State, Gone> {
        match state {
            State::Connecting => match ws::connect(&self.ctx.client, &self.stream.path()).await {
                Ok(ws) => Step::Next(State::Live {
                    ws: Box::new(ws),
                    doc: Materializer::new(self.stream.root()),
                    pulse: Pulse::new(self.ctx.health.clone()),
                }),
                Err(e) => {
                    tracing::debug!(stream = ?self.stream, error = %e, "object stream connect failed");
                    Step::Backoff(State::Connecting)
                }
            },
            State::Live {
                mut ws,
                mut doc,
                pulse,
            } => {
                let beat = || pulse.beat();
                let read = ws::next_text(&mut ws, &beat);
                match pulse.or_stall(self.ctx.cfg.ws_stall_after, read).await {
                    Ok(Ok(text)) => match self.on_frame(&text, &mut doc).await {
                        FrameOutcome::Ok => {
                            if doc.has_snapshot() {
                                reconnect.reset();
                            }
                            Step::Next(State::Live { ws, doc, pulse })
                        }
                        FrameOutcome::Garbage => Step::Next(State::Live { ws, doc, pulse }),
                        FrameOutcome::Resync(cause) => {
                            self.ctx.health.resynced(self.stream.scope(), cause);
                            Step::Backoff(State::Connecting)
                        }
                    },
                    Ok(Err(end)) if end.is_gone() => Step::End(Gone),
                    Ok(Err(end)) => {
                        tracing::debug!(stream = ?self.stream, ?end, "object stream ended; reconnecting");
                        self.lost()
                    }
                    Err(_stalled) => {
                        tracing::warn!(stream = ?self.stream, "object stream sent nothing, not even a ping; reconnecting");
                        self.lost()
                    }
                }
            }
        }
    }

    async fn finish(&self, _gone: Gone) {
        if let ObjectStream::Processes { attempt_id } = self.stream {
            let _ = self
                .ctx
                .signals
                .send(Signal::ProcessStreamGone { attempt_id });
        }
    }
}

impl ObjectFollower {
    /// The socket is gone: count it and reconnect after the next backoff delay (reset once a
    /// snapshot arrives, so a socket that keeps ending at once is not reopened in a tight loop).
    fn lost(&self) -> Step<State, Gone> {
        self.ctx.health.reconnected(self.stream.telemetry());
        Step::Backoff(State::Connecting)
    }

    async fn on_frame(&self, text: &str, doc: &mut Materializer) -> FrameOutcome {
        let frame: PatchFrame = match serde_json::from_str(text) {
            Ok(f) => f,
            Err(e) => {
                self.ctx
                    .health
                    .garbage(self.stream.telemetry(), &format!("{e}: {text}"));
                return FrameOutcome::Garbage;
            }
        };
        let changes = match doc.apply(&frame.patch.0) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(stream = ?self.stream, error = %e, "object stream frame does not apply: resyncing");
                return FrameOutcome::Resync(ResyncCause::PatchFailed);
            }
        };
        if let Some(h) = frame.invalidate
            && !h.task_ids.is_empty()
        {
            let _ = self.ctx.signals.send(Signal::TaskHints {
                task_ids: h.task_ids,
            });
        }
        if changes.is_empty() {
            return FrameOutcome::Ok;
        }
        let (events, signal) = self.to_events(&changes, doc);
        if let Err(e) = self.ctx.writer.write(events).await {
            tracing::error!(error = %e, "cannot store an object-stream change: resyncing");
            return FrameOutcome::Resync(ResyncCause::StoreError);
        }
        if let Some(s) = signal {
            let _ = self.ctx.signals.send(s);
        }
        FrameOutcome::Ok
    }

    fn to_events(
        &self,
        changes: &[Change],
        doc: &Materializer,
    ) -> (Vec<DomainEvent>, Option<Signal>) {
        let snapshot = changes.contains(&Change::Snapshot);
        match self.stream {
            ObjectStream::Projects => (
                vec![DomainEvent::ProjectsSnapshot {
                    projects: all_objects(doc),
                }],
                Some(Signal::Projects {
                    ids: object_ids(doc),
                }),
            ),
            ObjectStream::Tasks { project_id } => task_events(project_id, snapshot, changes, doc),
            ObjectStream::Processes { attempt_id } => {
                process_events(attempt_id, snapshot, changes, doc)
            }
        }
    }
}

fn all_objects(doc: &Materializer) -> Vec<Value> {
    doc.objects().collect()
}

fn object_ids(doc: &Materializer) -> Vec<Uuid> {
    doc.ids().collect()
}

/// Events of a tasks-stream frame; a snapshot also signals the project's full task list.
fn task_events(
    project_id: Uuid,
    snapshot: bool,
    changes: &[Change],
    doc: &Materializer,
) -> (Vec<DomainEvent>, Option<Signal>) {
    let mut events = Vec::new();
    if snapshot {
        events.push(DomainEvent::TasksSnapshot {
            project_id,
            tasks: all_objects(doc),
        });
    }
    for c in changes {
        match c {
            Change::Upsert(id) => {
                if let Some(task) = doc.get(id) {
                    events.push(DomainEvent::TaskUpserted { task });
                }
            }
            Change::Remove(id) => events.push(DomainEvent::TaskRemoved { task_id: *id }),
            Change::Snapshot => {}
        }
    }
    let signal = snapshot.then(|| Signal::TasksSnapshot {
        project_id,
        task_ids: object_ids(doc),
    });
    (events, signal)
}

/// Events of a processes-stream frame, and the process facts the coordinator decides on.
fn process_events(
    attempt_id: Uuid,
    snapshot: bool,
    changes: &[Change],
    doc: &Materializer,
) -> (Vec<DomainEvent>, Option<Signal>) {
    let mut events = Vec::new();
    let mut facts = Vec::new();
    let mut removed = Vec::new();
    if snapshot {
        let processes = all_objects(doc);
        facts.extend(processes.iter().filter_map(ProcessFacts::from_value));
        events.push(DomainEvent::ProcessesSnapshot {
            attempt_id,
            processes,
        });
    }
    for c in changes {
        match c {
            Change::Upsert(id) => {
                if let Some(process) = doc.get(id) {
                    facts.extend(ProcessFacts::from_value(&process));
                    events.push(DomainEvent::ProcessUpserted {
                        attempt_id,
                        process,
                    });
                }
            }
            Change::Remove(id) => {
                events.push(DomainEvent::ProcessRemoved {
                    attempt_id,
                    process_id: *id,
                });
                removed.push(*id);
            }
            Change::Snapshot => {}
        }
    }
    let signal = Signal::Processes {
        attempt_id,
        snapshot,
        processes: facts,
        removed,
    };
    (events, Some(signal))
}

enum FrameOutcome {
    Ok,
    Garbage,
    /// Reconnect for a fresh snapshot, for this cause.
    Resync(ResyncCause),
}
