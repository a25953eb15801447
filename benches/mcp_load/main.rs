//! Load driver for issue 5: MCP over real HTTP against the `vk-observer` binary, side by side in
//! one run, with p50/p99 and ratios. Writes `target/perf/results.json`, `target/perf/results.md`
//! and the plot `target/perf/latency.svg` (see docs/performance.md).
//!
//! Run: `cargo bench --bench mcp_load` (all of `cargo bench` also runs the ingest bench).
//! Knobs (environment): `VK_BENCH_QUICK=1` (small sizes, a smoke run), `VK_BENCH_ONLY=a,b,…`
//! (phases: status, wake, throughput, waiters, waiters_session, resource_wake, task_wake,
//! waiters_progress, lean_waiters,
//! tail, catchup, idle, bytes, fresh), `VK_BENCH_TAIL_SIZES=1000,…`,
//! `VK_BENCH_CATCHUP=N`, `VK_BENCH_WAITERS=N`, `VK_BENCH_SECS=N` (throughput duration),
//! `VK_BENCH_DAEMON_BIN=path` (another daemon build), `VK_BENCH_BASELINE_BIN=path` (phase
//! lean_waiters measures that build too, first, in the same run), `VK_BENCH_DAEMON_LOG=filter`
//! (its RUST_LOG), `VK_BENCH_OUT=dir` (default target/perf), `-- --scale[=N]` (only the catch-up
//! from empty against the scale board, N entries, see `scale.rs`; `VK_BENCH_BASE_BIN=path` runs
//! main's binary beside this one), `VK_BENCH_REPLOT=dir/results.json` (only redraw
//! `dir/latency.svg` from an earlier run), `VK_BENCH_PAUSE=N` (pause N s once the first daemon
//! is ready, to attach a profiler), `VK_BENCH_PARKED_PAUSE=N` (lean_waiters: pause N s while all
//! are parked).
//!
//! Set-up: the VK simulator, the clients and a REST-proxy MCP server (the baseline) run in this
//! process; every daemon is the real `vk-observer` binary in a child process (built by cargo for
//! benches: `CARGO_BIN_EXE_vk-observer`), so its RSS is read from `/proc/<pid>/status` alone and
//! the 10 k waiter connections fit the file limit (10 k sockets on each side). The daemon serves
//! `/mcp` in stateless JSON mode (`--mcp-stateless`); the MCP client is a plain HTTP POST of one
//! JSON-RPC `tools/call` (what the Streamable HTTP transport sends in that mode), timed from
//! sending the request to the last byte of the answer (parsing happens after the clock stops).

mod bytes;
mod bytes_run;
mod catchup;
mod client;
mod daemon;
mod data;
mod fresh;
mod idle;
mod lean;
mod lean_report;
mod opts;
mod plot;
mod proxy;
mod report;
mod resources;
mod scale;
mod scenario;
mod session_waits;
mod status;
mod tail;
mod task_wake;
mod throughput;
mod waiters;
mod wake;

use std::path::Path;

use anyhow::anyhow;

use crate::catchup::catch_up;
use crate::daemon::daemon_bin;
use crate::data::machine;
use crate::opts::Opts;
use crate::plot::plot;
use crate::report::{Report, write_outputs};
use crate::scenario::phase_a;
use crate::tail::phase_tail;

async fn run() -> anyhow::Result<()> {
    // Redraw the plot of an earlier run: VK_BENCH_REPLOT=target/perf/results.json.
    if let Ok(path) = std::env::var("VK_BENCH_REPLOT") {
        let r: Report = serde_json::from_slice(&std::fs::read(&path)?)?;
        let svg = plot(&r).ok_or_else(|| anyhow!("{path} has no tail or status curve"))?;
        let out = Path::new(&path).with_file_name("latency.svg");
        std::fs::write(&out, svg)?;
        println!("wrote {}", out.display());
        return Ok(());
    }
    let o = Opts::from_env();
    let mut r = Report {
        machine: machine(),
        ..Default::default()
    };
    println!("mcp_load: daemon binary {}", daemon_bin());
    r.machine.insert("daemon_bin".into(), daemon_bin());
    println!("machine: {:?}", r.machine);
    let result = async {
        if let Some(entries) = scale::scale_arg() {
            // `--scale`: only the catch-up from empty against the scale board.
            return scale::phase_scale(&mut r, entries).await;
        }
        phase_a(&mut r, &o).await?;
        phase_tail(&mut r, &o).await?;
        if o.runs("bytes") {
            bytes::phase_bytes(&mut r, &o).await?;
        }
        if o.runs("idle") {
            idle::phase_idle(&mut r, &o).await?;
        }
        if o.runs("fresh") {
            fresh::phase_fresh(&mut r, &o).await?;
        }
        if o.runs("catchup") {
            catch_up(&mut r, &o, false).await?;
            catch_up(&mut r, &o, true).await?;
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    write_outputs(&r)?;
    result
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes its options from the environment.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run()) {
        eprintln!("mcp_load failed: {e:#}");
        std::process::exit(1);
    }
}
