//! `vk-observer token create|list|revoke` with the real binary (issue 26): tokens created
//! before `serve` work with their scopes, a revocation holds at once on the running daemon and
//! across a restart, and no secret shows in `token list`, the daemon's logs, `/metrics` or
//! `doctor`.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::mcp::Mcp;

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Runs `vk-observer token …` on `dir`'s tokens file: (exit code, stdout, stderr).
fn token(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(["token", "--data-dir"])
        .arg(dir)
        .args(args)
        .env_remove("VK_OBSERVER_MCP_TOKEN")
        .output()
        .expect("token command runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn serve(upstream: &str, addr: &str, dir: &std::path::Path, log: &std::path::Path) -> Child {
    Command::new(BIN)
        .args([
            "serve",
            "--upstream",
            upstream,
            "--listen",
            addr,
            "--data-dir",
        ])
        .arg(dir)
        .env("RUST_LOG", "debug,rmcp=debug")
        .env_remove("VK_OBSERVER_MCP_TOKEN")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("binary starts")
}

async fn wait_ready(addr: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(r) = reqwest::get(format!("http://{addr}/readyz")).await
            && r.status().as_u16() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("daemon at {addr} never became ready");
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// The HTTP status of an `initialize` sent with this bearer token.
async fn status_with(addr: &str, secret: &str) -> u16 {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .bearer_auth(secret)
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_created_revoked_and_kept_across_a_restart() {
    let sim = support::sim().await;
    sim.add_project("Tokens", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let (code, agent, err) = token(
        dir.path(),
        &["create", "--name", "agent", "--scopes", "read,write"],
    );
    assert_eq!(code, 0, "{err}");
    let agent = agent.trim().to_string();
    assert!(agent.starts_with("vko_"), "{agent}");
    let (_, orch, _) = token(
        dir.path(),
        &[
            "create",
            "--name",
            "orchestrator",
            "--scopes",
            "read,write,approve,deliver",
        ],
    );
    let orch = orch.trim().to_string();
    let (code, _, err) = token(
        dir.path(),
        &["create", "--name", "agent", "--scopes", "read"],
    );
    assert_eq!(code, 1, "a name is unique");
    assert!(err.contains("exists"), "{err}");
    let (code, _, err) = token(
        dir.path(),
        &["create", "--name", "x", "--scopes", "read,root"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("unknown scope"), "{err}");

    let addr = free_addr();
    let log = dir.path().join("daemon.log");
    let child = serve(&sim.base_url(), &addr, dir.path(), &log);
    wait_ready(&addr).await;
    let sock: std::net::SocketAddr = addr.parse().unwrap();
    let tools = Mcp::connect_with_token(sock, &agent)
        .await
        .tool_names()
        .await;
    assert!(tools.contains(&"follow_up".to_string()));
    assert!(
        !tools.contains(&"merge_attempt".to_string())
            && !tools.contains(&"respond_approval".to_string())
    );
    assert_eq!(
        status_with(&addr, "").await,
        401,
        "a token is required once one exists"
    );

    let (code, list, _) = token(dir.path(), &["list"]);
    assert_eq!(code, 0);
    assert!(
        list.contains("agent") && list.contains("read,write,approve,deliver"),
        "{list}"
    );
    assert!(
        !list.contains(&agent[4..20]) && !list.contains(&orch[4..20]),
        "no secret in the list"
    );

    let (code, _, _) = token(dir.path(), &["revoke", "agent"]);
    assert_eq!(code, 0);
    assert_eq!(
        status_with(&addr, &agent).await,
        401,
        "revoked on the running daemon"
    );
    assert_eq!(status_with(&addr, &orch).await, 200);
    let metrics = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    stop(child);

    let child = serve(&sim.base_url(), &addr, dir.path(), &log);
    wait_ready(&addr).await;
    assert_eq!(
        status_with(&addr, &agent).await,
        401,
        "still revoked after a restart"
    );
    let tools = Mcp::connect_with_token(sock, &orch)
        .await
        .tool_names()
        .await;
    assert!(
        tools.contains(&"merge_attempt".to_string()),
        "the orchestrator keeps every scope"
    );
    let doctor = Command::new(BIN)
        .args([
            "doctor",
            "--upstream",
            &sim.base_url(),
            "--listen",
            &addr,
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    stop(child);

    let logs = std::fs::read_to_string(&log).unwrap();
    let doctor = format!(
        "{}{}",
        String::from_utf8_lossy(&doctor.stdout),
        String::from_utf8_lossy(&doctor.stderr)
    );
    for secret in [&agent, &orch] {
        let body = &secret[4..];
        for (what, text) in [("logs", &logs), ("metrics", &metrics), ("doctor", &doctor)] {
            assert!(!text.contains(body), "a secret in the {what}");
        }
    }
    assert!(doctor.contains("tokens_file"), "{doctor}");
    assert!(
        doctor.contains("orchestrator (read,write,approve,deliver)"),
        "{doctor}"
    );
    assert!(
        !doctor.contains("agent ("),
        "revoked tokens are gone: {doctor}"
    );
    sim.shutdown().await;
}

/// Settings flags are global (issue 37): `token create … --data-dir D` (after the nested
/// subcommand) writes the same tokens file that `token --data-dir D list` (before it) reads.
#[test]
fn settings_flags_are_taken_before_or_after_a_nested_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args([
            "token",
            "create",
            "--name",
            "late",
            "--scopes",
            "read",
            "--data-dir",
        ])
        .arg(dir.path())
        .env_remove("VK_OBSERVER_MCP_TOKEN")
        .output()
        .expect("token command runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "token create refused: {stderr}");
    let (code, listed, err) = token(dir.path(), &["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        listed.contains("late"),
        "the token made with --data-dir last is listed: {listed}"
    );
}
