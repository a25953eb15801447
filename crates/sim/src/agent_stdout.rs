//! The simulated coding agent's raw stdout, written like the Claude Code CLI's
//! `--output-format=stream-json` (as VK's recordings of a stand-in CLI show it): a `system`
//! `init` line naming the model, assistant lines each with its message's `usage`, and a final
//! `result` line with the run's `usage`, `total_cost_usd`, `duration_ms` and `num_turns` — a
//! failed run's too (`is_error`), while a killed run never writes one. VK stores stdout in read
//! CHUNKS, not lines: the lines are cut into the run's raw entries, the first assistant line
//! split across two chunks (so a reader must put lines back together).

use serde_json::{Value, json};

use super::types::AgentOutcome;

/// The model the simulated agent names (its normalized `system_message` says the same).
pub const SIM_MODEL: &str = "sim-agent-1";
/// Each assistant message's usage: input, output, cache creation, cache read tokens.
pub const SIM_MESSAGE_TOKENS: [u64; 4] = [12, 40, 300, 2000];
/// Each assistant message's cost in USD, as the CLI's `total_cost_usd` sums it.
pub const SIM_MESSAGE_COST_USD: f64 = 0.0125;

/// What a finished simulated run reports in its `result` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimRunUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cost_usd: f64,
    pub num_turns: u64,
}

/// Assistant messages of a run with `raw_entries` raw entries (0 when it writes no stdout).
fn messages(raw_entries: usize) -> usize {
    match raw_entries.saturating_sub(1) {
        0 => 0,
        1 | 2 => 1,
        chunks => chunks - 2,
    }
}

/// The totals a run of `raw_entries` raw entries reports when it ends on its own (None when it
/// writes no stdout or is killed).
pub fn sim_run_usage(raw_entries: usize, outcome: AgentOutcome) -> Option<SimRunUsage> {
    let m = messages(raw_entries) as u64;
    if m == 0 || outcome == AgentOutcome::Killed {
        return None;
    }
    let [input, output, creation, read] = SIM_MESSAGE_TOKENS;
    Some(SimRunUsage {
        input_tokens: input * m,
        output_tokens: output * m,
        cache_creation_input_tokens: creation * m,
        cache_read_input_tokens: read * m,
        cost_usd: SIM_MESSAGE_COST_USD * m as f64,
        num_turns: m,
    })
}

fn usage_json(m: u64) -> Value {
    let [input, output, creation, read] = SIM_MESSAGE_TOKENS;
    json!({"input_tokens": input * m, "output_tokens": output * m,
           "cache_creation_input_tokens": creation * m, "cache_read_input_tokens": read * m,
           "service_tier": "standard"})
}

fn assistant_line(n: usize, prompt: &str) -> String {
    let text = format!("chunk {n}: {prompt}");
    json!({"type": "assistant", "session_id": "sim-session",
           "message": {"id": format!("msg_sim_{n}"), "type": "message", "role": "assistant",
                       "model": SIM_MODEL, "content": [{"type": "text", "text": text}],
                       "stop_reason": null, "usage": usage_json(1)}})
    .to_string()
}

fn result_line(raw_entries: usize, outcome: AgentOutcome) -> Option<String> {
    let totals = sim_run_usage(raw_entries, outcome)?;
    let failed = outcome == AgentOutcome::Fail;
    let m = totals.num_turns;
    let line = json!({"type": "result",
        "subtype": if failed { "error_during_execution" } else { "success" },
        "is_error": failed, "duration_ms": 1000 * m, "num_turns": m, "session_id": "sim-session",
        "result": if failed { "simulated failure" } else { "Done. I made the changes." },
        "total_cost_usd": totals.cost_usd, "usage": usage_json(m),
        "modelUsage": {SIM_MODEL: {"inputTokens": totals.input_tokens,
                                   "outputTokens": totals.output_tokens}}});
    Some(line.to_string())
}

/// The run's raw entries, exactly `raw_entries` of them: the CLI's stderr greeting, then its
/// stdout lines cut into the remaining chunks (see the module doc).
pub(crate) fn raw_entries(raw_entries: usize, prompt: &str, outcome: AgentOutcome) -> Vec<Value> {
    if raw_entries == 0 {
        return Vec::new();
    }
    let mut out = vec![json!({"type": "STDERR", "content": "sim-agent: started\n"})];
    let m = messages(raw_entries);
    if m == 0 {
        return out;
    }
    let init = json!({"type": "system", "subtype": "init", "session_id": "sim-session",
                      "model": SIM_MODEL, "tools": ["Bash", "Write", "Read"]});
    let mut lines = vec![init.to_string()];
    lines.extend((1..=m).map(|n| assistant_line(n, prompt)));
    // A killed run never writes its result: one more assistant line keeps the entry count.
    lines.push(result_line(raw_entries, outcome).unwrap_or_else(|| assistant_line(m + 1, prompt)));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let mut cuts = Vec::new();
    let mut end = lines[0].len() + 1;
    // With two chunks or more, the first assistant line is split in two; with more, the
    // others end their chunks.
    if raw_entries >= 3 {
        cuts.push(end + lines[1].len() / 2);
    }
    if raw_entries > 3 {
        for line in &lines[1..=m] {
            end += line.len() + 1;
            cuts.push(end);
        }
    }
    let mut from = 0;
    for cut in cuts.into_iter().chain([text.len()]) {
        out.push(json!({"type": "STDOUT", "content": &text[from..cut]}));
        from = cut;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdout(entries: &[Value]) -> String {
        entries
            .iter()
            .filter(|e| e["type"] == "STDOUT")
            .map(|e| e["content"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn every_entry_count_keeps_its_count_and_makes_whole_lines() {
        for n in 0..12 {
            let entries = raw_entries(n, "p", AgentOutcome::Succeed);
            assert_eq!(entries.len(), n, "{n} entries");
            let text = stdout(&entries);
            assert!(text.is_empty() || text.ends_with('\n'));
            for line in text.lines() {
                serde_json::from_str::<Value>(line).expect("a whole JSON line");
            }
            if n >= 3 {
                // The first assistant line spans two chunks.
                let second = entries[1]["content"].as_str().unwrap();
                assert!(!second.ends_with('\n'), "{n}: {second}");
            }
        }
    }

    #[test]
    fn the_result_line_carries_the_totals_and_a_killed_run_has_none() {
        let text = stdout(&raw_entries(7, "p", AgentOutcome::Fail));
        let result: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        let totals = sim_run_usage(7, AgentOutcome::Fail).unwrap();
        assert_eq!(result["type"], "result");
        assert_eq!(result["is_error"], true);
        assert_eq!(result["usage"]["output_tokens"], totals.output_tokens);
        assert_eq!(result["num_turns"], 4);
        let killed = stdout(&raw_entries(7, "p", AgentOutcome::Killed));
        assert!(!killed.contains("\"result\""));
        assert_eq!(sim_run_usage(7, AgentOutcome::Killed), None);
    }
}
