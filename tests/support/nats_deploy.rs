//! A real `nats-server` started from deploy/nats-server.conf itself: its listen port and
//! JetStream store dir swapped for a free loopback port and a temporary directory, the
//! passwords it reads from its environment given here. The same absent-binary rule as
//! `nats::NatsServer` (skipped with a line, failed under `CI`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The deploy file's own lines the test replaces (checked present, so the file and the test
/// cannot drift apart silently).
const LISTEN_LINE: &str = "listen: 127.0.0.1:4222";
const STORE_LINE: &str = "store_dir: \"/var/lib/nats/jetstream\"";

/// The users of deploy/nats-server.conf and the passwords the test gives them.
pub const USERS: [(&str, &str, &str); 3] = [
    ("workstation", "VKO_WORKSTATION_PASSWORD", "ws-secret"),
    ("build-box", "VKO_BUILD_BOX_PASSWORD", "bb-secret"),
    ("fleet", "VKO_FLEET_PASSWORD", "fleet-secret"),
];

pub struct DeployedNats {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl DeployedNats {
    pub fn start(test: &str) -> Option<DeployedNats> {
        let binary = super::nats::binary_or_skip(test)?;
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/nats-server.conf"
        ))
        .unwrap();
        assert_eq!(
            conf.matches(LISTEN_LINE).count(),
            1,
            "the deploy file's listen line"
        );
        assert_eq!(
            conf.matches(STORE_LINE).count(),
            1,
            "the deploy file's store_dir line"
        );
        let store = dir.path().join("jetstream");
        let conf = conf
            .replace(LISTEN_LINE, &format!("listen: 127.0.0.1:{port}"))
            .replace(
                STORE_LINE,
                &format!("store_dir: {:?}", store.display().to_string()),
            );
        let path = dir.path().join("nats-server.conf");
        std::fs::write(&path, conf).unwrap();
        let mut cmd = Command::new(&binary);
        cmd.arg("-c")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (_, var, password) in USERS {
            cmd.env(var, password);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let server = DeployedNats {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _dir: dir,
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "nats-server from the deploy config did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(server)
    }

    /// A `user:password` credentials file for `user` (as deploy/nats-server.conf names them).
    pub fn credentials_file(&self, user: &str) -> std::path::PathBuf {
        let (_, _, password) = USERS.iter().find(|(u, ..)| *u == user).unwrap();
        let path = self._dir.path().join(format!("{user}.pass"));
        std::fs::write(&path, format!("{user}:{password}\n")).unwrap();
        path
    }
}

impl Drop for DeployedNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
