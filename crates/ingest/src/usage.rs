//! Token usage and cost of a coding agent's run, read from its raw log: VK keeps the Claude
//! Code CLI's stdout verbatim (`--output-format=stream-json`, one JSON object a line), in
//! CHUNKS (`{"type":"STDOUT","content":…}`: several lines, or part of one). [`UsageTap`] sits
//! in a raw-log follower (`logs`, `workspaces::logs`): it puts the chunks back into lines
//! ([`Lines`]: only the unfinished tail is kept between chunks, at most [`LINE_CAP`]) and reads
//! them ([`RunUsage`]): the run's totals from its last line (`{"type":"result",…}`: `usage`,
//! `total_cost_usd`, `duration_ms`, `num_turns`), and while the run goes the sum of its
//! assistant messages' `usage` (one count per message id: the CLI repeats an id across
//! lines, the last usage of an id counts), the model from the `system`/`init` line and each
//! message. What changed is reported as one `DomainEvent::ProcessUsage` per writer batch.
//!
//! **Order and restarts.** Entries are read in index order; one below what was read is a
//! re-send (skipped), one above it a hole (the partial line is dropped and reading resumes
//! after the next newline). A tap that starts above index 0 (a daemon restart, a log socket
//! that starts mid-log) first reads what the store already holds below it, so a running sum
//! continues where it stood; the `result` line is the newest entry of a run, so whatever VK
//! or the daemon lost of older entries, it is read.
//!
//! **Bad input** — a line that does not parse, an over-long line, negative, fractional,
//! non-numeric or absurd numbers ([`MAX_TOKENS`], [`MAX_COST_USD`]) — is counted
//! (`vk_observer_usage_garbage_total`), logged at debug and never read as a number: a bad
//! `result` line leaves the run's totals absent (the row keeps the running sum it had,
//! `complete: false`), and the tap reports nothing more for that run.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use serde_json::value::RawValue;
use uuid::Uuid;

use vk_observer_store::StoreReader;
use vk_observer_store::events::{Channel, DomainEvent};
use vk_observer_store::usage::ProcessUsage;
use vk_observer_vk::RunReason;

/// Longest line kept while its end is awaited (a longer one is garbage, skipped to its end).
pub(crate) const LINE_CAP: usize = 1 << 20;
/// A token count above this is not believed.
pub(crate) const MAX_TOKENS: u64 = 1_000_000_000_000;
/// A cost above this (USD) is not believed.
pub(crate) const MAX_COST_USD: f64 = 1e6;
/// A duration above this (ms, ~3 years) or a turn count above [`MAX_TURNS`] is not believed.
const MAX_DURATION_MS: u64 = 100_000_000_000;
const MAX_TURNS: u64 = 10_000_000;
/// Stored entries read below a tap's first entry (older ones: the tap starts mid-stream).
const PRIME_ENTRIES: u64 = 50_000;

/// A line that should carry usage and does not read: counted and logged, never a number.
#[derive(Debug, PartialEq)]
pub(crate) struct Garbage(pub &'static str);

fn count_garbage(process: Uuid, why: &str, line: &str) {
    metrics::counter!(vk_observer_telemetry::USAGE_GARBAGE).increment(1);
    let head: String = line.chars().take(120).collect();
    tracing::debug!(pid = %process, why, line = %head, "coding agent's usage line skipped");
}

// ---- chunks → lines ----

/// Reassembles stdout chunks into lines, keeping only the unfinished tail.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    tail: String,
    /// Reading starts after the next newline (mid-stream start, a hole, an over-long line).
    discarding: bool,
}

impl Lines {
    /// Lines that begin mid-stream: everything up to the first newline is dropped.
    pub(crate) fn mid_stream() -> Lines {
        Lines {
            tail: String::new(),
            discarding: true,
        }
    }

    pub(crate) fn restart_mid_stream(&mut self) {
        *self = Lines::mid_stream();
    }

    /// Feeds one chunk; `line` gets each finished line (without its newline), in order.
    /// Returns how many lines were dropped for passing [`LINE_CAP`].
    pub(crate) fn push(&mut self, chunk: &str, mut line: impl FnMut(&str)) -> usize {
        let mut overflows = 0;
        let mut pieces = chunk.split('\n').peekable();
        while let Some(piece) = pieces.next() {
            let finished = pieces.peek().is_some();
            if self.discarding {
                self.discarding = !finished;
                continue;
            }
            if self.tail.len() + piece.len() > LINE_CAP {
                overflows += 1;
                self.tail.clear();
                self.discarding = !finished;
                continue;
            }
            self.tail.push_str(piece);
            if finished {
                line(self.tail.trim_end_matches('\r'));
                self.tail.clear();
            }
        }
        overflows
    }
}

// ---- lines → usage ----

/// Token counts of one message or run, each checked.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_creation: u64,
    pub cache_read: u64,
}

impl Tokens {
    /// A `usage` object: every count a whole number in range (absent = 0), else garbage.
    pub(crate) fn read(usage: &Value) -> Result<Tokens, Garbage> {
        if !usage.is_object() {
            return Err(Garbage("usage is not an object"));
        }
        let count = |key: &str| match usage.get(key) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v
                .as_u64()
                .filter(|n| *n <= MAX_TOKENS)
                .ok_or(Garbage("a token count that is not a whole number in range")),
        };
        Ok(Tokens {
            input: count("input_tokens")?,
            output: count("output_tokens")?,
            cache_creation: count("cache_creation_input_tokens")?,
            cache_read: count("cache_read_input_tokens")?,
        })
    }

    fn plus(self, o: Tokens) -> Tokens {
        Tokens {
            input: self.input.saturating_add(o.input),
            output: self.output.saturating_add(o.output),
            cache_creation: self.cache_creation.saturating_add(o.cache_creation),
            cache_read: self.cache_read.saturating_add(o.cache_read),
        }
    }
}

/// What a `result` line says of the whole run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunTotals {
    pub tokens: Tokens,
    pub cost_usd: Option<f64>,
    pub duration_ms: Option<u64>,
    pub num_turns: Option<u64>,
}

/// A whole number in `0..=max` when present; garbage when present and not one.
fn bounded(line: &Value, key: &str, max: u64) -> Result<Option<u64>, Garbage> {
    match line.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n <= max)
            .map(Some)
            .ok_or(Garbage("a duration or turn count out of range")),
    }
}

impl RunTotals {
    /// A `result` line's totals; None when it carries no `usage` (an executor that reports
    /// none), garbage when any number is not believable.
    pub(crate) fn read(line: &Value) -> Result<Option<RunTotals>, Garbage> {
        let Some(usage) = line.get("usage").filter(|u| !u.is_null()) else {
            return Ok(None);
        };
        let tokens = Tokens::read(usage)?;
        let cost_usd = match line.get("total_cost_usd") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .filter(|c| c.is_finite() && (0.0..=MAX_COST_USD).contains(c))
                    .ok_or(Garbage("a cost that is not a number in range"))?,
            ),
        };
        Ok(Some(RunTotals {
            tokens,
            cost_usd,
            duration_ms: bounded(line, "duration_ms", MAX_DURATION_MS)?,
            num_turns: bounded(line, "num_turns", MAX_TURNS)?,
        }))
    }
}

/// Whether a line can carry usage, a model or the run's totals: the only ones parsed (a
/// `user` line with a large tool result is skipped by one substring scan, not parsed).
fn names_usage(line: &str) -> bool {
    line.contains("\"usage\"") || line.contains("\"model\"") || line.contains("\"result\"")
}

/// What the lines of one run said so far.
#[derive(Debug, Default)]
pub(crate) struct RunUsage {
    /// The last usage of each assistant message id (a line without an id counts on its own).
    messages: HashMap<String, Tokens>,
    anonymous: u64,
    models: BTreeSet<String>,
    totals: Option<RunTotals>,
    /// A `result` line did not read: no number of this run is reported any more.
    spoiled: bool,
}

impl RunUsage {
    /// Reads one stdout line. Lines that are not JSON objects (the CLI's own chatter) are not
    /// stream-json and pass silently; an object line that does not parse is garbage.
    pub(crate) fn read_line(&mut self, line: &str) -> Result<(), Garbage> {
        let line = line.trim();
        if !line.starts_with('{') || !names_usage(line) {
            return Ok(());
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            // A broken line that names a result may have been the run's totals.
            self.spoiled |= line.contains("\"result\"");
            return Err(Garbage("a stream-json line that does not parse"));
        };
        match v.get("type").and_then(Value::as_str) {
            Some("system") => self.note_model(v.get("model")),
            Some("assistant") => return self.assistant(v.get("message")),
            Some("result") => return self.result(&v),
            _ => {}
        }
        Ok(())
    }

    fn note_model(&mut self, model: Option<&Value>) {
        if let Some(m) = model.and_then(Value::as_str).filter(|m| !m.is_empty())
            && !self.models.contains(m)
            && self.models.len() < 16
        {
            self.models.insert(m.chars().take(200).collect());
        }
    }

    fn assistant(&mut self, message: Option<&Value>) -> Result<(), Garbage> {
        let Some(message) = message else {
            return Ok(());
        };
        self.note_model(message.get("model"));
        let Some(usage) = message.get("usage").filter(|u| !u.is_null()) else {
            return Ok(());
        };
        let tokens = Tokens::read(usage)?;
        let id = match message.get("id").and_then(Value::as_str) {
            Some(id) => id.to_owned(),
            None => {
                self.anonymous += 1;
                format!("\u{0}line{}", self.anonymous)
            }
        };
        self.messages.insert(id, tokens);
        Ok(())
    }

    fn result(&mut self, line: &Value) -> Result<(), Garbage> {
        if let Some(models) = line.get("modelUsage").and_then(Value::as_object) {
            for m in models.keys() {
                self.note_model(Some(&Value::String(m.clone())));
            }
        }
        match RunTotals::read(line) {
            Ok(totals) => {
                self.totals = totals.or(self.totals.take());
                Ok(())
            }
            Err(g) => {
                self.spoiled = true;
                Err(g)
            }
        }
    }

    /// The usage as it stands: the run's totals once read, else the sum of its messages;
    /// None when nothing was reported (or the result line spoiled the run).
    pub(crate) fn current(&self) -> Option<ProcessUsage> {
        if self.spoiled {
            return None;
        }
        let models = self.models.iter().cloned().collect();
        let messages = self.messages.len() as u64;
        if let Some(t) = &self.totals {
            return Some(usage_of(t.tokens, models, messages, Some(t)));
        }
        if self.messages.is_empty() {
            return None;
        }
        let sum = self
            .messages
            .values()
            .fold(Tokens::default(), |a, t| a.plus(*t));
        Some(usage_of(sum, models, messages, None))
    }
}

fn usage_of(
    t: Tokens,
    models: Vec<String>,
    messages: u64,
    totals: Option<&RunTotals>,
) -> ProcessUsage {
    ProcessUsage {
        input_tokens: t.input,
        output_tokens: t.output,
        cache_creation_input_tokens: t.cache_creation,
        cache_read_input_tokens: t.cache_read,
        cost_usd: totals.and_then(|t| t.cost_usd),
        duration_ms: totals.and_then(|t| t.duration_ms),
        num_turns: totals.and_then(|t| t.num_turns),
        models,
        complete: totals.is_some(),
        messages,
    }
}

// ---- the follower's tap ----

/// One raw-log follower's usage reader: decided at its first entries (a coding agent's raw
/// channel only), then fed every entry the follower writes, in write order.
#[derive(Debug, Default)]
pub(crate) enum UsageTap {
    /// Not known yet whether this log is a coding agent's (its process row not stored yet).
    #[default]
    Undecided,
    /// Not a coding agent's raw log: nothing to read.
    Off,
    Reading(Box<Reading>),
}

#[derive(Debug)]
pub(crate) struct Reading {
    lines: Lines,
    run: RunUsage,
    /// The index expected next; None before the first entry.
    next: Option<u64>,
    /// What was last reported (or stored before this tap started).
    reported: Option<ProcessUsage>,
}

impl UsageTap {
    /// [`UsageTap::observe`] through a follower's lock (an off tap reads no store).
    pub(crate) fn observe_locked(
        tap: &std::sync::Mutex<UsageTap>,
        store: &vk_observer_store::Store,
        attempt_id: Uuid,
        process_id: Uuid,
        entries: &[(u64, Box<RawValue>)],
    ) -> Option<DomainEvent> {
        let mut tap = tap.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*tap, UsageTap::Off) {
            return None;
        }
        tap.observe(&store.read(), attempt_id, process_id, entries)
    }

    /// A tap for `channel`'s log: only the raw channel carries stdout.
    pub(crate) fn for_channel(channel: Channel) -> UsageTap {
        match channel {
            Channel::Raw => UsageTap::Undecided,
            Channel::Normalized => UsageTap::Off,
        }
    }

    /// Reads `entries` (the next ones the follower writes); the event to write with them when
    /// the usage changed.
    pub(crate) fn observe(
        &mut self,
        store: &StoreReader,
        attempt_id: Uuid,
        process_id: Uuid,
        entries: &[(u64, Box<RawValue>)],
    ) -> Option<DomainEvent> {
        let first = entries.first()?.0;
        if matches!(self, UsageTap::Undecided) {
            *self = decide(store, process_id, first);
        }
        let UsageTap::Reading(reading) = self else {
            return None;
        };
        for (index, entry) in entries {
            reading.entry(process_id, *index, entry);
        }
        let usage = reading.run.current()?;
        if reading.reported.as_ref() == Some(&usage) {
            return None;
        }
        reading.reported = Some(usage.clone());
        Some(DomainEvent::ProcessUsage {
            attempt_id,
            process_id,
            usage,
        })
    }
}

/// Whether the process is a coding agent (by its stored row); a reading primed with what the
/// store holds below `first`.
fn decide(store: &StoreReader, process: Uuid, first: u64) -> UsageTap {
    let Ok(Some(row)) = store.process(process) else {
        return UsageTap::Undecided;
    };
    if !RunReason::CodingAgent.is(vk_observer_vk::run_reason(&row.value)) {
        return UsageTap::Off;
    }
    let mut reading = Reading::new(store.process_usage(process).ok().flatten());
    if first > 0 {
        let from = first.saturating_sub(PRIME_ENTRIES);
        let stored = store
            .log_range(process, Channel::Raw, from, first, usize::MAX)
            .unwrap_or_default();
        for e in stored {
            reading.entry(process, e.index, &e.entry);
        }
    }
    UsageTap::Reading(Box::new(reading))
}

impl Reading {
    fn new(reported: Option<ProcessUsage>) -> Reading {
        Reading {
            lines: Lines::default(),
            run: RunUsage::default(),
            next: None,
            reported,
        }
    }

    fn entry(&mut self, process: Uuid, index: u64, entry: &RawValue) {
        match self.next {
            Some(next) if index < next => return,
            Some(next) if index > next => self.lines.restart_mid_stream(),
            None if index > 0 => self.lines.restart_mid_stream(),
            _ => {}
        }
        self.next = Some(index + 1);
        let Some(text) = stdout_of(entry) else {
            return;
        };
        let run = &mut self.run;
        let overflows = self.lines.push(&text, |line| {
            if let Err(Garbage(why)) = run.read_line(line) {
                count_garbage(process, why, line);
            }
        });
        for _ in 0..overflows {
            count_garbage(process, "a line longer than the cap", "");
        }
    }
}

/// The stdout text of a raw entry (`{"type":"STDOUT","content":…}`, or `{"STDOUT":…}`);
/// None for stderr and anything else.
pub(crate) fn stdout_of(entry: &RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Chunk {
        #[serde(rename = "type")]
        kind: Option<String>,
        content: Option<String>,
        #[serde(rename = "STDOUT")]
        stdout: Option<String>,
    }
    let chunk: Chunk = serde_json::from_str(entry.get()).ok()?;
    match chunk {
        Chunk {
            stdout: Some(text), ..
        } => Some(text),
        Chunk {
            kind: Some(kind),
            content: Some(text),
            ..
        } if kind == "STDOUT" => Some(text),
        _ => None,
    }
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
