//! The daemon under test in a child process, and process/file measurements (RSS, CPU, disk).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};

use crate::client::Mcp;

/// The daemon under test: this crate's binary, or `VK_BENCH_DAEMON_BIN` (e.g. a build of a
/// patched tree, to measure a candidate fix side by side).
pub(crate) fn daemon_bin() -> String {
    std::env::var("VK_BENCH_DAEMON_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_vk-observer").into())
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub(crate) fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

pub(crate) fn dir_bytes(dir: &Path) -> u64 {
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
pub(crate) struct DaemonProc {
    pub(crate) child: std::process::Child,
    pub(crate) addr: SocketAddr,
    pub(crate) http: reqwest::Client,
    pub(crate) log: PathBuf,
}

impl DaemonProc {
    /// `log_filter`: None runs the daemon with its default log level (info, as shipped);
    /// `VK_BENCH_DAEMON_LOG` overrides it.
    pub(crate) fn spawn(
        upstream: &str,
        dir: &Path,
        stateless: bool,
        log_filter: Option<&str>,
        log: &Path,
    ) -> anyhow::Result<Self> {
        Self::spawn_bin(&daemon_bin(), upstream, dir, stateless, log_filter, log)
    }

    /// `spawn` with another daemon binary (main's build beside this one in one run: the lean
    /// and scale phases).
    pub(crate) fn spawn_bin(
        bin: &str,
        upstream: &str,
        dir: &Path,
        stateless: bool,
        log_filter: Option<&str>,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let mut cmd = std::process::Command::new(bin);
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

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn rss_kb(&self) -> u64 {
        rss_kb(self.pid())
    }

    pub(crate) fn log_bytes(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    pub(crate) fn mcp(&self) -> Mcp {
        Mcp::new(&format!("http://{}/mcp", self.addr))
    }

    /// The daemon's `vk_observer_waiters` gauge: long-polls parked right now.
    pub(crate) async fn waiters_gauge(&self) -> Option<u64> {
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

    pub(crate) async fn get_status(&self, path: &str) -> Option<u16> {
        self.http
            .get(format!("http://{}{path}", self.addr))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()
            .map(|r| r.status().as_u16())
    }

    /// Until `/healthz` answers (the process serves).
    pub(crate) async fn wait_serving(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
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
    pub(crate) async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
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
    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
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

/// CPU seconds (user + system) a process has used so far.
pub(crate) fn cpu_secs(pid: &str) -> f64 {
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
