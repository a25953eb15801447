//! `/metrics` of a fresh daemon, before VK has sent anything: every metric is described
//! (`# HELP`), and every counter is already exported at 0 with each known label value, so
//! dashboards and `rate()` work from the first scrape instead of showing "no data".
//!
//! The real binary is used because the Prometheus recorder is process-global and installed by
//! `main`; the upstream is a socket that accepts connections and never answers, so nothing can
//! arrive from VK while the test looks.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vk_observer_telemetry::{self as t, label};

/// Kills the daemon when the test ends, passed or not.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

async fn scrape(addr: &str) -> String {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(r) = reqwest::get(format!("http://{addr}/metrics")).await
            && r.status().is_success()
        {
            return r.text().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("daemon at {addr} never served /metrics");
}

/// The exposition split into `# HELP` names, `# TYPE` names with their type, and samples
/// (`name{labels}` → value).
struct Exposition {
    help: BTreeSet<String>,
    types: BTreeMap<String, String>,
    samples: BTreeMap<String, f64>,
}

fn parse(text: &str) -> Exposition {
    let mut e = Exposition {
        help: BTreeSet::new(),
        types: BTreeMap::new(),
        samples: BTreeMap::new(),
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        if let Some(rest) = line.strip_prefix("# HELP ") {
            e.help.insert(rest.split(' ').next().unwrap().to_string());
        } else if line.starts_with("# TYPE ") {
            let (name, kind) = (words.nth(2).unwrap(), words.next().unwrap());
            e.types.insert(name.to_string(), kind.to_string());
        } else if !line.starts_with('#') {
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            e.samples.insert(series.to_string(), value.parse().unwrap());
        }
    }
    e
}

fn series(name: &str, labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return name.to_string();
    }
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{name}{{{}}}", inner.join(","))
}

/// Every counter series `register` promises, as the exporter prints it.
fn registered_counters() -> Vec<String> {
    let mut out: Vec<String> = [
        t::EVENTS_APPLIED,
        t::LOG_ENTRIES_RECEIVED,
        t::STORE_BATCH_ERRORS,
        t::WAITS_PARKED,
        t::IDEMPOTENT_REPLAYS,
        t::USAGE_GARBAGE,
        t::RESOURCE_UPDATES,
    ]
    .iter()
    .map(|n| series(n, &[]))
    .collect();
    let by = |name, key, values: &[&str]| -> Vec<String> {
        values.iter().map(|v| series(name, &[(key, v)])).collect()
    };
    out.extend(by(t::GARBAGE_FRAMES, label::STREAM, t::GARBAGE_STREAMS));
    out.extend(by(
        t::UPSTREAM_RECONNECTS,
        label::STREAM,
        t::UPSTREAM_STREAMS,
    ));
    out.extend(by(
        t::ARTIFACT_BLOCKED,
        label::REASON,
        t::ARTIFACT_BLOCK_REASONS,
    ));
    out.extend(by(t::HTTP_REFUSED, label::REASON, t::HTTP_REFUSAL_REASONS));
    let catchup = t::catchup_metrics::FETCH_KINDS;
    for name in [
        t::catchup_metrics::UPSTREAM_REQUESTS,
        t::catchup_metrics::UPSTREAM_FETCH_US,
        t::catchup_metrics::UPSTREAM_DECODE_US,
    ] {
        out.extend(by(name, "kind", catchup));
    }
    for name in [
        t::catchup_metrics::STORE_BATCHES,
        t::catchup_metrics::STORE_GROUPS,
        t::catchup_metrics::STORE_APPLY_US,
        t::catchup_metrics::STORE_FLUSHES,
        t::catchup_metrics::STORE_FLUSH_US,
    ] {
        out.push(series(name, &[]));
    }
    for scope in t::RESYNC_SCOPES {
        for cause in t::RESYNC_CAUSES {
            out.push(series(
                t::RESYNCS,
                &[(label::SCOPE, scope), (label::CAUSE, cause)],
            ));
        }
    }
    out
}

/// Whether a counter's value is what a fresh daemon shows: 0, except the one resync of everything
/// the daemon starts with (`scope="all"`, cause `startup` once ingest labels causes), which is
/// its own first act and not something VK sent; it may or may not have run by the scrape.
fn unmoved(series: &str, value: f64) -> bool {
    let startup_resync = series.starts_with(t::RESYNCS)
        && series.contains(r#"scope="all""#)
        && (!series.contains("cause=") || series.contains(r#"cause="startup""#));
    value == 0.0 || (startup_resync && value == 1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_daemon_describes_every_metric_and_exports_counters_at_zero() {
    // Accepts (through the kernel's backlog) and never answers: VK "up" but silent.
    let silent_vk = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", silent_vk.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let _daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_vk-observer"))
            .args(["serve", "--upstream", &upstream, "--listen", &addr])
            .arg("--data-dir")
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("binary starts"),
    );
    let text = scrape(&addr).await;
    let e = parse(&text);

    for name in e.types.keys() {
        assert!(e.help.contains(name), "{name} has no # HELP line:\n{text}");
    }
    for name in [
        t::UPSTREAM_STATE,
        t::WAITERS,
        t::STORE_TOKEN,
        t::STORE_DISK_BYTES,
        t::BOOTSTRAPPED,
        t::RESOURCE_SUBSCRIPTIONS,
    ] {
        assert_eq!(
            e.types.get(name).map(String::as_str),
            Some("gauge"),
            "{name}"
        );
    }
    assert_eq!(e.samples.get(t::BOOTSTRAPPED), Some(&0.0), "{text}");
    assert_eq!(e.samples.get(t::WAITERS), Some(&0.0), "{text}");
    assert_eq!(
        e.samples.get(t::RESOURCE_SUBSCRIPTIONS),
        Some(&0.0),
        "{text}"
    );

    for s in registered_counters() {
        let v = e.samples.get(&s);
        assert!(v.is_some(), "{s} is not exported:\n{text}");
        assert!(unmoved(&s, *v.unwrap()), "{s} is not 0:\n{text}");
    }
    // Nothing has happened yet, so no counter anywhere has moved (whatever its labels).
    for (s, v) in &e.samples {
        let name = s.split('{').next().unwrap();
        if e.types.get(name).map(String::as_str) == Some("counter") {
            assert!(unmoved(s, *v), "{s} moved before any event:\n{text}");
            assert!(name.ends_with("_total"), "counter {name} lacks _total");
        }
    }
    drop(silent_vk);
}
