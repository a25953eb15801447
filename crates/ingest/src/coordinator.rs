//! The ingest coordinator: one task that decides what to fetch, open and close. It reacts to
//! signals from the stream followers and jobs, refreshes a task at its first hint and once
//! more after the rest of its burst (VK sends a burst per change: `refreshes::HintWindow`),
//! persists the SSE seq only once every hint before it is handled, keeps a process
//! stream open per active attempt and a log follower per running, non-dev-server process,
//! schedules change-summary re-reads (after process ends and a running agent's tool calls,
//! see `fresh_changes`), and says when bootstrap is done. It never writes projections itself except the seq.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Context;
use super::fresh_changes::ChangeSchedule;
use super::histories::Histories;
use super::jobs::Jobs;
use super::logs::LogFollower;
use super::objects::{ObjectFollower, ObjectStream};
use super::process_streams::ProcessStreams;
use super::refreshes::{HintWindow, Refreshes};
use super::signal::Signal;
use vk_observer_store::events::{Channel, DomainEvent};
use vk_observer_telemetry::{ResyncCause, ResyncScope};
use vk_observer_vk::{ProcessFacts, RunReason, uuid_of};

pub(crate) struct Coordinator {
    pub ctx: Context,
    pub jobs: Jobs,
    cancel: CancellationToken,
    projects_stream: Option<CancellationToken>,
    projects_seen: bool,
    task_streams: HashMap<Uuid, CancellationToken>,
    tasks_snapshot_seen: HashSet<Uuid>,
    deep_on_snapshot: bool,
    process_streams: ProcessStreams,
    /// (process, channel) of every log follower running or waiting in `histories`.
    log_followers: HashSet<(Uuid, Channel)>,
    /// Ended processes' logs waiting to be read from history, at most `log_backfills` at once.
    histories: Histories,
    running_seen: HashSet<Uuid>,
    hints: HintWindow,
    refreshes: Refreshes,
    pending_seq: Option<u64>,
    /// When the seq was last persisted: at most one seq write per `tick`.
    seq_written_at: Instant,
    /// Change-summary re-reads owed (after process ends and agents' tool calls).
    changes: ChangeSchedule,
}

fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(86_400)
}

impl Coordinator {
    pub(crate) fn new(ctx: Context, cancel: CancellationToken) -> Self {
        let jobs = Jobs {
            limit: Arc::new(tokio::sync::Semaphore::new(ctx.cfg.rest_concurrency)),
            ctx: ctx.clone(),
        };
        let histories = Histories::new(ctx.cfg.log_backfills);
        Coordinator {
            ctx,
            jobs,
            cancel,
            projects_stream: None,
            projects_seen: false,
            task_streams: HashMap::new(),
            tasks_snapshot_seen: HashSet::new(),
            deep_on_snapshot: true,
            process_streams: ProcessStreams::default(),
            log_followers: HashSet::new(),
            histories,
            running_seen: HashSet::new(),
            hints: HintWindow::default(),
            refreshes: Refreshes::default(),
            pending_seq: None,
            seq_written_at: Instant::now(),
            changes: ChangeSchedule::default(),
        }
    }

    /// React to signals, and wake by timer only when a deadline is pending (hint debounce,
    /// change summaries, lingering process streams, the seq to persist, bootstrap): an idle
    /// coordinator sleeps until the next signal instead of ticking.
    pub(crate) async fn run(mut self, mut rx: UnboundedReceiver<Signal>) {
        loop {
            let wake = self.next_wake();
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                sig = rx.recv() => match sig {
                    Some(sig) => self.handle(sig),
                    None => return,
                },
                _ = tokio::time::sleep_until(wake.unwrap_or_else(far_future).into()), if wake.is_some() => {}
            }
            self.on_tick().await;
        }
    }

    /// The earliest moment something is due without a further signal (None: nothing is).
    fn next_wake(&self) -> Option<Instant> {
        let now = Instant::now();
        let tick = self.ctx.cfg.tick;
        // When a quiet stream's linger ends; a quiet stream of an attempt still active (its
        // task in progress) is looked at again now and then: the task's change reaches the
        // store, not this task (`ProcessStreams::close_quiet`).
        let streams = self.process_streams.next_wake(now);
        // The seq waits for quiet hints; the signal that makes them quiet wakes us anyway.
        let quiet_hints = self.hints.is_quiet() && self.refreshes.is_empty();
        let seq = (self.pending_seq.is_some() && quiet_hints).then(|| self.seq_written_at + tick);
        let bootstrap = (!self.ctx.health.bootstrapped()).then(|| now + tick);
        self.hints
            .closes()
            .into_iter()
            .chain(self.changes.next_wake())
            .chain(streams)
            .chain(seq)
            .chain(bootstrap)
            .min()
    }

    fn handle(&mut self, sig: Signal) {
        match sig {
            Signal::TaskHints { task_ids } => {
                let now = Instant::now();
                for t in task_ids {
                    if self.hints.hint(t, now, self.ctx.cfg.hint_debounce) {
                        self.start_refresh(t, true);
                        self.open_known_process_streams(t);
                    }
                }
            }
            Signal::SseSeq { seq } => self.pending_seq = Some(seq),
            Signal::ResyncAll { reason, watermark } => self.resync_all(&reason, watermark),
            Signal::Projects { ids } => self.on_projects(ids),
            Signal::TasksSnapshot {
                project_id,
                task_ids,
            } => {
                self.tasks_snapshot_seen.insert(project_id);
                for t in task_ids {
                    self.start_refresh(t, self.deep_on_snapshot);
                }
            }
            Signal::Processes {
                attempt_id,
                snapshot,
                processes,
                removed,
            } => self.on_processes(attempt_id, snapshot, processes, removed),
            Signal::ProcessStreamGone { attempt_id } => self.process_streams.forget(attempt_id),
            Signal::LogDone {
                process_id,
                channel,
                complete,
                gave_up,
            } => {
                self.log_followers.remove(&(process_id, channel));
                self.histories.finished(process_id, channel);
                self.start_histories();
                if !complete && !gave_up {
                    self.follow_again_if_ended(process_id, channel);
                }
            }
            Signal::TaskRefreshed { task_id, attempts } => {
                if let Some(deep) = self.refreshes.ended(task_id) {
                    self.start_refresh(task_id, deep);
                }
                for a in attempts {
                    self.ensure_process_stream(a);
                }
            }
            Signal::RefreshBranchStatus { attempt_id, done } => {
                self.jobs.refresh_branch_status(attempt_id, done);
            }
            Signal::ToolUseLogged {
                attempt_id,
                process_id,
            } => self.on_tool_use(attempt_id, process_id),
            Signal::ChangesRefreshed { attempt_id, ok } => {
                let (min, max) = (self.ctx.cfg.reconnect_min, self.ctx.cfg.reconnect_max);
                self.changes
                    .finished(attempt_id, ok, |n| ChangeSchedule::backoff(n, min, max));
            }
            Signal::Nudge {
                task_id,
                attempt_id,
            } => {
                let task = task_id.or_else(|| {
                    let a = self.ctx.store.read().attempt(attempt_id?).ok()??;
                    uuid_of(&a.value, "task_id")
                });
                if let Some(t) = task {
                    self.start_refresh(t, true);
                }
                if let Some(a) = attempt_id {
                    self.ensure_process_stream(a);
                }
            }
            // VK 0.1.x's board takes these; the fork keeps its tasks itself.
            Signal::DraftTask { .. } | Signal::DraftRemoved { .. } | Signal::Linked { .. } => {}
        }
    }

    fn resync_all(&mut self, reason: &str, watermark: Option<u64>) {
        tracing::info!(reason, "resyncing with VK");
        self.ctx
            .health
            .resynced(ResyncScope::All, ResyncCause::of(reason));
        self.deep_on_snapshot = reason != ResyncCause::Resume.as_str();
        if watermark.is_some() {
            self.pending_seq = watermark;
        }
        // Fresh snapshots from every object stream; the writer keeps only real differences.
        if let Some(c) = self.projects_stream.take() {
            c.cancel();
        }
        for (_, c) in self.task_streams.drain() {
            c.cancel();
        }
        self.process_streams.cancel_all();
        self.tasks_snapshot_seen.clear();
        self.projects_seen = false;
        self.spawn_object(ObjectStream::Projects, |c, s| c.projects_stream = Some(s));
        self.jobs.refresh_server_info();
        // Attempts with a running process or an in-progress task get their process stream back.
        let reader = self.ctx.store.read();
        let active: Vec<Uuid> = reader
            .attempts()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| self.attempt_active(a.id))
            .map(|a| a.id)
            .collect();
        for a in active {
            self.ensure_process_stream(a);
        }
    }

    fn on_projects(&mut self, ids: Vec<Uuid>) {
        self.projects_seen = true;
        let keep: HashSet<Uuid> = ids.iter().copied().collect();
        self.task_streams.retain(|p, c| {
            let k = keep.contains(p);
            if !k {
                c.cancel();
            }
            k
        });
        for p in ids {
            self.spawn_repos_refresh(p);
            if !self.task_streams.contains_key(&p) {
                self.spawn_object(ObjectStream::Tasks { project_id: p }, move |c, s| {
                    c.task_streams.insert(p, s);
                });
            }
        }
    }

    fn spawn_repos_refresh(&self, project_id: Uuid) {
        let client = self.ctx.client.clone();
        let writer = self.ctx.writer.clone();
        let limit = self.jobs.limit.clone();
        tokio::spawn(async move {
            let Ok(_p) = limit.acquire().await else {
                return;
            };
            match client.project_repos(project_id).await {
                Ok(repos) => {
                    let _ = writer
                        .write(vec![DomainEvent::ReposSnapshot { project_id, repos }])
                        .await;
                }
                Err(e) => tracing::warn!(%project_id, error = %e, "repository refresh failed"),
            }
        });
    }

    fn spawn_object(
        &mut self,
        stream: ObjectStream,
        record: impl FnOnce(&mut Self, CancellationToken),
    ) {
        let token = self.cancel.child_token();
        let f = ObjectFollower {
            stream,
            ctx: self.ctx.clone(),
        };
        tokio::spawn(super::driver::drive(f, token.clone()));
        record(self, token);
    }

    fn start_refresh(&mut self, task: Uuid, deep: bool) {
        if self.refreshes.ask(task, deep) {
            self.jobs.refresh_task(task, deep);
        }
    }

    /// The process streams of the attempts of `task` the store knows, opened at its hint
    /// rather than after its refresh (which ends by opening them, `Signal::TaskRefreshed`): a
    /// new process of a known attempt (a follow-up's) is then not behind the refresh's reads.
    fn open_known_process_streams(&mut self, task: Uuid) {
        let known = self.ctx.store.read().attempts_of_task(task);
        for a in known.unwrap_or_default() {
            self.ensure_process_stream(a.id);
        }
    }

    fn ensure_process_stream(&mut self, attempt_id: Uuid) {
        if self.process_streams.contains(attempt_id) {
            return;
        }
        let mut token = None;
        self.spawn_object(ObjectStream::Processes { attempt_id }, |_, s| {
            token = Some(s)
        });
        if let Some(cancel) = token {
            self.process_streams.insert(attempt_id, cancel);
        }
    }

    fn on_processes(
        &mut self,
        attempt: Uuid,
        snapshot: bool,
        procs: Vec<ProcessFacts>,
        removed: Vec<Uuid>,
    ) {
        let reader = self.ctx.store.read();
        let mut changes_needed = false;
        let mut unknown_session = false;
        for p in &procs {
            if let Some(s) = p.session_id {
                unknown_session |= reader.session(s).ok().flatten().is_none();
            }
            if p.is_dev_server() {
                continue;
            }
            if p.is_running() {
                self.running_seen.insert(p.id);
            } else if self.running_seen.remove(&p.id) {
                changes_needed = true;
            } else if snapshot && !changes_needed {
                changes_needed = !self.summary_saw_end(&reader, attempt, p.id);
            }
            for ch in self.ctx.cfg.channels() {
                let complete = reader.logs_complete(p.id, ch).unwrap_or(false);
                if (p.is_running() || !complete) && !self.log_followers.contains(&(p.id, ch)) {
                    self.spawn_log_follower(attempt, p.id, ch, !p.is_running());
                }
            }
        }
        self.process_streams
            .on_processes(attempt, snapshot, &procs, &removed);
        if unknown_session {
            self.jobs.refresh_sessions(attempt);
        }
        if changes_needed {
            self.changes
                .after_process_end(attempt, self.ctx.cfg.changes_debounce);
        }
    }

    /// A snapshot shows the process ended: true when the stored change summary was read after
    /// that end (`fresh_changes::summary_read_after_end`), so no re-read is owed for it.
    fn summary_saw_end(
        &self,
        reader: &vk_observer_store::StoreReader,
        attempt: Uuid,
        process: Uuid,
    ) -> bool {
        let changes = reader.changes(attempt).ok().flatten();
        let row = reader.process(process).ok().flatten();
        super::fresh_changes::summary_read_after_end(
            changes.as_ref().map(|c| &c.value),
            row.as_ref().map(|r| &r.value),
            self.ctx.cfg.changes_debounce,
        )
    }

    /// A tool call of a running coding agent may have changed files: re-read the attempt's
    /// change summary soon (`fresh_changes`). Other processes' entries, and entries replayed
    /// for an agent that has ended, schedule nothing.
    fn on_tool_use(&mut self, attempt: Uuid, process: Uuid) {
        if self.changes.is_due(attempt) {
            return;
        }
        let running_agent = self
            .ctx
            .store
            .read()
            .process(process)
            .ok()
            .flatten()
            .and_then(|p| ProcessFacts::from_value(&p.value))
            .is_some_and(|f| f.is_running() && f.run_reason == RunReason::CodingAgent);
        if running_agent {
            self.changes
                .on_agent_tool(attempt, self.ctx.cfg.changes_live_every);
        }
    }

    /// A follower ended incomplete because the process still ran at its last look. If the
    /// process's end was stored meanwhile, its change was handled while that follower was still
    /// registered (so it started nothing): follow the log once more to read its final entries.
    fn follow_again_if_ended(&mut self, process_id: Uuid, channel: Channel) {
        let reader = self.ctx.store.read();
        let Some(row) = reader.process(process_id).ok().flatten() else {
            return;
        };
        let Some(facts) = ProcessFacts::from_value(&row.value) else {
            return;
        };
        let complete = reader.logs_complete(process_id, channel).unwrap_or(false);
        if facts.is_running() || complete {
            return;
        }
        let Some(attempt_id) = reader.attempt_of_process(process_id).ok().flatten() else {
            return;
        };
        tracing::debug!(pid = %process_id, ?channel, "process ended while its log follower looked: following once more");
        self.spawn_log_follower(attempt_id, process_id, channel, true);
    }

    /// `ended`: the process's end is stored: its log comes from history pages, not a socket,
    /// read when one of `log_backfills` readers is free (`histories`).
    fn spawn_log_follower(
        &mut self,
        attempt_id: Uuid,
        process_id: Uuid,
        channel: Channel,
        ended: bool,
    ) {
        self.log_followers.insert((process_id, channel));
        if ended {
            self.histories.push((attempt_id, process_id, channel));
            self.start_histories();
        } else {
            self.run_log_follower(attempt_id, process_id, channel, false);
        }
    }

    /// Followers for the waiting histories, as many as readers are free.
    fn start_histories(&mut self) {
        for (attempt_id, process_id, channel) in self.histories.start() {
            self.run_log_follower(attempt_id, process_id, channel, true);
        }
    }

    fn run_log_follower(&self, attempt_id: Uuid, process_id: Uuid, channel: Channel, ended: bool) {
        let f = LogFollower {
            process_id,
            attempt_id,
            channel,
            ctx: self.ctx.clone(),
            ended,
            usage: std::sync::Mutex::new(super::usage::UsageTap::for_channel(channel)),
        };
        tokio::spawn(super::driver::drive(f, self.cancel.child_token()));
    }

    /// Does the attempt still need a live process stream?
    fn attempt_active(&self, attempt: Uuid) -> bool {
        let reader = self.ctx.store.read();
        let running = reader
            .processes_of_attempt(attempt)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| ProcessFacts::from_value(&p.value))
            .any(|f| f.is_running() && !f.is_dev_server());
        if running {
            return true;
        }

        reader
            .attempt(attempt)
            .ok()
            .flatten()
            .and_then(|a| uuid_of(&a.value, "task_id"))
            .and_then(|t| reader.task(t).ok().flatten())
            .and_then(|t| t.value.get("has_in_progress_attempt")?.as_bool())
            .unwrap_or(false)
    }

    async fn on_tick(&mut self) {
        let now = Instant::now();
        self.flush_hints(now);
        self.refresh_due_changes(now);
        self.close_quiet_process_streams(now);
        let quiet_hints = self.hints.is_quiet() && self.refreshes.is_empty();
        if quiet_hints {
            self.persist_seq(now).await;
        }
        self.check_bootstrap(quiet_hints);
    }

    /// Tasks hinted again within the hint window are refreshed once it closed.
    fn flush_hints(&mut self, now: Instant) {
        for t in self.hints.close_due(now) {
            self.start_refresh(t, true);
        }
    }

    /// Change summaries after processes ended and while agents work.
    fn refresh_due_changes(&mut self, now: Instant) {
        for a in self.changes.take_due(now) {
            self.jobs.refresh_changes(a);
            // A process that ended may have committed (VK auto-commits after the agent):
            // re-read the branch status of attempts whose status is cached.
            if self
                .ctx
                .store
                .read()
                .branch_status(a)
                .ok()
                .flatten()
                .is_some()
            {
                self.jobs.refresh_branch_status(a, None);
            }
        }
    }

    /// Close the process streams of attempts that went quiet (`ProcessStreams::close_quiet`).
    fn close_quiet_process_streams(&mut self, now: Instant) {
        let linger = self.ctx.cfg.process_stream_linger;
        let mut streams = std::mem::take(&mut self.process_streams);
        streams.close_quiet(now, linger, |a| self.attempt_active(a));
        self.process_streams = streams;
    }

    /// Persist the SSE seq (called only once every hint before it was handled), at most once
    /// per tick period.
    async fn persist_seq(&mut self, now: Instant) {
        if self.seq_written_at + self.ctx.cfg.tick <= now
            && let Some(seq) = self.pending_seq.take()
        {
            self.seq_written_at = now;
            if let Err(e) = self
                .ctx
                .writer
                .write(vec![DomainEvent::UpstreamSeq { seq }])
                .await
            {
                tracing::warn!(error = %e, "cannot persist the SSE seq");
                self.pending_seq = Some(seq);
            }
        }
    }

    /// Bootstrap is done once every snapshot asked for has arrived and no hint is pending.
    fn check_bootstrap(&mut self, quiet_hints: bool) {
        if !self.ctx.health.bootstrapped()
            && self.projects_seen
            && quiet_hints
            && self
                .task_streams
                .keys()
                .all(|p| self.tasks_snapshot_seen.contains(p))
            && self.process_streams.all_snapshots_seen()
        {
            tracing::info!("bootstrap done: the cache reflects VK");
            self.ctx.health.set_bootstrapped();
            // VK just answered every snapshot: it is reachable even if its event stream has not
            // sent headers yet (an idle VK sends them with its first keep-alive). The SSE
            // follower moves the state on from here.
            if self.ctx.health.state() == vk_observer_telemetry::health::UpstreamState::Down {
                self.ctx
                    .health
                    .set_state(vk_observer_telemetry::health::UpstreamState::Connected);
            }
        }
    }
}
