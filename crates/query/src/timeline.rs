//! Attempts over time, for the board's chart: how many attempts started, finished (completed)
//! and failed (failed or killed) in each of [`BUCKETS`] time buckets ending now. The times are
//! the ones the attempts' statuses carry: `created_at` for a start, the latest relevant
//! process's `completed_at` (else the last activity) for an end.
//!
//! The bucket width adapts to the oldest time of the last day: the narrowest of [`WIDTHS`]
//! whose buckets reach back to it, so a demo a few minutes old and a day of work both fill the
//! chart. Buckets start at whole widths (UTC); the newest holds `now`; times before the first
//! bucket are left out, times after `now` (a clock ahead of this one) count in the newest.

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use super::status::{AttemptState, AttemptStatus};

/// How many buckets the chart has.
pub const BUCKETS: usize = 24;
/// The widths a bucket may take, in minutes, narrowest first.
const WIDTHS: [i64; 7] = [1, 2, 5, 10, 15, 30, 60];

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Finished,
    Failed,
}

/// The times of one attempt the chart counts.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptTimes {
    pub started_at: Option<DateTime<Utc>>,
    pub ended: Option<(DateTime<Utc>, Ending)>,
}

fn parse(t: Option<&str>) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(t?)
        .ok()
        .map(|d| d.with_timezone(&Utc))
}

impl AttemptTimes {
    pub fn of(s: &AttemptStatus) -> AttemptTimes {
        let ended_at = s
            .latest_process
            .as_ref()
            .and_then(|p| p.completed_at.as_deref())
            .or(s.last_activity_at.as_deref());
        AttemptTimes::from_parts(s.state, s.created_at.as_deref(), ended_at)
    }

    fn from_parts(state: AttemptState, created: Option<&str>, ended: Option<&str>) -> Self {
        let ending = match state {
            AttemptState::Completed => Some(Ending::Finished),
            AttemptState::Failed => Some(Ending::Failed),
            AttemptState::Running | AttemptState::Idle => None,
        };
        AttemptTimes {
            started_at: parse(created),
            ended: ending.and_then(|e| Some((parse(ended)?, e))),
        }
    }
}

/// One bucket: its start and what happened in it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TimelineBucket {
    /// RFC 3339 (UTC).
    pub start: String,
    pub started: u32,
    pub finished: u32,
    pub failed: u32,
}

/// The chart: [`BUCKETS`] buckets, oldest first, and the totals over them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Timeline {
    /// Width of a bucket, in seconds.
    pub bucket_seconds: i64,
    pub buckets: Vec<TimelineBucket>,
    pub started: u32,
    pub finished: u32,
    pub failed: u32,
}

/// The start of the bucket of width `width` that holds `t`.
fn floor_to(t: DateTime<Utc>, width: TimeDelta) -> DateTime<Utc> {
    let w = width.num_seconds();
    let secs = t.timestamp().div_euclid(w) * w;
    DateTime::from_timestamp(secs, 0).unwrap_or(t)
}

/// The narrowest width whose buckets, the newest holding `now`, reach back to `oldest`.
fn width_for(oldest: Option<DateTime<Utc>>, now: DateTime<Utc>) -> TimeDelta {
    let reaches = |w: TimeDelta| {
        let first = floor_to(now, w) - w * (BUCKETS as i32 - 1);
        oldest.is_none_or(|o| o >= first)
    };
    WIDTHS
        .iter()
        .map(|&m| TimeDelta::minutes(m))
        .find(|&w| reaches(w))
        .unwrap_or(TimeDelta::minutes(WIDTHS[WIDTHS.len() - 1]))
}

/// The chart of `attempts` at `now`.
pub fn timeline(attempts: &[AttemptTimes], now: DateTime<Utc>) -> Timeline {
    let day_ago = now - TimeDelta::days(1);
    let times = || {
        attempts
            .iter()
            .flat_map(|a| a.started_at.into_iter().chain(a.ended.map(|(t, _)| t)))
    };
    let oldest = times().filter(|&t| t >= day_ago).min().map(|t| t.min(now));
    let width = width_for(oldest, now);
    let first = floor_to(now, width) - width * (BUCKETS as i32 - 1);
    let mut buckets: Vec<TimelineBucket> = (0..BUCKETS as i32)
        .map(|i| TimelineBucket {
            start: (first + width * i).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            ..TimelineBucket::default()
        })
        .collect();
    let slot = |t: DateTime<Utc>| -> Option<usize> {
        let since = t.min(now) - first;
        (since >= TimeDelta::zero()).then(|| {
            let i = since.num_seconds() / width.num_seconds();
            (i as usize).min(BUCKETS - 1)
        })
    };
    for a in attempts {
        if let Some(i) = a.started_at.and_then(slot) {
            buckets[i].started += 1;
        }
        match a.ended.and_then(|(t, e)| Some((slot(t)?, e))) {
            Some((i, Ending::Finished)) => buckets[i].finished += 1,
            Some((i, Ending::Failed)) => buckets[i].failed += 1,
            None => {}
        }
    }
    Timeline {
        bucket_seconds: width.num_seconds(),
        started: buckets.iter().map(|b| b.started).sum(),
        finished: buckets.iter().map(|b| b.finished).sum(),
        failed: buckets.iter().map(|b| b.failed).sum(),
        buckets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        parse(Some(s)).unwrap()
    }

    fn started(t: &str) -> AttemptTimes {
        AttemptTimes {
            started_at: Some(at(t)),
            ended: None,
        }
    }

    fn ended(start: &str, end: &str, how: Ending) -> AttemptTimes {
        AttemptTimes {
            started_at: Some(at(start)),
            ended: Some((at(end), how)),
        }
    }

    const NOW: &str = "2026-03-01T12:07:30Z";

    #[test]
    fn nothing_gives_a_minute_wide_empty_chart_ending_now() {
        let t = timeline(&[], at(NOW));
        assert_eq!(t.bucket_seconds, 60);
        assert_eq!(t.buckets.len(), BUCKETS);
        assert_eq!(t.buckets[0].start, "2026-03-01T11:44:00Z");
        assert_eq!(t.buckets[BUCKETS - 1].start, "2026-03-01T12:07:00Z");
        assert_eq!((t.started, t.finished, t.failed), (0, 0, 0));
    }

    #[test]
    fn minutes_of_work_fall_in_minute_buckets() {
        let attempts = [
            ended(
                "2026-03-01T12:00:10Z",
                "2026-03-01T12:03:59Z",
                Ending::Finished,
            ),
            ended(
                "2026-03-01T12:00:50Z",
                "2026-03-01T12:01:00Z",
                Ending::Failed,
            ),
            started("2026-03-01T12:07:29Z"),
        ];
        let t = timeline(&attempts, at(NOW));
        assert_eq!(t.bucket_seconds, 60);
        let by_start = |s: &str| t.buckets.iter().find(|b| b.start == s).unwrap().clone();
        assert_eq!(by_start("2026-03-01T12:00:00Z").started, 2);
        assert_eq!(by_start("2026-03-01T12:01:00Z").failed, 1);
        assert_eq!(by_start("2026-03-01T12:03:00Z").finished, 1);
        assert_eq!(t.buckets[BUCKETS - 1].started, 1);
        assert_eq!((t.started, t.finished, t.failed), (3, 1, 1));
    }

    #[test]
    fn the_width_is_the_narrowest_that_reaches_the_oldest_time() {
        // Three and a half hours back: 10 minutes reach 08:10 (230 min before 12:00), 5 do not.
        let t = timeline(&[started("2026-03-01T08:37:00Z")], at(NOW));
        assert_eq!(t.bucket_seconds, 600);
        assert_eq!(t.buckets[0].start, "2026-03-01T08:10:00Z");
        assert_eq!(t.buckets[2].started, 1, "08:30-08:40");
        // Twenty hours back: hours.
        let t = timeline(&[started("2026-02-28T16:30:00Z")], at(NOW));
        assert_eq!(t.bucket_seconds, 3600);
        assert_eq!(t.started, 1);
    }

    #[test]
    fn older_than_the_chart_is_left_out_and_a_clock_ahead_counts_now() {
        let attempts = [
            ended(
                "2026-02-27T09:00:00Z",
                "2026-03-01T12:05:00Z",
                Ending::Failed,
            ),
            started("2026-03-01T12:09:00Z"),
        ];
        let t = timeline(&attempts, at(NOW));
        // The start two days back sets no width (older than a day) and is not counted.
        assert_eq!(t.bucket_seconds, 60);
        assert_eq!((t.started, t.finished, t.failed), (1, 0, 1));
        assert_eq!(t.buckets[BUCKETS - 1].started, 1, "two minutes ahead: now");
    }

    #[test]
    fn a_state_gives_its_ending_and_unreadable_times_count_nothing() {
        let (start, end) = (Some("2026-03-01T12:00:00Z"), Some("2026-03-01T12:01:00Z"));
        let running = AttemptTimes::from_parts(AttemptState::Running, start, end);
        assert_eq!(running.started_at, Some(at("2026-03-01T12:00:00Z")));
        assert_eq!(running.ended, None);
        let idle = AttemptTimes::from_parts(AttemptState::Idle, start, end);
        assert_eq!(idle.ended, None);
        let failed = AttemptTimes::from_parts(AttemptState::Failed, start, end);
        assert_eq!(
            failed.ended,
            Some((at("2026-03-01T12:01:00Z"), Ending::Failed))
        );
        let done = AttemptTimes::from_parts(AttemptState::Completed, start, end);
        assert_eq!(done.ended.map(|(_, e)| e), Some(Ending::Finished));
        let unreadable = AttemptTimes::from_parts(AttemptState::Completed, Some("soon"), None);
        assert_eq!(
            unreadable,
            AttemptTimes {
                started_at: None,
                ended: None
            }
        );
    }
}
