//! What open boards cost the daemon (issue 41: "≤ 1 % of a core with ten pages open on a busy
//! demo"). A measurement, not a check, so `#[ignore]`d in the suite:
//!
//! ```sh
//! cargo test --release --test board_load -- --ignored --nocapture
//! # or a debug test against a release daemon:
//! cargo build --release && VK_OBSERVER_LOAD_BIN=target/release/vk-observer \
//!     cargo test --test board_load -- --ignored --nocapture
//! ```
//!
//! It starts `vk-observer demo` (the daemon and its simulated VK in one process: the roads, one
//! of them logging every 0.3 s, and a new task every 2 s), reads that process's CPU time from
//! `/proc` over a window (20 s; `VK_BOARD_LOAD_WINDOW_S`) with no page open, then over the same window with [`PAGES`] pages
//! open, then again with none. Each page does what the board's script does: follow
//! `/board/api/events`, re-read `/board/api/board` after events whose cards cannot be patched in
//! (new activity, an attempt not shown; at most once a second), and (one page) follow the
//! long-running attempt's log with `?after=`. The demo
//! grows, so its own cost does too: the pages' cost is their window minus the mean of the two
//! windows around it. Linux only.

use std::io::BufRead;
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");
const PAGES: usize = 10;
/// Each window's length: 20 s, or `VK_BOARD_LOAD_WINDOW_S` (longer windows, steadier figures).
fn window() -> Duration {
    let secs = std::env::var("VK_BOARD_LOAD_WINDOW_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(secs)
}

/// CPU seconds (user + system) the process has used, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc is readable");
    let after = &stat[stat.rfind(')').expect("stat has a comm") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0 // USER_HZ is 100 on Linux
}

/// The share of one core the process used over `window`, in percent.
async fn share(pid: u32, window: Duration) -> f64 {
    let (c0, t0) = (cpu_seconds(pid), Instant::now());
    tokio::time::sleep(window).await;
    (cpu_seconds(pid) - c0) / t0.elapsed().as_secs_f64() * 100.0
}

/// The attempts a board shows, by id.
fn shown(board: &Value) -> std::collections::HashSet<String> {
    let groups = ["approval", "failed", "running", "completed", "idle"];
    let projects = board["projects"].as_array().into_iter().flatten();
    projects
        .flat_map(|p| groups.iter().filter_map(move |g| p[*g].as_array()))
        .flatten()
        .filter_map(|c| c["attempt_id"].as_str().map(str::to_string))
        .collect()
}

/// Whether a change event makes the page read the board again, as the script decides: new
/// activity in a project, or an attempt named that the page does not show or that came without
/// its card (else the event's cards are patched in).
fn board_needed(change: &Value, shown: &std::collections::HashSet<String>) -> bool {
    let attempts = change["attempts"].as_array().cloned().unwrap_or_default();
    let cards = change["cards"].as_array().cloned().unwrap_or_default();
    let patched = cards.len() == attempts.len()
        && cards
            .iter()
            .all(|c| c["attempt_id"].as_str().is_some_and(|a| shown.contains(a)));
    change["projects"].as_array().is_some_and(|p| !p.is_empty()) || !patched
}

/// One page: the event stream, a board read after each event that needs one (at most once a
/// second, as the script reads it), and the log of `follow` (if given) after each event naming
/// it. Runs until aborted.
async fn page(base: String, follow: Option<String>) {
    let http = reqwest::Client::new();
    let read_board = |seen: Option<String>| {
        let q = seen.map(|s| format!("?seen={s}")).unwrap_or_default();
        let request = http.get(format!("{base}/board/api/board{q}")).send();
        async move { request.await.ok()?.json::<Value>().await.ok() }
    };
    let board = read_board(None).await.expect("the board answers");
    let token = board["token"].as_str().unwrap().to_string();
    let mut on_page = shown(&board);
    let mut events = http
        .get(format!("{base}/board/api/events?since={token}"))
        .send()
        .await
        .unwrap();
    let mut buf = String::new();
    let mut after: Option<u64> = None;
    // The last change's token, sent as the page sends it (`?seen=`).
    let mut seen = token.clone();
    let mut board_at = Instant::now();
    let mut board_due = false;
    while let Ok(Some(chunk)) = events.chunk().await {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        let mut named = false;
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data:")) else {
                continue;
            };
            let Ok(c) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            if let Some(t) = c["token"].as_str() {
                seen = t.to_string();
            }
            board_due |= board_needed(&c, &on_page);
            let attempts = c["attempts"].as_array().cloned().unwrap_or_default();
            named |= follow
                .as_ref()
                .is_some_and(|f| attempts.iter().any(|a| a == f.as_str()));
        }
        if board_due && board_at.elapsed() >= Duration::from_secs(1) {
            board_at = Instant::now();
            board_due = false;
            if let Some(b) = read_board(Some(seen.clone())).await {
                on_page = shown(&b);
            }
        }
        if let (true, Some(id)) = (named, &follow) {
            let q = after.map(|a| format!("?after={a}")).unwrap_or_default();
            let url = format!("{base}/board/api/attempts/{id}{q}");
            if let Ok(r) = http.get(url).send().await
                && let Ok(v) = r.json::<Value>().await
            {
                after = v["log"]["latest_entry_index"].as_u64().or(after);
            }
        }
    }
}

/// A JSON answer of the board's API.
async fn get_json(url: String) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// The newest log entry's index of `attempt`, as the board's attempt view reads it.
async fn latest_entry(base: &str, attempt: &str) -> u64 {
    let view = get_json(format!("{base}/board/api/attempts/{attempt}")).await;
    view["log"]["latest_entry_index"].as_u64().unwrap_or(0)
}

/// The long-running road's attempt, once the board shows it running.
async fn long_running(base: &str) -> String {
    let started = Instant::now();
    loop {
        let b = get_json(format!("{base}/board/api/board")).await;
        let found = b["projects"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["running"].as_array().cloned().unwrap_or_default())
            .find(|c| c["task_title"] == vk_observer::demo::roads::LONG_RUNNING);
        if let Some(c) = found {
            return c["attempt_id"].as_str().unwrap().to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the long-running road never ran"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement (about a minute): cargo test --release --test board_load -- --ignored --nocapture"]
async fn ten_open_boards_cost_the_daemon_little() {
    let dir = tempfile::tempdir().unwrap();
    let bin = std::env::var("VK_OBSERVER_LOAD_BIN").unwrap_or_else(|_| BIN.to_string());
    // The daemon's build: this test's own, or the binary given (named by its path).
    let build = match std::env::var("VK_OBSERVER_LOAD_BIN") {
        Ok(path) => path,
        Err(_) if cfg!(debug_assertions) => "debug build".to_string(),
        Err(_) => "release build".to_string(),
    };
    let mut demo = std::process::Command::new(&bin)
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--every",
            "2",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the demo starts");
    let stderr = std::io::BufReader::new(demo.stderr.take().unwrap());
    let addr = stderr
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split("daemon at http://")
                .nth(1)
                .map(|r| r.split_whitespace().next().unwrap().to_string())
        })
        .expect("the demo prints its address");
    let base = format!("http://{addr}");
    let pid = demo.id();
    let follow = long_running(&base).await;
    // The demo grows (a task every 2 s), so its own cost grows too: the window with pages open
    // is compared with the mean of a window without pages before it and one after it.
    let before = share(pid, window()).await;
    let pages: Vec<_> = (0..PAGES)
        .map(|i| tokio::spawn(page(base.clone(), (i == 0).then(|| follow.clone()))))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let logged_before = latest_entry(&base, &follow).await;
    let open = share(pid, window()).await;
    let logged = latest_entry(&base, &follow).await - logged_before;
    pages.iter().for_each(|p| p.abort());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = share(pid, window()).await;
    let _ = demo.kill();
    let _ = demo.wait();
    // A demo whose long-running road stopped logging is not busy: that run measures nothing.
    let expected = window().as_secs_f64() / 0.3;
    assert!(
        logged as f64 > expected / 2.0,
        "the long-running road logged {logged} entries in the pages' window (about {expected:.0} expected): not a busy demo"
    );
    let idle = (before + after) / 2.0;
    println!(
        "demo process: {before:.1} % then {after:.1} % of a core with no page open, {open:.1} % with {PAGES} pages open between ({logged} log entries): the pages cost {:.1} % of a core ({})",
        open - idle,
        build
    );
}
