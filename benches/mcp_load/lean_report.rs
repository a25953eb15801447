//! What phase c7 `lean_waiters` measured per binary and mode, and its rows: RSS with N parked,
//! bytes per parked wait, the probe's wake latency while they are parked, the time to wake all.

use crate::lean::Wire;
use crate::report::{Report, Stats, ms};

#[derive(serde::Serialize)]
pub(crate) struct LeanRun {
    pub(crate) label: String,
    pub(crate) bin: String,
    /// "HTTP/1.1" or "HTTP/2" (`lean::Wire`): what the waits and the probe were sent over.
    pub(crate) wire: &'static str,
    /// Session mode with rmcp's progress token (SSE + keep-alives); else stateless JSON.
    pub(crate) progress: bool,
    pub(crate) n: usize,
    /// Sessions open (progress) or cache ready (stateless), no waits.
    pub(crate) rss_before_kb: u64,
    /// 3 s after the last wait was sent.
    pub(crate) rss_parked_kb: u64,
    /// With progress: once every wait streamed a notification; else the parked figure.
    pub(crate) rss_held_kb: u64,
    pub(crate) progress_notifications: usize,
    pub(crate) parked_at_once: usize,
    pub(crate) probe: Stats,
    /// Probe rounds answered before the append or without the change.
    pub(crate) probe_missed: usize,
    pub(crate) early: usize,
    pub(crate) wake_all: Stats,
    pub(crate) errors: usize,
    pub(crate) unchanged: usize,
}

impl LeanRun {
    pub(crate) fn new(
        label: &str,
        bin: &str,
        wire: Wire,
        progress: bool,
        n: usize,
        before: u64,
    ) -> LeanRun {
        LeanRun {
            label: label.to_string(),
            bin: bin.to_string(),
            wire: wire.name(),
            progress,
            n,
            rss_before_kb: before,
            rss_parked_kb: 0,
            rss_held_kb: 0,
            progress_notifications: 0,
            parked_at_once: 0,
            probe: Stats::default(),
            probe_missed: 0,
            early: 0,
            wake_all: Stats::default(),
            errors: 0,
            unchanged: 0,
        }
    }

    pub(crate) fn finish(&mut self, wake_all: Stats, errors: usize, unchanged: usize) {
        self.wake_all = wake_all;
        self.errors = errors;
        self.unchanged = unchanged;
    }

    /// Resident bytes each parked wait added.
    pub(crate) fn per_wait_bytes(&self) -> f64 {
        (self.rss_held_kb.saturating_sub(self.rss_before_kb) * 1024) as f64 / self.n as f64
    }

    /// Every wait parked at once, none answered early, all woken with a change.
    fn clean(&self) -> bool {
        self.parked_at_once == self.n
            && self.early == 0
            && self.errors == 0
            && self.unchanged == 0
            && self.wake_all.n == self.n
            && (!self.progress || self.progress_notifications >= self.n)
    }

    fn mode(&self) -> &'static str {
        if self.progress {
            "with progress (session)"
        } else {
            "without progress (stateless)"
        }
    }

    pub(crate) fn print(&self) {
        let mb = |kb: u64| kb as f64 / 1024.0;
        println!(
            "     VmRSS {:.1} MB held ({:.1} MB parked, {:.1} MB before): {:.0} B per wait; parked at once {} of {}; progress notifications {}; clean {}",
            mb(self.rss_held_kb),
            mb(self.rss_parked_kb),
            mb(self.rss_before_kb),
            self.per_wait_bytes(),
            self.parked_at_once,
            self.n,
            self.progress_notifications,
            self.clean()
        );
        println!(
            "     probe wake p50 {} p99 {} max {} ({} rounds, {} missed); all {} woken: p50 {} p99 {} max {}",
            ms(self.probe.p50_us),
            ms(self.probe.p99_us),
            ms(self.probe.max_us),
            self.probe.n,
            self.probe_missed,
            self.wake_all.n,
            ms(self.wake_all.p50_us),
            ms(self.wake_all.p99_us),
            ms(self.wake_all.max_us)
        );
    }
}

/// The rows of every run, and one for each binary that did not answer HTTP/2 (`h1_only`).
pub(crate) fn record(r: &mut Report, runs: &[LeanRun], h1_only: &[String]) {
    for who in h1_only {
        r.row(
            &format!("c7 [{who}] parked waits over HTTP/2"),
            "not served: HTTP/1.1 only".to_string(),
            "—",
            None,
        );
    }
    for run in runs {
        let (n, mode) = (run.n, run.mode());
        let who = format!("{}, {}", run.label, run.wire);
        let rss_mb = run.rss_held_kb as f64 / 1024.0;
        r.row(
            &format!("c7 [{who}] {n} parked waits {mode}: daemon VmRSS (per wait)"),
            format!(
                "{rss_mb:.1} MB ({:.0} B per wait over {:.1} MB before; all held and woken: {})",
                run.per_wait_bytes(),
                run.rss_before_kb as f64 / 1024.0,
                if run.clean() { "yes" } else { "NO" }
            ),
            if run.progress { "≤ 128 MB" } else { "—" },
            run.progress
                .then_some(run.rss_held_kb <= 128 * 1024 && run.clean()),
        );
        r.row(
            &format!("c7 [{who}] wake with {n} parked {mode}: append → answer, p99 (p50)"),
            format!(
                "{} ({}); {} missed",
                ms(run.probe.p99_us),
                ms(run.probe.p50_us),
                run.probe_missed
            ),
            "p99 ≤ 10 ms",
            Some(run.probe.p99_us <= 10_000.0 && run.probe_missed == 0),
        );
        r.row(
            &format!("c7 [{who}] all {n} {mode} woken: time to the last answer (p50)"),
            format!("{} ({})", ms(run.wake_all.max_us), ms(run.wake_all.p50_us)),
            "—",
            None,
        );
    }
    r.detail("lean_waiters", runs);
}
