//! The board: the one task that knows what the VK 0.1.x ingest learned and decides what is
//! written and what is followed. Followers and reads send it messages ([`Msg`]); it alone
//! holds the workspaces ([`Space`]), writes their domain events (`sync.rs`) and opens and
//! closes the session and log followers (`plans.rs`). Data flows one way: VK → followers →
//! board → writer.
//!
//! Until every workspace of the workspaces stream's snapshot has its details (repos, sessions)
//! and the registered repos are read, nothing is written; then one batch states the whole
//! board (every project's task list, the project list), so what vanished while the daemon was
//! away is removed. After that each change writes only what it touched.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::super::driver;
use super::super::workspace_model::Project;
use super::super::{Context, Signal};
use super::reads::{READS_AT_ONCE, Reader};
use super::space::{Details, Space};
use super::streams::{Feed, Mode, StreamFollower};
use super::tasks::Links;
use vk_observer_store::events::Channel;
use vk_observer_telemetry::health::UpstreamState;
use vk_observer_vk as vk;

/// What followers and reads tell the board.
#[derive(Debug)]
pub(crate) enum Msg {
    /// The workspaces stream's snapshot: every workspace VK has.
    WorkspacesSnapshot(Vec<Value>),
    WorkspaceUpserted(Value),
    WorkspaceRemoved(Uuid),
    /// The workspaces stream dropped (it reconnects).
    WorkspacesLost,
    /// VK no longer knows the workspace (its details answered 404).
    WorkspaceGone(Uuid),
    /// VK kept failing to answer the workspace's details: it is left out of the board until a
    /// later read answers.
    DetailsFailed(Uuid),
    Details {
        workspace: Uuid,
        details: Details,
    },
    /// A session's processes, whole, after a frame of its stream.
    SessionProcesses {
        workspace: Uuid,
        session: Uuid,
        processes: Vec<Value>,
    },
    /// A session stream was refused (VK does not know the session).
    SessionUnknown {
        workspace: Uuid,
        session: Uuid,
    },
    /// A session stream ended (its snapshot read, given up, or cancelled).
    StreamEnded {
        session: Uuid,
        generation: u64,
    },
    Registered(Vec<Value>),
    /// A process as VK's database holds it.
    ProcessRead {
        workspace: Uuid,
        process: Value,
    },
    LogEnded {
        workspace: Uuid,
        process: Uuid,
        channel: Channel,
        complete: bool,
    },
}

/// How often the board looks at its lingering streams.
const TICK: Duration = Duration::from_secs(1);
/// How often the registered repos are read again (a repo registered without a workspace).
const REPOS_EVERY: Duration = Duration::from_secs(60);

/// An open session stream.
pub(crate) struct OpenStream {
    pub workspace: Uuid,
    pub mode: Mode,
    pub cancel: CancellationToken,
    pub generation: u64,
    /// Since when its workspace is inactive (a live stream lingers, then closes).
    pub quiet_since: Option<Instant>,
}

/// The board's state (see the module doc).
pub(crate) struct Board {
    pub ctx: Context,
    pub cancel: CancellationToken,
    pub tx: UnboundedSender<Msg>,
    pub reader: Reader,
    pub registered: Option<Vec<Value>>,
    pub spaces: HashMap<Uuid, Space>,
    pub streams: HashMap<Uuid, OpenStream>,
    pub next_generation: u64,
    pub logs: HashMap<(Uuid, Channel), CancellationToken>,
    /// Logs complete in the store.
    pub logs_settled: HashSet<(Uuid, Channel)>,
    /// Logs whose follower ended incomplete: tried again after the next snapshot.
    pub logs_given_up: HashSet<(Uuid, Channel)>,
    /// The whole board was written since the last workspaces snapshot.
    pub synced: bool,
    /// Workspaces whose events are to be written.
    pub dirty: BTreeSet<Uuid>,
    /// Daemon-kept tasks whose rows are to be written.
    pub dirty_tasks: BTreeSet<Uuid>,
    /// The tasks as last written (one that is no more is removed).
    pub written: BTreeSet<Uuid>,
    /// The projects as last written.
    pub projects: Vec<Project>,
    /// Daemon-kept tasks and the links of workspaces to tasks.
    pub links: Links,
}

/// Follows a VK 0.1.x until `cancel`: the workspaces stream and the board, which also takes
/// the proxy's signals.
pub(crate) async fn run(
    ctx: Context,
    signals: UnboundedReceiver<Signal>,
    cancel: CancellationToken,
) {
    let (tx, rx) = unbounded_channel();
    let stream = StreamFollower {
        ctx: ctx.clone(),
        feed: Feed::Workspaces,
        mode: Mode::Live,
        board: tx.clone(),
    };
    tokio::spawn(driver::drive(stream, cancel.clone()));
    tracing::info!("following a VK 0.1.x");
    tokio::spawn(super::sync::write_server_info(ctx.clone(), cancel.clone()));
    let links = Links::load(&ctx.store.read());
    let reader = Reader {
        ctx: ctx.clone(),
        board: tx.clone(),
        cancel: cancel.clone(),
        permits: Arc::new(tokio::sync::Semaphore::new(READS_AT_ONCE)),
    };
    let board = Board {
        ctx,
        cancel,
        tx,
        reader,
        registered: None,
        spaces: HashMap::new(),
        streams: HashMap::new(),
        next_generation: 0,
        logs: HashMap::new(),
        logs_settled: HashSet::new(),
        logs_given_up: HashSet::new(),
        synced: false,
        dirty: BTreeSet::new(),
        dirty_tasks: BTreeSet::new(),
        written: BTreeSet::new(),
        projects: Vec::new(),
        links,
    };
    board.run(rx, signals).await;
}

impl Board {
    async fn run(mut self, mut rx: UnboundedReceiver<Msg>, mut signals: UnboundedReceiver<Signal>) {
        let mut tick = tokio::time::interval(TICK);
        let mut repos_read_at = Instant::now();
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                msg = rx.recv() => {
                    let Some(msg) = msg else { break };
                    self.on(msg);
                    while let Ok(more) = rx.try_recv() {
                        self.on(more);
                    }
                }
                signal = signals.recv() => {
                    let Some(signal) = signal else { break };
                    self.on_signal(signal);
                }
                _ = tick.tick() => {
                    self.close_quiet_streams();
                    self.recheck_stale_processes();
                    if repos_read_at.elapsed() >= REPOS_EVERY {
                        repos_read_at = Instant::now();
                        self.reader.registered();
                    }
                }
            }
            self.write_and_plan().await;
        }
        for (_, s) in self.streams.drain() {
            s.cancel.cancel();
        }
        for (_, c) in self.logs.drain() {
            c.cancel();
        }
    }

    fn on(&mut self, msg: Msg) {
        match msg {
            Msg::WorkspacesSnapshot(list) => self.on_snapshot(list),
            Msg::WorkspaceUpserted(json) => self.on_workspace(json),
            Msg::WorkspaceRemoved(id) | Msg::WorkspaceGone(id) => self.on_removed(id),
            Msg::WorkspacesLost => self.ctx.health.set_state(UpstreamState::Reconnecting),
            Msg::Details { workspace, details } => {
                if let Some(space) = self.spaces.get_mut(&workspace) {
                    space.details = Some(details);
                    space.unreadable = false;
                    self.dirty.insert(workspace);
                }
            }
            Msg::DetailsFailed(workspace) => {
                if let Some(space) = self.spaces.get_mut(&workspace) {
                    tracing::warn!(%workspace, "VK 0.1.x does not answer this workspace's repos or sessions: left out until it does");
                    space.unreadable = true;
                    self.dirty.insert(workspace);
                }
            }
            Msg::SessionProcesses {
                workspace,
                session,
                processes,
            } => {
                if let Some(space) = self.spaces.get_mut(&workspace) {
                    space.processes.insert(session, processes);
                    self.dirty.insert(workspace);
                }
            }
            Msg::SessionUnknown { workspace, session } => {
                // Known to VK's session list but refused: its processes are none.
                if let Some(space) = self.spaces.get_mut(&workspace) {
                    space.processes.entry(session).or_default();
                    self.dirty.insert(workspace);
                }
            }
            Msg::StreamEnded {
                session,
                generation,
            } => {
                if self.streams.get(&session).map(|s| s.generation) == Some(generation) {
                    self.streams.remove(&session);
                }
            }
            Msg::Registered(repos) => self.registered = Some(repos),
            Msg::ProcessRead { workspace, process } => {
                if let Some(space) = self.spaces.get_mut(&workspace)
                    && space.correct_process(&process)
                {
                    self.dirty.insert(workspace);
                }
            }
            Msg::LogEnded {
                workspace,
                process,
                channel,
                complete,
            } => {
                self.logs.remove(&(process, channel));
                if complete {
                    self.logs_settled.insert((process, channel));
                } else {
                    self.logs_given_up.insert((process, channel));
                }
                self.dirty.insert(workspace);
            }
        }
    }

    /// VK's whole workspace list: what is gone goes, what is new is read; the whole board is
    /// written again once every workspace is known.
    fn on_snapshot(&mut self, list: Vec<Value>) {
        self.ctx.health.set_state(UpstreamState::Connected);
        // A reconnect: what ran while the stream was down may have left no trace in the
        // workspaces (a whole run between two snapshots), so every session not followed live
        // is read again from a snapshot (a few at a time).
        let reconnect = !self.spaces.is_empty();
        self.synced = false;
        self.logs_given_up.clear();
        let ids: HashSet<Uuid> = list.iter().filter_map(vk::object_id).collect();
        let gone: Vec<Uuid> = self
            .spaces
            .keys()
            .filter(|id| !ids.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.on_removed(id);
        }
        for json in list {
            self.on_workspace(json);
        }
        self.reader.registered();
        if reconnect {
            let sessions: Vec<(Uuid, Uuid)> = self
                .spaces
                .iter()
                .flat_map(|(id, s)| s.session_ids().into_iter().map(|session| (*id, session)))
                .filter(|(_, session)| !self.streams.contains_key(session))
                .collect();
            for (workspace, session) in sessions {
                self.open_stream(workspace, session, super::streams::Mode::UntilReady);
            }
        }
    }

    /// A workspace added or changed: its details are read when new, when VK moved its
    /// `updated_at`, or when it starts running (a follow-up may have made a session).
    fn on_workspace(&mut self, json: Value) {
        let Some(id) = vk::object_id(&json) else {
            self.ctx.health.garbage(
                vk_observer_telemetry::UpstreamStream::Workspaces,
                &json.to_string(),
            );
            return;
        };
        let running = |v: &Value| v.get("is_running").and_then(Value::as_bool) == Some(true);
        let reread = match self.spaces.get(&id) {
            None => true,
            Some(old) => {
                old.json.get("updated_at") != json.get("updated_at")
                    || (running(&json) && !running(&old.json))
                    || old.unreadable
            }
        };
        let stopped = self
            .spaces
            .get(&id)
            .is_some_and(|old| running(&old.json) && !running(&json));
        let space = self
            .spaces
            .entry(id)
            .or_insert_with(|| Space::new(json.clone()));
        space.json = json;
        if stopped {
            // Wire fact 1: the last process delta may be stale or lost. Each process that
            // still says it runs is read from REST, and each session's processes from a fresh
            // snapshot (a process whose `add` was lost is in it).
            for pid in space.running_processes() {
                self.reader.process(id, pid);
            }
            for session in space.session_ids() {
                if let Some(open) = self.streams.remove(&session) {
                    open.cancel.cancel();
                }
                self.open_stream(id, session, super::streams::Mode::UntilReady);
            }
        }
        if reread {
            self.reader.details(id);
        }
        self.dirty.insert(id);
    }

    /// What the proxy says: daemon-kept tasks and links (`tasks.rs`), and nudges after a
    /// mutation (the workspace's sessions are read again: a follow-up may have made one).
    fn on_signal(&mut self, signal: Signal) {
        match signal {
            Signal::DraftTask { mut task } => {
                let Some(id) = vk::object_id(&task) else {
                    return;
                };
                if let (Some(old), Some(o)) = (self.links.kept.get(&id), task.as_object_mut()) {
                    for keep in ["linked_workspaces", "created_at"] {
                        if let Some(v) = old.get(keep) {
                            o.insert(keep.into(), v.clone());
                        }
                    }
                }
                self.links.kept.insert(id, task);
                self.dirty_tasks.insert(id);
            }
            Signal::DraftRemoved { task_id } => {
                self.links.kept.remove(&task_id);
                self.dirty_tasks.insert(task_id);
            }
            Signal::Linked {
                task_id,
                workspace_id,
            } => {
                self.links.link(task_id, workspace_id);
                self.dirty_tasks.insert(task_id);
                self.dirty.insert(workspace_id);
            }
            Signal::Nudge {
                attempt_id: Some(a),
                ..
            } if self.spaces.contains_key(&a) => self.reader.details(a),
            Signal::RefreshBranchStatus { attempt_id, done } => {
                self.reader.branch_status(attempt_id, done)
            }
            _ => {}
        }
    }

    fn on_removed(&mut self, id: Uuid) {
        if let Some(space) = self.spaces.remove(&id) {
            for session in space.session_ids() {
                if let Some(s) = self.streams.remove(&session) {
                    s.cancel.cancel();
                }
            }
            for p in space.all_processes() {
                if let Some(pid) = vk::object_id(&p) {
                    for ch in [Channel::Normalized, Channel::Raw] {
                        if let Some(c) = self.logs.remove(&(pid, ch)) {
                            c.cancel();
                        }
                    }
                }
            }
        }
        self.dirty.remove(&id);
    }
}
