//! Which of VK's streams run, and when: the fork's followers (the coordinator and the SSE
//! follower, `follow_fork`) while VK speaks the fork's dialect, the workspace-first ones
//! (`workspaces`) while it speaks VK 0.1.x's, never both.
//!
//! With `upstream_dialect = "auto"` VK is asked (`dialect_probe`):
//! - at start; while it does not answer, the fork's followers start as they always did (their
//!   own reconnects report VK down) and the asking goes on beside them, with backoff;
//! - while followers run, only after a stream to VK was lost and the upstream is not
//!   connected: VK may have come back as another server, e.g. a VK 0.1.x on the fork's port; a
//!   connected VK is never asked;
//! - while nothing runs, once a minute (the server may be replaced by a VK the daemon knows).
//!
//! An answer naming another dialect stops the running followers and starts that dialect's; an
//! answer naming neither stops them, and the cache keeps what it holds. Signals (from the proxy
//! and the followers) go through one route to the followers running now (the fork's
//! coordinator, or the workspace-first board); while none runs they are dropped.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;
use vk_observer_config::DialectSetting;
use vk_observer_telemetry::health::UpstreamState;
use vk_observer_upstream::dialect::{self, Dialect};

use super::backoff::Reconnect;
use super::dialect_probe::{self, Verdict};
use super::{Context, Signal};

/// How often a VK that speaks no followed dialect is asked again (it may be replaced).
const ASK_AGAIN: Duration = Duration::from_secs(60);
/// How often the upstream state is looked at while the fork's followers run (an atomic read).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The followers that take signals now, if any.
type Route = Arc<Mutex<Option<UnboundedSender<Signal>>>>;

/// Runs ingest for the whole life of the daemon: see the module doc.
pub(crate) async fn supervise(
    ctx: Context,
    signals: UnboundedReceiver<Signal>,
    setting: DialectSetting,
    cancel: CancellationToken,
) {
    let route = Route::default();
    tokio::spawn(forward(signals, route.clone(), cancel.clone()));
    let mut run = Run {
        ctx,
        route,
        cancel,
        current: None,
    };
    let (client, health) = (run.ctx.client.clone(), run.ctx.health.clone());
    let answered = match dialect_probe::first(&client, setting, &health).await {
        Verdict::Follow(d) => {
            run.start(d);
            true
        }
        Verdict::Stay => true,
        Verdict::NotYet => {
            run.start(Dialect::Fork);
            false
        }
    };
    if setting == DialectSetting::Auto {
        run.watch(answered).await;
    }
}

/// The followers running now (of one dialect), and what starts and stops them.
struct Run {
    ctx: Context,
    route: Route,
    cancel: CancellationToken,
    current: Option<(Dialect, CancellationToken)>,
}

impl Run {
    fn start(&mut self, dialect: Dialect) {
        match &self.current {
            Some((running, _)) if *running == dialect => return,
            Some(_) => self.stop(),
            None => {}
        }
        let token = self.cancel.child_token();
        self.ctx.client.set_dialect(Some(dialect));
        let (tx, rx) = unbounded_channel();
        *self.route.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        match dialect {
            Dialect::Fork => super::follow_fork(self.ctx.clone(), rx, token.clone()),
            Dialect::Workspaces => super::workspaces::follow(self.ctx.clone(), rx, token.clone()),
        }
        self.current = Some((dialect, token));
    }

    fn stop(&mut self) {
        self.ctx.client.set_dialect(None);
        if let Some((_, token)) = self.current.take() {
            token.cancel();
            *self.route.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Asks VK whenever the module doc says, and starts or stops followers.
    async fn watch(mut self, mut answered: bool) {
        let mut delays = Reconnect::new(Duration::from_millis(500), Duration::from_secs(30));
        loop {
            let waited = if !answered {
                sleep(delays.next_delay(), &self.cancel).await
            } else if self.current.is_some() {
                self.until_dropped().await
            } else {
                sleep(ASK_AGAIN, &self.cancel).await
            };
            if !waited {
                return;
            }
            match dialect::detect(&self.ctx.client).await {
                Err(e) => {
                    tracing::debug!(error = %e, "VK's dialect: not answered");
                    answered = false;
                }
                Ok(d) => {
                    answered = true;
                    delays.reset();
                    match dialect_probe::record(&self.ctx.health, &d) {
                        Verdict::Follow(d) => self.start(d),
                        _ => self.stop(),
                    }
                }
            }
        }
    }

    /// Until a stream to VK was lost and the upstream is not connected (VK went away, or
    /// answers otherwise): false when cancelled.
    async fn until_dropped(&self) -> bool {
        let health = &self.ctx.health;
        let mut seen = health.reconnects.load(Ordering::Relaxed);
        loop {
            if !sleep(LOOK_EVERY, &self.cancel).await {
                return false;
            }
            let now = health.reconnects.load(Ordering::Relaxed);
            if now != seen && health.state() != UpstreamState::Connected {
                return true;
            }
            seen = now;
        }
    }
}

/// Waits `d`; false when cancelled first.
async fn sleep(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Hands every signal to the coordinator running now; drops it while none runs.
async fn forward(mut signals: UnboundedReceiver<Signal>, route: Route, cancel: CancellationToken) {
    loop {
        let signal = tokio::select! {
            _ = cancel.cancelled() => return,
            s = signals.recv() => s,
        };
        let Some(signal) = signal else { return };
        if let Some(tx) = route.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = tx.send(signal);
        }
    }
}
