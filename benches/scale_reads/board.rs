//! The scale_reads bench's board data and disk report: which stores to build
//! (`VK_BENCH_COMPRESSION`), each log entry's JSON (the scale board's template or the recorded
//! real VK entries), the raw JSON the disk is compared with, and the per-table disk report.

use serde_json::{Value, json};
use vk_observer_sim::scale::{ScaleRows, scale_entry};
use vk_observer_store::{Store, StoreSettings};

/// The stores to build for `VK_BENCH_COMPRESSION`.
pub fn compression_modes(knob: Option<&str>) -> Vec<(&'static str, StoreSettings)> {
    let mode = |name: &str| match name.trim() {
        "plain" | "off" => Some(("plain", store_settings(false, false))),
        "entries" => Some(("entries", store_settings(true, false))),
        "pages" | "on" => Some(("pages", store_settings(false, true))),
        _ => None,
    };
    let names = match knob {
        None => return vec![("default", StoreSettings::default())],
        Some("all") => "plain,entries,pages",
        Some("both") => "plain,pages",
        Some(list) => list,
    };
    names.split(',').filter_map(mode).collect()
}

fn store_settings(compression: bool, page_compression: bool) -> StoreSettings {
    StoreSettings {
        compression,
        page_compression,
    }
}

/// Entry `i` of a process's log: the scale board's template, or with `VK_BENCH_ENTRIES=recorded`
/// the recorded real VK entries, cycled.
pub fn entry_json(i: u64) -> String {
    static RECORDED: std::sync::OnceLock<Option<Vec<String>>> = std::sync::OnceLock::new();
    let recorded = RECORDED.get_or_init(|| {
        (std::env::var("VK_BENCH_ENTRIES").as_deref() == Ok("recorded")).then(recorded_entries)
    });
    match recorded {
        Some(all) => all[(i % all.len() as u64) as usize].clone(),
        None => scale_entry(i),
    }
}

/// Every distinct log entry (normalized and raw) in the recorded VK frames of
/// tests/fixtures/vk-wire/samples, compact as VK sends them.
fn recorded_entries() -> Vec<String> {
    fn walk(v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                if let Some(e @ Value::Object(_)) = m.get("entry") {
                    out.insert(e.to_string());
                }
                m.values().for_each(|v| walk(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vk-wire/samples"
    );
    let mut out = std::collections::BTreeSet::new();
    for file in std::fs::read_dir(dir).expect("fixtures").flatten() {
        let name = file.file_name().to_string_lossy().into_owned();
        if !["normalized", "raw_logs", "raw_history"]
            .iter()
            .any(|k| name.contains(k))
        {
            continue;
        }
        let text = std::fs::read_to_string(file.path()).expect("fixture");
        let docs: Vec<Value> = if name.ends_with(".jsonl") {
            text.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        } else {
            serde_json::from_str(&text).into_iter().collect()
        };
        docs.iter().for_each(|d| walk(d, &mut out));
    }
    println!("recorded entries: {} distinct", out.len());
    out.into_iter().collect()
}

/// The raw JSON of the board: every object's JSON and every log entry's JSON, as VK's REST
/// answers and stream messages carry them (without the frames around them).
pub fn raw_json_bytes(rows: &ScaleRows) -> u64 {
    let values = rows
        .projects
        .iter()
        .chain(rows.repos.iter().flat_map(|(_, v)| v))
        .chain(rows.tasks.iter().flat_map(|(_, v)| v))
        .chain(rows.attempts.iter().flat_map(|(_, v)| v))
        .chain(rows.sessions.iter().flat_map(|(_, v)| v))
        .chain(rows.processes.iter().flat_map(|(_, v)| v));
    let objects: u64 = values.map(|v| v.to_string().len() as u64).sum();
    let entries: u64 = rows
        .logs
        .iter()
        .flat_map(|&(_, _, n)| 0..n)
        .map(|i| entry_json(i).len() as u64)
        .sum();
    objects + entries
}

/// Disk against the raw JSON: what sled's files take, what the store's live keys and values
/// add up to, per table.
pub fn disk_report(store: &Store, raw: u64, disk: u64) -> anyhow::Result<Value> {
    let tables = store.bytes_by_table()?;
    let live: u64 = tables.iter().map(|t| t.key_bytes + t.value_bytes).sum();
    println!(
        "disk: {:.1} MB on disk, {:.1} MB live keys+values, {:.1} MB raw JSON: disk/raw {:.2}, live/raw {:.2}",
        disk as f64 / 1e6,
        live as f64 / 1e6,
        raw as f64 / 1e6,
        disk as f64 / raw as f64,
        live as f64 / raw as f64
    );
    for t in &tables {
        println!(
            "  table 0x{:02X}: {:>9} entries, keys {:>8.1} MB, values {:>8.1} MB",
            t.table,
            t.entries,
            t.key_bytes as f64 / 1e6,
            t.value_bytes as f64 / 1e6
        );
    }
    Ok(json!({
        "raw_json_bytes": raw,
        "live_bytes": live,
        "disk_over_raw": disk as f64 / raw as f64,
        "tables": tables.iter().map(|t| json!({"table": t.table, "entries": t.entries,
            "key_bytes": t.key_bytes, "value_bytes": t.value_bytes})).collect::<Vec<_>>(),
    }))
}
