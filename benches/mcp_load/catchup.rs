//! Phase e: restart catch-up of N entries written while the daemon was down. With
//! `VK_BENCH_BASE_BIN` (main's build) both daemons catch up from the same simulator in the same
//! run, each on its own data dir: main's first, then this build's.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::ensure;
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;
use vk_observer_sim::{RunReason, Sim, SimConfig};

use crate::daemon::{DaemonProc, cpu_secs, daemon_bin, dir_bytes};
use crate::data::{entry_json, entry_value, out_dir, sim_config};
use crate::opts::Opts;
use crate::report::Report;

/// What one restart took, all from the spawn of the daemon.
#[derive(Serialize)]
pub(crate) struct Restart {
    /// `/healthz` answers.
    pub(crate) serving_s: f64,
    /// The first resync began (the daemon's own `resyncing with VK` log line, else the
    /// simulator seeing the daemon's first WebSocket).
    pub(crate) resync_s: f64,
    /// The daemon's SSE stream connected (`connected to VK's event stream`): an idle VK sends
    /// its SSE headers only with its first keep-alive, 15 s after the connect.
    pub(crate) sse_connected_s: Option<f64>,
    /// `/readyz` is 200 (SSE connected, resync done).
    pub(crate) ready_s: f64,
    /// The last entry is cached (and the log complete when the process ended).
    pub(crate) cached_s: f64,
    pub(crate) daemon_cpu_s: f64,
    pub(crate) bench_process_cpu_s: f64,
    pub(crate) peak_rss_kb: u64,
}

pub(crate) async fn restart_until_cached(
    sim: &Sim,
    bin: &str,
    dir: &Path,
    log: &Path,
    attempt: Uuid,
    last: u64,
    finished: bool,
) -> anyhow::Result<(DaemonProc, Restart)> {
    let tail = json!({"attempt_id": attempt, "limit": 1});
    let bench_cpu = cpu_secs("self");
    let ws_before = sim.counters().ws_connections;
    let spawned = Instant::now();
    let spawned_wall = chrono::Utc::now();
    let mut d = DaemonProc::spawn_bin(bin, &sim.base_url(), dir, true, None, log)?;
    d.wait_serving(Duration::from_secs(60)).await?;
    let serving = spawned.elapsed();
    let mcp = d.mcp();
    let (mut ready, mut resync, mut peak) = (None, None, 0);
    let cached = loop {
        peak = peak.max(d.rss_kb());
        if resync.is_none() && sim.counters().ws_connections > ws_before {
            resync = Some(spawned.elapsed());
        }
        if ready.is_none() && d.get_status("/readyz").await == Some(200) {
            ready = Some(spawned.elapsed());
        }
        if let Ok(v) = mcp.call("tail_attempt_logs", &tail).await
            && v["latest_entry_index"] == json!(last)
            && (!finished || v["log_complete"] == json!(true))
        {
            break spawned.elapsed();
        }
        ensure!(
            spawned.elapsed() < Duration::from_secs(900),
            "catch-up not done after 900 s"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    // `2026-…Z  INFO vk_observer_ingest::coordinator: resyncing with VK reason=…`
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let logged = |needle: &str| {
        let line = text.lines().find(|l| l.contains(needle))?;
        let ts = chrono::DateTime::parse_from_rfc3339(line.split_whitespace().next()?).ok()?;
        Some((ts.with_timezone(&chrono::Utc) - spawned_wall).as_seconds_f64())
    };
    let r = Restart {
        serving_s: serving.as_secs_f64(),
        resync_s: logged("resyncing with VK")
            .unwrap_or_else(|| resync.unwrap_or(cached).as_secs_f64()),
        sse_connected_s: logged("connected to VK's event stream"),
        ready_s: ready.unwrap_or(cached).as_secs_f64(),
        cached_s: cached.as_secs_f64(),
        daemon_cpu_s: cpu_secs(&d.pid().to_string()),
        bench_process_cpu_s: cpu_secs("self") - bench_cpu,
        peak_rss_kb: peak,
    };
    Ok((d, r))
}

/// The daemon builds to measure: main's (`VK_BENCH_BASE_BIN`) if given, then this one.
fn builds() -> Vec<(&'static str, String)> {
    let mut bins = Vec::new();
    if let Ok(base) = std::env::var("VK_BENCH_BASE_BIN") {
        bins.push(("main", base));
    }
    bins.push(("this build", daemon_bin()));
    bins
}

/// History pages the simulator has served so far.
fn history_pages(sim: &Sim) -> u64 {
    sim.counters()
        .by_route
        .iter()
        .filter(|(k, _)| k.contains("normalized-logs/v2") && !k.ends_with("/ws"))
        .map(|(_, v)| *v)
        .sum::<u64>()
}

/// One build's catch-up, for the report.
struct Measured {
    label: &'static str,
    restart: Restart,
    pages: u64,
    files: u64,
}

/// `finished`: the process ends while the daemon is down (catch-up by history v2, pages of
/// 1000); otherwise it keeps running (catch-up by the log WebSocket, which replays everything).
pub(crate) async fn catch_up(r: &mut Report, o: &Opts, finished: bool) -> anyhow::Result<()> {
    let n = o.catchup;
    let how = if finished {
        "process ended while down → history v2, 1000 per page"
    } else {
        "process still running → log WebSocket replay of VK's last 5000 + history pages below"
    };
    println!("\n== e. restart catch-up of {n} entries ({how})");
    // A running process: VK's defaults — the log WS replays the in-memory window
    // (VK_LOG_HISTORY_MAX_ENTRIES = 5000), older entries come from history pages (logs in VK's
    // database). An ended process: history pages only (window raised so they hold every entry).
    let window = if finished { n as usize + 100_000 } else { 5000 };
    let sim = Sim::start(SimConfig {
        log_db: !finished,
        ..sim_config(window)
    })
    .await?;
    let project = sim.add_project("Catch-up", &["cu"]);
    let task = sim.add_task(project, "Catch-up bench", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    for k in 0..10 {
        sim.append_log(pid, vk_observer_sim::Channel::Normalized, entry_value(k));
    }
    let builds = builds();
    let kind = if finished { "history" } else { "ws" };
    let log = |label: &str, run: u32| {
        let tag = if label == "main" { "-main" } else { "" };
        out_dir().join(format!("daemon-e-{kind}{tag}-{run}.log"))
    };
    let mut dirs = Vec::new();
    for (label, bin) in &builds {
        let dir = tempfile::tempdir()?;
        let (d, _) = restart_until_cached(
            &sim,
            bin,
            dir.path(),
            &log(label, 1),
            ids.attempt_id,
            9,
            false,
        )
        .await?;
        d.stop().await?;
        dirs.push(dir);
    }
    let t = Instant::now();
    let mut raw_bytes = 0u64;
    for k in 10..10 + n {
        raw_bytes += entry_json(k).len() as u64;
        sim.append_log(pid, vk_observer_sim::Channel::Normalized, entry_value(k));
    }
    if finished {
        sim.finish_process(pid, vk_observer_sim::ProcessStatus::Completed, Some(0));
    }
    println!(
        "  simulator appended {n} entries while the daemon was down ({:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let mut runs = Vec::new();
    for ((label, bin), dir) in builds.iter().zip(&dirs) {
        runs.push(
            measure(
                &sim,
                label,
                bin,
                dir.path(),
                &log(label, 2),
                &ids,
                n,
                finished,
            )
            .await?,
        );
        print_run(runs.last().expect("just pushed"), n, raw_bytes);
    }
    report_runs(r, &runs, n, raw_bytes, how, finished);
    let mut detail = json!({"entries": n, "raw_bytes": raw_bytes,
        "loadavg_after": std::fs::read_to_string("/proc/loadavg").unwrap_or_default()});
    for m in &runs {
        detail[m.label] = json!({"restart": m.restart, "history_pages": m.pages,
                                 "dir_bytes": m.files});
    }
    if !finished {
        // Restart again with the big log cached and 1 % new entries: VK's WS replays all of it.
        let m = (n / 100).max(1);
        for k in 10 + n..10 + n + m {
            sim.append_log(pid, vk_observer_sim::Channel::Normalized, entry_value(k));
        }
        for ((label, bin), dir) in builds.iter().zip(&dirs) {
            let last = n + m + 9;
            let (d, rs2) = restart_until_cached(
                &sim,
                bin,
                dir.path(),
                &log(label, 3),
                ids.attempt_id,
                last,
                false,
            )
            .await?;
            d.stop().await?;
            restart_with_cache_row(r, label, n, m, &rs2);
            detail[*label]["restart_with_cache"] = json!({"new_entries": m, "restart": rs2});
        }
    }
    r.detail(
        if finished {
            "catchup_history"
        } else {
            "catchup_ws"
        },
        detail,
    );
    sim.shutdown().await;
    Ok(())
}

/// One build's restart after `n` entries were written while it was down, checked complete.
#[allow(clippy::too_many_arguments)]
async fn measure(
    sim: &Sim,
    label: &'static str,
    bin: &str,
    dir: &Path,
    log: &Path,
    ids: &vk_observer_sim::AttemptIds,
    n: u64,
    finished: bool,
) -> anyhow::Result<Measured> {
    let pages_before = history_pages(sim);
    let (d, restart) =
        restart_until_cached(sim, bin, dir, log, ids.attempt_id, n + 9, finished).await?;
    // Every entry is there (the oldest page too).
    let v = d
        .mcp()
        .call(
            "tail_attempt_logs",
            &json!({"attempt_id": ids.attempt_id, "cursor": 5, "limit": 5}),
        )
        .await?;
    ensure!(
        v["entries"].as_array().map(Vec::len) == Some(5)
            && v["entries"][0]["entry_index"] == json!(0),
        "{label}: oldest entries missing: {v}"
    );
    d.stop().await?;
    Ok(Measured {
        label,
        restart,
        pages: history_pages(sim) - pages_before,
        files: dir_bytes(dir),
    })
}

fn print_run(m: &Measured, n: u64, raw_bytes: u64) {
    let rs = &m.restart;
    println!(
        "  {}: restart → serving {:.0} ms → resync began {:.2} s (SSE connected {}) → ready {:.2} s → all {n} entries cached {:.2} s ({:.0} entries/s after the resync began); daemon CPU {:.1} s, bench process (simulator) CPU {:.1} s; history pages {}; peak daemon RSS {:.0} MB; data dir {:.0} MB ({:.2}× the raw bytes); load average {}",
        m.label,
        rs.serving_s * 1000.0,
        rs.resync_s,
        rs.sse_connected_s
            .map_or("?".to_string(), |t| format!("{t:.2} s")),
        rs.ready_s,
        rs.cached_s,
        n as f64 / (rs.cached_s - rs.resync_s),
        rs.daemon_cpu_s,
        rs.bench_process_cpu_s,
        m.pages,
        rs.peak_rss_kb as f64 / 1024.0,
        m.files as f64 / 1e6,
        m.files as f64 / raw_bytes as f64,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}

/// Rows of the report: this build's under the names earlier runs used, main's marked.
fn report_runs(
    r: &mut Report,
    runs: &[Measured],
    n: u64,
    raw_bytes: u64,
    how: &str,
    finished: bool,
) {
    for m in runs {
        let rs = &m.restart;
        let tag = if m.label == "main" { " — main" } else { "" };
        let ingest_s = rs.cached_s - rs.resync_s;
        r.row(
            &format!("restart catch-up of {n} entries ({how}){tag}"),
            format!(
                "{:.1} s from spawn = {:.1} s until the resync starts + {:.1} s ingest ({:.0} entries/s); daemon CPU {:.1} s, simulator (bench process) CPU {:.1} s",
                rs.cached_s,
                rs.resync_s,
                ingest_s,
                n as f64 / ingest_s,
                rs.daemon_cpu_s,
                rs.bench_process_cpu_s
            ),
            "≤ 8 s for 1 M",
            (n >= 1_000_000).then_some(rs.cached_s <= 8.0),
        );
        let ratio = m.files as f64 / raw_bytes as f64;
        r.row(
            &format!(
                "data dir bytes per raw log byte after ingesting {n} entries from VK ({}){tag}",
                if finished { "history" } else { "WS" }
            ),
            format!(
                "{ratio:.2}× ({:.0} MB / {:.0} MB)",
                m.files as f64 / 1e6,
                raw_bytes as f64 / 1e6
            ),
            "≤ 2×",
            Some(ratio <= 2.0),
        );
    }
}

fn restart_with_cache_row(r: &mut Report, label: &str, n: u64, m: u64, rs2: &Restart) {
    println!(
        "  {label}: restart with {n} cached and {m} new: resync began {:.2} s → ready {:.2} s → cached {:.2} s; daemon CPU {:.1} s",
        rs2.resync_s, rs2.ready_s, rs2.cached_s, rs2.daemon_cpu_s
    );
    let tag = if label == "main" { " — main" } else { "" };
    r.row(
        &format!("restart with {n} entries cached and {m} new while down{tag}"),
        format!(
            "{:.1} s from spawn = {:.1} s until the resync + {:.1} s",
            rs2.cached_s,
            rs2.resync_s,
            rs2.cached_s - rs2.resync_s
        ),
        "—",
        None,
    );
}
