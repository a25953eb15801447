//! A simulated process's logs: both channels' entries as stored, and the broadcast each log
//! WebSocket of the simulator follows.

use std::sync::OnceLock;

use tokio::sync::broadcast;

use super::log_entry::LogEntry;
use super::types::Channel;

/// What a log WebSocket forwards (the entry as stored: its bytes are encoded once).
#[derive(Debug, Clone)]
pub(crate) enum LogEvent {
    Append(u64, LogEntry),
    Replace(u64, LogEntry),
    Finished,
}

/// Events a log's channel buffers for a slow subscriber.
const LOG_EVENT_BUFFER: usize = 4096;

/// A process's log on both channels. A channel's broadcast buffer (4096 slots, ~320 KB, every
/// slot written when it is made) exists only once someone subscribes: a log nobody watches
/// (the scale board's 20,000 ended processes, read through history pages) costs its entries
/// alone. Events sent before the first subscription reach nobody, as with a buffer no one reads.
pub(crate) struct ProcLogs {
    pub normalized: Vec<LogEntry>,
    pub raw: Vec<LogEntry>,
    pub finished: bool,
    normalized_tx: OnceLock<broadcast::Sender<LogEvent>>,
    raw_tx: OnceLock<broadcast::Sender<LogEvent>>,
}

impl ProcLogs {
    pub(crate) fn new() -> Self {
        Self {
            normalized: Vec::new(),
            raw: Vec::new(),
            finished: false,
            normalized_tx: OnceLock::new(),
            raw_tx: OnceLock::new(),
        }
    }

    pub(crate) fn entries(&self, ch: Channel) -> &Vec<LogEntry> {
        match ch {
            Channel::Normalized => &self.normalized,
            Channel::Raw => &self.raw,
        }
    }

    fn sender(&self, ch: Channel) -> &OnceLock<broadcast::Sender<LogEvent>> {
        match ch {
            Channel::Normalized => &self.normalized_tx,
            Channel::Raw => &self.raw_tx,
        }
    }

    /// Events of `ch` from now on (the channel is made at its first subscription).
    pub(crate) fn subscribe(&self, ch: Channel) -> broadcast::Receiver<LogEvent> {
        self.sender(ch)
            .get_or_init(|| broadcast::channel(LOG_EVENT_BUFFER).0)
            .subscribe()
    }

    /// Sends `event` to the subscribers of `ch`, if the channel was ever subscribed to.
    pub(crate) fn publish(&self, ch: Channel, event: LogEvent) {
        if let Some(tx) = self.sender(ch).get() {
            let _ = tx.send(event);
        }
    }

    /// Whether `ch` holds an event buffer (someone subscribed once).
    #[cfg(test)]
    pub(crate) fn has_channel(&self, ch: Channel) -> bool {
        self.sender(ch).get().is_some()
    }
}
