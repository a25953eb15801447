//! Phase `scale` (`--scale`, issue 27): catch-up from an empty data dir against the scale board
//! (`sim::scale`: 10,000 tasks, 20,000 attempts and N normalized entries in one project, a
//! 1,000-task project beside it, a 98-task one) served by the simulator over VK's wire (SSE,
//! object and log WebSockets, REST, history pages). Each daemon binary (main's when
//! `VK_BENCH_BASE_BIN` names it, then this build's) starts on its own empty data dir against the
//! same board, one after the other in the same run; timed from its spawn until it is ready,
//! answers `list_tasks` with every task of the big project, and holds every log entry; then its
//! RSS once idle.
//!
//! `cargo bench --bench mcp_load -- --scale` (5 M entries) or `-- --scale=1000000`;
//! `VK_BENCH_QUICK=1`: a tenth of the tasks and attempts (1,000 and 2,000, 100 beside);
//! `VK_BENCH_SCALE_PERF=1` records a `perf` profile of this build's daemon during its catch-up
//! (`target/perf/scale-perf-<label>.data`); `VK_BENCH_SCALE_IDLE_CMD='<shell command>'` runs a
//! command on each idle daemon (`$DAEMON_PID`) after its 20 s RSS, e.g. to save its smaps.

use std::time::{Duration, Instant};

use anyhow::ensure;
use serde::Serialize;
use serde_json::{Value, json};
use vk_observer_sim::scale::{ScaleRows, ScaleSpec};
use vk_observer_sim::{Sim, SimConfig};

use crate::daemon::{DaemonProc, cpu_secs, daemon_bin, dir_bytes, rss_kb};
use crate::data::{out_dir, sim_config};
use crate::report::Report;

/// One daemon's catch-up from empty, every time from its spawn.
#[derive(Serialize, Default)]
pub(crate) struct ScaleRun {
    pub(crate) label: String,
    pub(crate) bin: String,
    /// `/readyz` is 200 (the daemon's own "bootstrapped").
    pub(crate) ready_s: f64,
    /// `list_tasks` of the big project answers with all of its tasks.
    pub(crate) listed_s: f64,
    /// Every log entry of the board received by the writer (`/metrics`) and sampled logs
    /// complete through MCP.
    pub(crate) cached_s: f64,
    pub(crate) entries_per_s: f64,
    pub(crate) daemon_cpu_s: f64,
    pub(crate) simulator_cpu_s: f64,
    pub(crate) peak_rss_kb: u64,
    /// RSS 3 s and 20 s after the catch-up, nothing asked meanwhile.
    pub(crate) idle_rss_3s_kb: u64,
    pub(crate) idle_rss_20s_kb: u64,
    /// `list_tasks(status, limit 50)` on the big project once caught up (one call, wall).
    pub(crate) list_status_ms: f64,
    pub(crate) history_pages: u64,
    pub(crate) log_ws: u64,
    pub(crate) rest_gets: u64,
    pub(crate) dir_bytes: u64,
    /// The daemon's own account of the catch-up (`telemetry::catchup_metrics`, scraped once it
    /// is caught up; empty for a build without them): series → value.
    pub(crate) splits: std::collections::BTreeMap<String, f64>,
    /// Simulator routes called during the catch-up (route → calls).
    pub(crate) routes: std::collections::BTreeMap<String, u64>,
}

/// `--scale` or `--scale=N` on the command line (N entries, default the 5 M); also
/// `VK_BENCH_SCALE_ENTRIES=N`.
pub(crate) fn scale_arg() -> Option<u64> {
    let from_args = std::env::args().find_map(|a| match a.as_str() {
        "--scale" => Some(ScaleSpec::default().entries),
        _ => a.strip_prefix("--scale=")?.parse().ok(),
    });
    let from_env = std::env::var("VK_BENCH_SCALE_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok());
    from_args.map(|n| from_env.unwrap_or(n))
}

pub(crate) async fn phase_scale(r: &mut Report, entries: u64) -> anyhow::Result<()> {
    let quick = std::env::var("VK_BENCH_QUICK").is_ok_and(|v| v != "0");
    let spec = if quick {
        // A tenth of the board (a smoke run, or a dev-profile build).
        ScaleSpec {
            tasks: 1_000,
            attempts: 2_000,
            side_tasks: 100,
            small_tasks: 98,
            entries,
        }
    } else {
        ScaleSpec {
            entries,
            ..ScaleSpec::default()
        }
    };
    println!(
        "\n== scale: catch-up from empty, {} tasks, {} attempts, {entries} entries (+ {} and {} tasks beside)",
        spec.tasks, spec.attempts, spec.side_tasks, spec.small_tasks
    );
    // Logs in VK's database (every history page serves the whole log), VK's default window for
    // the running processes' sockets.
    let sim = Sim::start(SimConfig {
        log_db: true,
        ..sim_config(5000)
    })
    .await?;
    let t = Instant::now();
    let rows = sim.load_scale(spec);
    // The simulator lives in this process: its board's memory is this process's growth.
    let bench_rss_kb = rss_kb(std::process::id());
    println!(
        "  board built in {:.1} s; bench process VmRSS {:.0} MB",
        t.elapsed().as_secs_f64(),
        bench_rss_kb as f64 / 1024.0
    );
    let mut bins = Vec::new();
    if let Ok(base) = std::env::var("VK_BENCH_BASE_BIN") {
        bins.push(("main".to_string(), base));
    }
    bins.push(("this build".to_string(), daemon_bin()));
    let mut runs = Vec::new();
    for (label, bin) in bins {
        let run = catch_up_from_empty(&sim, &rows, spec, &label, &bin).await?;
        print_run(&run, entries);
        runs.push(run);
    }
    report_runs(r, &runs, spec);
    r.detail(
        "scale_catchup",
        json!({"spec": format!("{spec:?}"), "runs": runs, "bench_rss_after_board_kb": bench_rss_kb,
        "loadavg": std::fs::read_to_string("/proc/loadavg").unwrap_or_default()}),
    );
    sim.shutdown().await;
    Ok(())
}

fn print_run(run: &ScaleRun, entries: u64) {
    println!(
        "  {}: ready {:.1} s, list_tasks complete {:.1} s, all {entries} entries {:.1} s ({:.0}/s); daemon CPU {:.1} s, simulator CPU {:.1} s; peak RSS {:.0} MB, idle RSS {:.0} MB (3 s) / {:.0} MB (20 s); list_tasks(status) {:.2} ms; history pages {}, log sockets {}, REST GETs {}; data dir {:.0} MB",
        run.label,
        run.ready_s,
        run.listed_s,
        run.cached_s,
        run.entries_per_s,
        run.daemon_cpu_s,
        run.simulator_cpu_s,
        run.peak_rss_kb as f64 / 1024.0,
        run.idle_rss_3s_kb as f64 / 1024.0,
        run.idle_rss_20s_kb as f64 / 1024.0,
        run.list_status_ms,
        run.history_pages,
        run.log_ws,
        run.rest_gets,
        run.dir_bytes as f64 / 1e6,
    );
    print_splits(run);
}

/// Where this run's time went, from the daemon's own counters (summed over concurrent work).
fn print_splits(run: &ScaleRun) {
    let mut routes: Vec<(&String, &u64)> = run.routes.iter().collect();
    routes.sort_by(|a, b| b.1.cmp(a.1));
    let top: Vec<String> = routes
        .iter()
        .take(8)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!("    routes: {}", top.join(", "));
    if run.splits.is_empty() {
        return;
    }
    let get = |k: &str| run.splits.get(k).copied().unwrap_or(0.0);
    let secs = |k: &str| get(k) / 1e6;
    for kind in ["history", "rest"] {
        let n = get(&format!(
            "vk_observer_upstream_requests_total{{kind=\"{kind}\"}}"
        ));
        let fetch = secs(&format!(
            "vk_observer_upstream_fetch_microseconds_total{{kind=\"{kind}\"}}"
        ));
        let decode = secs(&format!(
            "vk_observer_upstream_decode_microseconds_total{{kind=\"{kind}\"}}"
        ));
        println!(
            "    {kind}: {n:.0} requests, fetch {fetch:.1} s summed ({:.2} ms each), decode {decode:.2} s",
            fetch * 1000.0 / n.max(1.0)
        );
    }
    let batches = get("vk_observer_store_batches_total");
    let groups = get("vk_observer_store_groups_total");
    println!(
        "    writer: {batches:.0} batches in {groups:.0} groups, apply {:.1} s, {:.0} flushes {:.1} s",
        secs("vk_observer_store_apply_microseconds_total"),
        get("vk_observer_store_flushes_total"),
        secs("vk_observer_store_flush_microseconds_total"),
    );
}

fn report_runs(r: &mut Report, runs: &[ScaleRun], spec: ScaleSpec) {
    let entries = spec.entries;
    let full = spec.tasks == ScaleSpec::default().tasks;
    let target_s = if entries >= 5_000_000 { 90.0 } else { 8.0 };
    for run in runs {
        r.row(
            &format!(
                "catch-up from empty, scale board with {entries} entries ({})",
                run.label
            ),
            format!(
                "{:.1} s (ready {:.1} s, list_tasks {:.1} s); daemon CPU {:.1} s",
                run.cached_s, run.ready_s, run.listed_s, run.daemon_cpu_s
            ),
            &format!("≤ {target_s:.0} s"),
            (full && (entries == 1_000_000 || entries >= 5_000_000))
                .then_some(run.cached_s <= target_s),
        );
        r.row(
            &format!("idle RSS after catching up the scale board ({})", run.label),
            format!("{:.0} MB", run.idle_rss_20s_kb as f64 / 1024.0),
            "≤ 150 MB",
            (full && entries >= 5_000_000).then_some(run.idle_rss_20s_kb <= 150 * 1024),
        );
    }
    if let [base, this] = runs {
        println!(
            "  ratio main / this build: catch-up {:.2}×, daemon CPU {:.2}×, idle RSS {:.2}×",
            base.cached_s / this.cached_s,
            base.daemon_cpu_s / this.daemon_cpu_s.max(0.01),
            base.idle_rss_20s_kb as f64 / this.idle_rss_20s_kb.max(1) as f64
        );
    }
}

/// The daemon's `vk_observer_log_entries_received_total`.
async fn entries_received(d: &DaemonProc) -> u64 {
    let Ok(resp) = d
        .http
        .get(format!("http://{}/metrics", d.addr))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    else {
        return 0;
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("vk_observer_log_entries_received_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// The daemon's catch-up counters (`vk_observer_upstream_*`, `vk_observer_store_*` of
/// `telemetry::catchup_metrics`) as they stand.
async fn catchup_splits(d: &DaemonProc) -> std::collections::BTreeMap<String, f64> {
    let Ok(resp) = d
        .http
        .get(format!("http://{}/metrics", d.addr))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    else {
        return Default::default();
    };
    let text = resp.text().await.unwrap_or_default();
    let names = [
        "vk_observer_upstream_requests_total",
        "vk_observer_upstream_fetch_microseconds_total",
        "vk_observer_upstream_decode_microseconds_total",
        "vk_observer_store_",
    ];
    text.lines()
        .filter(|l| names.iter().any(|n| l.starts_with(n)))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Sampled logs (first, middle, last ended process of the big project) hold every entry and
/// are complete.
async fn samples_complete(d: &DaemonProc, rows: &ScaleRows) -> bool {
    let n = rows.logs.len();
    let ended = |k: usize| if k % 100 == 99 { k - 1 } else { k };
    for k in [0, n / 2, n.saturating_sub(2)].map(ended) {
        let Some(&(attempt, _, count)) = rows.logs.get(k) else {
            continue;
        };
        let args = json!({"attempt_id": attempt, "limit": 1});
        let Ok(v) = d.mcp().call("tail_attempt_logs", &args).await else {
            return false;
        };
        let latest_ok = count == 0 || v["latest_entry_index"] == json!(count - 1);
        if !latest_ok || v["log_complete"] != json!(true) {
            return false;
        }
    }
    true
}

async fn listed_all(d: &DaemonProc, rows: &ScaleRows, tasks: usize) -> bool {
    let args = json!({"project_id": rows.project_ids[0], "limit": 50});
    d.mcp()
        .call("list_tasks", &args)
        .await
        .is_ok_and(|v: Value| v["total"] == json!(tasks))
}

/// Starts `perf record` on the daemon when `VK_BENCH_SCALE_PERF` is set.
fn start_perf(pid: u32, label: &str) -> Option<std::process::Child> {
    std::env::var("VK_BENCH_SCALE_PERF").ok()?;
    let out = out_dir().join(format!("scale-perf-{}.data", label.replace(' ', "-")));
    std::process::Command::new("perf")
        .args(["record", "-F", "199", "-g", "-p", &pid.to_string(), "-o"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

fn stop_perf(perf: Option<std::process::Child>) {
    if let Some(mut p) = perf {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &p.id().to_string()])
            .status();
        let _ = p.wait();
    }
}

async fn catch_up_from_empty(
    sim: &Sim,
    rows: &ScaleRows,
    spec: ScaleSpec,
    label: &str,
    bin: &str,
) -> anyhow::Result<ScaleRun> {
    let dir = tempfile::tempdir()?;
    let log = out_dir().join(format!("daemon-scale-{}.log", label.replace(' ', "-")));
    let before = sim.counters();
    let sim_cpu = cpu_secs("self");
    let spawned = Instant::now();
    let mut d = DaemonProc::spawn_bin(bin, &sim.base_url(), dir.path(), true, None, &log)?;
    let perf = start_perf(d.pid(), label);
    d.wait_serving(Duration::from_secs(60)).await?;
    let mut run = ScaleRun {
        label: label.into(),
        bin: bin.into(),
        ..ScaleRun::default()
    };
    let (mut ready, mut listed) = (None, None);
    let cached = loop {
        run.peak_rss_kb = run.peak_rss_kb.max(d.rss_kb());
        if ready.is_none() && d.get_status("/readyz").await == Some(200) {
            ready = Some(spawned.elapsed());
        }
        if ready.is_some() && listed.is_none() && listed_all(&d, rows, spec.tasks).await {
            listed = Some(spawned.elapsed());
        }
        if listed.is_some()
            && entries_received(&d).await >= spec.entries
            && samples_complete(&d, rows).await
        {
            break spawned.elapsed();
        }
        ensure!(
            spawned.elapsed() < Duration::from_secs(1800),
            "{label}: catch-up not done after 1800 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    stop_perf(perf);
    run.splits = catchup_splits(&d).await;
    run.daemon_cpu_s = cpu_secs(&d.pid().to_string());
    run.simulator_cpu_s = cpu_secs("self") - sim_cpu;
    run.ready_s = ready.unwrap_or(cached).as_secs_f64();
    run.listed_s = listed.unwrap_or(cached).as_secs_f64();
    run.cached_s = cached.as_secs_f64();
    run.entries_per_s = spec.entries as f64 / run.cached_s;
    after_catch_up(&d, rows, &mut run).await;
    let after = sim.counters();
    run.rest_gets = after.rest_gets - before.rest_gets;
    run.log_ws = count_routes(&after.by_route, true) - count_routes(&before.by_route, true);
    run.history_pages =
        count_routes(&after.by_route, false) - count_routes(&before.by_route, false);
    run.routes = after
        .by_route
        .iter()
        .map(|(k, v)| (k.clone(), v - before.by_route.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    d.stop().await?;
    run.dir_bytes = dir_bytes(dir.path());
    Ok(run)
}

/// Idle RSS (3 s and 20 s after the catch-up) and one `list_tasks(status)` call.
async fn after_catch_up(d: &DaemonProc, rows: &ScaleRows, run: &mut ScaleRun) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    run.idle_rss_3s_kb = d.rss_kb();
    tokio::time::sleep(Duration::from_secs(17)).await;
    run.idle_rss_20s_kb = d.rss_kb();
    idle_hook(d.pid());
    let args = json!({"project_id": rows.project_ids[0], "status": "done", "limit": 50});
    if let Ok((took, _)) = d.mcp().timed("list_tasks", &args).await {
        run.list_status_ms = took.as_secs_f64() * 1000.0;
    }
}

/// `VK_BENCH_SCALE_IDLE_CMD`: a shell command run (and waited for) once the idle daemon's 20 s
/// RSS is taken, with its pid in `$DAEMON_PID`: e.g. a snapshot of `/proc/$DAEMON_PID/smaps`
/// or the allocator's statistics through `gdb -p` (what holds the idle RSS).
fn idle_hook(pid: u32) {
    let Ok(cmd) = std::env::var("VK_BENCH_SCALE_IDLE_CMD") else {
        return;
    };
    let status = std::process::Command::new("sh")
        .args(["-c", &cmd])
        .env("DAEMON_PID", pid.to_string())
        .status();
    if let Err(e) = status {
        eprintln!("VK_BENCH_SCALE_IDLE_CMD did not run: {e}");
    }
}

/// Log routes called: sockets (`…/ws`) or history pages, both channels.
fn count_routes(by_route: &std::collections::BTreeMap<String, u64>, sockets: bool) -> u64 {
    by_route
        .iter()
        .filter(|(k, _)| k.contains("-logs/v2") && k.ends_with("/ws") == sockets)
        .map(|(_, v)| *v)
        .sum()
}
