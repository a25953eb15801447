//! Which VK the daemon faces (issue 38): the simulator, which speaks the fork's dialect, is
//! followed and named `fork` in `/healthz` and `doctor`; a server answering as the recorded
//! BloopAI VK v0.1.44 does (its `/api/info`, and the web app's HTML for every other `GET
//! /api/…`: `tests/fixtures/vk-wire-bloop/`) is named `workspaces` with its version and followed
//! with VK 0.1.x's routes only, never one of the fork's; a fork replaced by it on its port keeps
//! its cache. `doctor` names both, and a setting that contradicts VK.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{StatusCode, Uri, header};
use axum::routing::get;
use serde_json::Value;
use vk_observer_daemon::Daemon;

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");
const RECORDED_INFO: &str = include_str!("fixtures/vk-wire-bloop/samples/rest-info.json");
const RECORDED_UNKNOWN: &str =
    include_str!("fixtures/vk-wire-bloop/samples/rest-err-unknown-api-route.json");

/// Routes only the fork's followers ask (a VK 0.1.x answers each with its web page).
fn forks(path: &str) -> bool {
    [
        "/api/events",
        "/api/projects",
        "/api/tasks/stream",
        "/api/task-attempts",
        "/api/config",
    ]
    .iter()
    .any(|p| path.starts_with(p))
}

/// A server that answers as the recorded VK 0.1.44: `/api/info` with its recorded body, any
/// other path with the recorded web page. Every path asked is kept, in order.
async fn recorded_0_1_44() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    recorded_0_1_44_on(listener)
}

fn recorded_0_1_44_on(listener: tokio::net::TcpListener) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let info: Value = serde_json::from_str(RECORDED_INFO).unwrap();
    let info = info["response"].clone();
    let unknown: Value = serde_json::from_str(RECORDED_UNKNOWN).unwrap();
    let page = unknown["response_text"].as_str().unwrap().to_string();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = (asked.clone(), asked.clone());
    let app = Router::new()
        .route(
            "/api/info",
            get(move || {
                a.lock().unwrap().push("/api/info".to_string());
                std::future::ready(axum::Json(info.clone()))
            }),
        )
        .fallback(move |uri: Uri| {
            b.lock().unwrap().push(uri.path().to_string());
            let page = page.clone();
            async move { (StatusCode::OK, [(header::CONTENT_TYPE, "text/html")], page) }
        });
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, asked)
}

/// `/healthz`'s `dialect` once ingest has settled it (bounded: 20 s).
async fn settled_dialect(daemon: &Daemon) -> Value {
    let url = format!("http://{}/healthz", daemon.addr);
    let start = Instant::now();
    loop {
        let h: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        if h["dialect"]["dialect"] != "unknown" {
            return h["dialect"].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "dialect never settled: {h}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn daemon_on(upstream: &str, dir: &std::path::Path) -> Daemon {
    let s = support::settings(upstream, dir, Default::default());
    Daemon::start(s.validate().unwrap(), None)
        .await
        .expect("daemon starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fork_simulator_is_followed_and_named_fork() {
    let sim = support::sim().await;
    sim.add_project("Fork", &["repo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon_on(&sim.base_url(), dir.path()).await;
    let d = settled_dialect(&daemon).await;
    assert_eq!(d["dialect"], "fork", "{d}");
    assert_eq!(d["followed"], true, "{d}");
    assert_eq!(d["by"], "detected", "{d}");
    assert!(d.get("version").is_none(), "the fork names no version: {d}");
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "fork followed",
    )
    .await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_first_vk_is_named_and_followed_with_its_own_routes() {
    let (addr, asked) = recorded_0_1_44().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon_on(&format!("http://{addr}"), dir.path()).await;
    let d = settled_dialect(&daemon).await;
    assert_eq!(d["dialect"], "workspaces", "{d}");
    assert_eq!(d["version"], "0.1.44", "{d}");
    assert_eq!(d["followed"], true, "{d}");
    let detail = d["detail"].as_str().unwrap();
    assert!(
        detail.contains("/api/info names version 0.1.44"),
        "{detail}"
    );
    // A while later: the two probes, then VK 0.1.x's workspaces stream (this server has none:
    // its page answers the upgrade, so it is asked again), never a route of the fork's.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let paths = asked.lock().unwrap().clone();
    assert_eq!(paths[..2], ["/api/info", "/api/tasks"], "{paths:?}");
    assert!(
        paths.iter().any(|p| p == "/api/workspaces/streams/ws"),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| forks(p)), "{paths:?}");
    assert!(daemon.store.read().tasks().unwrap().is_empty());
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_first_vk_that_comes_up_late_stops_the_forks_followers() {
    // Nothing answers at first: the fork's followers start as they always did, and the daemon
    // keeps asking; once the 0.1.44 answers, they stop and VK 0.1.x's start.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon_on(&format!("http://127.0.0.1:{port}"), dir.path()).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (_, asked) = recorded_0_1_44_on(listener);
    let d = settled_dialect(&daemon).await;
    assert_eq!(
        (d["dialect"].as_str(), d["followed"].as_bool()),
        (Some("workspaces"), Some(true)),
        "{d}"
    );
    // Settled: the fork's followers are stopped, so none of their routes is asked any more.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled = asked.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let paths = asked.lock().unwrap().clone();
    let later = &paths[settled..];
    assert!(!later.iter().any(|p| forks(p)), "{later:?}");
    assert!(
        later.iter().any(|p| p.starts_with("/api/workspaces")),
        "{later:?}"
    );
    assert!(
        daemon.store.read().tasks().unwrap().is_empty(),
        "nothing was cached"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_replaced_by_a_workspace_first_vk_on_its_port_is_named_and_the_cache_kept() {
    let sim = support::sim().await;
    let project = sim.add_project("Fork", &["repo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon_on(&sim.base_url(), dir.path()).await;
    support::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "fork followed",
    )
    .await;
    assert_eq!(settled_dialect(&daemon).await["dialect"], "fork");

    // VK stops; a VK 0.1.44 starts on the same port (the port file's port, say).
    let addr: SocketAddr = sim
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    sim.shutdown().await;
    let start = Instant::now();
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "port never freed: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let (_, asked) = recorded_0_1_44_on(listener);
    let url = format!("http://{}/healthz", daemon.addr);
    let d = loop {
        let h: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        if h["dialect"]["dialect"] == "workspaces" {
            break h["dialect"].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the new VK was never named: {h}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (d["version"].as_str(), d["followed"].as_bool()),
        (Some("0.1.44"), Some(true)),
        "{d}"
    );
    // The fork's followers stopped (none of their routes is asked), and the cache still holds
    // the fork's project: this VK 0.1.x's board is never whole (it has no workspaces stream),
    // so nothing of it was written over the cache.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled = asked.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let paths = asked.lock().unwrap().clone();
    let later = &paths[settled..];
    assert!(!later.iter().any(|p| forks(p)), "{later:?}");
    assert!(
        daemon.store.read().project(project).unwrap().is_some(),
        "the cache was kept"
    );
    daemon.shutdown().await;
}

/// `vk-observer doctor` with a clean environment: (exit code, stdout).
async fn doctor(upstream: &str, extra: &[&str]) -> (i32, String) {
    let data_home = tempfile::tempdir().unwrap();
    let mut c = tokio::process::Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("VK_OBSERVER_") {
            c.env_remove(k);
        }
    }
    c.args(["doctor", "--upstream", upstream, "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("XDG_DATA_HOME", data_home.path())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .expect("doctor ends within 60 s")
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn dialect_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.contains("vk dialect: "))
        .unwrap_or_else(|| panic!("no dialect line:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_the_dialect_and_a_setting_that_contradicts_it() {
    let (addr, _) = recorded_0_1_44().await;
    let bloop = format!("http://{addr}");
    let (_, out) = doctor(&bloop, &[]).await;
    let line = dialect_line(&out);
    assert!(line.starts_with("ok"), "{line}");
    assert!(
        line.contains("the workspace-first dialect of VK 0.1.x (VK 0.1.44)"),
        "{line}"
    );
    let vk_line = out
        .lines()
        .find(|l| l.contains("  vk: "))
        .unwrap_or_default();
    assert!(
        vk_line.contains("(VK 0.1.44"),
        "the vk line names the version: {vk_line}"
    );
    let (_, out) = doctor(&bloop, &["--upstream-dialect", "fork"]).await;
    let line = dialect_line(&out);
    assert!(
        line.contains("upstream_dialect = \"fork\" says otherwise"),
        "{line}"
    );

    let sim = support::sim().await;
    let (_, out) = doctor(&sim.base_url(), &[]).await;
    let line = dialect_line(&out);
    assert!(line.starts_with("ok"), "{line}");
    assert!(line.contains("the fork's dialect"), "{line}");
}
