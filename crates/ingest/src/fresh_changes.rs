//! When to re-read an attempt's change summary (`GET …/changes`), so that `get_attempt_changes`
//! is fresh while the coding agent works, not only after a process ended.
//!
//! **Why re-read on the agent's tool calls, not follow VK's diff WebSocket.** VK's
//! `/diff/ws` follows the worktree, but its live mode carries the *full old and new contents*
//! of every changed file, at connect and again on every change of that file (up to 200 MB per
//! connection); `stats_only=true` sends the summary once and closes, so it cannot follow
//! anything. Its `/summary` is sent only once per connection, so a live summary would have to
//! be recomputed here from the entries (no `totalBytes` once contents are omitted, no marker for
//! the end of the initial file set). The summary the daemon needs is small: `/changes` answers
//! it exactly as VK computes it (numstat, file list, guard), without contents. The agent's own
//! normalized log, which the daemon follows anyway, says when files may have changed: every
//! `tool_use` entry (file edits, shell commands, …) is created before the tool runs and replaced
//! with its result after. So a re-read is due shortly after each tool entry of a *running coding
//! agent*; the cost is one small REST call per `changes_live_every` of tool activity, and
//! nothing at all for idle attempts. docs/performance.md gives the measured lag.
//!
//! **Rules kept here.** At most one re-read of an attempt is in flight (two in flight could
//! finish out of order and store the older answer last). A tool entry schedules a re-read
//! within `changes_live_every` and never postpones one already scheduled, so steady activity
//! yields one re-read per interval, not none. A process end schedules one after
//! `changes_debounce`, postponed by further ends (VK commits after the agent ends). A failed
//! re-read is retried with the followers' backoff (`reconnect_min` doubling up to
//! `reconnect_max`), at most `MAX_RETRIES` times in a row.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use uuid::Uuid;

/// True for a normalized log entry of kind `tool_use` (`content.entry_type.type`), read without
/// building the entry: the log follower asks this of every normalized frame it streams, so an
/// entry whose text cannot hold the tag (most of them) costs one byte scan, not a parse.
pub(crate) fn is_tool_use(entry: &RawValue) -> bool {
    if memchr::memmem::find(entry.get().as_bytes(), b"tool_use").is_none() {
        return false;
    }
    #[derive(Deserialize)]
    struct Entry<'a> {
        #[serde(borrow)]
        content: Option<Content<'a>>,
    }
    #[derive(Deserialize)]
    struct Content<'a> {
        #[serde(borrow)]
        entry_type: Option<Kind<'a>>,
    }
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_str::<Entry>(entry.get())
        .ok()
        .and_then(|e| e.content?.entry_type?.kind)
        .is_some_and(|k| k == "tool_use")
}

/// True when the stored change summary (`changes`, stamped `asOf` at its read) was read at
/// least `debounce` after the process ended (VK's `completed_at`): a processes snapshot that
/// shows this process ended then owes no re-read, since the summary already saw its end and
/// VK's commit after it. False whenever either time is missing or unreadable (re-read, as
/// before). Both clocks are the host's: the daemon runs beside its VK. At bootstrap the task
/// refresh has just read the summary of every attempt, so its ended processes' snapshots no
/// longer read it a second time.
pub(crate) fn summary_read_after_end(
    changes: Option<&serde_json::Value>,
    process: Option<&serde_json::Value>,
    debounce: Duration,
) -> bool {
    let time = |v: Option<&serde_json::Value>, field: &str| {
        let text = v?.get(field)?.as_str()?;
        chrono::DateTime::parse_from_rfc3339(text).ok()
    };
    let (Some(read), Some(ended)) = (
        time(changes, vk_observer_store::events::CHANGES_AS_OF),
        time(process, "completed_at"),
    ) else {
        return false;
    };
    let Ok(debounce) = chrono::Duration::from_std(debounce) else {
        return false;
    };
    read >= ended + debounce
}

/// Consecutive failed re-reads of one attempt after which it waits for the next trigger.
pub(crate) const MAX_RETRIES: u32 = 6;

/// The change-summary re-reads the coordinator owes, by attempt.
#[derive(Debug, Default)]
pub(crate) struct ChangeSchedule {
    due: HashMap<Uuid, Instant>,
    in_flight: HashSet<Uuid>,
    failures: HashMap<Uuid, u32>,
}

impl ChangeSchedule {
    /// A process of the attempt ended (or a snapshot showed it ended): re-read after `debounce`,
    /// postponed by a later end.
    pub(crate) fn after_process_end(&mut self, attempt: Uuid, debounce: Duration) {
        self.due.insert(attempt, Instant::now() + debounce);
    }

    /// The attempt's running coding agent logged a tool call: re-read within `every`; a re-read
    /// already scheduled keeps its time.
    pub(crate) fn on_agent_tool(&mut self, attempt: Uuid, every: Duration) {
        self.due
            .entry(attempt)
            .or_insert_with(|| Instant::now() + every);
    }

    /// True when a re-read is already scheduled (the caller can skip its own checks).
    pub(crate) fn is_due(&self, attempt: Uuid) -> bool {
        self.due.contains_key(&attempt)
    }

    /// The earliest scheduled re-read that can start (one in flight waits for its end).
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        self.due
            .iter()
            .filter(|(a, _)| !self.in_flight.contains(a))
            .map(|(_, at)| *at)
            .min()
    }

    /// The attempts whose re-read starts now; they count as in flight until `finished`.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Uuid> {
        let ready: Vec<Uuid> = self
            .due
            .iter()
            .filter(|(a, at)| **at <= now && !self.in_flight.contains(a))
            .map(|(a, _)| *a)
            .collect();
        for a in &ready {
            self.due.remove(a);
            self.in_flight.insert(*a);
        }
        ready
    }

    /// A re-read ended. A failure is retried after `retry(failures)` (the followers' backoff),
    /// unless another re-read is already scheduled or `MAX_RETRIES` were reached.
    pub(crate) fn finished(
        &mut self,
        attempt: Uuid,
        ok: bool,
        retry: impl FnOnce(u32) -> Duration,
    ) {
        self.in_flight.remove(&attempt);
        if ok {
            self.failures.remove(&attempt);
            return;
        }
        let n = self.failures.entry(attempt).or_insert(0);
        *n += 1;
        if *n > MAX_RETRIES {
            self.failures.remove(&attempt);
            return;
        }
        let delay = retry(*n);
        self.due
            .entry(attempt)
            .or_insert_with(|| Instant::now() + delay);
    }

    /// The exponential retry delay of the `n`-th consecutive failure (1-based).
    pub(crate) fn backoff(n: u32, min: Duration, max: Duration) -> Duration {
        let factor = 1u32 << n.saturating_sub(1).min(16);
        min.saturating_mul(factor).min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_millis(500);

    #[test]
    fn tool_use_entries_are_recognised_whatever_the_spacing() {
        let raw = |s: &str| RawValue::from_string(s.to_string()).unwrap();
        let tool = r#"{"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
            "entry_type": {"type": "tool_use", "tool_name": "Write"}, "content": "x"}}"#;
        assert!(is_tool_use(&raw(tool)));
        assert!(is_tool_use(&raw(&tool.replace([' ', '\n'], ""))));
        let msg = r#"{"type":"NORMALIZED_ENTRY","content":{"entry_type":{"type":"assistant_message"},
            "content":"I will call \"type\":\"tool_use\""}}"#;
        assert!(!is_tool_use(&raw(msg)));
        assert!(!is_tool_use(&raw(r#"{"type":"STDOUT","content":"hi"}"#)));
    }

    #[test]
    fn a_summary_read_after_the_end_and_its_debounce_owes_no_reread() {
        use serde_json::json;
        let debounce = Duration::from_millis(1500);
        let ended = json!({"completed_at": "2026-11-22T13:07:39.187218206Z"});
        let read = |at: &str| json!({"asOf": at, "files": []});
        let late = read("2026-11-22T13:07:41.000Z");
        let early = read("2026-11-22T13:07:40.000Z");
        assert!(summary_read_after_end(Some(&late), Some(&ended), debounce));
        assert!(
            !summary_read_after_end(Some(&early), Some(&ended), debounce),
            "inside the debounce"
        );
        let running = json!({"completed_at": null});
        assert!(!summary_read_after_end(
            Some(&late),
            Some(&running),
            debounce
        ));
        assert!(
            !summary_read_after_end(None, Some(&ended), debounce),
            "no summary"
        );
        assert!(!summary_read_after_end(
            Some(&json!({"files": []})),
            Some(&ended),
            debounce
        ));
        assert!(!summary_read_after_end(
            Some(&read("yesterday")),
            Some(&ended),
            debounce
        ));
        assert!(
            !summary_read_after_end(Some(&late), None, debounce),
            "no process row"
        );
    }

    #[test]
    fn tool_calls_do_not_postpone_a_scheduled_reread() {
        let mut s = ChangeSchedule::default();
        let a = Uuid::new_v4();
        s.on_agent_tool(a, EVERY);
        let first = s.next_wake().expect("scheduled");
        std::thread::sleep(Duration::from_millis(5));
        s.on_agent_tool(a, EVERY);
        assert_eq!(s.next_wake(), Some(first), "steady activity still re-reads");
        assert!(s.take_due(Instant::now()).is_empty(), "not due yet");
        assert_eq!(s.take_due(first), vec![a]);
    }

    #[test]
    fn one_reread_in_flight_per_attempt() {
        let mut s = ChangeSchedule::default();
        let a = Uuid::new_v4();
        s.on_agent_tool(a, Duration::ZERO);
        assert_eq!(s.take_due(Instant::now()), vec![a]);
        s.on_agent_tool(a, Duration::ZERO);
        assert_eq!(s.next_wake(), None, "waits for the one in flight");
        assert!(s.take_due(Instant::now()).is_empty());
        s.finished(a, true, |_| Duration::ZERO);
        assert_eq!(s.take_due(Instant::now()), vec![a], "then runs");
    }

    #[test]
    fn failures_retry_with_backoff_then_give_up() {
        let mut s = ChangeSchedule::default();
        let a = Uuid::new_v4();
        let mut delays = Vec::new();
        for _ in 0..=MAX_RETRIES {
            s.on_agent_tool(a, Duration::ZERO);
            let _ = s.take_due(Instant::now() + Duration::from_secs(60));
            s.finished(a, false, |n| {
                let d =
                    ChangeSchedule::backoff(n, Duration::from_millis(200), Duration::from_secs(10));
                delays.push(d);
                d
            });
        }
        assert_eq!(delays.len(), MAX_RETRIES as usize);
        assert_eq!(delays[0], Duration::from_millis(200));
        assert_eq!(delays[1], Duration::from_millis(400));
        assert_eq!(*delays.last().unwrap(), Duration::from_millis(6400));
        assert!(!s.is_due(a), "gave up after MAX_RETRIES");
        s.on_agent_tool(a, EVERY);
        assert!(s.is_due(a), "a trigger after giving up schedules again");
    }

    #[test]
    fn process_end_postpones() {
        let mut s = ChangeSchedule::default();
        let a = Uuid::new_v4();
        s.after_process_end(a, Duration::ZERO);
        let early = s.next_wake().unwrap();
        s.after_process_end(a, Duration::from_secs(1));
        assert!(s.next_wake().unwrap() > early);
    }
}
