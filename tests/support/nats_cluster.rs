//! Three real `nats-server`s forming one JetStream cluster on loopback (tests/fleet_replicas.rs,
//! tests/fleet_cluster_faults.rs): each with its own store dir and config file, so any one can
//! be killed (SIGKILL) and started again on the same ports and store.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn free_port() -> u16 {
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
    pub fn start(binary: &Path) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let (clients, routes): (Vec<u16>, Vec<u16>) =
            (0..3).map(|_| (free_port(), free_port())).unzip();
        let routes_line = routes
            .iter()
            .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut configs = Vec::new();
        for i in 0..3 {
            let store = dir.path().join(format!("js{i}"));
            let conf = format!(
                "server_name: n{i}\nlisten: 127.0.0.1:{}\njetstream {{ store_dir: {store:?} }}\n\
                 cluster {{\n  name: vko\n  listen: 127.0.0.1:{}\n  routes: [ {routes_line} ]\n}}\n",
                clients[i], routes[i]
            );
            let path = dir.path().join(format!("n{i}.conf"));
            std::fs::write(&path, conf).unwrap();
            configs.push(path);
        }
        let mut cluster = Cluster {
            binary: binary.to_path_buf(),
            children: (0..3).map(|_| None).collect(),
            configs,
            urls: clients
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect(),
            _dir: dir,
        };
        for i in 0..3 {
            cluster.start_again(i);
        }
        cluster
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
        if self.children[i].is_some() {
            return;
        }
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(&self.configs[i])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.children[i] = Some(child);
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
