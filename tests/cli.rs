//! The terminal commands (`status`, `watch`, `doctor`) run as the real binary against an
//! in-process simulator and daemon: the table lists the scripted attempts with their states,
//! `--json` is the tools' JSON, `watch` follows a live log (appends, an in-place edit, the end)
//! and exits with the final state, `doctor` passes on the example config and fails naming an
//! unreachable upstream.

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use vk_observer_sim::{AgentOutcome, AttemptScript, Channel, ProcessStatus, RunReason};

const BIN: &str = env!("CARGO_BIN_EXE_vk-observer");

/// The binary with a clean environment (no `VK_OBSERVER_*` from the caller's shell).
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

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn run(mut c: Command) -> Run {
    let out = tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .expect("the command ends within 60 s")
        .expect("the binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn mcp_url(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}/mcp")
}

fn assistant(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
           "entry_type": {"type": "assistant_message"}, "content": text}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_attempts_and_shows_one_with_its_log() {
    let sim = support::sim().await;
    let project = sim.add_project("Demo", &["demo"]);
    let ok_task = sim.add_task(project, "Add a greeting file", None);
    let ok = sim
        .run_attempt_script(
            ok_task,
            AttemptScript {
                normalized_entries: 14,
                ..AttemptScript::default()
            },
        )
        .await;
    let failed_task = sim.add_task(project, "Task that should FAIL", None);
    let failed = sim
        .run_attempt_script(
            failed_task,
            AttemptScript {
                agent: AgentOutcome::Fail,
                ..AttemptScript::default()
            },
        )
        .await;
    let _todo = sim.add_task(project, "Plain todo, nothing started", None);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "status").await;
    let url = mcp_url(daemon.addr);

    // The table: one row per task with an attempt, state and failure summary, then the footer.
    let r = run({
        let mut c = cli();
        c.args(["status", "--daemon", &url]);
        c
    })
    .await;
    assert_eq!(r.code, 0, "status failed: {}{}", r.stdout, r.stderr);
    println!("{}", r.stdout);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(lines[0].starts_with("PROJECT"), "{}", r.stdout);
    for h in ["TASK", "ATTEMPT", "STATE", "LAST ACTIVITY", "FAILURE"] {
        assert!(lines[0].contains(h), "header lacks {h}: {}", lines[0]);
    }
    let short = |id: uuid::Uuid| id.to_string()[..8].to_string();
    let ok_row = lines
        .iter()
        .find(|l| l.contains(&short(ok.attempt_id)))
        .expect("the completed attempt is listed");
    assert!(
        ok_row.contains("Add a greeting file") && ok_row.contains("completed"),
        "{ok_row}"
    );
    assert!(
        ok_row.contains(" ago") || ok_row.contains("just now"),
        "relative last activity: {ok_row}"
    );
    let failed_row = lines
        .iter()
        .find(|l| l.contains(&short(failed.attempt_id)))
        .expect("the failed attempt is listed");
    assert!(failed_row.contains("failed"), "{failed_row}");
    assert!(
        !r.stdout.contains("Plain todo"),
        "a task without attempts is not a row"
    );
    let footer = lines.last().unwrap();
    assert!(
        footer.starts_with("freshness: upstream connected") && footer.contains("token "),
        "{footer}"
    );

    // One attempt, by its short id: details and the last 10 log lines.
    let r = run({
        let mut c = cli();
        c.args(["status", &short(ok.attempt_id), "--daemon", &url]);
        c
    })
    .await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    println!("{}", r.stdout);
    assert!(
        r.stdout.contains(&ok.attempt_id.to_string()),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("Add a greeting file"), "{}", r.stdout);
    assert!(r.stdout.contains("completed (success)"), "{}", r.stdout);
    assert!(
        r.stdout.contains("The run completed"),
        "the result's summary: {}",
        r.stdout
    );
    assert!(r.stdout.contains("last 10 of 14 entries"), "{}", r.stdout);
    assert!(
        r.stdout.contains("   13  assistant_message  Done."),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("    3  "),
        "only the last 10 entries: {}",
        r.stdout
    );

    // --json: the tools' structured answers.
    let r = run({
        let mut c = cli();
        c.args([
            "status",
            &ok.attempt_id.to_string(),
            "--json",
            "--daemon",
            &url,
        ]);
        c
    })
    .await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).expect("status --json is JSON");
    assert_eq!(v["status"]["attempt_id"], json!(ok.attempt_id.to_string()));
    assert_eq!(v["status"]["state"], json!("completed"));
    assert_eq!(v["logs"]["entries"].as_array().unwrap().len(), 10);
    assert!(v["status"]["freshness"]["bootstrapped"].is_boolean());

    let r = run({
        let mut c = cli();
        c.args([
            "status",
            "--json",
            "--project",
            &project.to_string(),
            "--daemon",
            &url,
        ]);
        c
    })
    .await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).expect("status --json is JSON");
    let states: Vec<(String, String)> = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["status"]["attempt_id"].as_str().unwrap().to_string(),
                a["status"]["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(states.len(), 2, "{states:?}");
    assert!(states.contains(&(ok.attempt_id.to_string(), "completed".into())));
    assert!(states.contains(&(failed.attempt_id.to_string(), "failed".into())));

    // An unknown attempt: exit 1 with a sentence, not a panic.
    let r = run({
        let mut c = cli();
        c.args([
            "status",
            &uuid::Uuid::new_v4().to_string(),
            "--daemon",
            &url,
        ]);
        c
    })
    .await;
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("not in the daemon's cache"),
        "{}",
        r.stderr
    );

    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_a_live_log_to_the_final_state() {
    let sim = support::sim().await;
    let project = sim.add_project("Demo", &["demo"]);
    let task = sim.add_task(project, "Live task", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    for i in 0..3 {
        sim.append_log(pid, Channel::Normalized, assistant(&format!("line {i}")));
    }
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "watch").await;
    let url = mcp_url(daemon.addr);

    let mut child = cli()
        .args([
            "watch",
            &ids.attempt_id.to_string(),
            "--daemon",
            &url,
            "--linger",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    // The initial tail.
    while !seen.iter().any(|l: &String| l.contains("line 2")) {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("the initial tail is printed")
            .unwrap()
            .expect("watch is still running");
        seen.push(line);
    }
    // Live: two appends, an in-place edit of an entry already printed, then the end.
    sim.append_log(pid, Channel::Normalized, assistant("line 3"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.replace_log(pid, Channel::Normalized, 1, assistant("line 1, rewritten"));
    sim.append_log(pid, Channel::Normalized, assistant("line 4"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));

    let rest = async {
        while let Some(l) = stdout.next_line().await.unwrap() {
            seen.push(l);
        }
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(Duration::from_secs(60), rest)
        .await
        .expect("watch exits once the attempt completed");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = e.read_to_string(&mut err).await;
    }
    let out = seen.join("\n");
    println!("{out}\n--- stderr ---\n{err}");
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("── codingagent"), "{out}");
    for i in 0..5 {
        let line = format!("    {i}  assistant_message  line {i}");
        assert_eq!(
            seen.iter().filter(|l| l.starts_with(&line)).count(),
            1,
            "entry {i} printed once: {out}"
        );
    }
    assert!(
        out.contains("    1  assistant_message  [edited] line 1, rewritten"),
        "the edit is printed, marked: {out}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("final state: completed")
    );
    assert!(
        err.contains("running"),
        "the status line showed the state: {err}"
    );
    assert!(err.contains("entries seen"), "{err}");

    // An attempt that already failed: its tail, then the final state at once.
    let failed_task = sim.add_task(project, "Fails", None);
    let failed = sim
        .run_attempt_script(
            failed_task,
            AttemptScript {
                agent: AgentOutcome::Fail,
                ..AttemptScript::default()
            },
        )
        .await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "failed").await;
    let r = run({
        let mut c = cli();
        c.args([
            "watch",
            &failed.attempt_id.to_string(),
            "--daemon",
            &url,
            "--linger",
            "0.2",
        ]);
        c
    })
    .await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("simulated failure"), "{}", r.stdout);
    let last = r.stdout.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("final state: failed ("), "{}", r.stdout);

    // A follow-up while watching: the new process gets its own header and its entries.
    let done_task = sim.add_task(project, "Then a follow-up", None);
    let done = sim
        .run_attempt_script(done_task, AttemptScript::default())
        .await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "follow-up").await;
    let mut child = cli()
        .args([
            "watch",
            &done.attempt_id.to_string(),
            "--daemon",
            &url,
            "--linger",
            "3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("Done. I made the changes."))
    {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("the initial tail is printed")
            .unwrap()
            .expect("watch is still running");
        seen.push(line);
    }
    sim.follow_up_script(
        done.session_id,
        "now the second part",
        AttemptScript {
            normalized_entries: 8,
            ..AttemptScript::default()
        },
    )
    .await;
    let rest = async {
        while let Some(l) = stdout.next_line().await.unwrap() {
            seen.push(l);
        }
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(Duration::from_secs(60), rest)
        .await
        .expect("watch exits after the follow-up");
    let out = seen.join("\n");
    println!("{out}");
    assert_eq!(status.code(), Some(0), "{out}");
    assert_eq!(
        seen.iter()
            .filter(|l| l.starts_with("── codingagent"))
            .count(),
        2,
        "one header per agent process: {out}"
    );
    let after = out
        .split("Working on: now the second part")
        .nth(1)
        .unwrap_or_else(|| panic!("the follow-up's entries are printed: {out}"));
    assert!(after.contains("Done. I made the changes."), "{out}");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("final state: completed")
    );

    daemon.shutdown().await;
    sim.shutdown().await;
}

/// Until the daemon reports its upstream connected (it starts `down`).
async fn wait_connected(daemon: &vk_observer_daemon::Daemon) {
    let start = std::time::Instant::now();
    while daemon.health.state() != vk_observer_telemetry::health::UpstreamState::Connected {
        assert!(start.elapsed() < Duration::from_secs(30), "never connected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_on_the_example_config() {
    let sim = support::sim().await;
    sim.add_project("Demo", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    support::converge(&daemon.store, &sim, Duration::from_secs(30), "doctor").await;
    wait_connected(&daemon).await;
    let data_home = tempfile::tempdir().unwrap();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/vk-observer.example.toml"
    );
    let mut c = cli();
    c.args(["doctor", "--config", example, "--upstream", &sim.base_url()])
        .args(["--daemon", &mcp_url(daemon.addr)])
        .env("XDG_DATA_HOME", data_home.path());
    // The example listens on 127.0.0.1:8765; when another program holds that port here, check
    // the rest of the file with a free port instead (a daemon there is fine too).
    if std::net::TcpListener::bind("127.0.0.1:8765").is_err() {
        c.env("VK_OBSERVER_LISTEN", "127.0.0.1:0");
    }
    let r = run(c).await;
    println!("{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 0, "doctor failed:\n{}{}", r.stdout, r.stderr);
    assert!(
        !r.stdout.lines().any(|l| l.starts_with("fail")),
        "{}",
        r.stdout
    );
    for want in [
        "ok    config: ",
        "ok    settings: valid",
        "ok    round-trip: ",
        "ok    vk: ",
        "VK 0.0.143",
        "ok    vk config: ",
        "ok    daemon: ",
        "ok    daemon mcp: ",
        "ok    data dir: ",
        "0 failed",
    ] {
        assert!(r.stdout.contains(want), "no {want:?} in:\n{}", r.stdout);
    }
    let v = env!("CARGO_PKG_VERSION");
    assert!(
        r.stdout.contains(&format!(
            "ok    versions: vk-observer {v} (this binary), daemon {v}"
        )),
        "{}",
        r.stdout
    );
    // Effective settings are printed, the file's values among them.
    assert!(r.stdout.contains("prune_every = \"10m\""), "{}", r.stdout);
    assert!(r.stdout.contains("events_kept = 100000"), "{}", r.stdout);

    daemon.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_and_status_name_what_does_not_answer() {
    // A port nothing listens on, held for the whole test: a socket bound but
    // never listening refuses every connection, and no other test running
    // beside this one can take the port (dropping a listener here let a
    // parallel test's daemon bind it, so "nothing answers" met a daemon).
    let refused = tokio::net::TcpSocket::new_v4().unwrap();
    refused.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = refused.local_addr().unwrap().port();
    let upstream = format!("http://127.0.0.1:{port}");
    let data = tempfile::tempdir().unwrap();
    let r = run({
        let mut c = cli();
        c.args(["doctor", "--upstream", &upstream, "--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data.path().join("cache"));
        c
    })
    .await;
    println!("{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let vk = r
        .stdout
        .lines()
        .find(|l| l.starts_with("fail  vk: "))
        .expect("a failed vk check");
    assert!(vk.contains(&upstream), "{vk}");
    assert!(r.stdout.contains("ok    data dir: "), "{}", r.stdout);

    let daemon = format!("http://127.0.0.1:{port}/mcp");
    let r = run({
        let mut c = cli();
        c.args(["status", "--daemon", &daemon]);
        c
    })
    .await;
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains(&format!("no vk-observer daemon answers at {daemon}")),
        "{}",
        r.stderr
    );
    drop(refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_sends_the_daemons_bearer_token() {
    let sim = support::sim().await;
    sim.add_project("Demo", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let settings = vk_observer_config::McpSettings {
        token: Some("s3cret".into()),
        ..Default::default()
    };
    let daemon = support::daemon_with(&sim, dir.path(), settings).await;
    let url = mcp_url(daemon.addr);
    let r = run({
        let mut c = cli();
        c.args(["status", "--daemon", &url]);
        c
    })
    .await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("--token"), "{}", r.stderr);
    let r = run({
        let mut c = cli();
        c.args(["status", "--daemon", &url])
            .env("VK_OBSERVER_MCP_TOKEN", "s3cret");
        c
    })
    .await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("no attempts yet"), "{}", r.stdout);
    daemon.shutdown().await;
    sim.shutdown().await;
}
