//! Server-side reads on the scale board (issue 27): the in-process query layer (`query::Query`,
//! what every MCP read tool calls) over a store holding the simulator's scale board
//! (`sim::scale`: 10,000 tasks and 20,000 attempts in one project, a 1,000-task project beside
//! it, a 98-task project of today's size, and the normalized entries), side by side in one run.
//! The board goes into the store through the one writer, as VK's streams would deliver it.
//!
//! `list_tasks` is timed four ways in the same run: from the writer's task digests (today's
//! `Query::list_tasks`), the summary computed at read time from typed rows (main's way before the
//! digests), from full JSON rows (the way before that) and the page floor (task rows, no attempt
//! read). After the reads: the store's bytes on disk against the raw JSON of the board, per table,
//! and the writer's cost of a process status change (restates a digest) against a change the
//! digest does not read.
//!
//! Run: `cargo bench --bench scale_reads`. Knobs (environment): `VK_BENCH_QUICK=1` (1,000 tasks,
//! 2,000 attempts, 100 k entries), `VK_BENCH_SCALE_ENTRIES=N` (normalized entries; default
//! 5 M), `VK_BENCH_ONLY=a,b,…` (phases: list_status, updated_since, cursor, attempts,
//! status_batch, log_pages, writer), `VK_BENCH_ITERS=N` (calls per figure, default 400),
//! `VK_BENCH_COMPRESSION=plain|entries|pages|all` or a comma list of them (`plain`: nothing
//! compressed; `entries`: the store compresses log entries itself, `[store] compression`;
//! `pages`: sled's page compression, `[store] page_compression`; default: the built-in defaults;
//! `all`, or a list, builds one store of each, same board, in the same run, and runs every phase
//! on each: the write time, the disk and the reads side by side; the old `off`, `on`, `both` mean
//! plain, pages, both of them), `VK_BENCH_ENTRIES=scale|recorded` (the log entries: the scale
//! board's one template, or the recorded real VK entries of tests/fixtures/vk-wire cycled),
//! `VK_BENCH_OUT=dir` (default target/perf; writes `scale.json`).

#[path = "scale_reads/board.rs"]
mod board;

use board::{compression_modes, disk_report, entry_json, raw_json_bytes};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use uuid::Uuid;
use vk_observer_query::detail::Detail;
use vk_observer_query::logs::{LogMode, LogRequest};
use vk_observer_query::paging::PageArgs;
use vk_observer_query::task_summary::{SummaryFn, task_summary, task_summary_from_values};
use vk_observer_query::tasks::{TaskFilter, TaskStatus, TaskSummary};
use vk_observer_query::{Query, Since};
use vk_observer_sim::scale::{ScaleRows, ScaleSpec, scale_rows};
use vk_observer_store::events::{Channel, DomainEvent};
use vk_observer_store::reader::Stored;
use vk_observer_store::writer::Writer;
use vk_observer_store::{Retention, StoreOwner, StoreReader, StoreSettings};
use vk_observer_telemetry::health::Health;
use vk_observer_tool_error::ToolError;

struct Opts {
    spec: ScaleSpec,
    only: Option<Vec<String>>,
    iters: usize,
    /// The `[store]` settings of each store built, in order, with their names.
    compression: Vec<(&'static str, StoreSettings)>,
}

impl Opts {
    fn from_env() -> Opts {
        let var = |k: &str| std::env::var(k).ok();
        let num = |k: &str| var(k).and_then(|v| v.parse::<u64>().ok());
        let quick = var("VK_BENCH_QUICK").is_some_and(|v| v != "0");
        let mut spec = ScaleSpec::default();
        if quick {
            spec.tasks = 1_000;
            spec.attempts = 2_000;
            spec.entries = 100_000;
        }
        if let Some(n) = num("VK_BENCH_SCALE_ENTRIES") {
            spec.entries = n;
        }
        let only =
            var("VK_BENCH_ONLY").map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
        Opts {
            spec,
            only,
            iters: num("VK_BENCH_ITERS").unwrap_or(400) as usize,
            compression: compression_modes(var("VK_BENCH_COMPRESSION").as_deref()),
        }
    }
    fn runs(&self, phase: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|p| p == phase))
    }
}

/// One figure: p50 and p99 of `iters` calls, after a warm-up of a tenth of them.
struct Figure {
    name: String,
    p50: Duration,
    p99: Duration,
    items: usize,
}

fn measure<T>(
    name: &str,
    iters: usize,
    mut call: impl FnMut() -> T,
    count: impl Fn(&T) -> usize,
) -> Figure {
    let mut items = 0;
    for _ in 0..iters / 10 + 1 {
        items = count(&call());
    }
    let mut times: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            let out = call();
            let d = t.elapsed();
            std::hint::black_box(out);
            d
        })
        .collect();
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    let f = Figure {
        name: name.to_string(),
        p50: at(0.50),
        p99: at(0.99),
        items,
    };
    println!(
        "{:<64} p50 {:>9.1} µs  p99 {:>9.1} µs  ({} items)",
        f.name,
        us(f.p50),
        us(f.p99),
        f.items
    );
    f
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Feeds the board to the writer in the order VK's streams deliver it; returns what it took.
fn load(writer: &mut Writer, rows: &ScaleRows) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let mut events = vec![DomainEvent::ProjectsSnapshot {
        projects: rows.projects.clone(),
    }];
    for (project_id, repos) in &rows.repos {
        events.push(DomainEvent::ReposSnapshot {
            project_id: *project_id,
            repos: repos.clone(),
        });
    }
    for (project_id, tasks) in &rows.tasks {
        events.push(DomainEvent::TasksSnapshot {
            project_id: *project_id,
            tasks: tasks.clone(),
        });
    }
    writer.apply(std::mem::take(&mut events))?;
    let scoped =
        rows.attempts
            .iter()
            .map(|(task_id, attempts)| DomainEvent::AttemptsSnapshot {
                task_id: *task_id,
                attempts: attempts.clone(),
            })
            .chain(rows.sessions.iter().map(|(attempt_id, sessions)| {
                DomainEvent::SessionsSnapshot {
                    attempt_id: *attempt_id,
                    sessions: sessions.clone(),
                }
            }))
            .chain(rows.processes.iter().map(|(attempt_id, processes)| {
                DomainEvent::ProcessesSnapshot {
                    attempt_id: *attempt_id,
                    processes: processes.clone(),
                }
            }));
    for event in scoped {
        events.push(event);
        if events.len() == 500 {
            writer.apply(std::mem::take(&mut events))?;
        }
    }
    writer.apply(std::mem::take(&mut events))?;
    for &(attempt_id, process_id, count) in &rows.logs {
        for start in (0..count).step_by(512) {
            let entries = (start..(start + 512).min(count))
                .map(|i| Ok((i, RawValue::from_string(entry_json(i))?)))
                .collect::<Result<Vec<_>, serde_json::Error>>()?;
            writer.apply(vec![DomainEvent::LogEntriesPut {
                attempt_id,
                process_id,
                channel: Channel::Normalized,
                entries,
            }])?;
        }
    }
    Ok(t.elapsed())
}

fn list_status(
    q: &Query,
    project: Uuid,
    status: TaskStatus,
    limit: usize,
    summary: Option<SummaryFn>,
) -> usize {
    let filter = TaskFilter {
        status: Some(status),
        ..TaskFilter::default()
    };
    let args = PageArgs {
        cursor: None,
        limit,
    };
    match summary {
        Some(summary) => q.list_tasks_summarized_by(project, &filter, &args, summary),
        None => q.list_tasks(project, &filter, &args),
    }
    .map(|p| p.count)
    .unwrap_or(usize::MAX)
}

/// The page's floor: the task's own fields, no attempt read (what the summary costs on top).
fn task_fields_only(_: &StoreReader, t: &Stored) -> Result<TaskSummary, ToolError> {
    Ok(TaskSummary {
        task_id: t.id,
        project_id: None,
        title: t.value["title"].as_str().unwrap_or_default().to_string(),
        description: None,
        status: t.value["status"].as_str().unwrap_or_default().to_string(),
        created_at: None,
        updated_at: None,
        latest_attempt_id: None,
        latest_workspace_branch: None,
        latest_session_id: None,
        latest_session_executor: None,
        has_in_progress_attempt: false,
        last_attempt_failed: false,
        host: None,
        hosts: Vec::new(),
        usage: None,
    })
}

/// The same `list_tasks(status)` on the three projects of the board, side by side: from the
/// kept digests (today), the typed summary at read time (main's way), the full-JSON summary
/// (`task_summary_from_values`) and the page alone (no attempt read), each project in turn.
fn list_status_phase(o: &Opts, q: &Query, rows: &ScaleRows, out: &mut Vec<Figure>) {
    let sizes = [o.spec.tasks, o.spec.side_tasks, o.spec.small_tasks];
    let ways: [(&str, Option<SummaryFn>); 4] = [
        (" [kept digests]", None),
        (" [main: typed summary at read time]", Some(task_summary)),
        (
            " [previous: full-JSON summary]",
            Some(task_summary_from_values),
        ),
        (" [page floor: no attempt read]", Some(task_fields_only)),
    ];
    for (project, size) in rows.project_ids.into_iter().zip(sizes) {
        for (label, summary) in ways {
            let name = format!("list_tasks(status=todo, limit 50), {size} tasks{label}");
            out.push(measure(
                &name,
                o.iters,
                || list_status(q, project, TaskStatus::Todo, 50, summary),
                |c| *c,
            ));
        }
    }
    // The target compares the 10,000-task page with the 98-task one, whose status lists fewer
    // than 50 tasks: the big project again with the small page's size, for a like-for-like ratio.
    let small_page = list_status(q, rows.project_ids[2], TaskStatus::Todo, 50, None);
    if (1..50).contains(&small_page) {
        let name = format!(
            "list_tasks(status=todo, limit {small_page}), {} tasks [kept digests, the 98-task page's size]",
            sizes[0]
        );
        out.push(measure(
            &name,
            o.iters,
            || list_status(q, rows.project_ids[0], TaskStatus::Todo, small_page, None),
            |c| *c,
        ));
    }
}

fn phases(o: &Opts, q: &Query, rows: &ScaleRows, out: &mut Vec<Figure>) {
    let big = rows.project_ids[0];
    let n = o.iters;
    if o.runs("list_status") {
        list_status_phase(o, q, rows, out);
    }
    if o.runs("updated_since") {
        let since = updated_at(q, rows.big_tasks[rows.big_tasks.len().saturating_sub(10)]);
        let filter = TaskFilter {
            updated_since: since,
            ..TaskFilter::default()
        };
        let args = PageArgs {
            cursor: None,
            limit: 50,
        };
        let name = format!("list_tasks(updated_since) → 10 of {}", o.spec.tasks);
        out.push(measure(
            &name,
            n,
            || q.list_tasks(big, &filter, &args).map(|p| p.count),
            |c| *c.as_ref().unwrap_or(&0),
        ));
    }
    if o.runs("cursor") {
        let filter = TaskFilter {
            status: Some(TaskStatus::Done),
            ..TaskFilter::default()
        };
        let first = q.list_tasks(
            big,
            &filter,
            &PageArgs {
                cursor: None,
                limit: 50,
            },
        );
        let args = PageArgs {
            cursor: first.ok().and_then(|p| p.next_cursor),
            limit: 50,
        };
        let name = format!(
            "list_tasks(status=done, cursor: page 2, limit 50), {} tasks",
            o.spec.tasks
        );
        out.push(measure(
            &name,
            n,
            || q.list_tasks(big, &filter, &args).map(|p| p.count),
            |c| *c.as_ref().unwrap_or(&0),
        ));
    }
    if o.runs("attempts") {
        let task = rows.big_tasks[rows.big_tasks.len() / 2];
        let args = PageArgs {
            cursor: None,
            limit: 50,
        };
        let name = format!(
            "list_task_attempts(limit 50), a task of the {}-task project",
            o.spec.tasks
        );
        out.push(measure(
            &name,
            n,
            || q.list_task_attempts(task, &args).map(|p| p.attempts.len()),
            |c| *c.as_ref().unwrap_or(&0),
        ));
    }
    if o.runs("status_batch") {
        status_batch(o, q, rows, out);
    }
    if o.runs("log_pages") {
        log_pages(o, q, rows, out);
    }
}

/// A page of 50 normalized entries from a process picked across the whole board at each call
/// (most pages are not in sled's cache: with compression on, what a read pays to decompress).
fn log_pages(o: &Opts, q: &Query, rows: &ScaleRows, out: &mut Vec<Figure>) {
    let logs: Vec<(Uuid, u64)> = rows.logs.iter().map(|&(_, p, n)| (p, n)).collect();
    let mut call = 0usize;
    let name = format!(
        "log page (50 entries) of a process picked across {} processes",
        logs.len()
    );
    out.push(measure(
        &name,
        o.iters,
        || {
            call += 1;
            let (process, n) = logs[call.wrapping_mul(7919) % logs.len()];
            let from = n / 2;
            let page = q
                .read()
                .log_range(process, Channel::Normalized, from, from + 50, 50);
            page.map(|p| p.len()).unwrap_or(0)
        },
        |c| *c,
    ));
    let name = format!(
        "tail_attempt_logs(after_entry_index, limit 50) across {} processes",
        logs.len()
    );
    let attempts: Vec<(Uuid, u64)> = rows.logs.iter().map(|&(a, _, n)| (a, n)).collect();
    out.push(measure(
        &name,
        o.iters,
        || {
            call += 1;
            let (attempt, n) = attempts[call.wrapping_mul(7919) % attempts.len()];
            let req = LogRequest {
                attempt,
                channel: Channel::Normalized,
                mode: LogMode::After(n / 2),
                limit: 50,
                since: Since::None,
                process: None,
                detail: Detail::Compact,
            };
            q.tail_logs(req).map(|p| p.entries.len()).unwrap_or(0)
        },
        |c| *c,
    ));
}

/// The writer's cost of a process change, one batch each: a status change (the task's digest is
/// recomputed and rewritten) against a change of a field the digest does not read (`exit_code`:
/// two typed decodes, no restatement), alternating over the big project's processes.
fn writer_phase(o: &Opts, writer: &mut Writer, rows: &ScaleRows, out: &mut Vec<Figure>) {
    let processes: Vec<(Uuid, Value)> = rows
        .processes
        .iter()
        .flat_map(|(a, ps)| ps.iter().map(move |p| (*a, p.clone())))
        .take(o.iters)
        .collect();
    let mut apply = |name: &str, change: &dyn Fn(&mut Value, usize)| {
        let mut round = 0;
        let mut at = 0;
        let figure = measure(
            name,
            o.iters,
            || {
                let (attempt_id, mut process) = processes[at % processes.len()].clone();
                at += 1;
                round += 1;
                change(&mut process, round);
                writer
                    .apply(vec![DomainEvent::ProcessUpserted {
                        attempt_id,
                        process,
                    }])
                    .map(|a| a.token.is_some())
            },
            |c| usize::from(*c.as_ref().unwrap_or(&false)),
        );
        out.push(figure);
    };
    apply(
        "writer: a process's status changes (digest restated), one batch",
        &|p, n| p["status"] = json!(if n % 2 == 0 { "running" } else { "completed" }),
    );
    apply(
        "writer: a process's exit_code changes (digest untouched), one batch",
        &|p, n| p["exit_code"] = json!(n),
    );
}

/// `get_attempt_status` with 100 ids: steady state (statuses memoized per attempt token, as a
/// polling orchestrator meets them) and cold (a fresh memo every call).
fn status_batch(o: &Opts, q: &Query, rows: &ScaleRows, out: &mut Vec<Figure>) {
    let ids: Vec<Uuid> = rows
        .big_attempts
        .iter()
        .step_by((rows.big_attempts.len() / 100).max(1))
        .take(100)
        .copied()
        .collect();
    let name = format!(
        "get_attempt_status, batch of 100 of {} attempts, memoized",
        o.spec.attempts
    );
    out.push(measure(
        &name,
        o.iters,
        || {
            q.attempt_statuses(&ids, Since::None)
                .map(|p| p.attempts.len())
        },
        |c| *c.as_ref().unwrap_or(&0),
    ));
    let name = format!(
        "get_attempt_status, batch of 100 of {} attempts, cold memo",
        o.spec.attempts
    );
    let fresh = || Query::new(q.store.clone(), q.health.clone());
    out.push(measure(
        &name,
        o.iters,
        || {
            fresh()
                .attempt_statuses(&ids, Since::None)
                .map(|p| p.attempts.len())
        },
        |c| *c.as_ref().unwrap_or(&0),
    ));
}

fn updated_at(q: &Query, task: Uuid) -> Option<DateTime<Utc>> {
    let t = q.read().task(task).ok()??;
    t.value.get("updated_at")?.as_str()?.parse().ok()
}

/// One store holding the board, written with one set of `[store]` settings.
struct Built {
    compression: &'static str,
    _dir: tempfile::TempDir,
    owner: StoreOwner,
    writer: Writer,
    loaded: Duration,
    disk: u64,
    disk_json: Value,
}

fn build(
    rows: &ScaleRows,
    raw: u64,
    (compression, settings): (&'static str, StoreSettings),
) -> anyhow::Result<Built> {
    let dir = tempfile::tempdir()?;
    let mut owner = StoreOwner::open_with(dir.path(), Retention::default(), settings)?;
    let mut writer = owner
        .take_writer()
        .ok_or_else(|| anyhow::anyhow!("no writer"))?;
    let loaded = load(&mut writer, rows)?;
    owner.flush()?;
    let disk = owner.store().size_on_disk();
    println!("[compression {compression}] board written in {loaded:.2?}");
    let disk_json = disk_report(&owner.store(), raw, disk)?;
    Ok(Built {
        compression,
        _dir: dir,
        owner,
        writer,
        loaded,
        disk,
        disk_json,
    })
}

fn main() -> anyhow::Result<()> {
    let o = Opts::from_env();
    println!("scale_reads: {:?}, compression {:?}", o.spec, o.compression);
    let t = Instant::now();
    let rows = scale_rows(o.spec);
    let generated = t.elapsed();
    println!("board generated in {generated:.2?}");
    let raw = raw_json_bytes(&rows);
    let mut stores = o
        .compression
        .iter()
        .map(|&c| build(&rows, raw, c))
        .collect::<anyhow::Result<Vec<Built>>>()?;
    let mut reports = Vec::new();
    for b in &mut stores {
        println!("[compression {}] reads", b.compression);
        let q = Query::new(b.owner.store(), Arc::new(Health::new()));
        let mut figures = Vec::new();
        phases(&o, &q, &rows, &mut figures);
        if o.runs("writer") {
            writer_phase(&o, &mut b.writer, &rows, &mut figures);
        }
        reports.push(store_report(b, &figures));
    }
    write_report(&o, generated, reports)
}

fn store_report(b: &Built, figures: &[Figure]) -> Value {
    json!({
        "compression": b.compression,
        "written_s": b.loaded.as_secs_f64(),
        "disk_bytes": b.disk,
        "disk": b.disk_json,
        "figures": figures.iter().map(|f| json!({"name": f.name, "p50_us": us(f.p50), "p99_us": us(f.p99), "items": f.items})).collect::<Vec<Value>>(),
    })
}

fn write_report(o: &Opts, generated: Duration, stores: Vec<Value>) -> anyhow::Result<()> {
    let report = json!({
        "spec": format!("{:?}", o.spec),
        "iters": o.iters,
        "commit": std::process::Command::new("git").args(["rev-parse", "--short", "HEAD"]).output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
        "load_average": std::fs::read_to_string("/proc/loadavg").ok().map(|l| l.trim().to_string()),
        "generated_s": generated.as_secs_f64(),
        "stores": stores,
    });
    let out = std::env::var("VK_BENCH_OUT").unwrap_or_else(|_| "target/perf".into());
    std::fs::create_dir_all(&out)?;
    let path = std::path::Path::new(&out).join("scale.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&report)?)?;
    println!("wrote {}", path.display());
    Ok(())
}
