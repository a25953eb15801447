//! The notify hub: watch channels per attempt, per project and one global, fired by the writer
//! after each commit. Long-polls park on these; nothing here touches sled or VK.
//!
//! Senders are created on demand by subscribers and dropped once nobody listens, so an idle
//! daemon holds no per-attempt state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::watch;
use uuid::Uuid;

pub struct NotifyHub {
    global: watch::Sender<u64>,
    /// The highest token whose batch the writer has made (or is making) visible to readers; it
    /// is published on `global` only after the batch is durable, so it may run ahead of it.
    applying: AtomicU64,
    attempts: DashMap<Uuid, watch::Sender<u64>>,
    projects: DashMap<Uuid, watch::Sender<u64>>,
}

impl NotifyHub {
    pub(crate) fn new(token: u64) -> Self {
        NotifyHub {
            global: watch::channel(token).0,
            applying: AtomicU64::new(token),
            attempts: DashMap::new(),
            projects: DashMap::new(),
        }
    }

    /// The latest committed token.
    pub(crate) fn current(&self) -> u64 {
        *self.global.borrow()
    }

    pub fn subscribe_global(&self) -> watch::Receiver<u64> {
        self.global.subscribe()
    }

    /// Subscribe to changes of one attempt. Subscribe *before* reading the attempt's token, so a
    /// commit between the read and the wait still wakes the waiter.
    pub fn subscribe_attempt(&self, id: Uuid) -> watch::Receiver<u64> {
        let cur = self.current();
        self.attempts
            .entry(id)
            .or_insert_with(|| watch::channel(cur).0)
            .subscribe()
    }

    pub fn subscribe_project(&self, id: Uuid) -> watch::Receiver<u64> {
        let cur = self.current();
        self.projects
            .entry(id)
            .or_insert_with(|| watch::channel(cur).0)
            .subscribe()
    }

    /// Called by the writer just before the batch of `token` becomes visible to readers.
    pub(crate) fn applying(&self, token: u64) {
        self.applying.fetch_max(token, Ordering::SeqCst);
    }

    /// A token that covers everything a reader could see when this is called: a batch already
    /// visible whose token is not published yet (the writer flushes between the two) is waited
    /// for, at most `limit`, so an answer that read a change never names a token below it.
    pub async fn covering(&self, limit: Duration) -> u64 {
        let wanted = self.applying.load(Ordering::SeqCst);
        let mut published = self.global.subscribe();
        let _ = tokio::time::timeout(limit, published.wait_for(|t| *t >= wanted)).await;
        self.current()
    }

    /// Called by the writer after a commit.
    pub(crate) fn publish(&self, token: u64, attempts: &[Uuid], projects: &[Uuid]) {
        // The global token first: a waiter woken below reads a token that already covers the
        // change it was woken for, so its answer's token is not older than what it reports.
        self.global.send_replace(token);
        for id in attempts {
            fire(&self.attempts, id, token);
        }
        for id in projects {
            fire(&self.projects, id, token);
        }
    }

    /// Wake the waits on these attempts and projects without a new token: they look again and,
    /// finding no token moved, park again unless what they wait for is complete now (a run's
    /// log read to its end, `query::until`).
    pub(crate) fn nudge(&self, attempts: &[Uuid], projects: &[Uuid]) {
        let token = self.current();
        for id in attempts {
            fire(&self.attempts, id, token);
        }
        for id in projects {
            fire(&self.projects, id, token);
        }
    }

    /// Number of per-attempt and per-project channels currently held (for metrics and tests).
    pub fn channel_count(&self) -> usize {
        self.attempts.len() + self.projects.len()
    }

    /// Drop the channels of these attempts/projects if their last listener is gone (called when
    /// a waiter ends, so an abandoned wait leaves nothing behind).
    pub fn release(&self, attempts: &[Uuid], projects: &[Uuid]) {
        for id in attempts {
            self.attempts.remove_if(id, |_, s| s.receiver_count() == 0);
        }
        for id in projects {
            self.projects.remove_if(id, |_, s| s.receiver_count() == 0);
        }
    }

    /// Drop channels nobody listens to any more.
    pub(crate) fn collect_garbage(&self) {
        self.attempts.retain(|_, s| s.receiver_count() > 0);
        self.projects.retain(|_, s| s.receiver_count() > 0);
    }
}

fn fire(map: &DashMap<Uuid, watch::Sender<u64>>, id: &Uuid, token: u64) {
    let orphan = match map.get(id) {
        Some(s) => {
            s.send_replace(token);
            s.receiver_count() == 0
        }
        None => false,
    };
    if orphan {
        map.remove_if(id, |_, s| s.receiver_count() == 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_visible_batch_whose_token_is_not_published_yet_is_waited_for() {
        let hub = std::sync::Arc::new(NotifyHub::new(4));
        hub.applying(5); // the writer made token 5's batch visible and is flushing
        let writer = hub.clone();
        let publish = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            writer.publish(5, &[], &[]);
        });
        assert_eq!(
            hub.current(),
            4,
            "a reader alone would name the older token"
        );
        assert_eq!(hub.covering(Duration::from_secs(10)).await, 5);
        publish.await.unwrap();
    }

    #[tokio::test]
    async fn with_nothing_in_flight_the_covering_token_is_the_current_one() {
        let hub = NotifyHub::new(7);
        assert_eq!(hub.covering(Duration::from_secs(10)).await, 7);
        hub.applying(8);
        hub.publish(8, &[], &[]);
        assert_eq!(hub.covering(Duration::from_secs(10)).await, 8);
    }

    #[tokio::test]
    async fn a_batch_never_published_bounds_the_wait_by_its_limit() {
        let hub = NotifyHub::new(2);
        hub.applying(3); // the writer failed after making it visible
        assert_eq!(hub.covering(Duration::from_millis(20)).await, 2);
    }
}
