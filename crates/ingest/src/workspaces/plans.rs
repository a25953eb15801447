//! Which followers of a workspace run: its sessions' process streams and its processes' logs.
//!
//! - **Session streams.** While the workspace is active (VK's `is_running`; without it, one of
//!   its processes says it runs) each session's stream stays open; once inactive, a stream lingers
//!   [`LINGER`] (the next process of a chain, or the end of a stale one, comes within
//!   moments), then closes, and every process that still says it runs is read from REST (wire
//!   fact 1: a delta may be stale or lost); when VK's flag turns false each session is also
//!   read again from a fresh snapshot (`board.rs`: a process whose `add` was lost is in it). A
//!   session whose processes were never read is read once ([`Mode::UntilReady`]): an idle
//!   workspace costs no socket.
//! - **Logs.** Every process but a dev server, on each channel ingest follows, until its log is
//!   complete in the store; ended processes' logs are read a few at a time (`log_backfills`).

use std::time::{Duration, Instant};

use uuid::Uuid;

use super::super::driver;
use super::board::{Board, Msg, OpenStream};
use super::logs::LogFollower;
use super::streams::{Feed, Mode, StreamFollower};
use vk_observer_vk as vk;

/// How long a session stream stays open once its workspace is inactive.
pub(crate) const LINGER: Duration = Duration::from_secs(10);

impl Board {
    /// Opens, upgrades or starts closing the session streams of one workspace.
    pub(crate) fn plan_streams(&mut self, workspace: Uuid) {
        let Some(space) = self.spaces.get(&workspace) else {
            return;
        };
        // VK's own flag decides while the stream has it: a process that only says it runs
        // (maybe a stale delta) lets the stream linger, then is read from REST.
        let active = space.flag_running().unwrap_or_else(|| space.is_active());
        let sessions: Vec<(Uuid, bool)> = space
            .session_ids()
            .into_iter()
            .map(|s| (s, space.processes.contains_key(&s)))
            .collect();
        for (session, known) in sessions {
            match self.streams.get_mut(&session) {
                Some(open) if open.mode == Mode::Live => {
                    open.quiet_since = match (active, open.quiet_since) {
                        (true, _) => None,
                        (false, since) => Some(since.unwrap_or_else(Instant::now)),
                    };
                }
                Some(open) if active => {
                    open.cancel.cancel();
                    self.open_stream(workspace, session, Mode::Live);
                }
                Some(_) => {}
                None if active => self.open_stream(workspace, session, Mode::Live),
                None if !known => self.open_stream(workspace, session, Mode::UntilReady),
                None => {}
            }
        }
    }

    pub(crate) fn open_stream(&mut self, workspace: Uuid, session: Uuid, mode: Mode) {
        self.next_generation += 1;
        let generation = self.next_generation;
        let cancel = self.cancel.child_token();
        let follower = StreamFollower {
            ctx: self.ctx.clone(),
            feed: Feed::Session { workspace, session },
            mode,
            board: self.tx.clone(),
        };
        let (tx, token) = (self.tx.clone(), cancel.clone());
        tokio::spawn(async move {
            driver::drive(follower, token).await;
            let _ = tx.send(Msg::StreamEnded {
                session,
                generation,
            });
        });
        self.streams.insert(
            session,
            OpenStream {
                workspace,
                mode,
                cancel,
                generation,
                quiet_since: None,
            },
        );
    }

    /// Closes the live streams whose workspace stayed inactive for [`LINGER`], and reads from
    /// REST the processes that still say they run.
    pub(crate) fn close_quiet_streams(&mut self) {
        let due: Vec<(Uuid, Uuid)> = self
            .streams
            .iter()
            .filter(|(_, s)| s.quiet_since.is_some_and(|t| t.elapsed() >= LINGER))
            .map(|(session, s)| (*session, s.workspace))
            .collect();
        for (session, workspace) in due {
            let still_active = self.spaces.get(&workspace).is_some_and(|s| s.is_active());
            let flag = self.spaces.get(&workspace).is_some_and(|s| {
                s.json
                    .get("is_running")
                    .and_then(serde_json::Value::as_bool)
                    == Some(true)
            });
            if still_active && !flag {
                // Only a process says it runs: VK's own flag says not. Ask the database.
                for pid in self.spaces[&workspace].running_processes() {
                    self.reader.process(workspace, pid);
                }
                if let Some(s) = self.streams.get_mut(&session) {
                    s.quiet_since = Some(Instant::now());
                }
                continue;
            }
            if let Some(s) = self.streams.remove(&session) {
                s.cancel.cancel();
            }
        }
    }

    /// Workspaces VK says run nothing while a process of theirs still says it runs (a stale or
    /// a lost delta, wire fact 1, whatever stream was open): every [`LINGER`], each such
    /// process is read from REST and each session from a fresh snapshot, until they agree.
    pub(crate) fn recheck_stale_processes(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        for (id, space) in &mut self.spaces {
            let stale =
                space.flag_running() == Some(false) && !space.running_processes().is_empty();
            match (stale, space.recheck_at) {
                (false, _) => space.recheck_at = None,
                (true, None) => space.recheck_at = Some(now + LINGER),
                (true, Some(at)) if at <= now => {
                    space.recheck_at = Some(now + LINGER);
                    due.push((*id, space.running_processes(), space.session_ids()));
                }
                (true, Some(_)) => {}
            }
        }
        for (workspace, processes, sessions) in due {
            for pid in processes {
                self.reader.process(workspace, pid);
            }
            for session in sessions {
                if !self.streams.contains_key(&session) {
                    self.open_stream(workspace, session, Mode::UntilReady);
                }
            }
        }
    }

    /// Starts a follower for every log of the workspace not complete yet.
    pub(crate) fn plan_logs(&mut self, workspace: Uuid) {
        let Some(space) = self.spaces.get(&workspace) else {
            return;
        };
        let reader = self.ctx.store.read();
        let mut wanted = Vec::new();
        for p in space.all_processes() {
            let Some(pid) = vk::object_id(&p) else {
                continue;
            };
            if vk::RunReason::DevServer.is(vk::run_reason(&p)) {
                continue;
            }
            for channel in self.ctx.cfg.channels() {
                let key = (pid, channel);
                if self.logs.contains_key(&key)
                    || self.logs_settled.contains(&key)
                    || self.logs_given_up.contains(&key)
                {
                    continue;
                }
                if reader.logs_complete(pid, channel).unwrap_or(false) {
                    self.logs_settled.insert(key);
                    continue;
                }
                wanted.push(key);
            }
        }
        for (process, channel) in wanted {
            let token = self.cancel.child_token();
            let follower = LogFollower::new(
                self.ctx.clone(),
                workspace,
                process,
                channel,
                self.tx.clone(),
            );
            tokio::spawn(driver::drive(follower, token.clone()));
            self.logs.insert((process, channel), token);
        }
    }
}
