//! Shared by the board's tests (`tests/board.rs`: plain HTTP; `tests/board_browser.rs`: a real
//! headless chromium): a simulated VK with a daemon on a real socket whose tokens file holds one
//! token per role, the demo's roads where a test wants them, and small HTTP helpers that speak
//! to the board as a browser does (its cookie, its Origin).
#![allow(dead_code)]

pub mod browser;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;
use uuid::Uuid;

use vk_observer_config::access::{Scope, Scopes, TokenFile};
use vk_observer_config::{McpSettings, Settings};
use vk_observer_daemon::Daemon;
use vk_observer_sim::{Sim, SimConfig};

/// One token per role the board tells apart.
pub struct Tokens {
    /// `read`.
    pub reader: String,
    /// `read`, `approve`.
    pub approver: String,
    /// Every scope.
    pub operator: String,
    /// `read`, limited to the other project.
    pub limited: String,
}

/// A simulated VK with two projects, a daemon beside it, and the tokens file.
pub struct World {
    pub sim: Sim,
    pub daemon: Option<Daemon>,
    pub dir: tempfile::TempDir,
    pub tokens_path: PathBuf,
    pub file: TokenFile,
    pub tokens: Tokens,
    pub project: Uuid,
    pub repo: Uuid,
    pub other: Uuid,
    pub addr: SocketAddr,
}

/// Settings of the world's daemon on `listen` (a restart reuses the address).
fn settings(
    sim: &Sim,
    dir: &std::path::Path,
    tokens: &std::path::Path,
    listen: SocketAddr,
) -> Settings {
    Settings {
        upstream: sim.base_url(),
        listen,
        data_dir: dir.join("data"),
        ingest: vk_observer_ingest::IngestConfig {
            reconnect_min: Duration::from_millis(20),
            reconnect_max: Duration::from_millis(300),
            ..Default::default()
        },
        mcp: McpSettings {
            tokens_file: Some(tokens.to_path_buf()),
            ..Default::default()
        },
        ..Settings::default()
    }
}

impl World {
    /// `step_delay`: the simulator's pause between an agent's steps (the demo's is 300 ms).
    pub async fn start(step_delay: Duration) -> World {
        let sim = Sim::start(SimConfig {
            keepalive: Duration::from_millis(500),
            ws_ping: Duration::from_millis(500),
            step_delay,
            ..SimConfig::default()
        })
        .await
        .expect("simulator starts");
        let project = sim.add_project("Demo", &["demo"]);
        let repo = sim.project_repo_ids(project)[0];
        let other = sim.add_project("Other", &["other"]);
        let dir = tempfile::tempdir().unwrap();
        let tokens_path = dir.path().join("tokens.toml");
        let mut file = TokenFile::default();
        let mut make = |name: &str, scopes: &[Scope], projects: Vec<String>| {
            file.create(name, Scopes::of(scopes), projects).unwrap()
        };
        let tokens = Tokens {
            reader: make("reader", &[Scope::Read], vec![]),
            approver: make("approver", &[Scope::Read, Scope::Approve], vec![]),
            operator: make("operator", &Scope::ALL, vec![]),
            limited: make("limited", &[Scope::Read], vec![other.to_string()]),
        };
        file.save(&tokens_path).unwrap();
        let s = settings(
            &sim,
            dir.path(),
            &tokens_path,
            "127.0.0.1:0".parse().unwrap(),
        );
        let daemon = Daemon::start(s.validate().unwrap(), None)
            .await
            .expect("daemon starts");
        let addr = daemon.addr;
        World {
            sim,
            daemon: Some(daemon),
            dir,
            tokens_path,
            file,
            tokens,
            project,
            repo,
            other,
            addr,
        }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("the daemon runs")
    }

    /// The read side the tools answer from (to compare the board with).
    pub fn query(&self) -> vk_observer_query::Query {
        let d = self.daemon();
        vk_observer_query::Query::new(d.store.clone(), d.health.clone())
    }

    /// Stop the daemon (its data dir stays).
    pub async fn stop_daemon(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.shutdown().await;
        }
    }

    /// Start it again on the same address and data dir (retried while sled's lock lingers).
    pub async fn restart_daemon(&mut self) {
        let started = Instant::now();
        loop {
            let s = settings(&self.sim, self.dir.path(), &self.tokens_path, self.addr);
            match Daemon::start(s.validate().unwrap(), None).await {
                Ok(d) => {
                    self.daemon = Some(d);
                    return;
                }
                Err(e) if started.elapsed() < Duration::from_secs(10) => {
                    eprintln!("restart: {e:#}; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("the daemon restarts: {e:#}"),
            }
        }
    }

    /// Revoke a token by name (the tokens file is re-read on change).
    pub fn revoke(&mut self, name: &str) {
        assert!(self.file.revoke(name), "token {name} exists");
        self.file.save(&self.tokens_path).unwrap();
    }

    pub async fn shutdown(mut self) {
        self.stop_daemon().await;
        self.sim.shutdown().await;
    }
}

/// An HTTP client that does not follow redirects (the tests look at them).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// The cookie the login form sets for `token`.
pub fn cookie(token: &str) -> String {
    format!("vko_board={token}")
}

/// An answer: status, headers, body as JSON (Null when it is not JSON).
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

async fn answer(r: reqwest::Response) -> Answer {
    let status = r.status();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        text,
        json,
    }
}

/// `GET` with the board's cookie for `token` (None: no cookie).
pub async fn get(w: &World, path: &str, token: Option<&str>) -> Answer {
    let mut req = http().get(format!("{}{path}", w.base()));
    if let Some(t) = token {
        req = req.header("cookie", cookie(t));
    }
    answer(req.send().await.expect("GET answers")).await
}

/// A JSON `POST` as the page sends it: the cookie for `token`, and `origin` (None: no Origin).
pub async fn post(
    w: &World,
    path: &str,
    token: Option<&str>,
    origin: Option<&str>,
    body: Value,
) -> Answer {
    let mut req = http()
        .post(format!("{}{path}", w.base()))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.header("cookie", cookie(t));
    }
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    answer(req.send().await.expect("POST answers")).await
}

/// Poll `probe` every 100 ms until it gives a value, at most `within`.
pub async fn until<T, F, Fut>(what: &str, within: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The card of the task titled `title` in `group` of the board, if it is there.
pub fn card(board: &Value, group: &str, title: &str) -> Option<Value> {
    board["projects"]
        .as_array()?
        .iter()
        .flat_map(|p| p[group].as_array().cloned().unwrap_or_default())
        .find(|c| c["task_title"] == title)
}

/// The board as `token` sees it, once the card titled `title` is in `group`.
pub async fn card_until(
    w: &World,
    token: &str,
    group: &str,
    title: &str,
    within: Duration,
) -> Value {
    until(&format!("{title} in {group}"), within, || async {
        let b = get(w, "/board/api/board", Some(token)).await;
        card(&b.json, group, title)
    })
    .await
}
