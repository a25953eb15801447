//! Followers of VK's object WebSockets (projects; tasks of a project; processes of an attempt),
//! each one explicit state machine: `Connecting → Live (materialising frames) → Backoff`.
//!
//! Every (re)connect starts from a fresh snapshot rather than `after_seq`: VK answers an
//! `after_seq` past its watermark with silence (e.g. after a restart), and a snapshot diffed by the
//! writer moves tokens only where something really changed, so a reconnect is always safe.

use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Context;
use super::backoff::Reconnect;
use super::materialize::{Change, Materializer};
use super::signal::Signal;
use crate::store::events::DomainEvent;
use crate::upstream::wire::PatchFrame;
use crate::upstream::ws::{self, WsEnd};
use crate::vk::ProcessFacts;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectStream {
    Projects,
    Tasks { project_id: Uuid },
    Processes { attempt_id: Uuid },
}

impl ObjectStream {
    fn path(&self) -> String {
        match self {
            ObjectStream::Projects => "/api/projects/stream/ws".into(),
            ObjectStream::Tasks { project_id } => {
                format!("/api/tasks/stream/ws?project_id={project_id}")
            }
            ObjectStream::Processes { attempt_id } => {
                format!("/api/execution-processes/stream/ws?workspace_id={attempt_id}")
            }
        }
    }

    fn root(&self) -> &'static str {
        match self {
            ObjectStream::Projects => "projects",
            ObjectStream::Tasks { .. } => "tasks",
            ObjectStream::Processes { .. } => "execution_processes",
        }
    }

    fn label(&self) -> &'static str {
        match self {
            ObjectStream::Projects => "projects_ws",
            ObjectStream::Tasks { .. } => "tasks_ws",
            ObjectStream::Processes { .. } => "processes_ws",
        }
    }
}

enum State {
    Connecting,
    Live {
        ws: Box<ws::WsStream>,
        doc: Materializer,
    },
    Backoff {
        delay: Duration,
    },
    Gone,
}

pub struct ObjectFollower {
    pub stream: ObjectStream,
    pub ctx: Context,
}

impl ObjectFollower {
    pub async fn run(self, cancel: CancellationToken) {
        let mut state = State::Connecting;
        let mut reconnect = Reconnect::new(self.ctx.cfg.reconnect_min, self.ctx.cfg.reconnect_max);
        loop {
            state = tokio::select! {
                _ = cancel.cancelled() => return,
                next = self.step(state, &mut reconnect) => next,
            };
            if matches!(state, State::Gone) {
                if let ObjectStream::Processes { attempt_id } = self.stream {
                    let _ = self
                        .ctx
                        .signals
                        .send(Signal::ProcessStreamGone { attempt_id });
                }
                return;
            }
        }
    }

    async fn step(&self, state: State, reconnect: &mut Reconnect) -> State {
        match state {
            State::Connecting => match ws::connect(&self.ctx.client, &self.stream.path()).await {
                Ok(ws) => State::Live {
                    ws: Box::new(ws),
                    doc: Materializer::new(self.stream.root()),
                },
                Err(e) => {
                    tracing::debug!(stream = ?self.stream, error = %e, "object stream connect failed");
                    State::Backoff {
                        delay: reconnect.next_delay(),
                    }
                }
            },
            State::Live { mut ws, mut doc } => match ws::next_text(&mut ws).await {
                Ok(text) => {
                    self.ctx.health.touch();
                    match self.on_frame(&text, &mut doc).await {
                        FrameOutcome::Ok => {
                            if doc.has_snapshot() {
                                reconnect.reset();
                            }
                            State::Live { ws, doc }
                        }
                        FrameOutcome::Garbage => State::Live { ws, doc },
                        FrameOutcome::Resync => {
                            metrics::counter!("vk_observer_resyncs_total", "scope" => self.stream.label()).increment(1);
                            State::Backoff {
                                delay: reconnect.next_delay(),
                            }
                        }
                    }
                }
                Err(WsEnd::Closed { code: 4404, .. }) => State::Gone,
                Err(end) => {
                    tracing::debug!(stream = ?self.stream, ?end, "object stream ended; reconnecting");
                    State::Backoff {
                        delay: reconnect.next_delay(),
                    }
                }
            },
            State::Backoff { delay } => {
                tokio::time::sleep(delay).await;
                State::Connecting
            }
            State::Gone => State::Gone,
        }
    }

    async fn on_frame(&self, text: &str, doc: &mut Materializer) -> FrameOutcome {
        let frame: PatchFrame = match serde_json::from_str(text) {
            Ok(f) => f,
            Err(e) => {
                self.ctx
                    .health
                    .garbage(self.stream.label(), &format!("{e}: {text}"));
                return FrameOutcome::Garbage;
            }
        };
        let changes = match doc.apply(&frame.patch.0) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(stream = ?self.stream, error = %e, "object stream frame does not apply: resyncing");
                return FrameOutcome::Resync;
            }
        };
        if let Some(h) = frame.invalidate {
            if !h.task_ids.is_empty() {
                let _ = self.ctx.signals.send(Signal::TaskHints {
                    task_ids: h.task_ids,
                });
            }
        }
        if changes.is_empty() {
            return FrameOutcome::Ok;
        }
        let (events, signal) = self.to_events(&changes, doc);
        if let Err(e) = self.ctx.writer.write(events).await {
            tracing::error!(error = %e, "cannot store an object-stream change: resyncing");
            return FrameOutcome::Resync;
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
    doc.objects().cloned().collect()
}

fn object_ids(doc: &Materializer) -> Vec<Uuid> {
    doc.objects().filter_map(crate::vk::object_id).collect()
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
                if let Some(t) = doc.get(id) {
                    events.push(DomainEvent::TaskUpserted { task: t.clone() });
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
        events.push(DomainEvent::ProcessesSnapshot {
            attempt_id,
            processes: all_objects(doc),
        });
        facts.extend(doc.objects().filter_map(ProcessFacts::from_value));
    }
    for c in changes {
        match c {
            Change::Upsert(id) => {
                if let Some(p) = doc.get(id) {
                    events.push(DomainEvent::ProcessUpserted {
                        attempt_id,
                        process: p.clone(),
                    });
                    facts.extend(ProcessFacts::from_value(p));
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
    Resync,
}
