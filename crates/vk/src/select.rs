//! VK's selection rules over cached objects, written once for every representation that
//! carries the fields they read (full JSON rows and the typed rows of the status hot path):
//! which attempt or session is the latest (created_at desc, id asc), which execution process
//! is "relevant" for an attempt's status (VK's `latest_execution_process_id`: coding agent,
//! setup or cleanup script, never a dev server or a dropped process), and which process the
//! log tools follow.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::process::{RELEVANT_REASONS, RunReason, is_relevant_reason};

/// What the "latest" rules read of any VK object.
pub trait VkObject {
    fn id(&self) -> Uuid;
    fn created_at(&self) -> Option<DateTime<Utc>>;
}

/// What the process rules read of an execution process.
pub trait VkProcess: VkObject {
    /// `run_reason` as VK spells it ("" when absent).
    fn run_reason(&self) -> &str;
    fn is_dropped(&self) -> bool;
    fn session_id(&self) -> Option<Uuid>;
}

/// A cached row stored under its id (the id is its key, not one of its fields): an `(id, row)`
/// pair is a `VkObject` (and a `VkProcess`) when the row tells the rest.
pub trait KeyedRow {
    fn created_at(&self) -> Option<DateTime<Utc>>;
}

/// The process facts of a `KeyedRow`.
pub trait KeyedProcessRow: KeyedRow {
    fn run_reason(&self) -> &str;
    fn is_dropped(&self) -> bool;
    fn session_id(&self) -> Option<Uuid>;
}

impl<T: KeyedRow> VkObject for (Uuid, T) {
    fn id(&self) -> Uuid {
        self.0
    }
    fn created_at(&self) -> Option<DateTime<Utc>> {
        self.1.created_at()
    }
}

impl<T: KeyedProcessRow> VkProcess for (Uuid, T) {
    fn run_reason(&self) -> &str {
        self.1.run_reason()
    }
    fn is_dropped(&self) -> bool {
        self.1.is_dropped()
    }
    fn session_id(&self) -> Option<Uuid> {
        self.1.session_id()
    }
}

/// Newest first by `created_at`, then id ascending: VK's "latest" order for attempts and
/// sessions.
pub fn newest_first<T: VkObject>(a: &T, b: &T) -> Ordering {
    b.created_at()
        .cmp(&a.created_at())
        .then(a.id().cmp(&b.id()))
}

/// The latest by [`newest_first`].
pub fn latest<T: VkObject>(items: &[T]) -> Option<&T> {
    items.iter().min_by(|a, b| newest_first(*a, *b))
}

/// Oldest first by `created_at`, then id ascending.
fn oldest_first<T: VkObject>(a: &T, b: &T) -> Ordering {
    a.created_at()
        .cmp(&b.created_at())
        .then(a.id().cmp(&b.id()))
}

/// The newest process of one run reason (ties to the smaller id), dropped ones ignored.
fn newest_of_reason<'a, P: VkProcess>(processes: &'a [P], reason: &RunReason) -> Option<&'a P> {
    processes
        .iter()
        .filter(|p| reason.is(p.run_reason()) && !p.is_dropped())
        .max_by(|a, b| {
            a.created_at()
                .cmp(&b.created_at())
                .then(b.id().cmp(&a.id()))
        })
}

/// VK's `latest_execution_process_id`: per reason the newest, then the newest of those, ties
/// going to the earlier reason in [`RELEVANT_REASONS`].
pub fn status_process<P: VkProcess>(processes: &[P]) -> Option<&P> {
    let mut best: Option<&P> = None;
    for reason in &RELEVANT_REASONS {
        if let Some(p) = newest_of_reason(processes, reason)
            && best.is_none_or(|b| p.created_at() > b.created_at())
        {
            best = Some(p);
        }
    }
    best
}

/// The process whose logs the tail tools follow: the latest coding agent, else the latest
/// setup/cleanup script (seed 001, decision 2).
pub fn log_process<P: VkProcess>(processes: &[P]) -> Option<&P> {
    newest_of_reason(processes, &RunReason::CodingAgent).or_else(|| {
        let setup = newest_of_reason(processes, &RunReason::SetupScript);
        let cleanup = newest_of_reason(processes, &RunReason::CleanupScript);
        match (setup, cleanup) {
            (Some(s), Some(c)) => Some(if c.created_at() > s.created_at() {
                c
            } else {
                s
            }),
            (s, c) => s.or(c),
        }
    })
}

/// Relevant processes (not dev servers, not dropped), oldest first: for transcripts and
/// cross-process log reads.
pub fn relevant_oldest_first<P: VkProcess>(processes: &[P]) -> Vec<&P> {
    let mut v: Vec<&P> = processes
        .iter()
        .filter(|p| is_relevant_reason(p.run_reason()) && !p.is_dropped())
        .collect();
    v.sort_by(|a, b| oldest_first(*a, *b));
    v
}

/// Coding-agent runs of one session (not dropped), oldest first: the turns of a transcript.
pub fn agent_runs_of_session<P: VkProcess>(processes: &[P], session: Uuid) -> Vec<&P> {
    let mut v: Vec<&P> = processes
        .iter()
        .filter(|p| {
            RunReason::CodingAgent.is(p.run_reason())
                && !p.is_dropped()
                && p.session_id() == Some(session)
        })
        .collect();
    v.sort_by(|a, b| oldest_first(*a, *b));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    struct P(u128, &'static str, i64, bool);

    impl VkObject for P {
        fn id(&self) -> Uuid {
            Uuid::from_u128(self.0)
        }
        fn created_at(&self) -> Option<DateTime<Utc>> {
            DateTime::from_timestamp(self.2, 0)
        }
    }
    impl VkProcess for P {
        fn run_reason(&self) -> &str {
            self.1
        }
        fn is_dropped(&self) -> bool {
            self.3
        }
        fn session_id(&self) -> Option<Uuid> {
            None
        }
    }

    #[test]
    fn status_process_skips_dev_servers_and_dropped_and_breaks_ties_by_reason() {
        let ps = [
            P(1, "setupscript", 10, false),
            P(2, "codingagent", 10, false),
            P(3, "devserver", 30, false),
            P(4, "cleanupscript", 40, true),
        ];
        assert_eq!(status_process(&ps).map(|p| p.0), Some(2));
        assert_eq!(log_process(&ps).map(|p| p.0), Some(2));
        let order: Vec<u128> = relevant_oldest_first(&ps).iter().map(|p| p.0).collect();
        assert_eq!(order, [1, 2]);
    }

    #[test]
    fn latest_is_newest_then_smallest_id() {
        let ps = [P(5, "", 10, false), P(3, "", 10, false), P(9, "", 5, false)];
        assert_eq!(latest(&ps).map(|p| p.0), Some(3));
    }
}
