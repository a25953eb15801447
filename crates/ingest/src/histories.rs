//! Log histories of ended processes waiting for a reader (issue 27, idle RSS). A bootstrap on
//! a big board learns tens of thousands of ended processes within seconds (one processes
//! snapshot per attempt), and each needs its log read from history pages. A follower task
//! spawned per process and channel at once, all but `log_backfills` of them parked on the
//! backfill permits, held a whole follower's future each for most of the catch-up (the
//! catch-up's peak memory, left behind as allocator fragmentation once idle). Here a waiting
//! history is its ids only; the coordinator starts a follower for one as another finishes, at
//! most `limit` at once.

use std::collections::{HashSet, VecDeque};

use uuid::Uuid;

use vk_observer_store::events::Channel;

/// One log to read from history: (attempt, process, channel).
pub(crate) type History = (Uuid, Uuid, Channel);

pub(crate) struct Histories {
    waiting: VecDeque<History>,
    /// (process, channel) of the followers started from this queue and not finished yet.
    reading: HashSet<(Uuid, Channel)>,
    limit: usize,
}

impl Histories {
    pub(crate) fn new(limit: usize) -> Self {
        Histories {
            waiting: VecDeque::new(),
            reading: HashSet::new(),
            limit: limit.max(1),
        }
    }

    /// A history to read once a reader is free (the caller keeps one per process and channel).
    pub(crate) fn push(&mut self, history: History) {
        self.waiting.push_back(history);
    }

    /// The follower of (process, channel) finished (or was never one of this queue's: ignored).
    pub(crate) fn finished(&mut self, process: Uuid, channel: Channel) {
        self.reading.remove(&(process, channel));
    }

    /// The histories to start now, oldest first: as many as free readers, each then counted as
    /// reading until `finished`.
    pub(crate) fn start(&mut self) -> Vec<History> {
        let free = self.limit.saturating_sub(self.reading.len());
        let n = free.min(self.waiting.len());
        let started: Vec<History> = self.waiting.drain(..n).collect();
        self.reading
            .extend(started.iter().map(|(_, p, c)| (*p, *c)));
        started
    }

    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u128) -> History {
        (
            Uuid::from_u128(1000 + n),
            Uuid::from_u128(n),
            Channel::Normalized,
        )
    }

    #[test]
    fn starts_at_most_the_limit_and_one_more_per_finish_in_order() {
        let mut q = Histories::new(2);
        for n in 0..5 {
            q.push(h(n));
        }
        assert_eq!(q.start(), vec![h(0), h(1)]);
        assert!(q.start().is_empty(), "both readers busy");
        assert_eq!(q.waiting(), 3);
        q.finished(Uuid::from_u128(0), Channel::Normalized);
        assert_eq!(q.start(), vec![h(2)]);
        // A follower this queue did not start frees no reader.
        q.finished(Uuid::from_u128(99), Channel::Normalized);
        q.finished(Uuid::from_u128(1), Channel::Raw);
        assert!(q.start().is_empty());
        q.finished(Uuid::from_u128(1), Channel::Normalized);
        q.finished(Uuid::from_u128(2), Channel::Normalized);
        assert_eq!(q.start(), vec![h(3), h(4)]);
        assert_eq!(q.waiting(), 0);
    }

    #[test]
    fn a_zero_limit_still_reads_one_at_a_time() {
        let mut q = Histories::new(0);
        q.push(h(0));
        q.push(h(1));
        assert_eq!(q.start(), vec![h(0)]);
    }
}
