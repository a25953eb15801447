//! The notify hub: watch channels per attempt, per project and one global, fired by the writer
//! after each commit. Long-polls park on these; nothing here touches sled or VK.
//!
//! Senders are created on demand by subscribers and dropped once nobody listens, so an idle
//! daemon holds no per-attempt state.

use dashmap::DashMap;
use tokio::sync::watch;
use uuid::Uuid;

pub struct NotifyHub {
    global: watch::Sender<u64>,
    attempts: DashMap<Uuid, watch::Sender<u64>>,
    projects: DashMap<Uuid, watch::Sender<u64>>,
}

impl NotifyHub {
    pub fn new(token: u64) -> Self {
        NotifyHub {
            global: watch::channel(token).0,
            attempts: DashMap::new(),
            projects: DashMap::new(),
        }
    }

    /// The latest committed token.
    pub fn current(&self) -> u64 {
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

    /// Called by the writer after a commit.
    pub fn publish(&self, token: u64, attempts: &[Uuid], projects: &[Uuid]) {
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
    pub fn collect_garbage(&self) {
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
