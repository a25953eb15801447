//! The attempt the bytes phase follows: VK's recorded live normalized-log frames
//! (tests/fixtures/vk-wire/samples/ws_normalized_logs_live.jsonl) replayed in a loop until the
//! run holds the wanted number of entries, and the schedule that says in which 2-s tick of the
//! agents' loop each frame lands.
//!
//! Each appended entry is the one VK first sent (a tool call `created`, with `metadata`); the
//! tool call VK finished in place is followed by its recorded `replace` frame (status and
//! result, no `metadata`); a call VK never finished stays `created`, as recorded. Two paces:
//! the recording's own clock (each frame at its recorded time `t`, six entries per 10.4 s
//! cycle) and a fast one (`n` appends per tick, VK finishing a tick's tool calls at the next).

use anyhow::{Context as _, ensure};
use serde_json::Value;

/// One recorded frame of the cycle.
pub(crate) struct Frame {
    /// Seconds from the start of the recorded run.
    t: f64,
    /// Index of the entry within the recorded cycle.
    index: usize,
    /// The entry as VK sent it.
    pub(crate) entry: Value,
    /// A `replace` frame (else an `append`).
    replace: bool,
}

/// The recorded cycle: its frames in order and its length in seconds (up to `finished`).
pub(crate) struct Cycle {
    frames: Vec<Frame>,
    appends: usize,
    secs: f64,
}

/// How fast the run writes its entries, against the agents' 2-s loop.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pace {
    /// Each frame at its recorded time.
    Recorded,
    /// `n` appends per tick; a tick's tool calls are finished at the start of the next.
    PerTick(usize),
}

impl Pace {
    pub(crate) fn label(self) -> String {
        match self {
            Pace::Recorded => "recorded pace".into(),
            Pace::PerTick(n) => format!("{n} entries per 2-s tick"),
        }
    }
}

/// What the run does to the simulator's log, in order.
pub(crate) enum Op<'a> {
    /// Append the entry; it becomes global entry `index`.
    Append { index: u64, entry: &'a Value },
    /// Rewrite global entry `index` in place.
    Replace { index: u64, entry: &'a Value },
}

impl Cycle {
    pub(crate) fn load() -> anyhow::Result<Cycle> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/vk-wire/samples/ws_normalized_logs_live.jsonl");
        let text = std::fs::read_to_string(&path).context("ws_normalized_logs_live.jsonl")?;
        let (mut frames, mut appends, mut secs) = (Vec::new(), 0, 0.0);
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let f: Value = serde_json::from_str(line)?;
            let t = f["t"].as_f64().context("a frame without t")?;
            let d = &f["data"];
            match (d["type"].as_str(), d["entry_index"].as_u64()) {
                (Some(kind @ ("append" | "replace")), Some(i)) => {
                    let replace = kind == "replace";
                    ensure!(
                        replace || i as usize == appends,
                        "recorded appends are in index order"
                    );
                    ensure!(
                        !replace || (i as usize) < appends,
                        "replace of an unseen entry"
                    );
                    appends += usize::from(!replace);
                    frames.push(Frame {
                        t,
                        index: i as usize,
                        entry: d["entry"].clone(),
                        replace,
                    });
                }
                (Some("finished"), _) => secs = t,
                _ => {}
            }
        }
        ensure!(
            appends > 0 && secs > 0.0,
            "no recorded run in {}",
            path.display()
        );
        Ok(Cycle {
            frames,
            appends,
            secs,
        })
    }

    /// The ops of a run of `total` entries, grouped by the tick after which the agents read
    /// (tick `k` covers `[2k, 2k + 2)` s), in stream order within a tick.
    pub(crate) fn schedule(&self, total: usize, pace: Pace) -> Vec<Vec<Op<'_>>> {
        // (tick, order within the tick, op)
        let mut timed: Vec<(u64, f64, Op<'_>)> = Vec::new();
        let cycles = total.div_ceil(self.appends);
        let mut seq = 0.0;
        for c in 0..cycles {
            for f in &self.frames {
                let global = (c * self.appends + f.index) as u64;
                if global as usize >= total {
                    continue;
                }
                seq += 1.0;
                let (tick, order) = match pace {
                    Pace::Recorded => {
                        let at = c as f64 * self.secs + f.t;
                        ((at / 2.0).floor() as u64, at * 1e6 + seq)
                    }
                    // Replacements open the next tick, before its appends.
                    Pace::PerTick(n) if f.replace => ((global as usize / n) as u64 + 1, seq),
                    Pace::PerTick(n) => ((global as usize / n) as u64, 1e12 + seq),
                };
                let op = if f.replace {
                    Op::Replace {
                        index: global,
                        entry: &f.entry,
                    }
                } else {
                    Op::Append {
                        index: global,
                        entry: &f.entry,
                    }
                };
                timed.push((tick, order, op));
            }
        }
        timed.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let ticks = timed.last().map_or(0, |t| t.0 as usize + 1);
        let mut out: Vec<Vec<Op<'_>>> = (0..ticks).map(|_| Vec::new()).collect();
        for (tick, _, op) in timed {
            out[tick as usize].push(op);
        }
        out
    }
}

/// A tool use's status as VK's entry says it (None for other kinds).
pub(crate) fn tool_status(e: &Value) -> Option<String> {
    let et = &e["content"]["entry_type"];
    (et["type"] == "tool_use").then(|| et["status"]["status"].as_str().unwrap_or("").to_string())
}
