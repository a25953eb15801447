//! Phase b: tail_attempt_logs with 1 k … 1 M stored entries (store prefilled via the writer).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::ensure;
use serde_json::json;
use serde_json::value::RawValue;
use uuid::Uuid;
use vk_observer_sim::{RunReason, Sim};
use vk_observer_store::events::DomainEvent;
use vk_observer_store::{Retention, StoreOwner};

use crate::daemon::{DaemonProc, dir_bytes};
use crate::data::{entry_json, out_dir, sim_config};
use crate::opts::Opts;
use crate::report::{Report, ms, stats};

pub(crate) struct Prefilled {
    /// (stored entries, attempt, process)
    pub(crate) logs: Vec<(u64, Uuid, Uuid)>,
    pub(crate) raw_bytes: u64,
    pub(crate) entries: u64,
    pub(crate) write_secs: f64,
    pub(crate) size_on_disk: u64,
}

/// Entities as the simulator renders them; logs written directly, 512 entries per batch (the
/// log followers' chunk), into the data dir the daemon will open.
pub(crate) async fn prefill(dir: &Path, sizes: &[u64]) -> anyhow::Result<Prefilled> {
    let sim = Sim::start(sim_config(5000)).await?;
    let project = sim.add_project("Tails", &["tails"]);
    let task = sim.add_task(project, "Tail bench", None);
    let mut procs = Vec::new();
    for _ in sizes {
        let ids = sim.create_attempt(task, "CLAUDE_CODE");
        let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
        procs.push((ids.attempt_id, pid));
    }
    let truth = sim.truth();
    sim.shutdown().await;
    let sizes = sizes.to_vec();
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut owner = StoreOwner::open(&dir, Retention::default())?;
        let store = owner.store();
        let mut w = owner.take_writer().expect("the one writer");
        let session_attempt: BTreeMap<String, String> = truth
            .sessions
            .values()
            .map(|s| {
                (
                    s["id"].as_str().unwrap().to_string(),
                    s["workspace_id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let mut ev = vec![DomainEvent::ProjectsSnapshot {
            projects: truth.projects.values().cloned().collect(),
        }];
        for (p, repos) in &truth.repos {
            ev.push(DomainEvent::ReposSnapshot {
                project_id: *p,
                repos: repos.clone(),
            });
        }
        ev.push(DomainEvent::TasksSnapshot {
            project_id: project,
            tasks: truth.tasks.values().cloned().collect(),
        });
        ev.push(DomainEvent::AttemptsSnapshot {
            task_id: task,
            attempts: truth.attempts.values().cloned().collect(),
        });
        for (attempt, _) in &procs {
            let a = attempt.to_string();
            ev.push(DomainEvent::SessionsSnapshot {
                attempt_id: *attempt,
                sessions: truth
                    .sessions
                    .values()
                    .filter(|s| s["workspace_id"] == json!(a))
                    .cloned()
                    .collect(),
            });
            ev.push(DomainEvent::ProcessesSnapshot {
                attempt_id: *attempt,
                processes: truth
                    .processes
                    .values()
                    .filter(|p| {
                        p["session_id"]
                            .as_str()
                            .and_then(|s| session_attempt.get(s))
                            == Some(&a)
                    })
                    .cloned()
                    .collect(),
            });
        }
        w.apply(ev)?;
        let t = Instant::now();
        let (mut raw_bytes, mut entries) = (0u64, 0u64);
        let mut logs = Vec::new();
        for (&n, &(attempt, pid)) in sizes.iter().zip(&procs) {
            let mut i = 0;
            while i < n {
                let end = (i + 512).min(n);
                let chunk: Vec<(u64, Box<RawValue>)> = (i..end)
                    .map(|k| {
                        let s = entry_json(k);
                        raw_bytes += s.len() as u64;
                        (k, RawValue::from_string(s).unwrap())
                    })
                    .collect();
                w.apply(vec![DomainEvent::LogEntriesPut {
                    attempt_id: attempt,
                    process_id: pid,
                    channel: vk_observer_store::events::Channel::Normalized,
                    entries: chunk,
                }])?;
                i = end;
            }
            entries += n;
            logs.push((n, attempt, pid));
        }
        owner.flush()?;
        let write_secs = t.elapsed().as_secs_f64();
        let size_on_disk = store.size_on_disk();
        drop(w);
        drop(store);
        drop(owner);
        Ok::<_, anyhow::Error>(Prefilled {
            logs,
            raw_bytes,
            entries,
            write_secs,
            size_on_disk,
        })
    })
    .await?
}

pub(crate) async fn phase_tail(r: &mut Report, o: &Opts) -> anyhow::Result<()> {
    if !o.runs("tail") {
        return Ok(());
    }
    println!(
        "\n== b. tail_attempt_logs(after_entry_index) returning 50 new entries, stored history {:?}",
        o.tail_sizes
    );
    let dir = tempfile::tempdir()?;
    let p = prefill(dir.path(), &o.tail_sizes).await?;
    let dir_size = dir_bytes(dir.path());
    println!(
        "  wrote {} entries ({:.0} MB raw) through the store writer in {:.1} s = {:.0} entries/s; sled size_on_disk {:.0} MB, files {:.0} MB",
        p.entries,
        p.raw_bytes as f64 / 1e6,
        p.write_secs,
        p.entries as f64 / p.write_secs,
        p.size_on_disk as f64 / 1e6,
        dir_size as f64 / 1e6
    );
    let ratio = p.size_on_disk as f64 / p.raw_bytes as f64;
    r.row(
        &format!(
            "disk bytes per raw log byte ({} entries written via the store writer)",
            p.entries
        ),
        format!(
            "{ratio:.2}× ({:.0} MB sled size_on_disk / {:.0} MB raw entries)",
            p.size_on_disk as f64 / 1e6,
            p.raw_bytes as f64 / 1e6
        ),
        "≤ 2×",
        Some(ratio <= 2.0),
    );
    r.row(
        "write rate into a growing store (prefill, 512 per batch)",
        format!(
            "{:.0} entries/s ({} entries in {:.1} s)",
            p.entries as f64 / p.write_secs,
            p.entries,
            p.write_secs
        ),
        "—",
        None,
    );
    r.detail(
        "prefill",
        json!({"entries": p.entries, "raw_bytes": p.raw_bytes, "write_secs": p.write_secs,
               "size_on_disk": p.size_on_disk, "dir_bytes": dir_size}),
    );
    // The daemon serves the cache with its upstream unreachable (nothing can change it).
    let spawned = Instant::now();
    let mut d = DaemonProc::spawn(
        "http://127.0.0.1:9",
        dir.path(),
        true,
        None,
        &out_dir().join("daemon-b.log"),
    )?;
    d.wait_serving(Duration::from_secs(120)).await?;
    let mcp = d.mcp();
    let (largest_n, largest_attempt, _) = *p.logs.last().unwrap();
    let first = mcp
        .call(
            "tail_attempt_logs",
            &json!({"attempt_id": largest_attempt, "limit": 1}),
        )
        .await?;
    let to_first_answer = spawned.elapsed();
    ensure!(
        first["latest_entry_index"] == json!(largest_n - 1),
        "{first}"
    );
    println!(
        "  daemon restarted on this data dir: first tail answer {:.0} ms after spawn",
        to_first_answer.as_secs_f64() * 1000.0
    );
    r.row(
        &format!(
            "restart on a data dir holding {} entries: spawn → first tail answer",
            p.entries
        ),
        format!("{:.0} ms", to_first_answer.as_secs_f64() * 1000.0),
        "—",
        None,
    );
    let token = first["token"].as_str().unwrap().to_string();
    let args = |n: u64, attempt: Uuid, since: bool| {
        let mut a = json!({"attempt_id": attempt, "after_entry_index": n - 51, "limit": 50});
        if since {
            a["since_token"] = json!(token);
        }
        a
    };
    for &(n, attempt, _) in &p.logs {
        for since in [false, true] {
            let v = mcp
                .call("tail_attempt_logs", &args(n, attempt, since))
                .await?;
            let e = v["entries"].as_array().unwrap();
            ensure!(
                e.len() == 50
                    && e[0]["entry_index"] == json!(n - 50)
                    && v["has_more"] == json!(false),
                "unexpected tail page for {n}: {} entries",
                e.len()
            );
        }
    }
    let mut plain: Vec<Vec<Duration>> = vec![Vec::new(); p.logs.len()];
    let mut with_token: Vec<Vec<Duration>> = vec![Vec::new(); p.logs.len()];
    let iters = o.iters(500);
    for round in 0..iters + 20 {
        for (k, &(n, attempt, _)) in p.logs.iter().enumerate() {
            let a1 = mcp
                .timed("tail_attempt_logs", &args(n, attempt, false))
                .await?
                .0;
            let a2 = mcp
                .timed("tail_attempt_logs", &args(n, attempt, true))
                .await?
                .0;
            if round >= 20 {
                plain[k].push(a1);
                with_token[k].push(a2);
            }
        }
    }
    let mut curve = Vec::new();
    for (k, &(n, _, _)) in p.logs.iter().enumerate() {
        let (s1, s2) = (stats(&plain[k]), stats(&with_token[k]));
        println!(
            "    {n:>8} stored: p50 {} p99 {} | with since_token p50 {} p99 {}",
            ms(s1.p50_us),
            ms(s1.p99_us),
            ms(s2.p50_us),
            ms(s2.p99_us)
        );
        curve.push(json!({"stored": n, "plain": s1, "with_since_token": s2}));
    }
    let s_small = stats(&plain[0]);
    let s_large = stats(&plain[p.logs.len() - 1]);
    let (n_small, n_large) = (p.logs[0].0, largest_n);
    let ratio = s_large.p50_us / s_small.p50_us;
    r.row(
        &format!("tail 50 new entries, {n_large} vs {n_small} stored: p50 ratio"),
        format!(
            "{ratio:.2} ({} vs {})",
            ms(s_large.p50_us),
            ms(s_small.p50_us)
        ),
        "≤ 1.5",
        Some(ratio <= 1.5),
    );
    r.row(
        &format!("tail 50 new entries with {n_large} stored, p50 (p99)"),
        format!("{} ({})", ms(s_large.p50_us), ms(s_large.p99_us)),
        "p50 ≤ 1 ms",
        Some(s_large.p50_us <= 1000.0),
    );
    let t_small = stats(&with_token[0]);
    let t_large = stats(&with_token[p.logs.len() - 1]);
    r.row(
        &format!("same with since_token: {n_large} vs {n_small}, p50"),
        format!(
            "{} vs {} (ratio {:.2})",
            ms(t_large.p50_us),
            ms(t_small.p50_us),
            t_large.p50_us / t_small.p50_us
        ),
        "—",
        None,
    );
    r.detail("tail_by_history", curve);
    d.stop().await?;
    Ok(())
}
