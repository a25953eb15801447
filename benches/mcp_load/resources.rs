//! Phases c4/c5 (issue 18), against a daemon in its default session mode through rmcp's client:
//! c4 `resource_wake`, the latency from the simulator's `append_log` to the subscribed client's
//! `notifications/resources/updated` (beside c1's wait-wake figure); c5 `waiters_progress`,
//! RSS of N parked `wait_for_attempt_change` calls with progress on (rmcp's client sends a
//! `progressToken` with every request), held past the daemon's first progress tick so every
//! wait has streamed a keep-alive, then woken.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rmcp::model::SubscribeRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::daemon::DaemonProc;
use crate::data::{note, out_dir};
use crate::opts::Opts;
use crate::report::{Report, ms, stats};
use crate::scenario::ScenarioA;
use crate::session_waits::{collect, park_waits, running_token};

/// What the clients of these phases hear: resource updates (with their arrival time) and the
/// number of progress notifications.
#[derive(Clone)]
pub(crate) struct Ears {
    pub(crate) updates: Option<mpsc::UnboundedSender<Instant>>,
    pub(crate) progress: Arc<AtomicUsize>,
}

impl rmcp::ClientHandler for Ears {
    async fn on_resource_updated(
        &self,
        _params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if let Some(tx) = &self.updates {
            let _ = tx.send(Instant::now());
        }
    }

    async fn on_progress(
        &self,
        _params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) type Client = RunningService<RoleClient, Ears>;

async fn session_daemon(
    a: &ScenarioA,
    log: &str,
) -> anyhow::Result<(DaemonProc, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let mut d = DaemonProc::spawn(
        &a.sim.base_url(),
        dir.path(),
        false,
        None,
        &out_dir().join(log),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    Ok((d, dir))
}

pub(crate) async fn connect(
    d: &DaemonProc,
    ears: Ears,
    in_flight: usize,
) -> anyhow::Result<Client> {
    let cfg = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", d.addr))
        .max_concurrent_requests(in_flight.max(1));
    ears.serve(StreamableHttpClientTransport::from_config(cfg))
        .await
        .context("rmcp client connects")
}

/// `connect` through a given HTTP client (c7: an HTTP/2 one whose connection sessions share).
pub(crate) async fn connect_with(
    d: &DaemonProc,
    ears: Ears,
    in_flight: usize,
    http: reqwest::Client,
) -> anyhow::Result<Client> {
    let cfg = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", d.addr))
        .max_concurrent_requests(in_flight.max(1));
    ears.serve(StreamableHttpClientTransport::with_client(http, cfg))
        .await
        .context("rmcp client connects over the given HTTP client")
}

/// c4: `append_log` → `notifications/resources/updated` of the attempt's log resource.
pub(crate) async fn phase_resource_wake(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
) -> anyhow::Result<()> {
    println!(
        "\n== c4. resource wake: simulator append_log → notifications/resources/updated (session mode)"
    );
    let (d, _dir) = session_daemon(a, "daemon-c4.log").await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let ears = Ears {
        updates: Some(tx),
        progress: Arc::default(),
    };
    let c = connect(&d, ears, 16).await?;
    running_token(&c, a).await?;
    let (attempt, pid) = a.running[0];
    #[allow(deprecated)]
    c.peer()
        .subscribe(SubscribeRequestParams::new(format!(
            "vk-observer://attempts/{attempt}/logs"
        )))
        .await?;
    let iters = o.iters(300);
    let (mut lat, mut missed) = (Vec::with_capacity(iters), 0usize);
    for i in 0..iters + 10 {
        // Start each round from silence: nothing pending from the previous append.
        tokio::time::sleep(Duration::from_millis(15)).await;
        while rx.try_recv().is_ok() {}
        let t0 = Instant::now();
        a.sim.append_log(
            pid,
            vk_observer_sim::Channel::Normalized,
            note(3_000_000 + i as u64),
        );
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(t1)) if i >= 10 => lat.push(t1.saturating_duration_since(t0)),
            Ok(Some(_)) => {}
            _ => missed += 1,
        }
    }
    let s = stats(&lat);
    println!(
        "  {} updates: p50 {} p90 {} p99 {} min {} max {}; appends without an update within 5 s: {missed}",
        s.n,
        ms(s.p50_us),
        ms(s.p90_us),
        ms(s.p99_us),
        ms(s.min_us),
        ms(s.max_us)
    );
    r.row(
        "resource wake, append_log → notifications/resources/updated, p99 (p50, min)",
        format!(
            "{} ({}, {}); {missed} missed",
            ms(s.p99_us),
            ms(s.p50_us),
            ms(s.min_us)
        ),
        "p99 ≤ 10 ms",
        Some(s.p99_us <= 10_000.0 && missed == 0),
    );
    r.detail(
        "resource_wake",
        json!({"stats": s, "missed": missed, "appends": iters + 10}),
    );
    let _ = c.cancel().await;
    d.stop().await
}

/// c5: N waits parked with progress on, RSS once every wait has streamed a progress event.
pub(crate) async fn phase_waiters_progress(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
) -> anyhow::Result<()> {
    let n = o.waiters;
    let sessions = 100.min(n);
    println!(
        "\n== c5. {n} parked waits with progress on (session mode, {sessions} sessions), held past the first 10 s tick"
    );
    let (d, _dir) = session_daemon(a, "daemon-c5.log").await?;
    let progress = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let ears = Ears {
            updates: None,
            progress: progress.clone(),
        };
        // rmcp's client keeps 16 POSTs in flight per session by default: raise it.
        clients.push(connect(&d, ears, n.div_ceil(sessions)).await?);
    }
    let token = running_token(&clients[0], a).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = d.rss_kb();
    let answered = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let handles = park_waits(&clients, a, &token, n, 60_000, &answered).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss_parked, parked) = (d.rss_kb(), d.waiters_gauge().await.unwrap_or(0));
    // The daemon's default `[mcp] progress_every` is 10 s: wait until each wait sent one.
    let tick_deadline = started + Duration::from_secs(25);
    while progress.load(Ordering::Relaxed) < n && Instant::now() < tick_deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (rss_ticked, ticks) = (d.rss_kb(), progress.load(Ordering::Relaxed));
    let early = answered.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for (k, (_, pid)) in a.running.iter().enumerate() {
        a.sim.append_log(
            *pid,
            vk_observer_sim::Channel::Normalized,
            note(4_000_000 + k as u64),
        );
    }
    let (lat, errors, unchanged) = collect(handles, t0).await?;
    let run = ProgressRun {
        n,
        sessions,
        rss_before_kb: rss_before,
        rss_parked_kb: rss_parked,
        rss_ticked_kb: rss_ticked,
        progress_notifications: ticks,
        parked_at_once: parked as usize,
        early,
        errors,
        unchanged,
        wake_stats: stats(&lat),
    };
    record_progress(r, &run);
    for c in clients {
        let _ = c.cancel().await;
    }
    d.stop().await
}

/// What c5 measured.
#[derive(serde::Serialize)]
struct ProgressRun {
    n: usize,
    sessions: usize,
    rss_before_kb: u64,
    rss_parked_kb: u64,
    rss_ticked_kb: u64,
    progress_notifications: usize,
    parked_at_once: usize,
    early: usize,
    errors: usize,
    unchanged: usize,
    wake_stats: crate::report::Stats,
}

fn record_progress(r: &mut Report, f: &ProgressRun) {
    let mb = |kb: u64| kb as f64 / 1024.0;
    let (n, s) = (f.n, &f.wake_stats);
    println!(
        "  parked at once {} of {n}; VmRSS {:.1} MB parked, {:.1} MB after {} progress notifications (sessions open, no waits: {:.1} MB); answered early {}",
        f.parked_at_once,
        mb(f.rss_parked_kb),
        mb(f.rss_ticked_kb),
        f.progress_notifications,
        mb(f.rss_before_kb),
        f.early
    );
    println!(
        "  woken {}: p50 {} p99 {}; errors {}, unchanged {}",
        s.n,
        ms(s.p50_us),
        ms(s.p99_us),
        f.errors,
        f.unchanged
    );
    let ok = f.parked_at_once == n
        && f.progress_notifications >= n
        && f.early == 0
        && f.errors == 0
        && f.unchanged == 0
        && s.n == n;
    r.row(
        &format!(
            "{n} parked waits with progress on, session mode ({} sessions): daemon VmRSS after every wait sent a progress notification",
            f.sessions
        ),
        format!(
            "{:.1} MB ({:.1} MB before the first tick; sessions open, no waits: {:.1} MB; all held and ticked: {})",
            mb(f.rss_ticked_kb),
            mb(f.rss_parked_kb),
            mb(f.rss_before_kb),
            if ok { "yes" } else { "NO" }
        ),
        "≤ 256 MB",
        Some(f.rss_ticked_kb <= 256 * 1024 && ok),
    );
    r.detail("waiters_progress", f);
}
