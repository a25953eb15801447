//! Token usage and cost of coding-agent runs, summed at read time from the per-process rows
//! (`store::usage`, read from Claude Code's stdout by `ingest::usage`): per process → session
//! → attempt → task → project. Carried by `get_attempt_status` (the attempt's sum), `list_tasks`
//! / `get_task` (the task's, from detail 1) and answered whole by `get_usage`: totals, by
//! executor, by model, by host on a fleet node, and per attempt and session from detail 1.
//!
//! A sum is absent — never zeros — when no run of its scope reported usage; `complete` says
//! whether every coding-agent run of the scope reported its final totals (a running or stopped
//! run, or an executor that reports none, leaves it false). `cost_usd`, `duration_ms` and
//! `num_turns` sum the runs that reported them (absent when none did).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::detail::Rules;
use super::rows::{ProcessRow, SessionRow};
use super::{Freshness, Query, View};
use vk_observer_store::StoreReader;
use vk_observer_store::events::HOST_FIELD;
use vk_observer_store::usage::ProcessUsage;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::{RunReason, string_of, uuid_of};

/// Token usage and cost of some coding-agent runs.
#[derive(Debug, Clone, Default, Serialize, JsonSchema, PartialEq)]
pub struct Usage {
    /// Input tokens (not read from cache).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: u64,
    /// Cost in USD as the CLI computed it, summed over the runs that reported one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Run time in milliseconds the CLI reported, summed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Agent turns the CLI reported, summed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_turns: Option<u64>,
    /// Models the runs named, sorted.
    pub models: Vec<String>,
    /// True when every coding-agent run counted reported its final totals; false while one
    /// runs, or when one stopped before its totals or its executor reports none.
    pub complete: bool,
    /// Coding-agent runs that reported usage.
    pub runs: usize,
}

/// A sum being made: runs seen, and what those with usage reported.
#[derive(Debug, Default)]
struct Tally {
    sum: Usage,
    models: BTreeSet<String>,
    agents: usize,
    final_runs: usize,
}

impl Tally {
    /// One coding-agent run, with the usage it reported (if any).
    fn add(&mut self, usage: Option<&ProcessUsage>) {
        self.agents += 1;
        let Some(u) = usage else { return };
        let s = &mut self.sum;
        s.runs += 1;
        s.input_tokens = s.input_tokens.saturating_add(u.input_tokens);
        s.output_tokens = s.output_tokens.saturating_add(u.output_tokens);
        s.cache_creation_input_tokens = s
            .cache_creation_input_tokens
            .saturating_add(u.cache_creation_input_tokens);
        s.cache_read_input_tokens = s
            .cache_read_input_tokens
            .saturating_add(u.cache_read_input_tokens);
        s.cost_usd = plus(s.cost_usd, u.cost_usd, |a, b| a + b);
        s.duration_ms = plus(s.duration_ms, u.duration_ms, u64::saturating_add);
        s.num_turns = plus(s.num_turns, u.num_turns, u64::saturating_add);
        self.models.extend(u.models.iter().cloned());
        self.final_runs += usize::from(u.complete);
    }

    /// The sum; None when no run reported usage.
    fn finish(self) -> Option<Usage> {
        if self.sum.runs == 0 {
            return None;
        }
        Some(Usage {
            models: self.models.into_iter().collect(),
            complete: self.final_runs == self.agents,
            // Cents and below stay readable: sums of f64 costs carry float noise.
            cost_usd: self.sum.cost_usd.map(|c| (c * 1e9).round() / 1e9),
            ..self.sum
        })
    }
}

fn plus<T>(a: Option<T>, b: Option<T>, add: impl Fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(add(a, b)),
        (a, b) => a.or(b),
    }
}

/// Whether a process is a coding-agent run that counts (dev servers, scripts and processes VK
/// dropped report no usage).
fn is_agent_run(p: &ProcessRow) -> bool {
    RunReason::CodingAgent.is(p.reason()) && !p.is_dropped()
}

/// The usage of an attempt's processes (as `get_attempt_status` read them); None when no run
/// reported any.
pub(crate) fn of_processes(
    reader: &StoreReader,
    processes: &[(Uuid, ProcessRow)],
) -> Result<Option<Usage>, ToolError> {
    let mut tally = Tally::default();
    for (id, _) in processes.iter().filter(|(_, p)| is_agent_run(p)) {
        tally.add(reader.process_usage(*id)?.as_ref());
    }
    Ok(tally.finish())
}

/// The usage of a task's attempts; None when no run reported any.
pub(crate) fn of_task(reader: &StoreReader, task: Uuid) -> Result<Option<Usage>, ToolError> {
    let mut tally = Tally::default();
    for attempt in reader.attempts_of_task(task)? {
        for (id, p) in reader.processes_of_attempt_as::<ProcessRow>(attempt.id)? {
            if is_agent_run(&p) {
                tally.add(reader.process_usage(id)?.as_ref());
            }
        }
    }
    Ok(tally.finish())
}

/// Each listed task's usage, for `list_tasks` and `get_task` (shown from detail 1).
pub(crate) fn fill_tasks(
    reader: &StoreReader,
    tasks: &mut [super::tasks::TaskSummary],
) -> Result<(), ToolError> {
    for t in tasks {
        t.usage = of_task(reader, t.task_id)?;
    }
    Ok(())
}

// ---- get_usage ----

/// What `get_usage` sums.
#[derive(Debug, Clone)]
pub enum UsageScope {
    Project(Uuid),
    Task(Uuid),
    /// These attempts (request order, duplicates once).
    Attempts(Vec<Uuid>),
}

/// Only runs that started in `[since, until)` count (either bound open when absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl Window {
    fn holds(&self, p: &ProcessRow) -> bool {
        let started = p.started_at.or(p.created_at);
        match started {
            Some(at) => self.since.is_none_or(|s| at >= s) && self.until.is_none_or(|u| at < u),
            None => self.since.is_none() && self.until.is_none(),
        }
    }
}

/// One part of a breakdown: its key and its sum.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct UsagePart {
    /// The executor (`CLAUDE_CODE`, …), the model (several, joined by `+`, for a run that
    /// named several), or the fleet host; `unknown` when the cache does not say.
    pub key: String,
    #[serde(flatten)]
    pub usage: Usage,
}

/// One session's usage (detail 1).
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct SessionUsage {
    /// Session id (UUID).
    pub session_id: Option<Uuid>,
    /// The session's executor; null when unknown.
    pub executor: Option<String>,
    /// The sum of the session's runs.
    pub usage: Usage,
}

/// One attempt's usage with its sessions' (detail 1).
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct AttemptUsage {
    /// Attempt id (UUID).
    pub attempt_id: Uuid,
    /// Its task (UUID).
    pub task_id: Option<Uuid>,
    /// The sum of the attempt's runs.
    pub usage: Usage,
    /// Its sessions that reported usage.
    pub sessions: Vec<SessionUsage>,
}

/// Answer of `get_usage`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct UsageAnswer {
    /// The sum over the scope; absent when no run in it reported usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// By the session's executor.
    pub by_executor: Vec<UsagePart>,
    /// By the model each run named.
    pub by_model: Vec<UsagePart>,
    /// Fleet node only: by the host that owns the attempt.
    pub by_host: Vec<UsagePart>,
    /// Per attempt, with its sessions (detail 1 and 2).
    pub attempts: Vec<AttemptUsage>,
    /// Requested `attempt_ids` the cache does not know.
    pub not_found: Vec<Uuid>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// `get_usage` below detail 1: totals and breakdowns; the per-attempt list from 1.
pub const USAGE_RULES: Rules = Rules {
    finish: None,
    kept: &[],
    standard: &["attempts"],
    verbatim: &[],
    nested: &[],
};

/// One counted run, with what it is summed under.
struct Run {
    executor: Option<String>,
    session: Option<Uuid>,
    models: String,
    usage: Option<ProcessUsage>,
}

/// The tallies `get_usage` fills.
#[derive(Default)]
struct Tallies {
    all: Tally,
    executors: BTreeMap<String, Tally>,
    models: BTreeMap<String, Tally>,
    hosts: BTreeMap<String, Tally>,
}

impl Query {
    /// `get_usage`: the scope's runs that started in `window`, summed.
    pub fn usage(&self, scope: &UsageScope, window: Window) -> Result<UsageAnswer, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        let (attempts, not_found) = attempts_of(&reader, scope)?;
        let mut tallies = Tallies::default();
        let mut per_attempt = Vec::new();
        for (attempt, task, host) in attempts {
            let runs = runs_of(&reader, attempt, window)?;
            if let Some(a) = attempt_usage(attempt, task, &runs) {
                per_attempt.push(a);
            }
            for run in &runs {
                let usage = run.usage.as_ref();
                tallies.all.add(usage);
                let executor = run.executor.clone().unwrap_or_else(|| "unknown".into());
                tallies.executors.entry(executor).or_default().add(usage);
                tallies
                    .models
                    .entry(run.models.clone())
                    .or_default()
                    .add(usage);
                if let Some(h) = &host {
                    tallies.hosts.entry(h.clone()).or_default().add(usage);
                }
            }
        }
        Ok(UsageAnswer {
            usage: tallies.all.finish(),
            by_executor: parts(tallies.executors),
            by_model: parts(tallies.models),
            by_host: parts(tallies.hosts),
            attempts: per_attempt,
            not_found,
            token,
            freshness,
        })
    }
}

/// The breakdown's parts that reported usage, by key.
fn parts(tallies: BTreeMap<String, Tally>) -> Vec<UsagePart> {
    tallies
        .into_iter()
        .filter_map(|(key, t)| t.finish().map(|usage| UsagePart { key, usage }))
        .collect()
}

/// (attempt, its task, its fleet host) for each attempt of the scope; unknown attempt ids.
type ScopeAttempts = (Vec<(Uuid, Option<Uuid>, Option<String>)>, Vec<Uuid>);

fn attempts_of(reader: &StoreReader, scope: &UsageScope) -> Result<ScopeAttempts, ToolError> {
    let row = |a: &vk_observer_store::reader::Stored| {
        let host = string_of(&a.value, HOST_FIELD);
        (a.id, uuid_of(&a.value, "task_id"), host)
    };
    let tasks = match scope {
        UsageScope::Attempts(ids) => {
            let (mut found, mut not_found, mut seen) = (Vec::new(), Vec::new(), BTreeSet::new());
            for id in ids.iter().filter(|id| seen.insert(**id)) {
                match reader.attempt(*id)? {
                    Some(a) => found.push(row(&a)),
                    None => not_found.push(*id),
                }
            }
            return Ok((found, not_found));
        }
        UsageScope::Task(task) => {
            super::target::task(reader, *task)?;
            vec![*task]
        }
        UsageScope::Project(project) => {
            super::target::project(reader, *project)?;
            reader
                .tasks_of_project(*project)?
                .iter()
                .map(|t| t.id)
                .collect()
        }
    };
    let mut found = Vec::new();
    for task in tasks {
        found.extend(reader.attempts_of_task(task)?.iter().map(row));
    }
    Ok((found, Vec::new()))
}

/// An attempt's coding-agent runs that started in `window`.
fn runs_of(reader: &StoreReader, attempt: Uuid, window: Window) -> Result<Vec<Run>, ToolError> {
    let executors: BTreeMap<Uuid, Option<String>> = reader
        .sessions_of_attempt_as::<SessionRow>(attempt)?
        .into_iter()
        .map(|(id, s)| (id, s.executor))
        .collect();
    let mut runs = Vec::new();
    for (id, p) in reader.processes_of_attempt_as::<ProcessRow>(attempt)? {
        if !is_agent_run(&p) || !window.holds(&p) {
            continue;
        }
        let usage = reader.process_usage(id)?;
        let models = usage
            .as_ref()
            .map(|u| u.models.join("+"))
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "unknown".into());
        runs.push(Run {
            executor: p
                .session_id
                .and_then(|s| executors.get(&s).cloned().flatten()),
            session: p.session_id,
            models,
            usage,
        });
    }
    Ok(runs)
}

/// An attempt's sum with its sessions'; None when no run of it reported usage.
fn attempt_usage(attempt: Uuid, task: Option<Uuid>, runs: &[Run]) -> Option<AttemptUsage> {
    let mut all = Tally::default();
    let mut sessions: BTreeMap<Option<Uuid>, (Option<String>, Tally)> = BTreeMap::new();
    for run in runs {
        all.add(run.usage.as_ref());
        let entry = sessions
            .entry(run.session)
            .or_insert_with(|| (run.executor.clone(), Tally::default()));
        entry.1.add(run.usage.as_ref());
    }
    Some(AttemptUsage {
        attempt_id: attempt,
        task_id: task,
        usage: all.finish()?,
        sessions: sessions
            .into_iter()
            .filter_map(|(session_id, (executor, t))| {
                t.finish().map(|usage| SessionUsage {
                    session_id,
                    executor,
                    usage,
                })
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(output: u64, cost: Option<f64>, complete: bool) -> ProcessUsage {
        ProcessUsage {
            input_tokens: 1,
            output_tokens: output,
            cost_usd: cost,
            models: vec!["m".into()],
            complete,
            ..ProcessUsage::default()
        }
    }

    #[test]
    fn a_sum_is_absent_without_usage_and_complete_only_when_every_run_finished() {
        let mut none = Tally::default();
        none.add(None);
        assert_eq!(none.finish(), None);

        let mut two = Tally::default();
        two.add(Some(&run(10, Some(0.1), true)));
        two.add(Some(&run(5, Some(0.2), true)));
        let sum = two.finish().unwrap();
        assert_eq!((sum.input_tokens, sum.output_tokens, sum.runs), (2, 15, 2));
        assert_eq!(sum.cost_usd, Some(0.3));
        assert!(sum.complete);
        assert_eq!(sum.models, ["m"]);

        let mut partial = Tally::default();
        partial.add(Some(&run(10, Some(0.1), true)));
        partial.add(None);
        let sum = partial.finish().unwrap();
        assert!(!sum.complete);
        assert_eq!(sum.duration_ms, None);
    }
}
