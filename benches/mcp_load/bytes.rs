//! Phase bytes (issue 17, "agent loop bytes"): what following one attempt costs an agent's
//! context at the default detail (0) and at detail 2 (VK's objects verbatim). The simulator
//! writes one coding-agent run of 2,000 normalized entries replayed from VK's recorded live
//! frames (`bytes_run`), at two paces: the recording's own and ten entries per 2-s tick. Two
//! agents follow it in lockstep as docs/agent-guide.md's loop does: each tick
//! `get_attempt_status` (with `since_token`) and `tail_attempt_logs` with `after_entry_index`
//! (+ `since_token`, paging while `has_more`); at the end the last status,
//! `get_attempt_changes` and `tail_session_messages` once. Counted: the bytes of every answer's
//! document (the JSON text an agent reads). Asserted, not just reported: at detail 0 the agent
//! saw every entry index, every tool call with the final status VK left it in (through
//! `replaced` when VK finished it after the agent first saw it) and every state the detail-2
//! agent saw.
//!
//! Beside it, in the same lockstep, the `until` loop (issue 25): each tick
//! `wait_for_attempt_change(until=[completed, failed, cancelled, needs_input])` instead of the
//! status poll, then the same tail; at the end the wait answers `reached` with the status and
//! the final agent message, so `tail_session_messages` is not called. Its waits time out after
//! 1 ms to keep the lockstep (an agent would let each run for its tick; a timeout answer is
//! the same bytes whatever its length). Asserted: every entry index and tool status, the end
//! (`completed`) and the final agent message.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{anyhow, ensure};
use serde_json::{Value, json};
use vk_observer_sim::{Channel, ProcessStatus, RunReason, Sim, SimFile};

use crate::bytes_run::{Cycle, Op, Pace, tool_status};
use crate::client::{Mcp, call_body};
use crate::daemon::DaemonProc;
use crate::data::{out_dir, sim_config};
use crate::opts::Opts;
use crate::report::Report;

const ENTRIES: usize = 2_000;
const PER_TICK: usize = 10;

/// How an agent learns the attempt's state each tick.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loop {
    /// `get_attempt_status` with `since_token` (docs/agent-guide.md's cheap loop).
    Status,
    /// `wait_for_attempt_change` with `until` (answers only at a target state).
    Until,
}

/// The states the `until` loop waits for.
const UNTIL: [&str; 4] = ["completed", "failed", "cancelled", "needs_input"];

/// One agent following the attempt at one detail level.
struct Follower {
    detail: u8,
    how: Loop,
    bytes: BTreeMap<&'static str, (u64, u64)>,
    status_token: Option<Value>,
    log_token: Option<Value>,
    after: Option<u64>,
    indices: BTreeSet<u64>,
    /// Final tool status per entry index (a replacement overwrites the first sighting).
    tools: BTreeMap<u64, String>,
    states: Vec<String>,
    /// The `until` loop: the final agent message its last wait answered.
    final_message: Option<String>,
}

impl Follower {
    fn new(detail: u8, how: Loop) -> Self {
        Follower {
            detail,
            how,
            bytes: BTreeMap::new(),
            status_token: None,
            log_token: None,
            after: None,
            indices: BTreeSet::new(),
            tools: BTreeMap::new(),
            states: Vec::new(),
            final_message: None,
        }
    }

    /// Call a tool at this follower's level; count the answer's document bytes.
    async fn call(
        &mut self,
        mcp: &Mcp,
        tool: &'static str,
        mut args: Value,
    ) -> anyhow::Result<Value> {
        args["detail"] = json!(self.detail);
        let raw = mcp.raw(call_body(tool, &args)).await?;
        let v: Value = serde_json::from_slice(&raw)?;
        let text = v["result"]["content"][0]["text"]
            .as_str()
            .ok_or_else(|| anyhow!("{tool}: no text in {v}"))?;
        let e = self.bytes.entry(tool).or_default();
        e.0 += text.len() as u64;
        if std::env::var("VK_BYTES_DUMP").is_ok() && self.detail == 0 && (e.1 == 50 || e.1 == 51) {
            eprintln!("DUMP {tool}: {text}");
        }
        e.1 += 1;
        Mcp::parse(&raw)
    }

    async fn status(&mut self, mcp: &Mcp, attempt: uuid::Uuid) -> anyhow::Result<()> {
        let mut args = json!({"attempt_id": attempt});
        if let Some(t) = &self.status_token {
            args["since_token"] = t.clone();
        }
        let s = self.call(mcp, "get_attempt_status", args).await?;
        if let Some(state) = s["state"].as_str()
            && self.states.last().map(String::as_str) != Some(state)
        {
            self.states.push(state.to_string());
        }
        self.status_token = Some(s["token"].clone());
        Ok(())
    }

    /// What it learns of the state each tick (and at the end): a status poll or an `until` wait.
    async fn state(&mut self, mcp: &Mcp, attempt: uuid::Uuid) -> anyhow::Result<()> {
        match self.how {
            Loop::Status => self.status(mcp, attempt).await,
            Loop::Until => self.wait_until(mcp, attempt).await,
        }
    }

    /// One `until` wait (1 ms: the tick's time); a `reached` answer gives the state and the
    /// final agent message.
    async fn wait_until(&mut self, mcp: &Mcp, attempt: uuid::Uuid) -> anyhow::Result<()> {
        let args = json!({"attempt_ids": [attempt], "until": UNTIL, "timeout_ms": 1});
        let w = self.call(mcp, "wait_for_attempt_change", args).await?;
        match w["outcome"].as_str() {
            Some("timeout") => Ok(()),
            Some("reached") => {
                let state = w["attempts"][0]["state"].as_str().unwrap_or_default();
                if self.states.last().map(String::as_str) != Some(state) {
                    self.states.push(state.to_string());
                }
                self.final_message = w["final_messages"][0]["text"].as_str().map(str::to_owned);
                Ok(())
            }
            _ => Err(anyhow!("until wait: unexpected answer {w}")),
        }
    }

    /// What the agent reads once the run ended, after its last state read and tail.
    async fn end(&mut self, mcp: &Mcp, attempt: uuid::Uuid) -> anyhow::Result<()> {
        let changes = json!({"attempt_id": attempt});
        self.call(mcp, "get_attempt_changes", changes).await?;
        if self.how == Loop::Status {
            let messages = json!({"attempt_id": attempt});
            self.call(mcp, "tail_session_messages", messages).await?;
        }
        Ok(())
    }

    async fn tail(&mut self, mcp: &Mcp, attempt: uuid::Uuid) -> anyhow::Result<()> {
        loop {
            let mut args = json!({"attempt_id": attempt, "limit": 100});
            if let Some(a) = self.after {
                args["after_entry_index"] = json!(a);
            }
            if let Some(t) = &self.log_token {
                args["since_token"] = t.clone();
            }
            let page = self.call(mcp, "tail_attempt_logs", args).await?;
            for key in ["replaced", "entries"] {
                for e in page[key].as_array().into_iter().flatten() {
                    self.see(e);
                }
            }
            self.log_token = Some(page["token"].clone());
            if page["has_more"] != true {
                return Ok(());
            }
        }
    }

    /// Record one entry, compact (detail 0) or VK's (detail 2).
    fn see(&mut self, e: &Value) {
        let Some(i) = e["entry_index"].as_u64() else {
            return;
        };
        self.indices.insert(i);
        self.after = Some(self.after.map_or(i, |a| a.max(i)));
        let status = if self.detail == 2 {
            let et = &e["entry"]["content"]["entry_type"];
            (et["type"] == "tool_use")
                .then(|| et["status"]["status"].as_str().unwrap_or("").to_string())
        } else {
            e["tool"]["status"].as_str().map(str::to_owned)
        };
        if let Some(s) = status {
            self.tools.insert(i, s);
        }
    }

    fn total(&self) -> u64 {
        self.bytes.values().map(|(b, _)| b).sum()
    }
}

pub(crate) async fn phase_bytes(r: &mut Report, o: &Opts) -> anyhow::Result<()> {
    let total = if o.quick { 400 } else { ENTRIES };
    let cycle = Cycle::load()?;
    for pace in [Pace::Recorded, Pace::PerTick(PER_TICK)] {
        println!(
            "\n== agent loop bytes: one attempt of {total} normalized entries at {}, detail 0 vs 2",
            pace.label()
        );
        let schedule = cycle.schedule(total, pace);
        let ([cheap, full, until0, until2], final_tools) = follow(&schedule, pace).await?;
        judge(r, &[cheap, full], total, &final_tools, pace)?;
        judge_until(r, &[until0, until2], total, &final_tools, pace)?;
    }
    Ok(())
}

/// Run the schedule against a simulator and a daemon with four agents following it in
/// lockstep (each loop at detail 0 and 2); answers the agents and each tool call's final
/// status as VK left it.
async fn follow(
    schedule: &[Vec<Op<'_>>],
    pace: Pace,
) -> anyhow::Result<([Follower; 4], BTreeMap<u64, String>)> {
    let sim = Sim::start(sim_config(100_000)).await?;
    let project = sim.add_project("Bytes", &["demo"]);
    let task = sim.add_task(
        project,
        "Follow me",
        Some("An attempt followed to its end."),
    );
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let dir = tempfile::tempdir()?;
    let log = format!("daemon-bytes-{}.log", pace.label().replace([' ', '/'], "-"));
    let mut d = DaemonProc::spawn(
        &sim.base_url(),
        dir.path(),
        true,
        None,
        &out_dir().join(log),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let mcp = d.mcp();
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    let mut agents = [
        Follower::new(0, Loop::Status),
        Follower::new(2, Loop::Status),
        Follower::new(0, Loop::Until),
        Follower::new(2, Loop::Until),
    ];
    let mut final_tools: BTreeMap<u64, String> = BTreeMap::new();
    let mut last_appended: Option<u64> = None;
    for ops in schedule {
        let mut replaced = Vec::new();
        for op in ops {
            let (index, entry) = match op {
                Op::Append { index, entry } => {
                    let i = sim.append_log(pid, Channel::Normalized, (*entry).clone());
                    ensure!(i == *index, "the simulator numbered entry {index} as {i}");
                    last_appended = Some(i);
                    (i, *entry)
                }
                Op::Replace { index, entry } => {
                    sim.replace_log(pid, Channel::Normalized, *index, (*entry).clone());
                    replaced.push((*index, tool_status(entry)));
                    (*index, *entry)
                }
            };
            if let Some(s) = tool_status(entry) {
                final_tools.insert(index, s);
            }
        }
        settle(&mcp, ids.attempt_id, last_appended, &replaced).await?;
        for a in &mut agents {
            a.state(&mcp, ids.attempt_id).await?;
            a.tail(&mcp, ids.attempt_id).await?;
        }
    }
    let readme = SimFile {
        repo: "demo".into(),
        path: "README.md".into(),
        change: "added".into(),
        additions: 3,
        deletions: 0,
        content: "# Demo\n\nFollowed to its end.\n".into(),
    };
    sim.set_changes(ids.attempt_id, vec![readme]);
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    settle_done(&mcp, ids.attempt_id).await?;
    for a in &mut agents {
        a.state(&mcp, ids.attempt_id).await?;
        a.tail(&mcp, ids.attempt_id).await?;
        a.end(&mcp, ids.attempt_id).await?;
    }
    d.stop().await?;
    Ok((agents, final_tools))
}

/// Assert the cheap loop lost nothing, then report.
fn judge(
    r: &mut Report,
    agents: &[Follower; 2],
    total: usize,
    final_tools: &BTreeMap<u64, String>,
    pace: Pace,
) -> anyhow::Result<()> {
    let [cheap, full] = agents;
    let all: BTreeSet<u64> = (0..total as u64).collect();
    ensure!(cheap.indices == all, "detail 0 missed entry indices");
    ensure!(full.indices == all, "detail 2 missed entry indices");
    ensure!(
        cheap.tools == full.tools,
        "tool calls differ between detail 0 and 2"
    );
    ensure!(
        &cheap.tools == final_tools,
        "a tool call's final status was not seen at detail 0"
    );
    ensure!(
        cheap.states == full.states,
        "states differ: {:?} vs {:?}",
        cheap.states,
        full.states
    );
    ensure!(
        cheap.states.last().map(String::as_str) == Some("completed"),
        "the end was not seen"
    );
    let ratio = cheap.total() as f64 / full.total() as f64;
    print_per_tool("", cheap, full);
    println!(
        "total: {} B at detail 0, {} B at detail 2: {:.1} % ({} tool calls, states {:?})",
        cheap.total(),
        full.total(),
        ratio * 100.0,
        cheap.tools.len(),
        cheap.states
    );
    report_ratio(
        r,
        "agent loop bytes",
        "agent_loop_bytes",
        total,
        pace,
        cheap,
        full,
    );
    Ok(())
}

/// Assert the `until` loop lost nothing and reached the end with the final message; report it.
fn judge_until(
    r: &mut Report,
    agents: &[Follower; 2],
    total: usize,
    final_tools: &BTreeMap<u64, String>,
    pace: Pace,
) -> anyhow::Result<()> {
    let [cheap, full] = agents;
    let all: BTreeSet<u64> = (0..total as u64).collect();
    for a in agents {
        ensure!(
            a.indices == all,
            "until loop, detail {}: missed entry indices",
            a.detail
        );
        ensure!(
            &a.tools == final_tools,
            "until loop, detail {}: tool statuses",
            a.detail
        );
        ensure!(
            a.states == ["completed"],
            "until loop: states {:?}",
            a.states
        );
        ensure!(
            a.final_message.is_some(),
            "until loop: no final agent message"
        );
    }
    let ratio = cheap.total() as f64 / full.total() as f64;
    print_per_tool("until loop, ", cheap, full);
    println!(
        "until loop total: {} B at detail 0, {} B at detail 2: {:.1} %",
        cheap.total(),
        full.total(),
        ratio * 100.0
    );
    report_ratio(
        r,
        "agent loop bytes with until",
        "agent_loop_bytes_until",
        total,
        pace,
        cheap,
        full,
    );
    Ok(())
}

/// Until the cache holds entry `last` and this tick's replacements (each read back with the
/// status VK gave it): both followers then read the same state.
async fn settle(
    mcp: &Mcp,
    attempt: uuid::Uuid,
    last: Option<u64>,
    replaced: &[(u64, Option<String>)],
) -> anyhow::Result<()> {
    for _ in 0..2_000 {
        let page = mcp
            .call(
                "tail_attempt_logs",
                &json!({"attempt_id": attempt, "limit": 1, "detail": 0}),
            )
            .await?;
        let mut ready = page["latest_entry_index"].as_u64() == last;
        for (i, status) in replaced {
            if !ready {
                break;
            }
            let at = mcp
                .call(
                    "tail_attempt_logs",
                    &json!({"attempt_id": attempt, "limit": 1, "cursor": i + 1, "detail": 0}),
                )
                .await?;
            ready = at["entries"][0]["tool"]["status"].as_str() == status.as_deref();
        }
        if ready {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err(anyhow!(
        "the cache never reached entry {last:?} and its replacements"
    ))
}

/// Until the attempt is completed and its change summary is cached.
async fn settle_done(mcp: &Mcp, attempt: uuid::Uuid) -> anyhow::Result<()> {
    for _ in 0..5_000 {
        let s = mcp
            .call(
                "get_attempt_status",
                &json!({"attempt_id": attempt, "detail": 0}),
            )
            .await?;
        let changes = mcp
            .raw(call_body(
                "get_attempt_changes",
                &json!({"attempt_id": attempt, "detail": 0}),
            ))
            .await?;
        // `ready` is left out at detail 0 when true, `false` before any summary is cached.
        let ready = Mcp::parse(&changes).is_ok_and(|c| c["ready"] != false);
        if s["state"] == "completed" && ready && s["result"]["next_tool"] == "get_attempt_changes" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err(anyhow!("the attempt never completed in the cache"))
}

/// Print a loop's bytes per tool at both details.
fn print_per_tool(prefix: &str, cheap: &Follower, full: &Follower) {
    println!("{prefix}bytes per tool (detail 0 | detail 2, calls):");
    for (tool, (b2, n)) in &full.bytes {
        let b0 = cheap.bytes.get(tool).map_or(0, |x| x.0);
        println!("  {tool:24} {b0:>10} | {b2:>10}  ({n} calls)");
    }
}

/// Report a loop's detail-0 / detail-2 ratio as a row, and its bytes per tool under
/// `<key>_recorded_pace` / `<key>_<n>_per_tick`.
fn report_ratio(
    r: &mut Report,
    label: &str,
    key: &str,
    total: usize,
    pace: Pace,
    cheap: &Follower,
    full: &Follower,
) {
    let ratio = cheap.total() as f64 / full.total() as f64;
    r.row(
        &format!(
            "{label}, {total} entries at {}: detail 0 / detail 2",
            pace.label()
        ),
        format!(
            "{} B / {} B = {:.1} %",
            cheap.total(),
            full.total(),
            ratio * 100.0
        ),
        "≤ 25 %",
        Some(ratio <= 0.25),
    );
    let per_tool: BTreeMap<&str, Value> = full
        .bytes
        .iter()
        .map(|(t, (b2, n))| {
            let b0 = cheap.bytes.get(t).map_or(0, |x| x.0);
            (*t, json!({"calls": n, "detail0": b0, "detail2": b2}))
        })
        .collect();
    let key = match pace {
        Pace::Recorded => format!("{key}_recorded_pace"),
        Pace::PerTick(n) => format!("{key}_{n}_per_tick"),
    };
    r.detail(
        &key,
        json!({"entries": total, "pace": pace.label(), "per_tool": per_tool, "ratio": ratio}),
    );
}
