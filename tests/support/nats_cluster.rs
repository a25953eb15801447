//! Three real `nats-server`s forming one JetStream cluster on loopback (tests/fleet_replicas.rs,
//! tests/fleet_cluster_faults.rs): each with its own store dir and config file, so any one can
//! be killed (SIGKILL) and started again on the same ports and store.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};

/// Clusters made by this process so far (for their names).
static CLUSTERS: AtomicU64 = AtomicU64::new(0);

/// A cluster name no other cluster of this process has. Seeds run side by side, and a port that
/// one cluster's killed server leaves free can be taken by a new cluster; the old cluster's live
/// servers then route to the newcomer on that port, and with one shared name (and the same
/// server names) the two would merge. The suspected cause of a new cluster that never answered
/// JetStream (twice in 50-seed runs); a route to a cluster of another name is refused.
fn unique_cluster_name() -> String {
    let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
    format!("vko_{}_{n}", std::process::id())
}

/// A loopback port free when asked (it may be taken before it is bound: callers retry).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Three nats-servers forming one JetStream cluster (`n0`, `n1`, `n2`).
pub struct Cluster {
    binary: PathBuf,
    /// Each server while it runs (`None` while killed).
    children: Vec<Option<Child>>,
    configs: Vec<PathBuf>,
    /// The client URL of each server.
    pub urls: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Three servers on fresh ports, each ready (its log says so) before this returns; the
    /// whole cluster is tried again on other ports when a server could not bind its own (a
    /// port found free was taken before the server bound it: tests run side by side).
    pub fn start(binary: &Path) -> Cluster {
        for _ in 0..5 {
            let mut cluster = Self::configured(binary);
            if (0..3).all(|i| cluster.spawn(i)) {
                return cluster;
            }
        }
        panic!("a NATS cluster did not start in 5 tries (its ports kept being taken)");
    }

    fn configured(binary: &Path) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let (clients, routes): (Vec<u16>, Vec<u16>) =
            (0..3).map(|_| (free_port(), free_port())).unzip();
        let routes_line = routes
            .iter()
            .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let name = unique_cluster_name();
        let mut configs = Vec::new();
        for i in 0..3 {
            let home = dir.path().join(format!("n{i}"));
            std::fs::create_dir_all(&home).unwrap();
            let store = home.join("js");
            let conf = format!(
                "server_name: n{i}\nlisten: 127.0.0.1:{}\njetstream {{ store_dir: {store:?} }}\n\
                 cluster {{\n  name: {name}\n  listen: 127.0.0.1:{}\n  routes: [ {routes_line} ]\n}}\n",
                clients[i], routes[i]
            );
            let path = home.join("nats-server.conf");
            std::fs::write(&path, conf).unwrap();
            configs.push(path);
        }
        Cluster {
            binary: binary.to_path_buf(),
            children: (0..3).map(|_| None).collect(),
            configs,
            urls: clients
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect(),
            _dir: dir,
        }
    }

    /// Start server `i` and wait until it is ready; false when it exited first.
    fn spawn(&mut self, i: usize) -> bool {
        let home = self.configs[i].parent().unwrap().to_path_buf();
        let mut command = Command::new(&self.binary);
        command.arg("-c").arg(&self.configs[i]);
        self.children[i] = super::nats::spawn_ready(&mut command, &home);
        self.children[i].is_some()
    }

    /// Wait until every server answers JetStream (the cluster elected its meta leader), as a
    /// deployed cluster does before daemons use it; panics after 60 s (five clusters forming at
    /// once beside the seeds' daemons on two cores once took more than 30 s).
    pub async fn ready(&self) {
        if !self.formed_within(std::time::Duration::from_secs(60)).await {
            panic!(
                "the NATS cluster never answered JetStream within 60 s\n{}",
                self.log_tails(20)
            );
        }
    }

    /// A cluster that answers JetStream: started, and started anew (on other ports, with another
    /// name) when it has not formed within 30 s, up to three times, each failed one's logs
    /// printed. A cluster that does not form is the machine's trouble, not the code under test.
    pub async fn start_formed(binary: &Path) -> Cluster {
        for _ in 0..3 {
            let cluster = Self::start(binary);
            if cluster
                .formed_within(std::time::Duration::from_secs(30))
                .await
            {
                return cluster;
            }
            eprintln!(
                "a NATS cluster did not answer JetStream within 30 s; starting another\n{}",
                cluster.log_tails(20)
            );
        }
        panic!("no NATS cluster answered JetStream in 3 tries of 30 s");
    }

    /// Whether every server answered JetStream within `within`.
    async fn formed_within(&self, within: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        for url in &self.urls {
            loop {
                let answered = async {
                    let client = async_nats::connect(url).await.ok()?;
                    let js = async_nats::jetstream::new(client);
                    js.query_account().await.ok()
                };
                let asked = tokio::time::timeout(std::time::Duration::from_secs(2), answered);
                if let Ok(Some(_)) = asked.await {
                    break;
                }
                if start.elapsed() >= within {
                    return false;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        true
    }

    /// SIGKILL server `i` (its store stays).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start server `i` again on its ports and store (a no-op while it runs).
    pub fn start_again(&mut self, i: usize) {
        if self.children[i].is_none() {
            assert!(
                self.spawn(i),
                "nats-server n{i} did not start again on its port"
            );
        }
    }

    /// The last `lines` warnings, errors and leader changes of each server's log (all its
    /// runs), for a failure's message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut told = String::new();
        for (i, config) in self.configs.iter().enumerate() {
            let log = config.with_file_name("nats-server.log");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let notable: Vec<&str> = text
                .lines()
                .filter(|l| {
                    l.contains("[WRN]")
                        || l.contains("[ERR]")
                        || l.contains("leader")
                        || l.contains("Starting nats-server")
                })
                .collect();
            let tail = &notable[notable.len().saturating_sub(lines)..];
            told.push_str(&format!("--- n{i}:\n{}\n", tail.join("\n")));
        }
        told
    }

    /// The server index of a name `n<i>` (a stream's leader as JetStream names it).
    pub fn index_of(name: &str) -> Option<usize> {
        name.strip_prefix('n')?.parse().ok().filter(|i| *i < 3)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
    }
}
