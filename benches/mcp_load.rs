//! Load driver for issue 5: MCP over real HTTP against the `vk-observer` binary, side by side in
//! one run, with p50/p99 and ratios. Writes `target/perf/results.json`, `target/perf/results.md`
//! and the plot `target/perf/latency.svg` (see docs/performance.md).
//!
//! Run: `cargo bench --bench mcp_load` (all of `cargo bench` also runs the ingest bench).
//! Knobs (environment): `VK_BENCH_QUICK=1` (small sizes, a smoke run), `VK_BENCH_ONLY=a,b,…`
//! (phases: status, wake, throughput, waiters, waiters_session, tail, catchup), `VK_BENCH_TAIL_SIZES=1000,…`,
//! `VK_BENCH_CATCHUP=N`, `VK_BENCH_WAITERS=N`, `VK_BENCH_SECS=N` (throughput duration),
//! `VK_BENCH_DAEMON_BIN=path` (another daemon build), `VK_BENCH_DAEMON_LOG=filter` (its RUST_LOG),
//! `VK_BENCH_OUT=dir` (default target/perf), `VK_BENCH_REPLOT=dir/results.json` (only redraw
//! `dir/latency.svg` from an earlier run), `VK_BENCH_PAUSE=N` (pause N s once the first daemon
//! is ready, to attach a profiler).
//!
//! Set-up: the VK simulator, the clients and a REST-proxy MCP server (the baseline) run in this
//! process; every daemon is the real `vk-observer` binary in a child process (built by cargo for
//! benches: `CARGO_BIN_EXE_vk-observer`), so its RSS is read from `/proc/<pid>/status` alone and
//! the 10 k waiter connections fit the file limit (10 k sockets on each side). The daemon serves
//! `/mcp` in stateless JSON mode (`--mcp-stateless`); the MCP client is a plain HTTP POST of one
//! JSON-RPC `tools/call` (what the Streamable HTTP transport sends in that mode), timed from
//! sending the request to the last byte of the answer (parsing happens after the clock stops).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use uuid::Uuid;
use vk_observer::sim::{AgentOutcome, AttemptScript, RunReason, Sim, SimConfig};
use vk_observer::store::events::DomainEvent;
use vk_observer::store::writer::Writer;
use vk_observer::store::{Retention, Store};

/// The daemon under test: this crate's binary, or `VK_BENCH_DAEMON_BIN` (e.g. a build of a
/// patched tree, to measure a candidate fix side by side).
fn daemon_bin() -> String {
    std::env::var("VK_BENCH_DAEMON_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_vk-observer").into())
}
const PROTOCOL: &str = "2025-11-25";

// ---------------------------------------------------------------------------------------------
// Options and results
// ---------------------------------------------------------------------------------------------

struct Opts {
    quick: bool,
    only: Option<Vec<String>>,
    tail_sizes: Vec<u64>,
    catchup: u64,
    waiters: usize,
    secs: u64,
}

impl Opts {
    fn from_env() -> Opts {
        let quick = std::env::var("VK_BENCH_QUICK").is_ok_and(|v| v != "0");
        let list = |k: &str| {
            std::env::var(k).ok().map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            })
        };
        let num = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let tail_sizes = list("VK_BENCH_TAIL_SIZES")
            .map(|v| v.iter().filter_map(|s| s.parse().ok()).collect())
            .unwrap_or_else(|| {
                if quick {
                    vec![1_000, 10_000]
                } else {
                    vec![1_000, 10_000, 100_000, 1_000_000]
                }
            });
        Opts {
            quick,
            only: list("VK_BENCH_ONLY"),
            tail_sizes,
            catchup: num("VK_BENCH_CATCHUP", if quick { 20_000 } else { 1_000_000 }),
            waiters: num("VK_BENCH_WAITERS", if quick { 500 } else { 10_000 }) as usize,
            secs: num("VK_BENCH_SECS", if quick { 3 } else { 10 }),
        }
    }
    fn runs(&self, phase: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|p| p == phase))
    }
    fn iters(&self, full: usize) -> usize {
        if self.quick { (full / 8).max(10) } else { full }
    }
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Serialize)]
struct Stats {
    n: usize,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    min_us: f64,
    max_us: f64,
    mean_us: f64,
}

fn stats(v: &[Duration]) -> Stats {
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

fn ms(us: f64) -> String {
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
struct Row {
    figure: String,
    measured: String,
    target: String,
    /// None: informational (no target).
    met: Option<bool>,
}

#[derive(Default, Serialize, Deserialize)]
struct Report {
    machine: BTreeMap<String, String>,
    rows: Vec<Row>,
    details: BTreeMap<String, Value>,
}

impl Report {
    fn row(&mut self, figure: &str, measured: String, target: &str, met: Option<bool>) {
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
    fn detail(&mut self, key: &str, v: impl Serialize) {
        self.details
            .insert(key.to_string(), serde_json::to_value(v).unwrap());
    }
}

// ---------------------------------------------------------------------------------------------
// Processes, HTTP, MCP
// ---------------------------------------------------------------------------------------------

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_bytes(&p),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// The daemon binary in a child process.
struct DaemonProc {
    child: std::process::Child,
    addr: SocketAddr,
    http: reqwest::Client,
    log: PathBuf,
}

impl DaemonProc {
    /// `log_filter`: None runs the daemon with its default log level (info, as shipped);
    /// `VK_BENCH_DAEMON_LOG` overrides it.
    fn spawn(
        upstream: &str,
        dir: &Path,
        stateless: bool,
        log_filter: Option<&str>,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let bin = daemon_bin();
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("serve")
            .arg("--upstream")
            .arg(upstream)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(dir)
            .env_remove("RUST_LOG")
            .env_remove("VK_OBSERVER_CONFIG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log)?);
        if stateless {
            cmd.arg("--mcp-stateless");
        }
        match (std::env::var("VK_BENCH_DAEMON_LOG").ok(), log_filter) {
            (Some(f), _) => cmd.env("RUST_LOG", f),
            (None, Some(f)) => cmd.env("RUST_LOG", f),
            (None, None) => &mut cmd,
        };
        let child = cmd.spawn().with_context(|| format!("spawning {bin}"))?;
        Ok(DaemonProc {
            child,
            addr,
            http: reqwest::Client::new(),
            log: log.to_path_buf(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn rss_kb(&self) -> u64 {
        rss_kb(self.pid())
    }

    fn log_bytes(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    fn mcp(&self) -> Mcp {
        Mcp::new(&format!("http://{}/mcp", self.addr))
    }

    /// The daemon's `vk_observer_waiters` gauge: long-polls parked right now.
    async fn waiters_gauge(&self) -> Option<u64> {
        let text = reqwest::get(format!("http://{}/metrics", self.addr))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("vk_observer_waiters "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    }

    async fn get_status(&self, path: &str) -> Option<u16> {
        self.http
            .get(format!("http://{}{path}", self.addr))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()
            .map(|r| r.status().as_u16())
    }

    /// Until `/healthz` answers (the process serves).
    async fn wait_serving(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait()? {
                bail!("daemon exited early: {st}");
            }
            if self.get_status("/healthz").await == Some(200) {
                return Ok(t.elapsed());
            }
            ensure!(
                t.elapsed() < timeout,
                "daemon not serving after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Until `/readyz` is 200 (bootstrap done).
    async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait()? {
                bail!("daemon exited early: {st}");
            }
            if self.get_status("/readyz").await == Some(200) {
                return Ok(t.elapsed());
            }
            ensure!(t.elapsed() < timeout, "daemon not ready after {timeout:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGTERM, then wait for the ordered shutdown (writer drained, sled flushed).
    async fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.pid().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let t = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                bail!("daemon did not stop within 30 s of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A stateless-JSON MCP client: one POST per `tools/call`.
#[derive(Clone)]
struct Mcp {
    http: reqwest::Client,
    url: String,
    /// A bare HTTP/1.1 keep-alive connection used instead of `http` when set (see `bare`).
    bare: Option<std::sync::Arc<tokio::sync::Mutex<BareConn>>>,
}

type BareConn = hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

fn call_body(tool: &str, args: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
    .to_string()
}

impl Mcp {
    fn new(url: &str) -> Mcp {
        Mcp::with_client(url, reqwest::Client::new())
    }

    fn with_client(url: &str, http: reqwest::Client) -> Mcp {
        Mcp {
            http,
            url: url.to_string(),
            bare: None,
        }
    }

    /// A client on one bare hyper HTTP/1.1 keep-alive connection (like one wrk connection):
    /// no pool, no redirects, no per-request client bookkeeping, so sub-millisecond server
    /// times are not buried under the client's own. Call from the runtime that will use it.
    async fn bare(url: &str) -> anyhow::Result<Mcp> {
        let authority = url
            .strip_prefix("http://")
            .and_then(|u| u.split('/').next())
            .ok_or_else(|| anyhow!("not an http:// url: {url}"))?;
        let tcp = tokio::net::TcpStream::connect(authority).await?;
        tcp.set_nodelay(true)?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut mcp = Mcp::new(url);
        mcp.bare = Some(std::sync::Arc::new(tokio::sync::Mutex::new(send)));
        Ok(mcp)
    }

    async fn bare_post(
        conn: &tokio::sync::Mutex<BareConn>,
        url: &str,
        body: String,
    ) -> anyhow::Result<bytes::Bytes> {
        use http_body_util::BodyExt;
        let authority = url
            .strip_prefix("http://")
            .and_then(|u| u.split('/').next())
            .unwrap_or("");
        let path = url
            .find(authority)
            .map(|i| &url[i + authority.len()..])
            .unwrap_or("/");
        let req = hyper::Request::post(path)
            .header("host", authority)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
        let mut send = conn.lock().await;
        send.ready().await?;
        let r = send.send_request(req).await?;
        let status = r.status();
        let bytes = r.into_body().collect().await?.to_bytes();
        ensure!(
            status.is_success(),
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        Ok(bytes)
    }

    /// POST one JSON-RPC body; the answer's bytes.
    async fn raw(&self, body: String) -> anyhow::Result<bytes::Bytes> {
        if let Some(conn) = &self.bare {
            return Self::bare_post(conn, &self.url, body).await;
        }
        let r = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .body(body)
            .send()
            .await?;
        let status = r.status();
        let bytes = r.bytes().await?;
        ensure!(
            status.is_success(),
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        Ok(bytes)
    }

    /// The tool's structured result; an error for JSON-RPC errors and `isError` answers.
    fn parse(bytes: &[u8]) -> anyhow::Result<Value> {
        let v: Value = serde_json::from_slice(bytes)
            .with_context(|| format!("not JSON: {}", String::from_utf8_lossy(bytes)))?;
        if let Some(e) = v.get("error") {
            bail!("JSON-RPC error: {e}");
        }
        let r = v.get("result").ok_or_else(|| anyhow!("no result: {v}"))?;
        if r.get("isError") == Some(&Value::Bool(true)) {
            bail!("tool error: {}", r["content"][0]["text"]);
        }
        if let Some(s) = r.get("structuredContent") {
            return Ok(s.clone());
        }
        let text = r["content"][0]["text"]
            .as_str()
            .ok_or_else(|| anyhow!("no content: {r}"))?;
        Ok(serde_json::from_str(text)?)
    }

    async fn call(&self, tool: &str, args: &Value) -> anyhow::Result<Value> {
        Self::parse(&self.raw(call_body(tool, args)).await?)
    }

    /// Time from sending to the last byte of the answer; parsed afterwards.
    async fn timed(&self, tool: &str, args: &Value) -> anyhow::Result<(Duration, Value)> {
        let body = call_body(tool, args);
        let t = Instant::now();
        let bytes = self.raw(body).await?;
        let d = t.elapsed();
        Ok((d, Self::parse(&bytes)?))
    }
}

// ---------------------------------------------------------------------------------------------
// The REST-proxy baseline: an MCP server answering get_attempt_status the way VK's own MCP
// server does, one REST call into VK per attempt (`GET /api/task-attempts/{id}/status`).
// ---------------------------------------------------------------------------------------------

mod proxy {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::RequestContext;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use rmcp::{ErrorData, RoleServer, ServerHandler};
    use serde_json::{Value, json};

    #[derive(Clone)]
    pub struct RestProxy {
        pub http: reqwest::Client,
        pub base: String,
    }

    impl RestProxy {
        async fn status(&self, id: &str) -> Result<Value, String> {
            let r = self
                .http
                .get(format!("{}/api/task-attempts/{id}/status", self.base))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let v: Value = r.json().await.map_err(|e| e.to_string())?;
            Ok(v.get("data").cloned().unwrap_or(Value::Null))
        }
    }

    impl ServerHandler for RestProxy {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let schema = json!({"type": "object", "properties": {
                "attempt_id": {"type": "string"},
                "attempt_ids": {"type": "array", "items": {"type": "string"}}}});
            let Value::Object(schema) = schema else {
                unreachable!()
            };
            Ok(ListToolsResult {
                tools: vec![Tool::new(
                    "get_attempt_status",
                    "Attempt status via VK's REST API",
                    schema,
                )],
                ..Default::default()
            })
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let args = request.arguments.unwrap_or_default();
            let ids: Vec<String> = match (args.get("attempt_id"), args.get("attempt_ids")) {
                (Some(Value::String(id)), _) => vec![id.clone()],
                (_, Some(Value::Array(ids))) => ids
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect(),
                _ => return Err(ErrorData::invalid_params("attempt_id(s) required", None)),
            };
            let mut attempts = Vec::with_capacity(ids.len());
            for id in &ids {
                attempts.push(
                    self.status(id)
                        .await
                        .map_err(|e| ErrorData::internal_error(e, None))?,
                );
            }
            Ok(CallToolResult::structured(json!({ "attempts": attempts })).into())
        }
    }

    /// Serve it stateless with JSON answers (the daemon's fastest mode) on 127.0.0.1.
    pub async fn serve(base: String) -> anyhow::Result<std::net::SocketAddr> {
        let proxy = RestProxy {
            http: reqwest::Client::new(),
            base,
        };
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true);
        let svc = StreamableHttpService::new(
            move || Ok(proxy.clone()),
            LocalSessionManager::default().into(),
            config,
        );
        let app = axum::Router::new().nest_service("/mcp", svc);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(addr)
    }
}

// ---------------------------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------------------------

/// A normalized entry shaped like VK's (as in benches/ingest.rs), ~430 bytes.
fn entry_json(i: u64) -> String {
    format!(
        r#"{{"type":"NORMALIZED_ENTRY","content":{{"timestamp":null,"entry_type":{{"type":"tool_use","tool_name":"Bash","action_type":{{"action":"command_run","command":"cargo test --package demo -- step {i}","result":{{"exit_status":{{"type":"success","success":true}},"output":"running 12 tests\ntest result: ok. 12 passed; 0 failed"}}}},"status":{{"status":"success"}}}},"content":"cargo test --package demo -- step {i}"}}}}"#
    )
}

fn entry_value(i: u64) -> Value {
    serde_json::from_str(&entry_json(i)).unwrap()
}

fn note(i: u64) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": format!("note {i}")}})
}

fn sim_config(history_max_entries: usize) -> SimConfig {
    SimConfig {
        step_delay: Duration::from_millis(1),
        history_max_entries,
        ..SimConfig::default()
    }
}

fn machine() -> BTreeMap<String, String> {
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

fn out_dir() -> PathBuf {
    let d = std::env::var("VK_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/perf"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ---------------------------------------------------------------------------------------------
// Phase A: 100 attempts in the simulator, one daemon; status, wake, throughput, waiters, RSS
// ---------------------------------------------------------------------------------------------

struct ScenarioA {
    sim: Sim,
    attempts: Vec<Uuid>,
    /// Attempts with a running coding agent, and its process id.
    running: Vec<(Uuid, Uuid)>,
}

async fn build_scenario_a() -> anyhow::Result<ScenarioA> {
    let sim = Sim::start(sim_config(5000)).await?;
    let project = sim.add_project("Bench", &["bench"]);
    let mut attempts = Vec::new();
    let mut running = Vec::new();
    let mut scripts = Vec::new();
    for i in 0..100u64 {
        let task = sim.add_task(project, &format!("Bench task {i}"), None);
        match i {
            0..50 => {
                let s = sim.clone();
                let agent = if i < 40 {
                    AgentOutcome::Succeed
                } else {
                    AgentOutcome::Fail
                };
                scripts.push(tokio::spawn(async move {
                    s.run_attempt_script(
                        task,
                        AttemptScript {
                            agent,
                            ..AttemptScript::default()
                        },
                    )
                    .await
                    .attempt_id
                }));
            }
            50..80 => {
                let ids = sim.create_attempt(task, "CLAUDE_CODE");
                let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
                ensure!(!pid.is_nil(), "process starts");
                for k in 0..5 {
                    sim.append_log(pid, vk_observer::sim::Channel::Normalized, note(k));
                }
                attempts.push(ids.attempt_id);
                running.push((ids.attempt_id, pid));
            }
            _ => attempts.push(sim.create_attempt(task, "CLAUDE_CODE").attempt_id),
        }
    }
    let mut scripted = Vec::new();
    for s in scripts {
        scripted.push(s.await?);
    }
    scripted.extend(attempts);
    Ok(ScenarioA {
        sim,
        attempts: scripted,
        running,
    })
}

/// Until the daemon's batch status agrees with the simulator's `/status` for every attempt.
async fn wait_cache_holds(mcp: &Mcp, a: &ScenarioA, timeout: Duration) -> anyhow::Result<()> {
    let t = Instant::now();
    let truth = a.sim.truth();
    let mut last = String::new();
    while t.elapsed() < timeout {
        if let Ok(v) = mcp
            .call("get_attempt_status", &json!({"attempt_ids": a.attempts}))
            .await
        {
            let got: BTreeMap<String, String> = v["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| {
                    (
                        s["attempt_id"].as_str().unwrap_or("").to_string(),
                        s["state"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            let missing: Vec<_> = a
                .attempts
                .iter()
                .filter(|id| {
                    let want = truth.attempt_status[id]["state"].as_str().unwrap_or("");
                    got.get(&id.to_string()).map(String::as_str) != Some(want)
                })
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            last = format!("{} attempts not yet as in VK", missing.len());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("cache did not hold the scenario after {timeout:?}: {last}")
}

/// Run a latency measurement on a thread of its own with a single-threaded runtime, the way
/// wrk's event loop runs: the timing client's wakeups need no hand-off between worker threads,
/// so what is timed is the server under test. The simulator and the REST-proxy baseline keep
/// running on the main runtime; both servers are timed by the same client.
fn on_client_thread<T: Send>(
    f: impl FnOnce(&tokio::runtime::Runtime) -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                f(&rt)
            })
            .join()
            .map_err(|_| anyhow!("client thread panicked"))?
        })
    })
}

async fn phase_status(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
    mcp: &Mcp,
    proxy: &Mcp,
) -> anyhow::Result<()> {
    println!("\n== a. get_attempt_status: batch of 100 vs 100 single calls vs REST-proxy baseline");
    let ids = &a.attempts;
    let batch_args = json!({ "attempt_ids": ids });
    // The answers agree (state and latest ids) between the cache and VK's REST.
    let (_, ours) = mcp.timed("get_attempt_status", &batch_args).await?;
    let (_, theirs) = proxy.timed("get_attempt_status", &batch_args).await?;
    let fields = [
        "state",
        "latest_execution_process_id",
        "latest_session_id",
        "failure_summary",
    ];
    for (x, y) in ours["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(theirs["attempts"].as_array().unwrap())
    {
        for f in fields {
            ensure!(x[f] == y[f], "cache and VK disagree on {f}: {x} vs {y}");
        }
    }
    ensure!(ours["attempts"].as_array().unwrap().len() == 100);
    let answer_bytes = mcp
        .raw(call_body("get_attempt_status", &batch_args))
        .await?
        .len();
    let proxy_answer_bytes = proxy
        .raw(call_body("get_attempt_status", &batch_args))
        .await?
        .len();
    println!(
        "  answers agree on state, latest session/process and failure summary; HTTP body of a batch of 100: {answer_bytes} B (REST proxy: {proxy_answer_bytes} B)"
    );
    r.detail(
        "status_answer_bytes",
        json!({"cache_batch100": answer_bytes, "proxy_batch100": proxy_answer_bytes}),
    );
    for _ in 0..o.iters(20) {
        mcp.call("get_attempt_status", &batch_args).await?;
        proxy.call("get_attempt_status", &batch_args).await?;
    }
    let (mut cb, mut cs, mut cs1, mut pb, mut ps, mut ps1) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    // Each round times every variant the same way: a call right after another call of the
    // same kind (warm: what a p50 of repeated calls measures), plus the cache batch's first call
    // of the round, made right after the REST-proxy round (cold: the daemon's threads parked and
    // its caches evicted by the other server), reported separately.
    let mut cb_cold = Vec::new();
    let iters = o.iters(200);
    for _ in 0..iters {
        cb_cold.push(mcp.timed("get_attempt_status", &batch_args).await?.0);
        cb.push(mcp.timed("get_attempt_status", &batch_args).await?.0);
        let t = Instant::now();
        for id in ids {
            cs1.push(
                mcp.timed("get_attempt_status", &json!({ "attempt_id": id }))
                    .await?
                    .0,
            );
        }
        cs.push(t.elapsed());
        proxy.timed("get_attempt_status", &batch_args).await?;
        pb.push(proxy.timed("get_attempt_status", &batch_args).await?.0);
        let t = Instant::now();
        for id in ids {
            ps1.push(
                proxy
                    .timed("get_attempt_status", &json!({ "attempt_id": id }))
                    .await?
                    .0,
            );
        }
        ps.push(t.elapsed());
    }
    let cb_cold = stats(&cb_cold);
    let (cb, cs, cs1, pb, ps, ps1) = (
        stats(&cb),
        stats(&cs),
        stats(&cs1),
        stats(&pb),
        stats(&ps),
        stats(&ps1),
    );
    println!(
        "  {iters} rounds, interleaved. p50/p99:\n    cache batch(100)      {} / {}\n    cache 100 singles     {} / {}  (one single call {} / {})\n    REST proxy batch(100) {} / {}\n    REST proxy 100 singles {} / {}  (one single call {} / {})",
        ms(cb.p50_us),
        ms(cb.p99_us),
        ms(cs.p50_us),
        ms(cs.p99_us),
        ms(cs1.p50_us),
        ms(cs1.p99_us),
        ms(pb.p50_us),
        ms(pb.p99_us),
        ms(ps.p50_us),
        ms(ps.p99_us),
        ms(ps1.p50_us),
        ms(ps1.p99_us)
    );
    println!(
        "    cache batch(100), cold (first call after the proxy round) {} / {}",
        ms(cb_cold.p50_us),
        ms(cb_cold.p99_us)
    );
    r.row(
        "status batch of 100, p50 (p99)",
        format!("{} ({})", ms(cb.p50_us), ms(cb.p99_us)),
        "p50 ≤ 1 ms",
        Some(cb.p50_us <= 1000.0),
    );
    r.row(
        "status batch of 100, cold: first call after the REST-proxy round, p50 (p99)",
        format!("{} ({})", ms(cb_cold.p50_us), ms(cb_cold.p99_us)),
        "—",
        None,
    );
    let ratio_pb = pb.p50_us / cb.p50_us;
    let ratio_ps = ps.p50_us / cb.p50_us;
    r.row(
        "REST-proxy baseline (1 MCP call, 100 REST GETs) / cache batch, p50",
        format!("{ratio_pb:.1}× ({} vs {})", ms(pb.p50_us), ms(cb.p50_us)),
        "≥ 20×",
        Some(ratio_pb >= 20.0),
    );
    r.row(
        "REST-proxy 100 single MCP calls / cache batch, p50",
        format!("{ratio_ps:.1}× ({} vs {})", ms(ps.p50_us), ms(cb.p50_us)),
        "≥ 20×",
        Some(ratio_ps >= 20.0),
    );
    r.row(
        "cache 100 single calls / cache batch, p50",
        format!(
            "{:.1}× ({} vs {})",
            cs.p50_us / cb.p50_us,
            ms(cs.p50_us),
            ms(cb.p50_us)
        ),
        "—",
        None,
    );
    r.row(
        "status single call (cache), p50 (p99)",
        format!("{} ({})", ms(cs1.p50_us), ms(cs1.p99_us)),
        "—",
        None,
    );
    r.detail(
        "status",
        json!({"cache_batch100": cb, "cache_batch100_cold": cb_cold, "cache_100_singles": cs, "cache_single_call": cs1,
               "proxy_batch100": pb, "proxy_100_singles": ps, "proxy_single_call": ps1,
               "ratio_proxy_batch_over_cache_batch_p50": ratio_pb,
               "ratio_proxy_singles_over_cache_batch_p50": ratio_ps}),
    );

    // Latency vs batch size (for the plot).
    let sizes = [1usize, 2, 5, 10, 20, 50, 100];
    let mut by_size: Vec<Vec<Duration>> = vec![Vec::new(); sizes.len()];
    for _ in 0..o.iters(300) {
        for (k, &n) in sizes.iter().enumerate() {
            let args = json!({ "attempt_ids": &ids[..n] });
            by_size[k].push(mcp.timed("get_attempt_status", &args).await?.0);
        }
    }
    let curve: Vec<Value> = sizes
        .iter()
        .zip(&by_size)
        .map(|(n, v)| {
            let s = stats(v);
            println!(
                "    batch {n:>3}: p50 {} p99 {}",
                ms(s.p50_us),
                ms(s.p99_us)
            );
            json!({"batch": n, "stats": s})
        })
        .collect();
    r.detail("status_by_batch", curve);
    Ok(())
}

/// `<epoch>.<n>` → n.
fn token_seq(t: &str) -> u64 {
    t.rsplit('.')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn phase_wake(r: &mut Report, o: &Opts, a: &ScenarioA, mcp: &Mcp) -> anyhow::Result<()> {
    println!("\n== c1. wake latency: simulator append_log → the waiting client's answer");
    let (attempt, pid) = a.running[0];
    let v = mcp
        .call("get_attempt_status", &json!({ "attempt_id": attempt }))
        .await?;
    let mut token = v["token"].as_str().unwrap().to_string();
    let mut lat = Vec::new();
    let (mut early, mut stale_token) = (0, 0);
    let iters = o.iters(300);
    for i in 0..iters + 10 {
        let body = call_body(
            "wait_for_attempt_change",
            &json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": 10_000}),
        );
        let m = mcp.clone();
        let h = tokio::spawn(async move {
            let res = m.raw(body).await;
            (Instant::now(), res)
        });
        // Let the request reach the daemon and park.
        tokio::time::sleep(Duration::from_millis(25)).await;
        let t0 = Instant::now();
        a.sim.append_log(
            pid,
            vk_observer::sim::Channel::Normalized,
            note(100 + i as u64),
        );
        let (t1, res) = h.await?;
        let v = Mcp::parse(&res?)?;
        ensure!(
            v["changed"] == json!(true),
            "wait did not see the change: {v}"
        );
        // The next `since_token`: the answer's token, but never below the attempt tokens it
        // reports (the daemon can answer with a token older than the change it reports; see
        // docs/performance.md; a client passing such a token back is answered at once with the
        // same change again).
        let answer_token = v["token"].as_str().unwrap().to_string();
        let newest = v["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["attempt_token"].as_str())
            .max_by_key(|t| token_seq(t))
            .map(str::to_string);
        token = match newest {
            Some(t) if token_seq(&t) > token_seq(&answer_token) => {
                stale_token += 1;
                t
            }
            _ => answer_token,
        };
        if t1 < t0 {
            early += 1; // answered before the event: something else changed the attempt
            continue;
        }
        if i >= 10 {
            lat.push(t1 - t0);
        }
    }
    let s = stats(&lat);
    println!(
        "  {} waits: p50 {} p90 {} p99 {} min {} max {} (answered before the event: {early}; answers whose token was older than the change they reported: {stale_token})",
        s.n,
        ms(s.p50_us),
        ms(s.p90_us),
        ms(s.p99_us),
        ms(s.min_us),
        ms(s.max_us)
    );
    r.row(
        "wake latency, append_log → answer, p99 (p50, min)",
        format!("{} ({}, {})", ms(s.p99_us), ms(s.p50_us), ms(s.min_us)),
        "p99 ≤ 10 ms",
        Some(s.p99_us <= 10_000.0),
    );
    r.row(
        "wake answers whose `token` is older than the attempt_token they report",
        format!("{stale_token} of {}", iters + 10),
        "0",
        Some(stale_token == 0),
    );
    r.detail(
        "wake",
        json!({"stats": s, "early": early, "stale_token_answers": stale_token, "waits": iters + 10}),
    );
    Ok(())
}

fn wrk_run(url: &str, body: &str, secs: u64, conns: u32) -> anyhow::Result<Option<Value>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/mcp_load.lua");
    let out = match std::process::Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{conns}"),
            &format!("-d{secs}s"),
            "--latency",
        ])
        .arg("-s")
        .arg(&script)
        .arg(url)
        .env("MCP_BODY", body)
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    ensure!(
        out.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |prefix: &str| -> Option<String> {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .map(|l| l.trim_start()[prefix.len()..].trim().to_string())
    };
    let rps: f64 = field("Requests/sec:")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no Requests/sec in wrk output:\n{text}"))?;
    let non2xx: u64 = field("Non-2xx or 3xx responses:")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let errors = field("Socket errors:").unwrap_or_default();
    let requests: Option<u64> = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok());
    Ok(Some(json!({
        "requests_per_sec": rps, "requests": requests, "p50": field("50%"), "p99": field("99%"),
        "non_2xx": non2xx, "socket_errors": errors, "raw": text,
    })))
}

/// The same load from this process: `conns` tasks, each POSTing back to back for `secs`.
async fn reqwest_run(url: &str, body: &str, secs: u64, conns: usize) -> anyhow::Result<Value> {
    let http = reqwest::Client::new();
    let done = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let m = Mcp::with_client(url, http.clone());
        let body = body.to_string();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < end {
                let t = Instant::now();
                let b = m.raw(body.clone()).await?;
                lat.push(t.elapsed());
                ensure!(b.len() > 20);
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let t = Instant::now();
    let mut lat = Vec::new();
    for h in tasks {
        lat.extend(h.await??);
    }
    let secs_f = t.elapsed().as_secs_f64();
    let s = stats(&lat);
    Ok(json!({"requests_per_sec": lat.len() as f64 / secs_f, "stats": s}))
}

async fn phase_throughput(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
    d: &DaemonProc,
    quiet: &DaemonProc,
) -> anyhow::Result<()> {
    println!(
        "\n== d. throughput of get_attempt_status over Streamable HTTP (stateless JSON), 2 cores shared with the load generator"
    );
    let single = call_body("get_attempt_status", &json!({"attempt_id": a.running[0].0}));
    let batch = call_body("get_attempt_status", &json!({"attempt_ids": a.attempts}));
    // The bodies answer correctly before we count them.
    Mcp::parse(&d.mcp().raw(single.clone()).await?)?;
    Mcp::parse(&d.mcp().raw(batch.clone()).await?)?;
    let mut detail = serde_json::Map::new();
    let url = format!("http://{}/mcp", d.addr);
    let log_before = d.log_bytes();
    match wrk_run(&url, &single, o.secs, 32)? {
        Some(w) => {
            let rps = w["requests_per_sec"].as_f64().unwrap();
            let total = w["requests"].as_f64().unwrap_or(0.0);
            let log_per_call = (d.log_bytes() - log_before) as f64 / total.max(1.0);
            let bad = w["non_2xx"].as_u64().unwrap_or(0);
            println!(
                "  wrk -t2 -c32 -d{}s, single attempt: {rps:.0} calls/s, p50 {} p99 {}, non-2xx {bad}; daemon log written: {log_per_call:.0} bytes per call",
                o.secs,
                w["p50"].as_str().unwrap_or("?"),
                w["p99"].as_str().unwrap_or("?")
            );
            r.row(
                "throughput get_attempt_status (1 attempt), wrk -t2 -c32, daemon as shipped (default log level)",
                format!(
                    "{rps:.0} calls/s (p50 {}, p99 {}; {log_per_call:.0} B of log per call)",
                    w["p50"].as_str().unwrap_or("?"),
                    w["p99"].as_str().unwrap_or("?")
                ),
                "≥ 15 000 calls/s",
                Some(rps >= 15_000.0 && bad == 0),
            );
            detail.insert("wrk_single".into(), w);
            detail.insert("log_bytes_per_call".into(), json!(log_per_call));
            let qurl = format!("http://{}/mcp", quiet.addr);
            if let Some(w) = wrk_run(&qurl, &single, o.secs, 32)? {
                let rps = w["requests_per_sec"].as_f64().unwrap();
                println!("  same against a daemon with RUST_LOG=warn: {rps:.0} calls/s");
                r.row(
                    "throughput get_attempt_status (1 attempt), wrk -t2 -c32, daemon with RUST_LOG=warn",
                    format!(
                        "{rps:.0} calls/s (p50 {}, p99 {})",
                        w["p50"].as_str().unwrap_or("?"),
                        w["p99"].as_str().unwrap_or("?")
                    ),
                    "≥ 15 000 calls/s",
                    Some(rps >= 15_000.0),
                );
                detail.insert("wrk_single_log_warn".into(), w);
            }
            if let Some(w) = wrk_run(&url, &batch, o.secs, 32)? {
                let rps = w["requests_per_sec"].as_f64().unwrap();
                println!(
                    "  wrk, batch of 100: {rps:.0} calls/s = {:.0} attempt statuses/s",
                    rps * 100.0
                );
                r.row(
                    "throughput get_attempt_status (batch of 100), wrk -t2 -c32",
                    format!("{rps:.0} calls/s = {:.0} statuses/s", rps * 100.0),
                    "—",
                    None,
                );
                detail.insert("wrk_batch100".into(), w);
            }
        }
        None => println!("  wrk not installed (apt-get install wrk): skipped"),
    }
    let rq = reqwest_run(&url, &single, o.secs, 32).await?;
    let rps = rq["requests_per_sec"].as_f64().unwrap();
    println!("  in-process reqwest driver, 32 connections, single attempt: {rps:.0} calls/s");
    r.row(
        "throughput get_attempt_status (1 attempt), reqwest driver in the bench process, 32 conns",
        format!("{rps:.0} calls/s"),
        "≥ 15 000 calls/s",
        Some(rps >= 15_000.0),
    );
    detail.insert("reqwest_single".into(), rq);
    r.detail("throughput", Value::Object(detail));
    Ok(())
}

async fn phase_waiters(
    r: &mut Report,
    o: &Opts,
    a: &ScenarioA,
    d: &DaemonProc,
) -> anyhow::Result<()> {
    let n = o.waiters;
    println!(
        "\n== c2. {n} concurrent waiters held by the daemon, then woken by one append per running attempt"
    );
    let rss_before = d.rss_kb();
    let url = format!("http://{}/mcp", d.addr);
    let v = d
        .mcp()
        .call("get_attempt_status", &json!({"attempt_id": a.running[0].0}))
        .await?;
    let token = v["token"].as_str().unwrap().to_string();
    // One connection per parked request (HTTP/1.1: a request in flight holds its connection).
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(120))
        .build()?;
    let answered = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let attempt = a.running[i % a.running.len()].0;
        let body = call_body(
            "wait_for_attempt_change",
            &json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": 50_000}),
        );
        let m = Mcp::with_client(&url, http.clone());
        let answered = answered.clone();
        handles.push(tokio::spawn(async move {
            let res = m.raw(body).await;
            let t = Instant::now();
            answered.fetch_add(1, Ordering::Relaxed);
            (t, res)
        }));
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Let every request arrive and park.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let early = answered.load(Ordering::Relaxed);
    let rss_held = d.rss_kb();
    // Held means parked in the daemon at the same time, not merely sent (a client may queue).
    let parked = d.waiters_gauge().await.unwrap_or(0);
    println!("  parked in the daemon at once (vk_observer_waiters): {parked} of {n}");
    let ramp = started.elapsed();
    println!(
        "  held after {:.1} s: daemon VmRSS {:.1} MB (before {:.1} MB), answered early: {early}",
        ramp.as_secs_f64(),
        rss_held as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
    let t0 = Instant::now();
    for (k, (_, pid)) in a.running.iter().enumerate() {
        a.sim.append_log(
            *pid,
            vk_observer::sim::Channel::Normalized,
            note(1_000_000 + k as u64),
        );
    }
    let mut lat = Vec::with_capacity(n);
    let mut errors = 0usize;
    let mut unchanged = 0usize;
    for h in handles {
        let (t, res) = h.await?;
        match res.and_then(|b| Mcp::parse(&b)) {
            Ok(v) if v["changed"] == json!(true) => lat.push(t.saturating_duration_since(t0)),
            Ok(_) => unchanged += 1,
            Err(e) => {
                if errors < 3 {
                    eprintln!("  waiter error: {e:#}");
                }
                errors += 1;
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = d.rss_kb();
    ensure!(!lat.is_empty(), "no waiter woke ({errors} errors)");
    let s = stats(&lat);
    println!(
        "  woken {}: p50 {} p99 {} max {}; errors {errors}, unchanged {unchanged}; VmRSS after release {:.1} MB",
        s.n,
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.max_us),
        rss_after as f64 / 1024.0
    );
    let held_ok = early == 0 && errors == 0 && unchanged == 0 && s.n == n && parked as usize == n;
    r.row(
        &format!("{n} concurrent waiters: daemon VmRSS while held"),
        format!(
            "{:.1} MB (idle before: {:.1} MB; all {} held: {})",
            rss_held as f64 / 1024.0,
            rss_before as f64 / 1024.0,
            n,
            if held_ok { "yes" } else { "NO" }
        ),
        "≤ 256 MB",
        Some(rss_held <= 256 * 1024 && held_ok),
    );
    r.row(
        &format!("{n} waiters woken by 30 appends: time to the last answer, p50 (p99)"),
        format!("{} ({}), max {}", ms(s.p50_us), ms(s.p99_us), ms(s.max_us)),
        "—",
        None,
    );
    r.detail(
        "waiters",
        json!({"n": n, "rss_before_kb": rss_before, "rss_held_kb": rss_held,
               "rss_after_kb": rss_after, "early": early, "errors": errors, "parked_at_once": parked,
               "unchanged": unchanged, "wake_stats": s}),
    );
    Ok(())
}

/// The same waiters against a daemon in its default session mode (Streamable HTTP with
/// `Mcp-Session-Id`, answers as SSE), through rmcp's own client: `sessions` clients, each with
/// n / sessions waits in flight (one HTTP request, hence one connection, per wait).
async fn phase_waiters_session(r: &mut Report, o: &Opts, a: &ScenarioA) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let n = o.waiters;
    let sessions = 100.min(n);
    println!(
        "\n== c3. {n} concurrent waiters in session mode (rmcp client, {sessions} sessions), then woken"
    );
    let dir = tempfile::tempdir()?;
    let mut d = DaemonProc::spawn(
        &a.sim.base_url(),
        dir.path(),
        false,
        None,
        &out_dir().join("daemon-c3.log"),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let url = format!("http://{}/mcp", d.addr);
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        // rmcp's client keeps at most 16 POSTs in flight per session by default: raise it so
        // every wait is in flight (and parked in the daemon) at once.
        let cfg = StreamableHttpClientTransportConfig::with_uri(url.clone())
            .max_concurrent_requests(n.div_ceil(sessions));
        clients.push(
            ().serve(StreamableHttpClientTransport::from_config(cfg))
                .await
                .context("rmcp client connects")?,
        );
    }
    let args = |v: Value| match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    };
    // The cache holds the running attempts before we wait on them.
    let ids: Vec<Uuid> = a.running.iter().map(|x| x.0).collect();
    let t = Instant::now();
    let token = loop {
        let res = clients[0]
            .peer()
            .call_tool(
                CallToolRequestParams::new("get_attempt_status")
                    .with_arguments(args(json!({ "attempt_ids": ids }))),
            )
            .await?;
        let v = res.structured_content.unwrap_or_default();
        let running = v["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["state"] == json!("running"))
            .count();
        if running == ids.len() {
            break v["token"].as_str().unwrap_or_default().to_string();
        }
        ensure!(
            t.elapsed() < Duration::from_secs(60),
            "running attempts not cached: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = d.rss_kb();
    let answered = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let peer = clients[i % sessions].peer().clone();
        let attempt = a.running[i % a.running.len()].0;
        let params = CallToolRequestParams::new("wait_for_attempt_change").with_arguments(args(
            json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": 50_000}),
        ));
        let answered = answered.clone();
        handles.push(tokio::spawn(async move {
            let res = peer.call_tool(params).await;
            let t = Instant::now();
            answered.fetch_add(1, Ordering::Relaxed);
            (t, res)
        }));
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let early = answered.load(Ordering::Relaxed);
    let rss_held = d.rss_kb();
    // Held means parked in the daemon at the same time, not merely sent (a client may queue).
    let parked = d.waiters_gauge().await.unwrap_or(0);
    println!("  parked in the daemon at once (vk_observer_waiters): {parked} of {n}");
    println!(
        "  held: daemon VmRSS {:.1} MB (with {sessions} sessions open, before the waits: {:.1} MB), answered early: {early}",
        rss_held as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
    let t0 = Instant::now();
    for (k, (_, pid)) in a.running.iter().enumerate() {
        a.sim.append_log(
            *pid,
            vk_observer::sim::Channel::Normalized,
            note(2_000_000 + k as u64),
        );
    }
    let (mut lat, mut errors, mut unchanged) = (Vec::with_capacity(n), 0usize, 0usize);
    for h in handles {
        let (t, res) = h.await?;
        match res {
            Ok(v) if v.structured_content.as_ref().map(|s| &s["changed"]) == Some(&json!(true)) => {
                lat.push(t.saturating_duration_since(t0))
            }
            Ok(_) => unchanged += 1,
            Err(e) => {
                if errors < 3 {
                    eprintln!("  waiter error: {e}");
                }
                errors += 1;
            }
        }
    }
    ensure!(!lat.is_empty(), "no waiter woke ({errors} errors)");
    let s = stats(&lat);
    println!(
        "  woken {}: p50 {} p99 {} max {}; errors {errors}, unchanged {unchanged}",
        s.n,
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.max_us)
    );
    let held_ok = early == 0 && errors == 0 && unchanged == 0 && s.n == n && parked as usize == n;
    r.row(
        &format!(
            "{n} concurrent waiters, session mode ({sessions} sessions): daemon VmRSS while held"
        ),
        format!(
            "{:.1} MB (sessions open, no waits: {:.1} MB; all {n} held: {})",
            rss_held as f64 / 1024.0,
            rss_before as f64 / 1024.0,
            if held_ok { "yes" } else { "NO" }
        ),
        "≤ 256 MB",
        Some(rss_held <= 256 * 1024 && held_ok),
    );
    r.row(
        &format!("{n} waiters (session mode) woken by 30 appends: time to the answer, p50 (p99)"),
        format!("{} ({}), max {}", ms(s.p50_us), ms(s.p99_us), ms(s.max_us)),
        "—",
        None,
    );
    r.detail(
        "waiters_session",
        json!({"n": n, "sessions": sessions, "rss_before_kb": rss_before, "rss_held_kb": rss_held,
               "early": early, "errors": errors, "parked_at_once": parked, "unchanged": unchanged, "wake_stats": s}),
    );
    for c in clients {
        let _ = c.cancel().await;
    }
    d.stop().await?;
    Ok(())
}

/// Wake latency for a process status change (the object stream, not a log): each running
/// attempt's agent finishes once while a client waits on it.
async fn phase_wake_status(r: &mut Report, a: &ScenarioA, mcp: &Mcp) -> anyhow::Result<()> {
    println!("\n== c1b. wake latency: simulator finish_process → the waiting client's answer");
    let mut lat = Vec::new();
    for (attempt, pid) in &a.running {
        let v = mcp
            .call("get_attempt_status", &json!({ "attempt_id": attempt }))
            .await?;
        let token = v["token"].as_str().unwrap().to_string();
        let body = call_body(
            "wait_for_attempt_change",
            &json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": 10_000}),
        );
        let m = mcp.clone();
        let h = tokio::spawn(async move {
            let res = m.raw(body).await;
            (Instant::now(), res)
        });
        tokio::time::sleep(Duration::from_millis(25)).await;
        let t0 = Instant::now();
        a.sim
            .finish_process(*pid, vk_observer::sim::ProcessStatus::Completed, Some(0));
        let (t1, res) = h.await?;
        let v = Mcp::parse(&res?)?;
        ensure!(
            v["changed"] == json!(true),
            "wait did not see the change: {v}"
        );
        if t1 >= t0 {
            lat.push(t1 - t0);
        }
        // Let the follow-up writes of this attempt (logs complete, changes) settle.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = stats(&lat);
    println!(
        "  {} waits: p50 {} p99 {} min {} max {}",
        s.n,
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.min_us),
        ms(s.max_us)
    );
    r.row(
        "wake latency, finish_process → answer, p99 (p50, min)",
        format!(
            "{} ({}, {}) over {} waits",
            ms(s.p99_us),
            ms(s.p50_us),
            ms(s.min_us),
            s.n
        ),
        "p99 ≤ 10 ms",
        Some(s.p99_us <= 10_000.0),
    );
    r.detail("wake_status", json!({ "stats": s }));
    Ok(())
}

async fn phase_a(r: &mut Report, o: &Opts) -> anyhow::Result<()> {
    let wants = ["status", "wake", "throughput", "waiters", "waiters_session"];
    if !wants.iter().any(|p| o.runs(p)) {
        return Ok(());
    }
    println!(
        "\n== scenario: 100 attempts (40 completed, 10 failed, 30 running, 20 idle) in the simulator"
    );
    let a = build_scenario_a().await?;
    let (dir, qdir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let spawned = Instant::now();
    let mut d = DaemonProc::spawn(
        &a.sim.base_url(),
        dir.path(),
        true,
        None,
        &out_dir().join("daemon-a.log"),
    )?;
    // A second daemon on the same simulator, only for the log-level comparison of d.
    let mut quiet = DaemonProc::spawn(
        &a.sim.base_url(),
        qdir.path(),
        true,
        Some("warn"),
        &out_dir().join("daemon-a-quiet.log"),
    )?;
    d.wait_ready(Duration::from_secs(60)).await?;
    let ready = spawned.elapsed();
    let mcp = d.mcp();
    wait_cache_holds(&mcp, &a, Duration::from_secs(60)).await?;
    quiet.wait_ready(Duration::from_secs(60)).await?;
    wait_cache_holds(&quiet.mcp(), &a, Duration::from_secs(60)).await?;
    println!(
        "  daemon pid {} ready {:.2} s after spawn; cache holds the scenario",
        d.pid(),
        ready.as_secs_f64()
    );
    r.row(
        "daemon spawn → /readyz (100 attempts, VK idle)",
        format!("{:.2} s", ready.as_secs_f64()),
        "—",
        None,
    );
    if let Some(secs) = std::env::var("VK_BENCH_PAUSE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        println!(
            "  pausing {secs} s (VK_BENCH_PAUSE): attach a profiler to pid {}",
            d.pid()
        );
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    // f. idle RSS after bootstrap.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = d.rss_kb();
    r.row(
        "idle RSS of the daemon binary after bootstrap (100 attempts, 30 live log streams)",
        format!("{:.1} MB", idle as f64 / 1024.0),
        "≤ 50 MB",
        Some(idle <= 50 * 1024),
    );
    r.detail("idle_rss_kb", idle);

    let proxy_addr = proxy::serve(a.sim.base_url()).await?;
    let proxy = Mcp::new(&format!("http://{proxy_addr}/mcp"));
    if o.runs("status") {
        let (cache_url, proxy_url) = (mcp.url.clone(), proxy.url.clone());
        on_client_thread(|rt| {
            rt.block_on(async {
                let cache = Mcp::bare(&cache_url).await?;
                let proxy = Mcp::bare(&proxy_url).await?;
                phase_status(r, o, &a, &cache, &proxy).await
            })
        })?;
    }
    if o.runs("wake") {
        phase_wake(r, o, &a, &mcp).await?;
    }
    if o.runs("throughput") {
        phase_throughput(r, o, &a, &d, &quiet).await?;
    }
    quiet.stop().await?;
    if o.runs("waiters") {
        phase_waiters(r, o, &a, &d).await?;
    }
    if o.runs("waiters_session") {
        phase_waiters_session(r, o, &a).await?;
    }
    // Last: it ends the running agents the phases above wait on.
    if o.runs("wake") {
        phase_wake_status(r, &a, &mcp).await?;
    }
    let rss_end = d.rss_kb();
    r.detail("rss_after_phase_a_kb", rss_end);
    let log_bytes = d.log_bytes();
    d.stop().await?;
    r.detail("daemon_a_log_bytes", log_bytes);
    // The shipped log level writes per-call lines; do not leave hundreds of MB behind.
    if log_bytes > 16 << 20 {
        std::fs::write(
            out_dir().join("daemon-a.log"),
            format!("(log of {log_bytes} bytes removed by the bench)\n"),
        )?;
    }
    a.sim.shutdown().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Phase B: tails with 1 k … 1 M stored entries (store filled through the writer API)
// ---------------------------------------------------------------------------------------------

struct Prefilled {
    /// (stored entries, attempt, process)
    logs: Vec<(u64, Uuid, Uuid)>,
    raw_bytes: u64,
    entries: u64,
    write_secs: f64,
    size_on_disk: u64,
}

/// Entities as the simulator renders them; logs written directly, 512 entries per batch (the
/// log followers' chunk), into the data dir the daemon will open.
async fn prefill(dir: &Path, sizes: &[u64]) -> anyhow::Result<Prefilled> {
    let sim = Sim::start(sim_config(5000)).await?;
    let project = sim.add_project("Tails", &["tails"]);
    let task = sim.add_task(project, "Tail bench", None);
    let mut procs = Vec::new();
    for _ in sizes {
        let ids = sim.create_attempt(task, "CLAUDE_CODE");
        let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
        procs.push((ids.attempt_id, pid));
    }
    let truth = sim.truth();
    sim.shutdown().await;
    let sizes = sizes.to_vec();
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let store = Store::open(&dir, Retention::default())?;
        let mut w = Writer::new(store.clone());
        let session_attempt: BTreeMap<String, String> = truth
            .sessions
            .values()
            .map(|s| {
                (
                    s["id"].as_str().unwrap().to_string(),
                    s["workspace_id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let mut ev = vec![DomainEvent::ProjectsSnapshot {
            projects: truth.projects.values().cloned().collect(),
        }];
        for (p, repos) in &truth.repos {
            ev.push(DomainEvent::ReposSnapshot {
                project_id: *p,
                repos: repos.clone(),
            });
        }
        ev.push(DomainEvent::TasksSnapshot {
            project_id: project,
            tasks: truth.tasks.values().cloned().collect(),
        });
        ev.push(DomainEvent::AttemptsSnapshot {
            task_id: task,
            attempts: truth.attempts.values().cloned().collect(),
        });
        for (attempt, _) in &procs {
            let a = attempt.to_string();
            ev.push(DomainEvent::SessionsSnapshot {
                attempt_id: *attempt,
                sessions: truth
                    .sessions
                    .values()
                    .filter(|s| s["workspace_id"] == json!(a))
                    .cloned()
                    .collect(),
            });
            ev.push(DomainEvent::ProcessesSnapshot {
                attempt_id: *attempt,
                processes: truth
                    .processes
                    .values()
                    .filter(|p| {
                        p["session_id"]
                            .as_str()
                            .and_then(|s| session_attempt.get(s))
                            == Some(&a)
                    })
                    .cloned()
                    .collect(),
            });
        }
        w.apply(ev)?;
        let t = Instant::now();
        let (mut raw_bytes, mut entries) = (0u64, 0u64);
        let mut logs = Vec::new();
        for (&n, &(attempt, pid)) in sizes.iter().zip(&procs) {
            let mut i = 0;
            while i < n {
                let end = (i + 512).min(n);
                let chunk: Vec<(u64, Box<RawValue>)> = (i..end)
                    .map(|k| {
                        let s = entry_json(k);
                        raw_bytes += s.len() as u64;
                        (k, RawValue::from_string(s).unwrap())
                    })
                    .collect();
                w.apply(vec![DomainEvent::LogEntriesPut {
                    attempt_id: attempt,
                    process_id: pid,
                    channel: vk_observer::store::events::Channel::Normalized,
                    entries: chunk,
                }])?;
                i = end;
            }
            entries += n;
            logs.push((n, attempt, pid));
        }
        store.flush()?;
        let write_secs = t.elapsed().as_secs_f64();
        let size_on_disk = store.size_on_disk();
        drop(w);
        drop(store);
        Ok::<_, anyhow::Error>(Prefilled {
            logs,
            raw_bytes,
            entries,
            write_secs,
            size_on_disk,
        })
    })
    .await?
}

async fn phase_tail(r: &mut Report, o: &Opts) -> anyhow::Result<()> {
    if !o.runs("tail") {
        return Ok(());
    }
    println!(
        "\n== b. tail_attempt_logs(after_entry_index) returning 50 new entries, stored history {:?}",
        o.tail_sizes
    );
    let dir = tempfile::tempdir()?;
    let p = prefill(dir.path(), &o.tail_sizes).await?;
    let dir_size = dir_bytes(dir.path());
    println!(
        "  wrote {} entries ({:.0} MB raw) through the store writer in {:.1} s = {:.0} entries/s; sled size_on_disk {:.0} MB, files {:.0} MB",
        p.entries,
        p.raw_bytes as f64 / 1e6,
        p.write_secs,
        p.entries as f64 / p.write_secs,
        p.size_on_disk as f64 / 1e6,
        dir_size as f64 / 1e6
    );
    let ratio = p.size_on_disk as f64 / p.raw_bytes as f64;
    r.row(
        &format!(
            "disk bytes per raw log byte ({} entries written via the store writer)",
            p.entries
        ),
        format!(
            "{ratio:.2}× ({:.0} MB sled size_on_disk / {:.0} MB raw entries)",
            p.size_on_disk as f64 / 1e6,
            p.raw_bytes as f64 / 1e6
        ),
        "≤ 2×",
        Some(ratio <= 2.0),
    );
    r.row(
        "write rate into a growing store (prefill, 512 per batch)",
        format!(
            "{:.0} entries/s ({} entries in {:.1} s)",
            p.entries as f64 / p.write_secs,
            p.entries,
            p.write_secs
        ),
        "—",
        None,
    );
    r.detail(
        "prefill",
        json!({"entries": p.entries, "raw_bytes": p.raw_bytes, "write_secs": p.write_secs,
               "size_on_disk": p.size_on_disk, "dir_bytes": dir_size}),
    );
    // The daemon serves the cache with its upstream unreachable (nothing can change it).
    let spawned = Instant::now();
    let mut d = DaemonProc::spawn(
        "http://127.0.0.1:9",
        dir.path(),
        true,
        None,
        &out_dir().join("daemon-b.log"),
    )?;
    d.wait_serving(Duration::from_secs(120)).await?;
    let mcp = d.mcp();
    let (largest_n, largest_attempt, _) = *p.logs.last().unwrap();
    let first = mcp
        .call(
            "tail_attempt_logs",
            &json!({"attempt_id": largest_attempt, "limit": 1}),
        )
        .await?;
    let to_first_answer = spawned.elapsed();
    ensure!(
        first["latest_entry_index"] == json!(largest_n - 1),
        "{first}"
    );
    println!(
        "  daemon restarted on this data dir: first tail answer {:.0} ms after spawn",
        to_first_answer.as_secs_f64() * 1000.0
    );
    r.row(
        &format!(
            "restart on a data dir holding {} entries: spawn → first tail answer",
            p.entries
        ),
        format!("{:.0} ms", to_first_answer.as_secs_f64() * 1000.0),
        "—",
        None,
    );
    let token = first["token"].as_str().unwrap().to_string();
    let args = |n: u64, attempt: Uuid, since: bool| {
        let mut a = json!({"attempt_id": attempt, "after_entry_index": n - 51, "limit": 50});
        if since {
            a["since_token"] = json!(token);
        }
        a
    };
    for &(n, attempt, _) in &p.logs {
        for since in [false, true] {
            let v = mcp
                .call("tail_attempt_logs", &args(n, attempt, since))
                .await?;
            let e = v["entries"].as_array().unwrap();
            ensure!(
                e.len() == 50
                    && e[0]["entry_index"] == json!(n - 50)
                    && v["has_more"] == json!(false),
                "unexpected tail page for {n}: {} entries",
                e.len()
            );
        }
    }
    let mut plain: Vec<Vec<Duration>> = vec![Vec::new(); p.logs.len()];
    let mut with_token: Vec<Vec<Duration>> = vec![Vec::new(); p.logs.len()];
    let iters = o.iters(500);
    for round in 0..iters + 20 {
        for (k, &(n, attempt, _)) in p.logs.iter().enumerate() {
            let a1 = mcp
                .timed("tail_attempt_logs", &args(n, attempt, false))
                .await?
                .0;
            let a2 = mcp
                .timed("tail_attempt_logs", &args(n, attempt, true))
                .await?
                .0;
            if round >= 20 {
                plain[k].push(a1);
                with_token[k].push(a2);
            }
        }
    }
    let mut curve = Vec::new();
    for (k, &(n, _, _)) in p.logs.iter().enumerate() {
        let (s1, s2) = (stats(&plain[k]), stats(&with_token[k]));
        println!(
            "    {n:>8} stored: p50 {} p99 {} | with since_token p50 {} p99 {}",
            ms(s1.p50_us),
            ms(s1.p99_us),
            ms(s2.p50_us),
            ms(s2.p99_us)
        );
        curve.push(json!({"stored": n, "plain": s1, "with_since_token": s2}));
    }
    let s_small = stats(&plain[0]);
    let s_large = stats(&plain[p.logs.len() - 1]);
    let (n_small, n_large) = (p.logs[0].0, largest_n);
    let ratio = s_large.p50_us / s_small.p50_us;
    r.row(
        &format!("tail 50 new entries, {n_large} vs {n_small} stored: p50 ratio"),
        format!(
            "{ratio:.2} ({} vs {})",
            ms(s_large.p50_us),
            ms(s_small.p50_us)
        ),
        "≤ 1.5",
        Some(ratio <= 1.5),
    );
    r.row(
        &format!("tail 50 new entries with {n_large} stored, p50 (p99)"),
        format!("{} ({})", ms(s_large.p50_us), ms(s_large.p99_us)),
        "p50 ≤ 1 ms",
        Some(s_large.p50_us <= 1000.0),
    );
    let t_small = stats(&with_token[0]);
    let t_large = stats(&with_token[p.logs.len() - 1]);
    r.row(
        &format!("same with since_token: {n_large} vs {n_small}, p50"),
        format!(
            "{} vs {} (ratio {:.2})",
            ms(t_large.p50_us),
            ms(t_small.p50_us),
            t_large.p50_us / t_small.p50_us
        ),
        "—",
        None,
    );
    r.detail("tail_by_history", curve);
    d.stop().await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Phase E: restart catch-up of N entries written while the daemon was down
// ---------------------------------------------------------------------------------------------

/// CPU seconds (user + system) a process has used so far.
fn cpu_secs(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0 // USER_HZ is 100 on Linux
}

/// What one restart took, all from the spawn of the daemon.
#[derive(Serialize)]
struct Restart {
    /// `/healthz` answers.
    serving_s: f64,
    /// The first resync began (the daemon's own `resyncing with VK` log line, else the
    /// simulator seeing the daemon's first WebSocket).
    resync_s: f64,
    /// The daemon's SSE stream connected (`connected to VK's event stream`): an idle VK sends
    /// its SSE headers only with its first keep-alive, 15 s after the connect.
    sse_connected_s: Option<f64>,
    /// `/readyz` is 200 (SSE connected, resync done).
    ready_s: f64,
    /// The last entry is cached (and the log complete when the process ended).
    cached_s: f64,
    daemon_cpu_s: f64,
    bench_process_cpu_s: f64,
    peak_rss_kb: u64,
}

async fn restart_until_cached(
    sim: &Sim,
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
    let mut d = DaemonProc::spawn(&sim.base_url(), dir, true, None, log)?;
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
        if let Ok(v) = mcp.call("tail_attempt_logs", &tail).await {
            if v["latest_entry_index"] == json!(last)
                && (!finished || v["log_complete"] == json!(true))
            {
                break spawned.elapsed();
            }
        }
        ensure!(
            spawned.elapsed() < Duration::from_secs(900),
            "catch-up not done after 900 s"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    // `2026-…Z  INFO vk_observer::ingest::coordinator: resyncing with VK reason=…`
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

/// `finished`: the process ends while the daemon is down (catch-up by history v2, pages of
/// 1000); otherwise it keeps running (catch-up by the log WebSocket, which replays everything).
async fn catch_up(r: &mut Report, o: &Opts, finished: bool) -> anyhow::Result<()> {
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
    let sim = Sim::start(if finished {
        sim_config(n as usize + 100_000)
    } else {
        SimConfig {
            log_db: true,
            ..sim_config(5000)
        }
    })
    .await?;
    let project = sim.add_project("Catch-up", &["cu"]);
    let task = sim.add_task(project, "Catch-up bench", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    for k in 0..10 {
        sim.append_log(pid, vk_observer::sim::Channel::Normalized, entry_value(k));
    }
    let dir = tempfile::tempdir()?;
    let kind = if finished { "history" } else { "ws" };
    let log = |run: u32| out_dir().join(format!("daemon-e-{kind}-{run}.log"));
    let (d, _) = restart_until_cached(&sim, dir.path(), &log(1), ids.attempt_id, 9, false).await?;
    d.stop().await?;
    let t = Instant::now();
    let mut raw_bytes = 0u64;
    for k in 10..10 + n {
        raw_bytes += entry_json(k).len() as u64;
        sim.append_log(pid, vk_observer::sim::Channel::Normalized, entry_value(k));
    }
    if finished {
        sim.finish_process(pid, vk_observer::sim::ProcessStatus::Completed, Some(0));
    }
    println!(
        "  simulator appended {n} entries while the daemon was down ({:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let (d, rs) =
        restart_until_cached(&sim, dir.path(), &log(2), ids.attempt_id, n + 9, finished).await?;
    let mcp = d.mcp();
    // Every entry is there (the oldest page too).
    let v = mcp
        .call(
            "tail_attempt_logs",
            &json!({"attempt_id": ids.attempt_id, "cursor": 5, "limit": 5}),
        )
        .await?;
    ensure!(
        v["entries"].as_array().map(Vec::len) == Some(5)
            && v["entries"][0]["entry_index"] == json!(0),
        "oldest entries missing: {v}"
    );
    let pages = sim
        .counters()
        .by_route
        .iter()
        .filter(|(k, _)| k.contains("normalized-logs/v2") && !k.ends_with("/ws"))
        .map(|(_, v)| *v)
        .sum::<u64>();
    d.stop().await?;
    let files = dir_bytes(dir.path());
    let ingest_s = rs.cached_s - rs.resync_s;
    println!(
        "  restart → serving {:.0} ms → resync began {:.2} s (SSE connected {}) → ready {:.2} s → all {n} entries cached {:.2} s ({:.0} entries/s after the resync began); daemon CPU {:.1} s, bench process (simulator) CPU {:.1} s; history pages {pages}; peak daemon RSS {:.0} MB; data dir {:.0} MB ({:.2}× the raw bytes)",
        rs.serving_s * 1000.0,
        rs.resync_s,
        rs.sse_connected_s
            .map_or("?".to_string(), |t| format!("{t:.2} s")),
        rs.ready_s,
        rs.cached_s,
        n as f64 / ingest_s,
        rs.daemon_cpu_s,
        rs.bench_process_cpu_s,
        rs.peak_rss_kb as f64 / 1024.0,
        files as f64 / 1e6,
        files as f64 / raw_bytes as f64
    );
    r.row(
        &format!("restart catch-up of {n} entries ({how})"),
        format!(
            "{:.1} s from spawn = {:.1} s until the resync starts + {:.1} s ingest ({:.0} entries/s); daemon CPU {:.1} s",
            rs.cached_s,
            rs.resync_s,
            ingest_s,
            n as f64 / ingest_s,
            rs.daemon_cpu_s
        ),
        "≤ 15 s for 1 M",
        (n >= 1_000_000).then_some(rs.cached_s <= 15.0),
    );
    r.row(
        &format!(
            "data dir bytes per raw log byte after ingesting {n} entries from VK ({})",
            if finished { "history" } else { "WS" }
        ),
        format!(
            "{:.2}× ({:.0} MB / {:.0} MB)",
            files as f64 / raw_bytes as f64,
            files as f64 / 1e6,
            raw_bytes as f64 / 1e6
        ),
        "≤ 2×",
        Some(files as f64 / raw_bytes as f64 <= 2.0),
    );
    let mut detail = json!({"entries": n, "restart": rs, "history_pages": pages,
                            "dir_bytes": files, "raw_bytes": raw_bytes});
    if !finished {
        // Restart again with the big log cached and 1 % new entries: VK's WS replays all of it.
        let m = (n / 100).max(1);
        for k in 10 + n..10 + n + m {
            sim.append_log(pid, vk_observer::sim::Channel::Normalized, entry_value(k));
        }
        let (d, rs2) =
            restart_until_cached(&sim, dir.path(), &log(3), ids.attempt_id, n + m + 9, false)
                .await?;
        d.stop().await?;
        println!(
            "  restart with {n} cached and {m} new: resync began {:.2} s → ready {:.2} s → cached {:.2} s; daemon CPU {:.1} s",
            rs2.resync_s, rs2.ready_s, rs2.cached_s, rs2.daemon_cpu_s
        );
        r.row(
            &format!("restart with {n} entries cached and {m} new while down"),
            format!(
                "{:.1} s from spawn = {:.1} s until the resync + {:.1} s",
                rs2.cached_s,
                rs2.resync_s,
                rs2.cached_s - rs2.resync_s
            ),
            "—",
            None,
        );
        detail["restart_with_cache"] = json!({"new_entries": m, "restart": rs2});
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

// ---------------------------------------------------------------------------------------------
// Output: the summary, JSON, and the plot
// ---------------------------------------------------------------------------------------------

fn write_outputs(r: &Report) -> anyhow::Result<()> {
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

/// One panel: x on a log scale, y linear from 0, lines for each series.
struct Panel<'a> {
    title: &'a str,
    xlabel: &'a str,
    series: Vec<(&'a str, &'a str, Vec<(f64, f64)>)>,
    /// A dashed horizontal line (ms) and its label.
    target: Option<(f64, &'a str)>,
    /// Legend in the upper left corner (else the lower right).
    legend_top_left: bool,
}

fn panel_svg(p: &Panel, x0: f64, y0: f64, w: f64, h: f64) -> String {
    let mut s = String::new();
    let pts: Vec<(f64, f64)> = p.series.iter().flat_map(|x| x.2.clone()).collect();
    if pts.is_empty() {
        return s;
    }
    let (lx_min, lx_max) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), &(x, _)| {
        (a.min(x.log10()), b.max(x.log10()))
    });
    let (lx_min, lx_max) = (lx_min.floor(), lx_max.ceil().max(lx_min.floor() + 1.0));
    let y_max = pts
        .iter()
        .fold(0.0f64, |a, &(_, y)| a.max(y))
        .max(p.target.map_or(0.0, |t| t.0 * 1.1));
    // A round y range in ms.
    let step = [
        0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 50.0, 100.0,
    ]
    .into_iter()
    .find(|st| y_max / st <= 6.0)
    .unwrap_or(200.0);
    let y_top = (y_max / step).ceil().max(1.0) * step;
    let (ml, mr, mt, mb) = (60.0, 15.0, 30.0, 45.0);
    let (pw, ph) = (w - ml - mr, h - mt - mb);
    let px = |x: f64| x0 + ml + (x.log10() - lx_min) / (lx_max - lx_min) * pw;
    let py = |y: f64| y0 + mt + ph - y / y_top * ph;
    s += &format!(
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold" text-anchor="middle">{}</text>"#,
        x0 + ml + pw / 2.0,
        y0 + 18.0,
        p.title
    );
    s += &format!(
        r##"<rect x="{:.1}" y="{:.1}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#444"/>"##,
        x0 + ml,
        y0 + mt
    );
    let mut y = 0.0;
    while y <= y_top + 1e-9 {
        s += &format!(
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            x0 + ml,
            py(y),
            x0 + ml + pw,
            py(y),
            x0 + ml - 5.0,
            py(y) + 4.0,
            if step < 1.0 {
                format!("{y:.2}")
            } else {
                format!("{y:.0}")
            }
        );
        y += step;
    }
    let mut e = lx_min;
    while e <= lx_max + 1e-9 {
        let x = 10f64.powf(e);
        let label = match e as i32 {
            0 => "1".to_string(),
            1 => "10".to_string(),
            2 => "100".to_string(),
            3 => "1 k".to_string(),
            4 => "10 k".to_string(),
            5 => "100 k".to_string(),
            6 => "1 M".to_string(),
            k => format!("1e{k}"),
        };
        s += &format!(
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{label}</text>"##,
            px(x),
            y0 + mt,
            px(x),
            y0 + mt + ph,
            px(x),
            y0 + mt + ph + 15.0
        );
        e += 1.0;
    }
    s += &format!(
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        x0 + ml + pw / 2.0,
        y0 + h - 8.0,
        p.xlabel
    );
    s += &format!(
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">latency (ms)</text>"#,
        x0 + 15.0,
        y0 + mt + ph / 2.0,
        x0 + 15.0,
        y0 + mt + ph / 2.0
    );
    if let Some((t, label)) = p.target {
        s += &format!(
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#888" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#555" text-anchor="end">{label}</text>"##,
            x0 + ml,
            py(t),
            x0 + ml + pw,
            py(t),
            x0 + ml + pw - 4.0,
            py(t) - 4.0
        );
    }
    for (_, color, pts) in &p.series {
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        s += &format!(
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for &(x, y) in pts {
            s += &format!(
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                px(x),
                py(y)
            );
        }
    }
    // Legend in a box at the lower right.
    let n = p.series.len() as f64;
    let (bw, bh) = (150.0, 8.0 + 16.0 * n);
    let (bx, by) = if p.legend_top_left {
        (x0 + ml + 8.0, y0 + mt + 8.0)
    } else {
        (x0 + ml + pw - bw - 8.0, y0 + mt + ph - bh - 8.0)
    };
    s += &format!(
        r##"<rect x="{bx:.1}" y="{by:.1}" width="{bw:.1}" height="{bh:.1}" fill="white" fill-opacity="0.9" stroke="#bbb"/>"##
    );
    for (k, (name, color, _)) in p.series.iter().enumerate() {
        let ly = by + 12.0 + k as f64 * 16.0;
        s += &format!(
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11">{name}</text>"#,
            bx + 6.0,
            bx + 26.0,
            bx + 31.0,
            ly + 4.0
        );
    }
    s
}

fn plot(r: &Report) -> Option<String> {
    let get = |v: &Value, path: &[&str]| -> Option<f64> {
        let mut c = v;
        for p in path {
            c = c.get(*p)?;
        }
        c.as_f64()
    };
    let mut panels = Vec::new();
    if let Some(Value::Array(t)) = r.details.get("tail_by_history") {
        let series = |key: &str, pct: &str| -> Vec<(f64, f64)> {
            t.iter()
                .filter_map(|e| Some((get(e, &["stored"])?, get(e, &[key, pct])? / 1000.0)))
                .collect()
        };
        panels.push(Panel {
            title: "tail_attempt_logs: 50 new entries (after_entry_index)",
            xlabel: "entries stored for the process (log scale)",
            series: vec![
                ("p50", "#1f77b4", series("plain", "p50_us")),
                ("p99", "#ff7f0e", series("plain", "p99_us")),
                (
                    "p50 with since_token",
                    "#2ca02c",
                    series("with_since_token", "p50_us"),
                ),
                (
                    "p99 with since_token",
                    "#d62728",
                    series("with_since_token", "p99_us"),
                ),
            ],
            target: Some((1.0, "target p50 ≤ 1 ms")),
            legend_top_left: false,
        });
    }
    if let Some(Value::Array(b)) = r.details.get("status_by_batch") {
        let series = |pct: &str| -> Vec<(f64, f64)> {
            b.iter()
                .filter_map(|e| Some((get(e, &["batch"])?, get(e, &["stats", pct])? / 1000.0)))
                .collect()
        };
        panels.push(Panel {
            title: "get_attempt_status: one call, N attempts",
            xlabel: "attempts per call (log scale)",
            series: vec![
                ("p50", "#1f77b4", series("p50_us")),
                ("p99", "#ff7f0e", series("p99_us")),
            ],
            target: Some((1.0, "target p50 ≤ 1 ms (batch of 100)")),
            legend_top_left: true,
        });
    }
    if panels.is_empty() {
        return None;
    }
    let (w, h) = (480.0, 320.0);
    let total_w = w * panels.len() as f64;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>"#,
        h + 20.0
    );
    for (i, p) in panels.iter().enumerate() {
        s += &panel_svg(p, i as f64 * w, 0.0, w, h);
    }
    s += &format!(
        r##"<text x="8" y="{:.1}" font-size="10" fill="#666">MCP over HTTP (stateless JSON) to the vk-observer binary; client-side time to the last byte; {} · {} cores · {}</text>"##,
        h + 12.0,
        r.machine.get("cpu").map(String::as_str).unwrap_or(""),
        r.machine.get("nproc").map(String::as_str).unwrap_or(""),
        r.machine.get("git_head").map(String::as_str).unwrap_or("")
    );
    s += "</svg>\n";
    Some(s)
}

// ---------------------------------------------------------------------------------------------

async fn run() -> anyhow::Result<()> {
    // Redraw the plot of an earlier run: VK_BENCH_REPLOT=target/perf/results.json.
    if let Ok(path) = std::env::var("VK_BENCH_REPLOT") {
        let r: Report = serde_json::from_slice(&std::fs::read(&path)?)?;
        let svg = plot(&r).ok_or_else(|| anyhow!("{path} has no tail or status curve"))?;
        let out = Path::new(&path).with_file_name("latency.svg");
        std::fs::write(&out, svg)?;
        println!("wrote {}", out.display());
        return Ok(());
    }
    let o = Opts::from_env();
    let mut r = Report {
        machine: machine(),
        ..Default::default()
    };
    println!("mcp_load: daemon binary {}", daemon_bin());
    r.machine.insert("daemon_bin".into(), daemon_bin());
    println!("machine: {:?}", r.machine);
    let result = async {
        phase_a(&mut r, &o).await?;
        phase_tail(&mut r, &o).await?;
        if o.runs("catchup") {
            catch_up(&mut r, &o, false).await?;
            catch_up(&mut r, &o, true).await?;
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    write_outputs(&r)?;
    result
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes its options from the environment.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run()) {
        eprintln!("mcp_load failed: {e:#}");
        std::process::exit(1);
    }
}
