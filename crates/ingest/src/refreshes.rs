//! Task refreshes (REST reads of a task's attempts, sessions and repos) in flight, at most one
//! per task at a time. Two refreshes of one task running side by side could commit out of
//! order: the older REST answer landing last would remove an attempt the newer one had
//! stored, and its return would be reported as a second start. A refresh asked for while one
//! of the same task runs is folded into one rerun after it (deep if any ask was deep), so every
//! ask is still answered by a read that began after it.

use std::collections::HashMap;

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

#[cfg(test)]
mod tests {
    use super::*;

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
