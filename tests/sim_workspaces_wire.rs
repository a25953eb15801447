//! The simulator's second dialect (`SimDialect::Workspaces`, BloopAI VK 0.1.44) against the
//! recordings in `tests/fixtures/vk-wire-bloop/samples/`: REST shapes and error answers, the
//! object streams (snapshot, `Ready`, changes), the v1 log sockets (fed the recorded entries:
//! live, then the renumbered replay, frame for frame as recorded), start / follow-up / stop /
//! delete / queue, approvals, SSE and a restart. Shapes are compared by key sets and value
//! types (`assert_shape`), not ids or times.

#[allow(dead_code)]
#[path = "support/sim_common.rs"]
mod sim_common;

use std::fmt::Display;
use std::time::Duration;

use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use sim_common::{assert_shape, call, drain, next, sse};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{self, Message};
use uuid::Uuid;
use vk_observer_sim::{AttemptIds, Channel, ProcessStatus, RunReason};
use vk_observer_sim::{Sim, SimConfig, SimDialect};

/// What a WebSocket client sees: text frames, then the end (with a close frame or without).
type Rx = mpsc::UnboundedReceiver<Result<Value, bool>>;

const NORM: &str = "normalized-logs";
const RAW: &str = "raw-logs";
const WS_STREAM: &str = "/api/workspaces/streams/ws";
const START: &str = "/api/workspaces/start";
const SESSION_STREAM: &str = "/api/execution-processes/stream/session/ws?session_id=";

async fn start() -> Sim {
    let cfg = SimConfig {
        dialect: SimDialect::Workspaces,
        step_delay: Duration::from_millis(5),
        ..SimConfig::default()
    };
    Sim::start(cfg).await.expect("sim starts")
}

fn sample(name: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let file = format!("{root}/tests/fixtures/vk-wire-bloop/samples/{name}");
    std::fs::read_to_string(file).expect("recording exists")
}

/// A recorded REST exchange (`request`, `status`, `response` | `response_text`).
fn exchange(name: &str) -> Value {
    serde_json::from_str(&sample(name)).expect("json")
}

/// The recorded request's body.
fn body_of(name: &str) -> Value {
    exchange(name)["request"]["body"].clone()
}

/// The recorded answer: status and body (parsed, or the text for an empty/plain body).
fn recorded(name: &str) -> (Value, Value) {
    let e = exchange(name);
    let body = e.get("response").unwrap_or(&e["response_text"]).clone();
    (e["status"].clone(), body)
}

/// The recorded request (`path` for the recorded one if given) answers as recorded.
async fn as_recorded(sim: &Sim, path: Option<&str>, fixture: &str) {
    let request = &exchange(fixture)["request"];
    let method = request["method"].as_str().unwrap_or("GET");
    let method = Method::from_bytes(method.as_bytes()).expect("method");
    let path = path.or(request["path"].as_str()).unwrap_or("");
    let body = request.get("body").cloned();
    let got = req(sim, method, path, body).await;
    assert_eq!(got, recorded(fixture), "{fixture}");
}

/// Same key sets and value types as the recorded answer.
fn shape(name: &str, got: &Value) {
    assert_shape(&exchange(name)["response"], got, name, &[]);
}

/// The text frames of a recorded WebSocket, parsed.
fn rec_frames(name: &str) -> Vec<Value> {
    let text_of = |e: Value| serde_json::from_str(e["raw"].as_str().unwrap_or("")).expect("frame");
    let lines = sample(name);
    let events = lines.lines().filter(|l| !l.starts_with('#'));
    let events = events.map(|l| serde_json::from_str::<Value>(l).expect("jsonl"));
    let texts = events.filter(|e| e["kind"] == "text");
    texts.map(text_of).collect()
}

/// A frame shaped as the first recorded one whose op is `kind` on a path under `prefix`.
fn like(name: &str, kind: &str, prefix: &str, got: &Value) {
    let is = |f: &Value| op(f)["op"] == kind && path(f).starts_with(prefix);
    let found = rec_frames(name).into_iter().find(is);
    let rec = found.unwrap_or_else(|| panic!("no {kind} {prefix}… in {name}"));
    assert_shape(&rec, got, kind, &[]);
}

fn op(frame: &Value) -> &Value {
    &frame["JsonPatch"][0]
}

fn path(frame: &Value) -> &str {
    op(frame)["path"].as_str().unwrap_or("")
}

fn value<'a>(frame: &'a Value, key: &str) -> &'a Value {
    &op(frame)["value"][key]
}

/// The entry type of a log frame's entry.
fn entry_type(frame: &Value) -> &str {
    let t = value(frame, "content").pointer("/entry_type/type");
    t.and_then(Value::as_str).unwrap_or("")
}

/// The first log frame with an entry of type `ty`.
fn of_type<'a>(frames: &'a [Value], ty: &str) -> &'a Value {
    frames.iter().find(|f| entry_type(f) == ty).expect(ty)
}

/// The fields `keys` (space-separated) of `v`, as an array.
fn pick(v: &Value, keys: &str) -> Value {
    keys.split(' ').map(|k| v[k].clone()).collect()
}

/// The fields `keys` (space-separated) of `v` are `want`, in order.
fn has(v: &Value, keys: &str, want: Value) {
    assert_eq!(pick(v, keys), want, "{keys} of {v}");
}

/// A call: status and body (parsed, else the text), comparable with `recorded`.
async fn req(sim: &Sim, method: Method, path: &str, body: Option<Value>) -> (Value, Value) {
    let (status, text) = call(sim, method, path, body).await;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (json!(status), body)
}

async fn get(sim: &Sim, path: &str) -> Value {
    let (status, body) = req(sim, Method::GET, path, None).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

async fn post(sim: &Sim, path: &str, body: Value) -> Value {
    let (status, body) = req(sim, Method::POST, path, Some(body)).await;
    assert_eq!(status, 200, "POST {path}: {body}");
    body
}

async fn open(sim: &Sim, path: &str) -> Rx {
    let url = format!("{}{path}", sim.base_url().replace("http://", "ws://"));
    let connected = tokio_tungstenite::connect_async(url).await;
    let (mut socket, _) = connected.expect("upgrade");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let item = match socket.next().await {
                Some(Ok(Message::Text(t))) => Ok(serde_json::from_str(&t).expect("json")),
                Some(Ok(Message::Close(_))) => Err(true),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => Err(false),
            };
            let end = item.is_err();
            if tx.send(item).is_err() || end {
                return;
            }
        }
    });
    rx
}

/// The next text frame within 3 s.
async fn frame(rx: &mut Rx) -> Value {
    match next(rx, 3000).await {
        Some(Ok(v)) => v,
        other => panic!("expected a frame, got {other:?}"),
    }
}

/// The next text frame matching `pred` (others skipped; `frame` gives up after 3 s).
async fn until(rx: &mut Rx, pred: impl Fn(&Value) -> bool) -> Value {
    loop {
        let f = frame(rx).await;
        if pred(&f) {
            return f;
        }
    }
}

/// Every text frame to the end of the socket, and whether it ended with a close frame.
async fn to_end(mut rx: Rx) -> (Vec<Value>, bool) {
    let mut frames = Vec::new();
    loop {
        match next(&mut rx, 3000).await {
            Some(Ok(v)) => frames.push(v),
            Some(Err(close_frame)) => return (frames, close_frame),
            None => panic!("socket did not end; got {frames:?}"),
        }
    }
}

/// A process's log socket on `ch` (`NORM` / `RAW`).
async fn log(sim: &Sim, pid: impl Display, ch: &str) -> Rx {
    open(sim, &format!("/api/execution-processes/{pid}/{ch}/ws")).await
}

/// A log socket opened now, read to its end.
async fn replay(sim: &Sim, pid: impl Display, ch: &str) -> (Vec<Value>, bool) {
    to_end(log(sim, pid, ch).await).await
}

/// Polls a process until it no longer runs; its JSON.
async fn ended(sim: &Sim, pid: &Value) -> Value {
    let url = format!("/api/execution-processes/{}", pid.as_str().expect("id"));
    for _ in 0..200 {
        let p = get(sim, &url).await["data"].clone();
        if p["status"] != "running" {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{url} still runs");
}

/// A project "Alpha" with one repo and a workspace (a world attempt) on a task `title`.
fn world(sim: &Sim, title: &str) -> (Uuid, AttemptIds) {
    let p = sim.add_project("Alpha", &["alpha"]);
    let task = sim.add_task(p, title, None);
    (p, sim.create_attempt(task, "CLAUDE_CODE"))
}

/// `GET path` (`{ws}`, `{session}`, `{agent}` filled in) has the shape of `fixture`.
const READS: [&str; 8] = [
    "/api/health rest-health.json",
    "/api/repos rest-repos.json",
    "/api/workspaces rest-workspaces-list.json",
    "/api/workspaces/{ws} rest-workspace-get-a.json",
    "/api/workspaces/{ws}/repos rest-workspace-repos-a.json",
    "/api/sessions?workspace_id={ws} rest-sessions-list-a.json",
    "/api/sessions/{session} rest-session-get-a.json",
    "/api/execution-processes/{agent} rest-execution-process-completed.json",
];

#[tokio::test]
async fn rest_reads_and_refusals_have_the_recorded_shapes() {
    let sim = start().await;
    let (_, a) = world(&sim, "ws-a-single");
    let pid = sim.start_process(a.session_id, RunReason::CodingAgent);
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    let (ws, session) = (a.attempt_id.to_string(), a.session_id.to_string());
    let info = get(&sim, "/api/info").await;
    assert_eq!(info["data"]["version"], "0.1.44");
    let (mut r, mut g) = (recorded("rest-info.json").1, info);
    for v in [&mut r, &mut g] {
        v["data"]["executors"] = json!({});
        v["data"]["capabilities"] = json!({});
    }
    assert_shape(&r, &g, "info", &[]);
    for read in READS {
        let (url, fixture) = read.split_once(' ').expect("path fixture");
        let url = url.replace("{ws}", &ws).replace("{session}", &session);
        let url = url.replace("{agent}", &pid.to_string());
        shape(fixture, &get(&sim, &url).await);
    }
    let w = get(&sim, &format!("/api/workspaces/{ws}")).await;
    has(&w["data"], "name task_id", json!(["ws-a-single", null]));
    let repos = get(&sim, &format!("/api/workspaces/{ws}/repos")).await;
    let repo = &repos["data"][0];
    has(repo, "name target_branch", json!(["alpha", "main"]));
    let s = get(&sim, &format!("/api/sessions/{session}")).await;
    let want = json!(["CLAUDE_CODE", "alpha"]);
    has(&s["data"], "executor agent_working_dir", want);
    // Unknown ids: 404 with an empty body, before a WebSocket upgrade too.
    for unknown in ["workspace", "session", "process"] {
        as_recorded(&sim, None, &format!("rest-err-{unknown}-unknown.json")).await;
    }
    let nil = Uuid::nil();
    let base = sim.base_url().replace("http://", "ws://");
    for ch in [NORM, RAW] {
        let url = format!("{base}/api/execution-processes/{nil}/{ch}/ws");
        let answer = match tokio_tungstenite::connect_async(&url).await {
            Err(tungstenite::Error::Http(r)) => Some((r.status().as_u16(), r.into_body())),
            _ => None,
        };
        let empty = answer.map(|(status, body)| (status, body.unwrap_or_default()));
        assert_eq!(empty, Some((404, Vec::new())), "{url}");
    }
    // The web app answers every other GET (0.1.x has no /api/tasks); other methods: 405.
    let html = exchange("rest-err-legacy-tasks.json")["content_type"].clone();
    for url in ["/api/tasks", "/api/nope"] {
        let resp = reqwest::get(format!("{}{url}", sim.base_url())).await;
        let resp = resp.expect("get");
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        assert_eq!(resp.headers()["content-type"], html.as_str().unwrap_or(""));
    }
    as_recorded(&sim, None, "rest-err-unknown-api-route-post.json").await;
    // An unknown session's process stream: an empty snapshot and Ready, as recorded.
    let url = format!("/api/execution-processes/stream/session/ws?session_id={nil}");
    let mut rx = open(&sim, &url).await;
    let got = vec![frame(&mut rx).await, frame(&mut rx).await];
    assert_eq!(got, rec_frames("ws-session-unknown.jsonl"));
}

#[tokio::test]
async fn object_streams_send_a_snapshot_ready_then_changes() {
    let sim = start().await;
    let (p, a) = world(&sim, "ws-a-single");
    let ws = a.attempt_id.to_string();
    let (rec_ws, rec_s) = ("ws-workspaces.jsonl", "ws-session-a.jsonl");
    let mut rx = open(&sim, WS_STREAM).await;
    let mut unarchived = open(&sim, &format!("{WS_STREAM}?archived=false")).await;
    let mut procs = open(&sim, &format!("{SESSION_STREAM}{}", a.session_id)).await;
    let snap = frame(&mut rx).await;
    let rec_snap = rec_frames("ws-workspaces-after-restart.jsonl").remove(0);
    assert_shape(&rec_snap, &snap, "snap", &["snap.JsonPatch[0].value"]);
    assert_eq!(value(&snap, &ws)["name"], "ws-a-single");
    for rx in [&mut rx, &mut unarchived, &mut procs] {
        until(rx, |f| *f == json!({"Ready": true})).await;
    }
    // A process starting, then failing, flips the flags: a replace each.
    let pid = sim.start_process(a.session_id, RunReason::CodingAgent);
    let runs = |f: &Value| path(f) == format!("/workspaces/{ws}") && value(f, "is_running") == true;
    let running = until(&mut rx, runs).await;
    like(rec_ws, "replace", "/workspaces/", &running);
    assert_eq!(op(&running)["op"], "replace");
    // ?archived=false: a matching workspace's change goes out as an `add`.
    assert_eq!(op(&until(&mut unarchived, runs).await)["op"], "add");
    // (the recording's first process `add` is a script's: an agent's is shaped as its replace)
    let added = frame(&mut procs).await;
    like(rec_s, "replace", "/execution_processes/", &added);
    let want = json!(["add", format!("/execution_processes/{pid}")]);
    assert_eq!(pick(op(&added), "op path"), want);
    sim.finish_process(pid, ProcessStatus::Failed, Some(1));
    let failed = until(&mut rx, |f| value(f, "is_errored") == true).await;
    assert_eq!(value(&failed, "is_running"), false);
    let done = frame(&mut procs).await;
    like(rec_s, "replace", "/execution_processes/", &done);
    let failed = &op(&done)["value"];
    has(failed, "status exit_code", json!(["failed", 1]));
    // The session's stream: not another session's process; a script's action in 0.1.x words.
    let other = sim.create_attempt(sim.add_task(p, "other", None), "CLAUDE_CODE");
    sim.start_process(other.session_id, RunReason::CodingAgent);
    let dev = sim.start_process(a.session_id, RunReason::DevServer);
    let added = frame(&mut procs).await;
    assert_eq!(path(&added), format!("/execution_processes/{dev}"));
    like(rec_s, "add", "/execution_processes/", &added);
    let typ = &value(&added, "executor_action")["typ"];
    let want = json!(["bash vk-dev.sh", "alpha"]);
    has(typ, "script working_dir", want);
    // A new workspace is an add; a deleted one a remove, and then unknown to REST.
    let task = sim.add_task(p, "ws-b", None);
    let b = sim.create_attempt(task, "CLAUDE_CODE").attempt_id;
    let added = until(&mut rx, |f| path(f) == format!("/workspaces/{b}")).await;
    like(rec_ws, "add", "/workspaces/", &added);
    assert_eq!(op(&added)["op"], "add");
    let url = format!("/api/workspaces/{b}");
    as_recorded(&sim, Some(&url), "rest-workspace-delete.json").await;
    let removed = until(&mut rx, |f| op(f)["op"] == "remove").await;
    let want = json!([{"op": "remove", "path": format!("/workspaces/{b}")}]);
    assert_eq!(removed, json!({ "JsonPatch": want }));
    as_recorded(&sim, Some(&url), "rest-workspace-get-deleted.json").await;
}

/// Gives process `pid` the entries of recorded live log frames, both channels.
fn feed(sim: &Sim, pid: Uuid, normalized: &[Value], raw: &[Value]) {
    for (ch, frames) in [(Channel::Normalized, normalized), (Channel::Raw, raw)] {
        for f in frames {
            let index = path(f).trim_start_matches("/entries/").parse();
            let (index, entry) = (index.expect("index"), op(f)["value"].clone());
            if op(f)["op"] == "add" {
                assert_eq!(sim.append_log(pid, ch, entry), index);
            } else {
                assert!(sim.replace_log(pid, ch, index, entry));
            }
        }
    }
}

#[tokio::test]
async fn log_sockets_are_live_then_a_renumbered_replay_as_recorded() {
    let sim = start().await;
    let (_, a) = world(&sim, "ws-a-single");
    let pid = sim.start_process(a.session_id, RunReason::CodingAgent);
    let (mut live_n, mut live_r) = (log(&sim, pid, NORM).await, log(&sim, pid, RAW).await);
    let rec_n = rec_frames("ws-normalized-a-live.jsonl");
    let rec_r = rec_frames("ws-raw-a-live.jsonl");
    let (entries_n, entries_r) = (&rec_n[..rec_n.len() - 1], &rec_r[..rec_r.len() - 1]);
    // The first entries come either as history or live (the same frame); then all live.
    feed(&sim, pid, &entries_n[..1], &entries_r[..1]);
    let mut got_n = vec![frame(&mut live_n).await];
    let mut got_r = vec![frame(&mut live_r).await];
    feed(&sim, pid, &entries_n[1..], &entries_r[1..]);
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    // Live: every add and replace as it happened, `{"finished":true}`, a close frame.
    for (got, rx, rec) in [(&mut got_n, live_n, &rec_n), (&mut got_r, live_r, &rec_r)] {
        let (rest, closed) = to_end(rx).await;
        got.extend(rest);
        assert_eq!((&*got, closed), (rec, true));
    }
    // After the end: a replay, the stderr entry moved last and the others renumbered.
    let replay_n = rec_frames("ws-normalized-a-replay.jsonl");
    assert_ne!(replay_n, rec_n);
    assert_eq!(replay(&sim, pid, NORM).await, (replay_n.clone(), true));
    let replay_r = rec_frames("ws-raw-a-replay.jsonl");
    assert_eq!(replay(&sim, pid, RAW).await, (replay_r, true));
    // A socket open at a restart ends without a close frame; later ones are replays.
    let b = sim.start_process(a.session_id, RunReason::CodingAgent);
    feed(&sim, b, &entries_n[..2], &[]);
    let mut cut = log(&sim, b, NORM).await;
    let history = vec![frame(&mut cut).await, frame(&mut cut).await];
    assert_eq!(history, entries_n[..2].to_vec());
    sim.restart();
    assert_eq!(to_end(cut).await, (Vec::new(), false));
    assert_eq!(rec_frames("ws-normalized-a-after-restart.jsonl"), replay_n);
    assert_eq!(replay(&sim, pid, NORM).await, (replay_n, true));
    let (frames, _) = replay(&sim, b, NORM).await;
    let first = json!([{"op": "add", "path": "/entries/0", "value": op(&entries_n[1])["value"]}]);
    assert_eq!(frames[0]["JsonPatch"], first);
    let second = [entry_type(&frames[1]), path(&frames[1])];
    assert_eq!(second, ["error_message", "/entries/1"]);
    assert_eq!(frames[2], json!({"finished": true}));
    let killed = get(&sim, &format!("/api/execution-processes/{b}")).await;
    has(&killed["data"], "status exit_code", json!(["killed", null]));
    // A script has no normalized log: `finished` at once.
    let script = sim.start_process(a.session_id, RunReason::SetupScript);
    let finished = vec![json!({"finished": true})];
    assert_eq!(replay(&sim, script, NORM).await, (finished, true));
}

/// A project with one repo, and the recorded start body on it with `prompt` and `variant`.
async fn start_body(sim: &Sim, prompt: &str, variant: Option<&str>) -> Value {
    if sim.truth().projects.is_empty() {
        sim.add_project("Alpha", &["alpha"]);
    }
    let repos = get(sim, "/api/repos").await;
    let mut body = body_of("rest-workspace-start-a.json");
    body["repos"][0]["repo_id"] = repos["data"][0]["id"].clone();
    body["prompt"] = json!(prompt);
    body["executor_config"]["variant"] = json!(variant);
    body
}

/// A follow-up body as recorded, with `prompt`.
fn follow_up(prompt: &str) -> Value {
    let mut body = body_of("rest-follow-up.json");
    body["prompt"] = json!(prompt);
    body
}

#[tokio::test]
async fn start_then_follow_ups_stopped_and_refused() {
    let sim = start().await;
    let prompt = "SLOW FILE:hello.txt Please write a greeting file.";
    let body = start_body(&sim, prompt, None).await;
    let reply = post(&sim, START, body.clone()).await;
    shape("rest-workspace-start-a.json", &reply);
    let w = &reply["data"]["workspace"];
    let p = &reply["data"]["execution_process"];
    has(w, "name container_ref", json!(["ws-a-single", null]));
    has(p, "run_reason status", json!(["codingagent", "running"]));
    let rec_start = recorded("rest-workspace-start-a.json").1;
    let rec_typ = &rec_start["data"]["execution_process"]["executor_action"]["typ"];
    let keys = "type executor_config working_dir";
    has(&p["executor_action"]["typ"], keys, pick(rec_typ, keys));
    let ws = w["id"].as_str().expect("id").to_string();
    let session = p["session_id"].as_str().expect("session").to_string();
    // No idempotency key: the same request again is a second workspace.
    let again = post(&sim, START, body.clone()).await;
    assert_ne!(again["data"]["workspace"]["id"], w["id"]);
    assert_eq!(ended(&sim, &p["id"]).await["status"], "completed");
    let first = format!("/api/workspaces/{ws}/messages/first");
    as_recorded(&sim, Some(&first), "rest-workspace-first-message.json").await;
    let status = get(&sim, &format!("/api/workspaces/{ws}/git/status")).await;
    shape("rest-git-status-a-initial.json", &status);
    // A follow-up; deleting its workspace meanwhile is refused; stopped: killed, no exit code.
    let url = format!("/api/sessions/{session}/follow-up");
    let fu = post(&sim, &url, follow_up("SLOW stop me")).await;
    shape("rest-follow-up.json", &fu);
    let typ = &fu["data"]["executor_action"]["typ"];
    let want = json!(["CodingAgentFollowUpRequest", null]);
    has(typ, "type reset_to_message_id", want);
    let path = format!("/api/workspaces/{ws}");
    let busy = "rest-workspace-delete-while-running.json";
    as_recorded(&sim, Some(&path), busy).await;
    let pid = fu["data"]["id"].as_str().unwrap_or("");
    let stop = format!("/api/execution-processes/{pid}/stop");
    as_recorded(&sim, Some(&stop), "rest-process-stop.json").await;
    let killed = ended(&sim, &fu["data"]["id"]).await;
    has(&killed, "status exit_code", json!(["killed", null]));
    assert!(killed["completed_at"].is_string());
    // Another executor than the session's: 409; an unknown session: 404 empty.
    as_recorded(&sim, Some(&url), "rest-follow-up-executor-mismatch.json").await;
    as_recorded(&sim, None, "rest-err-follow-up-unknown-session.json").await;
    // The workspace's stop route stops its agents.
    let fu = post(&sim, &url, follow_up("SLOW again")).await;
    let stop = format!("/api/workspaces/{ws}/execution/stop");
    as_recorded(&sim, Some(&stop), "rest-workspace-execution-stop.json").await;
    assert_eq!(ended(&sim, &fu["data"]["id"]).await["status"], "killed");
    // The queue: one message a session (one no run ends meanwhile: an end takes it).
    let idle = sim.add_session(ws.parse().expect("uuid"), "CLAUDE_CODE");
    let queue = format!("/api/sessions/{idle}/queue");
    let queued = post(&sim, &queue, body_of("rest-queue-post.json")).await;
    shape("rest-queue-post.json", &queued);
    shape("rest-queue-get.json", &get(&sim, &queue).await);
    as_recorded(&sim, Some(&queue), "rest-queue-delete.json").await;
    // Refused starts; one refused for its repo leaves a workspace record behind (no repos).
    for refusal in ["empty-prompt", "no-repos", "unknown-repo"] {
        as_recorded(&sim, None, &format!("rest-err-start-{refusal}.json")).await;
    }
    let list = get(&sim, "/api/workspaces").await["data"].clone();
    has(&list[0], "name container_ref", json!(["x", null]));
    // A merge of the agent's commit archives the workspace.
    let repo = json!({"repo_id": body["repos"][0]["repo_id"]});
    let merged = post(&sim, &format!("/api/workspaces/{ws}/git/merge"), repo).await;
    assert_eq!(merged, recorded("rest-git-merge.json").1);
    assert_eq!(get(&sim, &path).await["data"]["archived"], true);
}

#[tokio::test]
async fn approvals_stream_and_the_nested_respond() {
    let sim = start().await;
    let rec_a = "ws-approvals.jsonl";
    let mut rx = open(&sim, "/api/approvals/stream/ws").await;
    let got = vec![frame(&mut rx).await, frame(&mut rx).await];
    assert_eq!(got, rec_frames(rec_a)[..2].to_vec());
    // Each run's agent asks before its Bash call: `replace /pending/{id}` (not add).
    let mut asked = Vec::new();
    for prompt in ["APPROVAL approve", "APPROVAL deny", "APPROVAL stop"] {
        let body = start_body(&sim, prompt, Some("APPROVALS")).await;
        let reply = post(&sim, START, body).await;
        let pid = reply["data"]["execution_process"]["id"].clone();
        let pending = frame(&mut rx).await;
        like(rec_a, "replace", "/pending/", &pending);
        assert_eq!(value(&pending, "execution_process_id"), &pid);
        let id = value(&pending, "approval_id").as_str();
        let id = id.expect("id").to_string();
        assert_eq!(path(&pending), format!("/pending/{id}"));
        asked.push((id, pid));
    }
    // The nested status; an answered, cancelled or unknown id is a 500 without a body.
    let respond = |id: &str| format!("/api/approvals/{id}/respond");
    let answer = |pid: &Value, fixture: &str| {
        let status = body_of(fixture)["status"].clone();
        Some(json!({"execution_process_id": pid, "status": status}))
    };
    let removed =
        |id: &str| json!({"JsonPatch": [{"op": "remove", "path": format!("/pending/{id}")}]});
    let empty_500 = recorded("rest-approval-respond-again-approve.json");
    for ((id, pid), fixture) in asked.iter().zip(["approve", "deny"]) {
        let fixture = format!("rest-approval-respond-{fixture}.json");
        let got = req(&sim, Method::POST, &respond(id), answer(pid, &fixture)).await;
        assert_eq!(got, recorded(&fixture));
        assert_eq!(frame(&mut rx).await, removed(id));
        let again = answer(pid, &fixture);
        let got = req(&sim, Method::POST, &respond(id), again).await;
        assert_eq!(got, empty_500);
    }
    as_recorded(&sim, None, "rest-approval-respond-unknown.json").await;
    // A stop cancels the approval: removed, the tool call denied with VK's reason.
    let (id, pid) = &asked[2];
    let pid = pid.as_str().unwrap_or("");
    let stop = format!("/api/execution-processes/{pid}/stop");
    post(&sim, &stop, json!({})).await;
    assert_eq!(frame(&mut rx).await, removed(id));
    let late = answer(&json!(pid), "rest-approval-respond-approve.json");
    assert_eq!(req(&sim, Method::POST, &respond(id), late).await, empty_500);
    let (frames, _) = replay(&sim, pid, NORM).await;
    let tool = of_type(&frames, "tool_use");
    let status = &value(tool, "content")["entry_type"]["status"];
    let reason = "Approval service error: executor approval request cancelled";
    assert_eq!(*status, json!({"status": "denied", "reason": reason}));
    // Then a user_feedback entry, as the recorded denied run's.
    let rec = "ws-normalized-approval-deny.jsonl";
    like(rec, "add", "/entries/4", of_type(&frames, "user_feedback"));
}

#[tokio::test]
async fn sse_replays_its_history_without_ids_until_a_restart() {
    let sim = start().await;
    let (_, a) = world(&sim, "ws-a-single");
    let pid = sim.start_process(a.session_id, RunReason::CodingAgent);
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    let mut events = sse(&sim, "", None).await;
    let first = drain(&mut events, 400).await;
    let plain = |e: &sse_stream::Sse| e.event.as_deref() == Some("json_patch") && e.id.is_none();
    assert!(first.len() >= 3 && first.iter().all(plain), "{first:?}");
    // Every connection replays the whole history; Last-Event-ID means nothing.
    let datas = |evs: &[sse_stream::Sse]| evs.iter().map(|e| e.data.clone()).collect::<Vec<_>>();
    let mut again = sse(&sim, "", Some(5)).await;
    assert_eq!(datas(&drain(&mut again, 400).await), datas(&first));
    // A restart ends the stream; after it, no history to replay (only keep-alives).
    sim.restart();
    assert!(next(&mut events, 3000).await.is_none(), "the SSE body ends");
    let mut fresh = sse(&sim, "", None).await;
    assert!(drain(&mut fresh, 700).await.is_empty());
}
