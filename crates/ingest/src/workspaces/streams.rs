//! Followers of VK 0.1.x's object WebSockets: the workspaces stream and one session's
//! execution processes. Each is one state machine run by the driver, `Connecting → Live →
//! Backoff`, and hands what it materialised to the board (`board.rs`), which alone decides.
//!
//! Both streams send a snapshot (`replace /<root>`), then `{"Ready":true}`, then `add` /
//! `replace` / `remove` of `/<root>/{id}` (recorded: `ws-workspaces.jsonl`,
//! `ws-session-a.jsonl`). VK's patches are lenient (wire fact 7): `add`/`replace` are upserts
//! and a `remove` of an unknown id changes nothing, as the materializer already treats them. A
//! session stream may be asked for its snapshot only ([`Mode::UntilReady`]): it ends at
//! `Ready`, so an idle workspace costs no socket.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use super::super::Context;
use super::super::backoff::Reconnect;
use super::super::driver::{Follower, Step};
use super::super::materialize::{Change, Materializer};
use super::super::pulse::Pulse;
use super::board::Msg;
use vk_observer_telemetry::{ResyncCause, ResyncScope, UpstreamStream};
use vk_observer_upstream::routes_v01 as routes;
use vk_observer_upstream::ws;

/// Which stream a follower reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feed {
    Workspaces,
    Session { workspace: Uuid, session: Uuid },
}

/// How long a follower reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Until cancelled, reconnecting after a drop.
    Live,
    /// Until the first `Ready` (the snapshot only); a drop before it reconnects.
    UntilReady,
}

impl Feed {
    fn path(&self) -> String {
        match self {
            Feed::Workspaces => routes::WORKSPACES_WS.into(),
            Feed::Session { session, .. } => routes::session_processes_ws(*session),
        }
    }

    fn root(&self) -> &'static str {
        match self {
            Feed::Workspaces => "workspaces",
            Feed::Session { .. } => "execution_processes",
        }
    }

    fn telemetry(&self) -> UpstreamStream {
        match self {
            Feed::Workspaces => UpstreamStream::Workspaces,
            Feed::Session { .. } => UpstreamStream::Processes,
        }
    }
}

/// The follower's states; backoff and cancellation belong to the driver.
pub(crate) enum State {
    Connecting,
    Live {
        ws: Box<ws::WsStream>,
        doc: Materializer,
        pulse: Pulse,
    },
}

/// How a follower ends: its snapshot was read ([`Mode::UntilReady`]), or VK does not know what
/// it streams (the upgrade refused, e.g. a session of a deleted workspace).
pub(crate) enum End {
    Read,
    Unknown,
}

pub(crate) struct StreamFollower {
    pub ctx: Context,
    pub feed: Feed,
    pub mode: Mode,
    pub board: UnboundedSender<Msg>,
}

/// Failed opens in a row after which a session stream is given up (its session is unknown).
const SESSION_OPEN_TRIES: u32 = 3;

impl Follower for StreamFollower {
    type State = State;
    type End = End;

    fn backoff(&self) -> (Duration, Duration) {
        (self.ctx.cfg.reconnect_min, self.ctx.cfg.reconnect_max)
    }

    fn initial(&self) -> State {
        State::Connecting
    }

    async fn step(&self, state: State, reconnect: &mut Reconnect) -> Step<State, End> {
        match state {
            State::Connecting => match self.connect().await {
                Ok(ws) => Step::Next(State::Live {
                    ws: Box::new(ws),
                    doc: Materializer::new(self.feed.root()),
                    pulse: Pulse::new(self.ctx.health.clone()),
                }),
                Err(e) => {
                    tracing::debug!(feed = ?self.feed, error = %e, "VK 0.1.x stream: connect failed");
                    let session = matches!(self.feed, Feed::Session { .. });
                    if session && reconnect.failures + 1 >= SESSION_OPEN_TRIES {
                        return Step::End(End::Unknown);
                    }
                    Step::Backoff(State::Connecting)
                }
            },
            State::Live {
                mut ws,
                mut doc,
                pulse,
            } => {
                let beat = || pulse.beat();
                // VK 0.1.x's sockets send no pings: the client pings them.
                let every = self.ctx.cfg.ws_stall_after / 3;
                let read = ws::next_text_pinging(&mut ws, &beat, every);
                match pulse.or_stall(self.ctx.cfg.ws_stall_after, read).await {
                    Ok(Ok(text)) => match self.on_frame(&text, &mut doc) {
                        Frame::Applied => Step::Next(State::Live { ws, doc, pulse }),
                        Frame::Ready => {
                            reconnect.reset();
                            if self.mode == Mode::UntilReady {
                                return Step::End(End::Read);
                            }
                            Step::Next(State::Live { ws, doc, pulse })
                        }
                        Frame::Resync => {
                            self.ctx
                                .health
                                .resynced(ResyncScope::Processes, ResyncCause::PatchFailed);
                            self.lost()
                        }
                    },
                    Ok(Err(end)) => {
                        tracing::debug!(feed = ?self.feed, ?end, "VK 0.1.x stream ended; reconnecting");
                        self.lost()
                    }
                    Err(_stalled) => {
                        tracing::warn!(feed = ?self.feed, "VK 0.1.x stream sent nothing; reconnecting");
                        self.lost()
                    }
                }
            }
        }
    }

    async fn finish(&self, end: End) {
        if let (End::Unknown, Feed::Session { workspace, session }) = (end, self.feed) {
            let _ = self.board.send(Msg::SessionUnknown { workspace, session });
        }
    }
}

/// What one frame was.
enum Frame {
    /// A patch (applied, or skipped as garbage).
    Applied,
    /// `{"Ready":true}`: the snapshot is whole.
    Ready,
    /// A patch that does not apply: the document is unsure, read a fresh snapshot.
    Resync,
}

impl StreamFollower {
    /// Opens the socket; a snapshot-only one waits for one of the `log_backfills` permits
    /// first (a reconnect reads every idle session again: a few at a time).
    async fn connect(&self) -> Result<ws::WsStream, vk_observer_upstream::UpstreamError> {
        let _permit = match self.mode {
            Mode::UntilReady => self.ctx.backfills.acquire().await.ok(),
            Mode::Live => None,
        };
        ws::connect(&self.ctx.client, &self.feed.path()).await
    }

    fn lost(&self) -> Step<State, End> {
        self.ctx.health.reconnected(self.feed.telemetry());
        if self.feed == Feed::Workspaces {
            let _ = self.board.send(Msg::WorkspacesLost);
        }
        Step::Backoff(State::Connecting)
    }

    fn on_frame(&self, text: &str, doc: &mut Materializer) -> Frame {
        let parsed: Result<Value, _> = serde_json::from_str(text);
        let frame = match parsed {
            Ok(v) if v.get("Ready").is_some() => return Frame::Ready,
            Ok(v) => v,
            Err(e) => return self.garbage(&format!("{e}: {text}")),
        };
        let Some(patch) = frame.get("JsonPatch").cloned() else {
            return self.garbage(text);
        };
        let ops: Vec<json_patch::PatchOperation> = match serde_json::from_value(patch) {
            Ok(ops) => ops,
            Err(e) => return self.garbage(&format!("{e}: {text}")),
        };
        match doc.apply(&ops) {
            Ok(changes) if !changes.is_empty() => {
                self.hand_over(&changes, doc);
                Frame::Applied
            }
            Ok(_) => Frame::Applied,
            Err(e) => {
                tracing::warn!(feed = ?self.feed, error = %e, "VK 0.1.x frame does not apply: resyncing");
                Frame::Resync
            }
        }
    }

    fn garbage(&self, detail: &str) -> Frame {
        self.ctx.health.garbage(self.feed.telemetry(), detail);
        Frame::Applied
    }

    /// Tells the board what changed: the workspaces one by one (a snapshot whole), a session's
    /// processes always whole (a session holds a handful).
    fn hand_over(&self, changes: &[Change], doc: &Materializer) {
        let msgs = match self.feed {
            Feed::Session { workspace, session } => vec![Msg::SessionProcesses {
                workspace,
                session,
                processes: doc.objects().collect(),
            }],
            Feed::Workspaces if changes.contains(&Change::Snapshot) => {
                vec![Msg::WorkspacesSnapshot(doc.objects().collect())]
            }
            Feed::Workspaces => changes
                .iter()
                .filter_map(|c| match c {
                    Change::Upsert(id) => doc.get(id).map(Msg::WorkspaceUpserted),
                    Change::Remove(id) => Some(Msg::WorkspaceRemoved(*id)),
                    Change::Snapshot => None,
                })
                .collect(),
        };
        for m in msgs {
            let _ = self.board.send(m);
        }
    }
}
