//! A real process kill: the `vk-observer` binary is killed with SIGKILL mid-ingest and restarted
//! on the same data dir, several times per seed. Tokens seen by clients never go backwards, and
//! once the daemon has caught up the cache equals the simulator's truth (0 lost, 0 duplicated).

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vk_observer_sim::{AttemptScript, Sim};
use vk_observer_store::StoreOwner;
use vk_observer_store::token::Token;

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn spawn(sim: &Sim, addr: &str, dir: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_vk-observer"))
        .args([
            "serve",
            "--upstream",
            &sim.base_url(),
            "--listen",
            addr,
            "--data-dir",
        ])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts")
}

async fn get_json(addr: &str, path: &str) -> Option<(u16, serde_json::Value)> {
    let r = reqwest::get(format!("http://{addr}{path}")).await.ok()?;
    let code = r.status().as_u16();
    Some((code, r.json().await.ok()?))
}

async fn token(addr: &str) -> Option<u64> {
    let (_, v) = get_json(addr, "/healthz").await?;
    Some(Token::parse(v["token"].as_str()?).ok()?.seq)
}

async fn wait_ready(addr: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some((200, _)) = get_json(addr, "/readyz").await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("daemon at {addr} never became ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_ingest_loses_nothing_and_tokens_never_decrease() {
    kill_schedules(false).await;
}

/// The same on VK 0.1.x's dialect: every restart reads the logs again as replays, renumbered
/// into the daemon's numbering (nothing twice, nothing lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_on_vk_0_1_x_loses_nothing_and_tokens_never_decrease() {
    kill_schedules(true).await;
}

async fn kill_schedules(v01: bool) {
    let seeds = std::env::var("VK_KILL_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3u64);
    for seed in 0..seeds {
        eprintln!("kill schedule seed {seed} (VK 0.1.x: {v01})");
        let mut rng = StdRng::seed_from_u64(seed);
        let sim = match v01 {
            true => support::workspaces::sim().await,
            false => support::sim().await,
        };
        let project = sim.add_project("Kill", &["demo"]);
        let dir = tempfile::tempdir().unwrap();
        let addr = free_addr();
        let mut child = spawn(&sim, &addr, dir.path());
        wait_ready(&addr).await;

        let player = {
            let sim = sim.clone();
            tokio::spawn(async move {
                for i in 0..3 {
                    let t = sim.add_task(project, &format!("kill {i}"), None);
                    sim.run_attempt_script(
                        t,
                        AttemptScript {
                            normalized_entries: 150,
                            raw_entries: 60,
                            replacements: 4,
                            ..AttemptScript::default()
                        },
                    )
                    .await;
                }
            })
        };
        let mut seen = 0u64;
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
            if let Some(t) = token(&addr).await {
                assert!(t >= seen, "seed {seed}: token went from {seen} to {t}");
                seen = t;
            }
            child.kill().expect("SIGKILL");
            let _ = child.wait();
            child = spawn(&sim, &addr, dir.path());
            wait_ready(&addr).await;
            let t = token(&addr).await.expect("token after restart");
            assert!(
                t >= seen,
                "seed {seed}: after a kill the token went from {seen} back to {t}"
            );
            seen = t;
        }
        player.await.unwrap();

        // Let the daemon catch up, stop it cleanly, and compare its data dir with the truth.
        let mut diff = Vec::new();
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(800)).await;
            support::terminate(child);
            let store = StoreOwner::open(dir.path(), Default::default())
                .unwrap()
                .store();
            diff = match v01 {
                true => support::workspaces::diff(&store, &sim.truth()),
                false => support::cache_diff(&store, &sim.truth()),
            };
            drop(store);
            if diff.is_empty() {
                break;
            }
            child = spawn(&sim, &addr, dir.path());
            wait_ready(&addr).await;
        }
        assert!(
            diff.is_empty(),
            "seed {seed}: cache differs after kills:\n{}",
            diff.join("\n")
        );
        sim.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_flushes_and_exits_cleanly() {
    let sim = support::sim().await;
    let project = sim.add_project("Term", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let mut child = spawn(&sim, &addr, dir.path());
    wait_ready(&addr).await;
    let t = sim.add_task(project, "before SIGTERM", None);
    sim.run_attempt_script(t, AttemptScript::default()).await;
    // Let ingest apply it, then stop the way systemd does.
    let mut last = 0;
    for _ in 0..100 {
        let now = token(&addr).await.unwrap_or(0);
        if now == last && now > 0 {
            break;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "SIGTERM did not stop the daemon within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status after SIGTERM: {status}");
    // Everything applied before the signal is on disk.
    let store = StoreOwner::open(dir.path(), Default::default())
        .unwrap()
        .store();
    assert!(
        store.current_token() >= last,
        "flushed token {} < served token {last}",
        store.current_token()
    );
    let diff = support::cache_diff(&store, &sim.truth());
    assert!(diff.is_empty(), "after SIGTERM: {diff:?}");
}

/// Every activity item after `since`, following `next_since_token` until caught up.
async fn feed_after(
    mcp: &support::mcp::Mcp,
    project: uuid::Uuid,
    since: &mut String,
) -> Vec<serde_json::Value> {
    let mut items = Vec::new();
    loop {
        let page = mcp
            .call(
                "tail_project_activity",
                serde_json::json!({"project_id": project, "since_token": since, "limit": 5, "detail": 0}),
            )
            .await
            .ok();
        assert_eq!(page["token_reset"], false, "{page}");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        *since = page["next_since_token"].as_str().unwrap().to_string();
        if page["has_more"] == false {
            return items;
        }
    }
}

fn ident(v: &serde_json::Value) -> String {
    format!(
        "{}|{}|{}|{}",
        v["token"], v["kind"], v["task_id"], v["execution_process_id"]
    )
}

/// A client following a project's activity by `since_token` across SIGKILLs of the binary sees
/// every item once: the same items a fresh walk of the finished feed returns, each task created
/// once and each process started and ended once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_activity_continues_with_no_gap_or_duplicate() {
    let mut rng = StdRng::seed_from_u64(7);
    let sim = support::sim().await;
    let project = sim.add_project("KillFeed", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let sock: std::net::SocketAddr = addr.parse().unwrap();
    let mut child = spawn(&sim, &addr, dir.path());
    wait_ready(&addr).await;
    let mut mcp = support::mcp::Mcp::connect(sock).await;
    let start = loop {
        let r = mcp
            .call(
                "tail_project_activity",
                serde_json::json!({"project_id": project}),
            )
            .await;
        if let support::mcp::Reply::Ok(v) = r {
            break v["next_since_token"].as_str().unwrap().to_string();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let player = {
        let sim = sim.clone();
        tokio::spawn(async move {
            for i in 0..4 {
                let t = sim.add_task(project, &format!("feed {i}"), None);
                sim.run_attempt_script(t, AttemptScript::default()).await;
            }
        })
    };
    let mut since = start.clone();
    let mut seen = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..500))).await;
        seen.extend(feed_after(&mcp, project, &mut since).await);
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        child = spawn(&sim, &addr, dir.path());
        wait_ready(&addr).await;
        mcp = support::mcp::Mcp::connect(sock).await;
    }
    player.await.unwrap();
    let mut all = Vec::new();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        seen.extend(feed_after(&mcp, project, &mut since).await);
        let mut from = start.clone();
        all = feed_after(&mcp, project, &mut from).await;
        let ended = all.iter().filter(|i| i["kind"] == "process_ended").count();
        let processes = sim.truth().processes.len();
        if ended == processes && processes > 0 {
            break;
        }
    }
    seen.extend(feed_after(&mcp, project, &mut since).await);
    assert_eq!(
        seen.iter().map(ident).collect::<Vec<_>>(),
        all.iter().map(ident).collect::<Vec<_>>(),
        "the follower's items differ from the finished feed"
    );
    let truth = sim.truth();
    let count = |kind: &str, field: &str, id: String| {
        all.iter()
            .filter(|i| i["kind"] == kind && i[field] == serde_json::json!(id))
            .count()
    };
    for t in truth.tasks.keys() {
        assert_eq!(
            count("task_created", "task_id", t.to_string()),
            1,
            "task {t}"
        );
    }
    for p in truth.processes.keys() {
        let id = p.to_string();
        assert_eq!(
            count("process_started", "execution_process_id", id.clone()),
            1
        );
        assert_eq!(
            count("process_ended", "execution_process_id", id),
            1,
            "process {p}"
        );
    }
    support::terminate(child);
    sim.shutdown().await;
}
