//! Task refreshes (REST reads of a task's attempts, sessions and repos) in flight, at most one
//! per task at a time. Two refreshes of one task running side by side could commit out of
//! order: the older REST answer landing last would remove an attempt the newer one had
//! stored, and its return would be reported as a second start. A refresh asked for while one
//! of the same task runs is folded into one rerun after it (deep if any ask was deep), so every
//! ask is still answered by a read that began after it.
//!
//! VK's task hints come in bursts (several per change, over a few milliseconds): `HintWindow`
//! refreshes a task at its first hint, without waiting, and folds the rest of the burst (the
//! hints of `hint_debounce` after it) into one refresh when that window closes. A lone hint
//! costs one refresh, a burst two, and nothing waits a fixed delay before VK is read (issue 39:
//! a trailing-only debounce put its 50 ms between VK's hint and every wake it leads to).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use uuid::Uuid;

#[derive(Default)]
pub(crate) struct Refreshes {
    /// Task → the rerun owed after the running refresh (`Some(deep)`), if any.
    in_flight: HashMap<Uuid, Option<bool>>,
}

impl Refreshes {
    /// Ask for a refresh of `task`: true when it should start now, false when it is folded
    /// into the rerun after the one running.
    pub(crate) fn ask(&mut self, task: Uuid, deep: bool) -> bool {
        match self.in_flight.get_mut(&task) {
            Some(rerun) => {
                *rerun = Some(rerun.unwrap_or(false) || deep);
                false
            }
            None => {
                self.in_flight.insert(task, None);
                true
            }
        }
    }

    /// The running refresh of `task` ended: `Some(deep)` when a rerun is owed (the caller
    /// starts it with `ask`).
    pub(crate) fn ended(&mut self, task: Uuid) -> Option<bool> {
        self.in_flight.remove(&task).flatten()
    }

    /// No refresh runs.
    pub(crate) fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }
}

/// The hints of the open coalescing window (one window for every task: it opens with the first
/// hint after the last one closed).
#[derive(Default)]
pub(crate) struct HintWindow {
    /// When the open window closes; None while none is open.
    closes: Option<Instant>,
    /// Tasks refreshed at their first hint of this window.
    led: HashSet<Uuid>,
    /// Tasks hinted again in this window: each owed one refresh when it closes.
    owed: HashSet<Uuid>,
}

impl HintWindow {
    /// A hint for `task` at `now`: true when the task is to be refreshed now (its first hint of
    /// the window, which opens for `debounce` if none is open); else it is owed one refresh at
    /// the window's close.
    pub(crate) fn hint(&mut self, task: Uuid, now: Instant, debounce: Duration) -> bool {
        self.closes.get_or_insert(now + debounce);
        if self.led.insert(task) {
            return true;
        }
        self.owed.insert(task);
        false
    }

    /// When the open window closes (the coordinator wakes then).
    pub(crate) fn closes(&self) -> Option<Instant> {
        self.closes
    }

    /// If the window closed by `now`: the tasks owed a refresh (the window is over; the next
    /// hint opens another). Else nothing.
    pub(crate) fn close_due(&mut self, now: Instant) -> Vec<Uuid> {
        if self.closes.is_none_or(|c| c > now) {
            return Vec::new();
        }
        self.closes = None;
        self.led.clear();
        self.owed.drain().collect()
    }

    /// No hint waits for a refresh (those refreshed at once are `Refreshes`' in flight).
    pub(crate) fn is_quiet(&self) -> bool {
        self.owed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_hint_refreshes_at_once_and_the_rest_of_its_burst_once_at_the_close() {
        let mut w = HintWindow::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let t0 = Instant::now();
        let debounce = Duration::from_millis(50);
        assert!(w.hint(a, t0, debounce), "the first hint is not held back");
        assert!(w.is_quiet(), "nothing is owed yet");
        for ms in [1, 5, 20] {
            assert!(!w.hint(a, t0 + Duration::from_millis(ms), debounce));
        }
        assert!(
            w.hint(b, t0 + Duration::from_millis(30), debounce),
            "another task's first"
        );
        assert!(!w.is_quiet());
        assert_eq!(
            w.closes(),
            Some(t0 + debounce),
            "the window is the first hint's"
        );
        assert_eq!(
            w.close_due(t0 + Duration::from_millis(49)),
            Vec::<Uuid>::new()
        );
        assert_eq!(
            w.close_due(t0 + debounce),
            vec![a],
            "one refresh for the burst's rest"
        );
        assert!(w.is_quiet());
        assert_eq!(w.closes(), None);
        let later = t0 + Duration::from_millis(80);
        assert!(w.hint(a, later, debounce), "a new window leads again");
        assert_eq!(
            w.close_due(later + debounce),
            Vec::<Uuid>::new(),
            "a lone hint owes nothing"
        );
    }

    #[test]
    fn with_no_debounce_every_hint_leads() {
        let mut w = HintWindow::default();
        let a = Uuid::from_u128(1);
        let now = Instant::now();
        assert!(w.hint(a, now, Duration::ZERO));
        assert_eq!(w.close_due(now), Vec::<Uuid>::new());
        assert!(w.hint(a, now, Duration::ZERO));
    }

    #[test]
    fn one_refresh_per_task_and_asks_meanwhile_fold_into_one_rerun() {
        let mut r = Refreshes::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert!(r.ask(a, false));
        assert!(r.ask(b, false), "another task is not held back");
        assert!(!r.ask(a, false));
        assert!(!r.ask(a, true));
        assert!(!r.ask(a, false));
        assert_eq!(
            r.ended(a),
            Some(true),
            "one rerun, deep because one ask was"
        );
        assert!(r.ask(a, true));
        assert_eq!(r.ended(a), None);
        assert_eq!(r.ended(b), None);
        assert!(r.is_empty());
    }
}
