//! The coordinator's open process streams (one per attempt it watches): what each has seen and
//! when a quiet one is closed. A stream stays open while one of its attempt's processes runs or
//! its task is in progress. A stream that saw a process run lingers `process_stream_linger`
//! once quiet (the next process of a just-ended agent comes within moments); a stream whose
//! first snapshot already held only ended processes shows history, and closes as soon as its
//! attempt is found inactive (a bootstrap opens one per attempt of the board: lingering, they
//! were thousands of sockets and documents at once; VK's task hint for any later process
//! reopens it).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use vk_observer_vk::ProcessFacts;

/// How often a quiet process stream of a still-active attempt is looked at again.
const ACTIVE_RECHECK: Duration = Duration::from_secs(1);

struct ProcessStream {
    cancel: CancellationToken,
    snapshot_seen: bool,
    running: HashSet<Uuid>,
    /// Its first snapshot held processes, all ended, and none has run since: it closes without
    /// lingering once its attempt is inactive.
    history_only: bool,
    idle_since: Option<Instant>,
    /// When a quiet stream is looked at next (None: at once). Only due streams cost store
    /// reads: a bootstrap holds thousands of streams and the coordinator ticks on every signal.
    recheck_at: Option<Instant>,
}

#[derive(Default)]
pub(crate) struct ProcessStreams {
    streams: HashMap<Uuid, ProcessStream>,
}

impl ProcessStreams {
    pub(crate) fn contains(&self, attempt: Uuid) -> bool {
        self.streams.contains_key(&attempt)
    }

    pub(crate) fn insert(&mut self, attempt: Uuid, cancel: CancellationToken) {
        self.streams.insert(
            attempt,
            ProcessStream {
                cancel,
                snapshot_seen: false,
                running: HashSet::new(),
                history_only: false,
                idle_since: None,
                recheck_at: None,
            },
        );
    }

    /// The stream ended on its own (VK says the workspace is gone).
    pub(crate) fn forget(&mut self, attempt: Uuid) {
        self.streams.remove(&attempt);
    }

    /// Close every stream (a resync reopens what is still needed).
    pub(crate) fn cancel_all(&mut self) {
        for (_, s) in self.streams.drain() {
            s.cancel.cancel();
        }
    }

    pub(crate) fn all_snapshots_seen(&self) -> bool {
        self.streams.values().all(|s| s.snapshot_seen)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.streams.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// When the next quiet stream is due to be looked at (None: none is quiet).
    pub(crate) fn next_wake(&self, now: Instant) -> Option<Instant> {
        self.streams
            .values()
            .filter(|s| s.snapshot_seen && s.running.is_empty())
            .map(|s| s.recheck_at.unwrap_or(now))
            .min()
    }

    /// A frame of the attempt's stream: which of its processes run now.
    pub(crate) fn on_processes(
        &mut self,
        attempt: Uuid,
        snapshot: bool,
        procs: &[ProcessFacts],
        removed: &[Uuid],
    ) {
        let Some(s) = self.streams.get_mut(&attempt) else {
            return;
        };
        if snapshot {
            if !s.snapshot_seen {
                s.history_only = !procs.is_empty() && procs.iter().all(|p| !p.is_running());
            }
            s.snapshot_seen = true;
            s.running.clear();
        }
        for p in procs {
            if p.is_running() && !p.is_dev_server() {
                s.running.insert(p.id);
            } else {
                s.running.remove(&p.id);
            }
            s.history_only &= !p.is_running();
        }
        for r in removed {
            s.running.remove(r);
        }
        if !s.running.is_empty() {
            s.idle_since = None;
            s.recheck_at = None;
        }
    }

    /// Close the streams of attempts that went quiet: at once for a stream that only ever
    /// showed history, after `linger` for the others. A quiet stream is looked at when it turns
    /// quiet, when its linger ends, and every `ACTIVE_RECHECK` while `active` says its attempt
    /// still is; not on every tick. Returns how many were closed.
    pub(crate) fn close_quiet(
        &mut self,
        now: Instant,
        linger: Duration,
        active: impl Fn(Uuid) -> bool,
    ) -> usize {
        let due: Vec<Uuid> = self
            .streams
            .iter()
            .filter(|(_, s)| s.snapshot_seen && s.running.is_empty())
            .filter(|(_, s)| s.recheck_at.is_none_or(|t| t <= now))
            .map(|(a, _)| *a)
            .collect();
        let mut closed = 0;
        for a in due {
            let active = active(a);
            let Some(s) = self.streams.get_mut(&a) else {
                continue;
            };
            if active {
                s.idle_since = None;
                s.recheck_at = Some(now + ACTIVE_RECHECK);
                continue;
            }
            let since = *s.idle_since.get_or_insert(now);
            if s.history_only || now.duration_since(since) >= linger {
                s.cancel.cancel();
                self.streams.remove(&a);
                closed += 1;
            } else {
                s.recheck_at = Some(since + linger);
            }
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vk_observer_vk::{ProcessStatus, RunReason};

    fn process(n: u128, status: &str) -> ProcessFacts {
        ProcessFacts {
            id: Uuid::from_u128(n),
            session_id: None,
            run_reason: RunReason::CodingAgent,
            status: ProcessStatus::parse(status),
        }
    }

    fn open(streams: &mut ProcessStreams, attempt: u128) -> CancellationToken {
        let cancel = CancellationToken::new();
        streams.insert(Uuid::from_u128(attempt), cancel.clone());
        cancel
    }

    const LINGER: Duration = Duration::from_secs(5);

    #[test]
    fn a_stream_showing_only_ended_processes_closes_without_lingering() {
        let mut s = ProcessStreams::default();
        let cancel = open(&mut s, 1);
        let now = Instant::now();
        assert_eq!(s.close_quiet(now, LINGER, |_| false), 0, "no snapshot yet");
        let ended = [process(10, "completed"), process(11, "failed")];
        s.on_processes(Uuid::from_u128(1), true, &ended, &[]);
        assert_eq!(s.close_quiet(now, LINGER, |_| false), 1);
        assert!(cancel.is_cancelled() && s.is_empty());
    }

    #[test]
    fn a_stream_that_saw_a_process_run_lingers_once_quiet() {
        let mut s = ProcessStreams::default();
        let cancel = open(&mut s, 1);
        let attempt = Uuid::from_u128(1);
        s.on_processes(attempt, true, &[process(10, "running")], &[]);
        s.on_processes(attempt, false, &[process(10, "completed")], &[]);
        let now = Instant::now();
        assert_eq!(s.close_quiet(now, LINGER, |_| false), 0);
        assert_eq!(s.next_wake(now), Some(now + LINGER));
        assert_eq!(s.close_quiet(now + LINGER, LINGER, |_| false), 1);
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn an_empty_first_snapshot_lingers_and_an_active_attempt_stays_open() {
        let mut s = ProcessStreams::default();
        open(&mut s, 1);
        open(&mut s, 2);
        s.on_processes(Uuid::from_u128(1), true, &[], &[]);
        s.on_processes(Uuid::from_u128(2), true, &[process(20, "completed")], &[]);
        let now = Instant::now();
        // Attempt 2's task is still in progress: looked at again later, not closed.
        let active = |a: Uuid| a == Uuid::from_u128(2);
        assert_eq!(s.close_quiet(now, LINGER, active), 0);
        assert_eq!(s.len(), 2);
        assert_eq!(s.close_quiet(now + LINGER, LINGER, active), 1);
        assert!(s.contains(Uuid::from_u128(2)) && !s.contains(Uuid::from_u128(1)));
        // Once inactive, the history-only stream closes at its next look, without a linger.
        assert_eq!(s.close_quiet(now + LINGER * 2, LINGER, |_| false), 1);
        assert!(s.is_empty());
    }

    #[test]
    fn a_process_starting_later_makes_a_history_stream_linger_again() {
        let mut s = ProcessStreams::default();
        open(&mut s, 1);
        let attempt = Uuid::from_u128(1);
        s.on_processes(attempt, true, &[process(10, "completed")], &[]);
        s.on_processes(attempt, false, &[process(11, "running")], &[]);
        let now = Instant::now();
        assert_eq!(s.close_quiet(now, LINGER, |_| false), 0, "a process runs");
        s.on_processes(attempt, false, &[process(11, "completed")], &[]);
        assert_eq!(s.close_quiet(now, LINGER, |_| false), 0, "it lingers now");
        assert_eq!(s.close_quiet(now + LINGER, LINGER, |_| false), 1);
    }
}
