//! The one loop every stream follower runs in (SSE, object WebSockets, log WebSockets).
//!
//! A follower is a state machine: it says how to start and how to take one step from a state.
//! Everything the followers used to repeat lives here once: cancellation (checked around every
//! step and every backoff sleep, so a cancelled follower stops at its next await point), the
//! jittered exponential backoff between attempts (one `Reconnect` per follower, reset by the
//! follower when a connection proved healthy), and the end (the follower's `finish` runs
//! exactly once, unless the follower was cancelled). Modelled on kube-runtime's `watcher`:
//! the follower file keeps only its states and their transitions.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::backoff::Reconnect;

/// What a step leads to.
pub(crate) enum Step<S, E> {
    /// Go on in this state at once.
    Next(S),
    /// Wait the follower's next backoff delay, then go on in this state.
    Backoff(S),
    /// Wait exactly this long, then go on in this state.
    After(Duration, S),
    /// The follower is done for good, with this outcome.
    End(E),
}

/// A stream follower: its states, its first state and one transition at a time.
pub(crate) trait Follower: Send + Sync + Sized + 'static {
    /// The follower's own states (documented in its file).
    type State: Send;
    /// How it ends (never reached by followers that run until cancelled).
    type End: Send;

    /// Backoff bounds: the first and the longest delay.
    fn backoff(&self) -> (Duration, Duration);

    fn initial(&self) -> Self::State;

    /// One transition. `reconnect` is the follower's backoff: `failures` counts consecutive
    /// failed attempts; call `reset()` once a connection proved healthy.
    fn step(
        &self,
        state: Self::State,
        reconnect: &mut Reconnect,
    ) -> impl Future<Output = Step<Self::State, Self::End>> + Send;

    /// Runs once when the follower ends (not when it is cancelled).
    fn finish(&self, end: Self::End) -> impl Future<Output = ()> + Send;
}

/// Run `follower` until it ends or `cancel` fires.
pub(crate) async fn drive<F: Follower>(follower: F, cancel: CancellationToken) {
    let (min, max) = follower.backoff();
    let mut reconnect = Reconnect::new(min, max);
    let mut state = follower.initial();
    loop {
        let step = tokio::select! {
            _ = cancel.cancelled() => return,
            step = follower.step(state, &mut reconnect) => step,
        };
        let (delay, next) = match step {
            Step::Next(s) => (Duration::ZERO, s),
            Step::Backoff(s) => (reconnect.next_delay(), s),
            Step::After(d, s) => (d, s),
            Step::End(end) => {
                follower.finish(end).await;
                return;
            }
        };
        if !delay.is_zero() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
        state = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Fails to "connect" twice, then ends; counts its finishes.
    struct Flaky {
        finished: Arc<AtomicU32>,
    }

    impl Follower for Flaky {
        type State = u32;
        type End = u32;
        fn backoff(&self) -> (Duration, Duration) {
            (Duration::from_secs(1), Duration::from_secs(8))
        }
        fn initial(&self) -> u32 {
            0
        }
        async fn step(&self, tries: u32, reconnect: &mut Reconnect) -> Step<u32, u32> {
            if tries < 2 {
                Step::Backoff(tries + 1)
            } else {
                Step::End(reconnect.failures)
            }
        }
        async fn finish(&self, failures: u32) {
            self.finished.fetch_add(1, Ordering::SeqCst);
            assert_eq!(failures, 2, "two backoffs were counted");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn backs_off_between_steps_and_finishes_once() {
        let finished = Arc::new(AtomicU32::new(0));
        let start = tokio::time::Instant::now();
        drive(
            Flaky {
                finished: finished.clone(),
            },
            CancellationToken::new(),
        )
        .await;
        assert_eq!(finished.load(Ordering::SeqCst), 1);
        assert!(
            start.elapsed() >= Duration::from_secs(1),
            "it slept between tries"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_stops_a_backoff_without_finishing() {
        let finished = Arc::new(AtomicU32::new(0));
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            c.cancel();
        });
        drive(
            Flaky {
                finished: finished.clone(),
            },
            cancel,
        )
        .await;
        assert_eq!(finished.load(Ordering::SeqCst), 0);
    }
}
