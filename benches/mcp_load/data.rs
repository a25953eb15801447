//! Test data (log entries, simulator config) and run metadata (machine, output dir).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use vk_observer_sim::SimConfig;

/// A normalized entry shaped like VK's (as in benches/ingest.rs), ~430 bytes.
pub(crate) fn entry_json(i: u64) -> String {
    format!(
        r#"{{"type":"NORMALIZED_ENTRY","content":{{"timestamp":null,"entry_type":{{"type":"tool_use","tool_name":"Bash","action_type":{{"action":"command_run","command":"cargo test --package demo -- step {i}","result":{{"exit_status":{{"type":"success","success":true}},"output":"running 12 tests\ntest result: ok. 12 passed; 0 failed"}}}},"status":{{"status":"success"}}}},"content":"cargo test --package demo -- step {i}"}}}}"#
    )
}

pub(crate) fn entry_value(i: u64) -> Value {
    serde_json::from_str(&entry_json(i)).unwrap()
}

pub(crate) fn note(i: u64) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": format!("note {i}")}})
}

pub(crate) fn sim_config(history_max_entries: usize) -> SimConfig {
    SimConfig {
        step_delay: Duration::from_millis(1),
        history_max_entries,
        ..SimConfig::default()
    }
}

pub(crate) fn machine() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    m.insert(
        "nproc".into(),
        std::thread::available_parallelism()
            .map(|n| n.get().to_string())
            .unwrap_or_default(),
    );
    m.insert(
        "cpu".into(),
        read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("")
            .trim()
            .to_string(),
    );
    m.insert(
        "mem_total".into(),
        read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("")
            .trim()
            .to_string(),
    );
    m.insert(
        "kernel".into(),
        read("/proc/sys/kernel/osrelease").trim().to_string(),
    );
    m.insert(
        "loadavg_at_start".into(),
        read("/proc/loadavg").trim().to_string(),
    );
    if let Ok(c) = std::env::var("VK_BENCH_COMMIT") {
        m.insert("git_head".into(), c);
    } else if let Ok(o) = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    {
        m.insert(
            "git_head".into(),
            String::from_utf8_lossy(&o.stdout).trim().to_string(),
        );
    }
    m.insert("date_utc".into(), chrono::Utc::now().to_rfc3339());
    m
}

pub(crate) fn out_dir() -> PathBuf {
    let d = std::env::var("VK_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/perf"));
    std::fs::create_dir_all(&d).unwrap();
    d
}
