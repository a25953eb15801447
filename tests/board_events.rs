//! The board's event stream (`GET /board/api/events`, Server-Sent Events) over plain HTTP,
//! against the simulator and a real daemon: a dropped stream resumed with `Last-Event-ID`
//! carries exactly what the project's activity feed holds after that token (nothing missing,
//! nothing twice) and names the attempts that changed meanwhile; a token it cannot resume from
//! gets `reset`; a token revoked while the stream is open ends it with `auth`; a log line comes
//! as the attempt's card, the one the board shows, with no activity to make the page re-read.

mod board_support;

use std::time::Duration;

use board_support::{World, card_until, until};
use serde_json::{Value, json};
use vk_observer_sim::AttemptScript;

const WAIT: Duration = Duration::from_secs(30);

/// One Server-Sent Event: (event, id, data).
type Sse = (String, String, Value);

/// An open event stream and the bytes of its unfinished event.
struct Stream {
    resp: reqwest::Response,
    buf: String,
}

impl Stream {
    /// Open the stream as `token`'s page, with `resume` (a header and its value) if given.
    async fn open(w: &World, token: &str, resume: Option<(&str, &str)>) -> Stream {
        let mut req = board_support::http()
            .get(format!("{}/board/api/events", w.base()))
            .header("cookie", board_support::cookie(token))
            .timeout(Duration::from_secs(60));
        if let Some((name, value)) = resume {
            req = req.header(name, value);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert_eq!(resp.headers()["x-accel-buffering"], "no");
        Stream {
            resp,
            buf: String::new(),
        }
    }

    /// Events until `done` says stop (at most 20 s); heartbeat comments are skipped.
    async fn until(&mut self, mut done: impl FnMut(&[Sse]) -> bool) -> Vec<Sse> {
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !done(&got) {
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk()).await;
            let chunk = chunk.expect("events within 20 s").expect("stream open");
            let Some(chunk) = chunk else { break };
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                got.extend(parse(&block));
            }
        }
        got
    }
}

fn parse(block: &str) -> Option<Sse> {
    let field = |name: &str| {
        let lines = block.lines().filter_map(|l| l.strip_prefix(name));
        lines.map(str::trim_start).collect::<Vec<_>>().join("\n")
    };
    let event = field("event:");
    if event.is_empty() {
        return None; // a heartbeat comment
    }
    let data = serde_json::from_str(&field("data:")).unwrap_or(Value::Null);
    Some((event, field("id:"), data))
}

fn names(events: &[Sse], attempt: uuid::Uuid) -> bool {
    let id = json!(attempt);
    events
        .iter()
        .any(|e| e.2["attempts"].as_array().is_some_and(|a| a.contains(&id)))
}

/// The store's token once nothing has been committed for 600 ms.
async fn settled(w: &World) -> String {
    let query = w.query();
    until("the store settles", WAIT, || {
        let q = query.clone();
        async move {
            let before = q.token();
            tokio::time::sleep(Duration::from_millis(600)).await;
            (q.token() == before).then_some(before)
        }
    })
    .await
}

/// The project's activity after `token`, as `tail_project_activity` reads it: `token:kind`.
fn feed_after(w: &World, token: &str) -> Vec<String> {
    use vk_observer_query::activity::{ActivityRequest, ActivityScope};
    let scope = ActivityScope::Project(w.project);
    let req = ActivityRequest::new(scope, Some(token.into()), None, Some(200), None).unwrap();
    let feed = w.query().activity(&req).unwrap();
    assert!(!feed.has_more);
    let item =
        |i: &vk_observer_query::activity::ActivityItem| format!("{}:{}", i.token, json!(i.kind));
    feed.items.iter().map(item).collect()
}

/// The activity items `events` carried, in order: `token:kind`.
fn streamed(events: &[Sse]) -> Vec<String> {
    let items = events
        .iter()
        .flat_map(|e| e.2["activity"].as_array().unwrap().iter());
    items
        .map(|i| format!("{}:{}", i["token"].as_str().unwrap(), i["kind"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_resumes_after_last_event_id_with_no_gap() {
    let w = World::start(Duration::from_millis(5)).await;
    let first = w.sim.add_task(w.project, "First", None);
    w.sim
        .run_attempt_script(first, AttemptScript::default())
        .await;
    card_until(&w, &w.tokens.reader, "completed", "First", WAIT).await;
    let mut stream = Stream::open(&w, &w.tokens.reader, None).await;
    let hello = stream.until(|got| !got.is_empty()).await;
    assert_eq!(hello[0].0, "hello");
    let second = w.sim.add_task(w.project, "Second", None);
    let ids = w
        .sim
        .run_attempt_script(second, AttemptScript::default())
        .await;
    let seen = stream.until(|got| names(got, ids.attempt_id)).await;
    let last = seen.last().unwrap().1.clone();
    drop(stream); // the connection drops; the page holds `last`

    let third = w.sim.add_task(w.project, "Third", None);
    let gone = w
        .sim
        .run_attempt_script(third, AttemptScript::default())
        .await;
    card_until(&w, &w.tokens.reader, "completed", "Third", WAIT).await;
    let now = settled(&w).await;
    let mut stream = Stream::open(&w, &w.tokens.reader, Some(("last-event-id", &last))).await;
    let resumed = stream
        .until(|got| got.last().is_some_and(|e| e.1 == now))
        .await;
    let plain = resumed
        .iter()
        .all(|e| e.0 == "change" && e.2["reset"] == false);
    assert!(plain, "{resumed:?}");
    assert!(
        names(&resumed, gone.attempt_id),
        "the attempt made while away is named"
    );
    // Exactly the feed after `last`, as the tool reads it: nothing missing, nothing twice.
    let expected = feed_after(&w, &last);
    assert!(!expected.is_empty());
    assert_eq!(streamed(&resumed), expected);
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_it_cannot_resume_from_is_a_reset_and_a_revoked_one_ends_the_stream() {
    let mut w = World::start(Duration::from_millis(5)).await;
    for bad in ["not-a-token", "0000000000000000.5"] {
        let mut stream = Stream::open(&w, &w.tokens.reader, Some(("last-event-id", bad))).await;
        let first = stream.until(|got| !got.is_empty()).await;
        assert_eq!(
            (first[0].0.as_str(), &first[0].2["reset"]),
            ("change", &json!(true)),
            "{bad}"
        );
    }
    let mut stream = Stream::open(&w, &w.tokens.reader, None).await;
    stream.until(|got| !got.is_empty()).await;
    w.revoke("reader");
    let task = w.sim.add_task(w.project, "After the revocation", None);
    w.sim
        .run_attempt_script(task, AttemptScript::default())
        .await;
    let told = stream.until(|got| got.iter().any(|e| e.0 == "auth")).await;
    let auth = told.iter().find(|e| e.0 == "auth").unwrap();
    assert_eq!(auth.2["code"], "token_refused", "{auth:?}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_open_together_each_see_every_new_attempt() {
    let w = World::start(Duration::from_millis(5)).await;
    let first = w.sim.add_task(w.project, "Before", None);
    w.sim
        .run_attempt_script(first, AttemptScript::default())
        .await;
    card_until(&w, &w.tokens.reader, "completed", "Before", WAIT).await;
    let since = settled(&w).await;
    let resume = Some(("last-event-id", since.as_str()));
    let mut streams = Vec::new();
    for token in [&w.tokens.reader, &w.tokens.operator, &w.tokens.reader] {
        streams.push(Stream::open(&w, token, resume).await);
    }
    let mut made = Vec::new();
    for n in 0..3 {
        let task = w.sim.add_task(w.project, &format!("Together {n}"), None);
        made.push(
            w.sim
                .run_attempt_script(task, AttemptScript::default())
                .await
                .attempt_id,
        );
    }
    // Each stream names every new attempt (else `until` runs out of time and fails).
    for stream in &mut streams {
        let got = stream
            .until(|got| made.iter().all(|a| names(got, *a)))
            .await;
        assert!(got.iter().all(|e| e.0 == "change" && e.2["reset"] == false));
    }
    w.shutdown().await;
}

/// The newest card that `events` carried for `attempt`.
fn carried(events: &[Sse], attempt: uuid::Uuid) -> Option<Value> {
    let id = json!(attempt);
    let cards = events
        .iter()
        .flat_map(|e| e.2["cards"].as_array().cloned().unwrap_or_default());
    cards.filter(|c| c["attempt_id"] == id).last()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_line_comes_as_the_attempts_card_without_new_activity() {
    use vk_observer_sim::{Channel, RunReason};
    let w = World::start(Duration::from_millis(5)).await;
    let task = w.sim.add_task(w.project, "Logging", None);
    let ids = w.sim.create_attempt(task, "CLAUDE_CODE");
    let pid = w.sim.start_process(ids.session_id, RunReason::CodingAgent);
    let line = |text: &str| {
        json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
               "entry_type": {"type": "assistant_message"}, "content": text}})
    };
    w.sim
        .append_log(pid, Channel::Normalized, line("first line"));
    until("the first line on the card", WAIT, || async {
        let b = board_support::get(&w, "/board/api/board", Some(&w.tokens.reader)).await;
        let c = board_support::card(&b.json, "running", "Logging")?;
        (c["last_line"] == "first line").then_some(())
    })
    .await;
    let since = settled(&w).await;
    let mut stream = Stream::open(&w, &w.tokens.reader, Some(("last-event-id", &since))).await;
    w.sim
        .append_log(pid, Channel::Normalized, line("second line"));
    let got = stream
        .until(|got| carried(got, ids.attempt_id).is_some_and(|c| c["last_line"] == "second line"))
        .await;
    // A log line is no activity: the page patches the card in and reads no board.
    assert!(got.iter().all(|e| e.2["projects"] == json!([])), "{got:?}");
    // Every event brings a card for each attempt it names, and a hosts line.
    for e in &got {
        let named = e.2["attempts"].as_array().unwrap();
        let cards = e.2["cards"].as_array().unwrap();
        let ids: Vec<&Value> = cards.iter().map(|c| &c["attempt_id"]).collect();
        assert_eq!(named.len(), cards.len(), "{e:?}");
        assert!(named.iter().all(|a| ids.contains(&a)), "{e:?}");
        assert!(e.2["freshness"]["upstream"].is_string(), "{e:?}");
    }
    // Once nothing moves, the card the last event carried is the one the board shows.
    let now = settled(&w).await;
    let mut got = got;
    if got.last().is_none_or(|e| e.1 != now) {
        got.extend(
            stream
                .until(|more| more.last().is_some_and(|e| e.1 == now))
                .await,
        );
    }
    let board = board_support::get(&w, "/board/api/board", Some(&w.tokens.reader)).await;
    let shown = board_support::card(&board.json, "running", "Logging").unwrap();
    assert_eq!(carried(&got, ids.attempt_id).unwrap(), shown);
    w.shutdown().await;
}
