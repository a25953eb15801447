//! The wake after a follow-up (issue 39 item 6): how long after VK's own first SSE event for a
//! follow-up a `wait_for_attempt_change` parked on the (finished) attempt answers.
//!
//! One simulated VK, one in-process daemon following it, and beside them this bench's own
//! subscription to the simulator's `/api/events`. Per sample: the attempt's last run ended and
//! its process stream closed (the daemon's linger passed), a wait is parked on it with the
//! current token, the follow-up is sent to VK's REST route (as VK's UI would: the daemon's own
//! `follow_up` nudges ingest at once and would hide the hint path), then the instant the first
//! SSE event arrives here is compared with the instant the wait answers.
//!
//! Run: `cargo bench --bench follow_up_wake`. Knobs: `VK_BENCH_FOLLOW_UPS` (samples, default
//! 30). Prints p50 / p90 / max of wake − SSE, and of SSE and wake after the follow-up was sent.

use std::time::{Duration, Instant};

use futures::StreamExt;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;
use vk_observer_config::Settings;
use vk_observer_daemon::Daemon;
use vk_observer_ingest::IngestConfig;
use vk_observer_sim::{AttemptScript, Sim, SimConfig};

type Client = RunningService<rmcp::RoleClient, ()>;

/// How long the daemon keeps a quiet process stream open once its process ended (default 5 s;
/// shortened so each sample starts, as on the real VK measured, with the stream closed).
const LINGER: Duration = Duration::from_millis(300);

/// Wait after a run ended before the next sample: the linger, the change-summary re-read after
/// the end (300 ms), and margin.
const SETTLE: Duration = Duration::from_millis(1500);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn call(c: &Client, name: &str, args: Value) -> Value {
    let Value::Object(args) = args else {
        unreachable!()
    };
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(args);
    let r = c.peer().call_tool(params).await.expect("tool answers");
    r.structured_content.unwrap_or(Value::Null)
}

async fn client(daemon: &Daemon) -> Client {
    let cfg = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", daemon.addr));
    ().serve(StreamableHttpClientTransport::from_config(cfg))
        .await
        .expect("MCP client connects")
}

/// Follows the simulator's `/api/events` and sends the instant each `invalidate` event arrived.
fn follow_sse(base: String) -> mpsc::UnboundedReceiver<Instant> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let r = reqwest::get(format!("{base}/api/events"))
            .await
            .expect("the simulator's event stream");
        let mut body = r.bytes_stream();
        let mut pending = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            let now = Instant::now();
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                if event.starts_with("event: invalidate\n") && tx.send(now).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Until no process of the attempt's session runs in VK.
async fn until_ended(sim: &Sim, session: Uuid) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = sim.truth();
        let running = t
            .processes
            .values()
            .any(|p| p["session_id"] == json!(session) && p["status"] == "running");
        if !running {
            return;
        }
        assert!(Instant::now() < deadline, "the run never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One sample's instants, relative to the follow-up's send.
struct Sample {
    sse: Duration,
    wake: Duration,
}

/// Park a wait on `attempt`, send a follow-up to VK, and time the first SSE event and the answer.
async fn sample(
    c: &Client,
    base: &str,
    attempt: Uuid,
    session: Uuid,
    sse: &mut mpsc::UnboundedReceiver<Instant>,
) -> Option<Sample> {
    let token = call(c, "get_attempt_status", json!({"attempt_id": attempt})).await["token"]
        .as_str()
        .expect("a token")
        .to_string();
    let waiting = {
        let c = c.peer().clone();
        let args = json!({"attempt_ids": [attempt], "since_token": token, "timeout_ms": 20000});
        tokio::spawn(async move {
            let Value::Object(args) = args else {
                unreachable!()
            };
            let params = CallToolRequestParams::new("wait_for_attempt_change").with_arguments(args);
            let r = c.call_tool(params).await.expect("the wait answers");
            (Instant::now(), r.structured_content.unwrap_or(Value::Null))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    while sse.try_recv().is_ok() {}
    let sent = Instant::now();
    let r = reqwest::Client::new()
        .post(format!("{base}/api/sessions/{session}/follow-up"))
        .json(&json!({"prompt": "one more thing"}))
        .send()
        .await
        .expect("VK takes the follow-up");
    assert!(r.status().is_success(), "follow-up refused: {}", r.status());
    let first_event = sse.recv().await.expect("VK's event stream is open");
    let (woke, answer) = waiting.await.expect("the wait task");
    if woke < sent || answer["outcome"] != "changed" {
        eprintln!(
            "  sample dropped: the wait answered {} before the follow-up",
            answer["outcome"]
        );
        return None;
    }
    Some(Sample {
        sse: first_event - sent,
        wake: woke - sent,
    })
}

/// p50, p90 and max of signed milliseconds.
fn spread(mut ms: Vec<f64>) -> (f64, f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let i = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1;
        ms[i]
    };
    (at(0.50), at(0.90), at(1.0))
}

fn print_row(what: &str, ms: Vec<f64>) {
    let (p50, p90, max) = spread(ms);
    println!("| {what} | {p50:.1} | {p90:.1} | {max:.1} |");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = env("VK_BENCH_FOLLOW_UPS", 30);
    let sim = Sim::start(SimConfig {
        keepalive: Duration::from_secs(1),
        step_delay: Duration::from_millis(5),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts");
    let project = sim.add_project("Follow-up wake", &["alpha"]);
    let task = sim.add_task(project, "follow me up", None);
    let ids = sim.run_attempt_script(task, AttemptScript::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        upstream: sim.base_url(),
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        ingest: IngestConfig {
            process_stream_linger: LINGER,
            ..IngestConfig::default()
        },
        ..Settings::default()
    };
    let daemon = Daemon::start(settings.validate().unwrap(), None)
        .await
        .expect("daemon starts");
    let c = client(&daemon).await;
    let mut sse = follow_sse(sim.base_url());
    let (mut gaps, mut sses, mut wakes) = (Vec::new(), Vec::new(), Vec::new());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    while gaps.len() < n {
        until_ended(&sim, ids.session_id).await;
        tokio::time::sleep(SETTLE).await;
        let got = sample(
            &c,
            &sim.base_url(),
            ids.attempt_id,
            ids.session_id,
            &mut sse,
        )
        .await;
        if let Some(s) = got {
            gaps.push(ms(s.wake) - ms(s.sse));
            sses.push(ms(s.sse));
            wakes.push(ms(s.wake));
        }
    }
    println!("follow-up wake, {n} samples (ms)\n");
    println!("| figure | p50 | p90 | max |\n|---|---|---|---|");
    print_row("wait answered − VK's first SSE event", gaps);
    print_row("VK's first SSE event − follow-up sent", sses);
    print_row("wait answered − follow-up sent", wakes);
    let _ = c.cancel().await;
    daemon.shutdown().await;
    sim.shutdown().await;
}
