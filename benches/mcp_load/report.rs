//! Results: latency stats, the summary table rows, and writing results.json/results.md.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::data::out_dir;
use crate::plot::plot;

/// Latency summary in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Stats {
    pub(crate) n: usize,
    pub(crate) p50_us: f64,
    pub(crate) p90_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) min_us: f64,
    pub(crate) max_us: f64,
    pub(crate) mean_us: f64,
}

pub(crate) fn stats(v: &[Duration]) -> Stats {
    assert!(!v.is_empty(), "no samples");
    let mut us: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    us.sort_by(f64::total_cmp);
    // Nearest rank.
    let pct = |p: f64| us[((p * us.len() as f64).ceil() as usize).clamp(1, us.len()) - 1];
    Stats {
        n: us.len(),
        p50_us: pct(0.50),
        p90_us: pct(0.90),
        p99_us: pct(0.99),
        min_us: us[0],
        max_us: us[us.len() - 1],
        mean_us: us.iter().sum::<f64>() / us.len() as f64,
    }
}

pub(crate) fn ms(us: f64) -> String {
    if us >= 100_000.0 {
        format!("{:.0} ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// One line of the summary table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) figure: String,
    pub(crate) measured: String,
    pub(crate) target: String,
    /// None: informational (no target).
    pub(crate) met: Option<bool>,
}

#[derive(Default, Serialize, Deserialize)]
pub(crate) struct Report {
    pub(crate) machine: BTreeMap<String, String>,
    pub(crate) rows: Vec<Row>,
    pub(crate) details: BTreeMap<String, Value>,
}

impl Report {
    pub(crate) fn row(&mut self, figure: &str, measured: String, target: &str, met: Option<bool>) {
        let mark = match met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "info",
        };
        println!("  [{mark:>6}] {figure}: {measured} (target {target})");
        self.rows.push(Row {
            figure: figure.to_string(),
            measured,
            target: target.to_string(),
            met,
        });
    }
    pub(crate) fn detail(&mut self, key: &str, v: impl Serialize) {
        self.details
            .insert(key.to_string(), serde_json::to_value(v).unwrap());
    }
}

pub(crate) fn write_outputs(r: &Report) -> anyhow::Result<()> {
    let dir = out_dir();
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(r)?)?;
    let mut md = String::from("| figure | measured | target | |\n|---|---|---|---|\n");
    for row in &r.rows {
        let mark = match row.met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "",
        };
        md.push_str(&format!(
            "| {} | {} | {} | {mark} |\n",
            row.figure, row.measured, row.target
        ));
    }
    std::fs::write(dir.join("results.md"), &md)?;
    if let Some(svg) = plot(r) {
        std::fs::write(dir.join("latency.svg"), svg)?;
    }
    println!("\n{md}");
    println!(
        "wrote {}/results.json, results.md and latency.svg",
        dir.display()
    );
    Ok(())
}
