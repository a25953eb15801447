//! Liveness of one upstream connection: when VK last sent it anything, and the stall rule built
//! on that.
//!
//! **Why bytes, not events.** An idle VK sends no events at all: its SSE stream carries only a
//! `:` keep-alive comment every 15 s (which SSE parsers drop) and its WebSockets only a ping
//! every 30 s. A watchdog fed by parsed events would call a healthy idle VK dead and reconnect
//! forever. So every connection gets a `Pulse` that is beaten for *any* bytes (SSE, below the
//! parser) or *any* message (WebSocket, pings included), and a read is declared stalled only
//! when the connection has been silent for the whole stall window. The window must stay well
//! above VK's period (defaults: SSE 50 s against 15 s keep-alives, WebSockets 75 s against 30 s
//! pings), so one late keep-alive never costs a reconnect.
//!
//! Each beat also touches the shared [`Health`], which is what `freshness.upstream_age_ms`
//! reports: the age of the last byte from VK on any connection.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use vk_observer_telemetry::health::Health;

/// The read timed out: the connection said nothing at all for the stall window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stalled;

/// When one connection last heard from VK. Cheap to clone; clones share the clock.
#[derive(Clone)]
pub(crate) struct Pulse {
    started: Instant,
    /// Milliseconds after `started` of the last beat.
    last_ms: Arc<AtomicU64>,
    health: Arc<Health>,
}

impl Pulse {
    /// A pulse for a connection that has just been opened (opening counts as a beat).
    pub(crate) fn new(health: Arc<Health>) -> Self {
        Pulse {
            started: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
            health,
        }
    }

    /// VK sent something on this connection.
    pub(crate) fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
        self.health.touch();
    }

    /// A `'static` beat for a byte tap (the SSE body stream).
    pub(crate) fn beater(&self) -> impl Fn() + Send + Sync + 'static {
        let p = self.clone();
        move || p.beat()
    }

    fn last_beat(&self) -> Instant {
        self.started + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Await `read` unless the connection goes silent for `stall_after`. Beats that arrive while
    /// `read` is pending (keep-alives, pings) push the deadline on, so a read may wait far longer
    /// than `stall_after` on a connection that is alive but quiet.
    pub(crate) async fn or_stall<F: Future>(
        &self,
        stall_after: Duration,
        read: F,
    ) -> Result<F::Output, Stalled> {
        tokio::pin!(read);
        loop {
            let deadline = self.last_beat() + stall_after;
            tokio::select! {
                biased;
                out = &mut read => return Ok(out),
                _ = tokio::time::sleep_until(deadline) => {
                    if self.last_beat() + stall_after <= Instant::now() {
                        return Err(Stalled);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn beats_keep_a_quiet_read_alive_and_silence_stalls_it() {
        let pulse = Pulse::new(Arc::new(Health::new()));
        let beating = pulse.clone();
        // A keep-alive every 15 s for 100 s, then silence; the read itself never completes.
        tokio::spawn(async move {
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_secs(15)).await;
                beating.beat();
            }
        });
        let start = Instant::now();
        let r = pulse
            .or_stall(Duration::from_secs(50), std::future::pending::<()>())
            .await;
        assert_eq!(r, Err(Stalled));
        // Last beat at 90 s, stalled 50 s later.
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(140) && waited < Duration::from_secs(141),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_completes_wins() {
        let pulse = Pulse::new(Arc::new(Health::new()));
        let r = pulse.or_stall(Duration::from_secs(1), async { 7 }).await;
        assert_eq!(r, Ok(7));
    }
}
