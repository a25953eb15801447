//! The board over plain HTTP (issue 41), against the simulator and a real daemon: its strict
//! headers, the login cookie, reads by the tools' grants, approve / stop through the tools'
//! own path (VK records the answer, the audit names the token), refusals of forged POSTs, and
//! an event stream that resumes after `Last-Event-ID` with no gap. The page itself, in a real
//! browser: `tests/board_browser.rs`.

mod board_support;

use std::time::Duration;

use board_support::{World, card, card_until, get, post, until};
use serde_json::{Value, json};
use vk_observer_sim::{ApprovalScript, AttemptScript, SimApprovalStatus};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_assets_carry_a_strict_policy() {
    let w = World::start(Duration::from_millis(5)).await;
    let root = get(&w, "/", None).await;
    assert!(root.status.is_redirection(), "{}", root.status);
    assert_eq!(root.headers["location"], "/board");
    let page = get(&w, "/board", None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    for part in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp} lacks {part}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    assert_eq!(page.headers["cache-control"], "no-store");
    // No inline script or style: one script and one stylesheet, both by URL.
    assert_eq!(page.text.matches("<script").count(), 1);
    assert!(
        page.text
            .contains(r#"<script src="/board/board.js" defer></script>"#)
    );
    assert!(!page.text.contains("<style") && !page.text.contains("style="));
    for handler in [
        "onclick=",
        "onload=",
        "onsubmit=",
        "onerror=",
        "javascript:",
    ] {
        assert!(!page.text.contains(handler), "inline {handler}");
    }
    for (path, kind) in [
        ("/board/board.js", "text/javascript"),
        ("/board/board.css", "text/css"),
    ] {
        let a = get(&w, path, None).await;
        assert_eq!(a.status, 200, "{path}");
        assert!(
            a.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind),
            "{path}"
        );
        assert!(a.headers.contains_key("content-security-policy"), "{path}");
    }
    w.shutdown().await;
}

/// `application/x-www-form-urlencoded` as a browser writes a field's value.
fn form_encoded(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                (b as char).to_string()
            }
            b' ' => "+".into(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_keeps_the_token_in_a_strict_cookie_and_refuses_the_rest() {
    let w = World::start(Duration::from_millis(5)).await;
    let own = w.base();
    let login = |token: &str, origin: Option<&str>| {
        let mut req = board_support::http()
            .post(format!("{}/board/login", w.base()))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={}", form_encoded(token)));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    let ok = login(&w.tokens.reader, Some(&own)).await.unwrap();
    assert_eq!(ok.status(), 303);
    assert_eq!(ok.headers()["location"], "/board");
    let set = ok.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.starts_with(&format!("vko_board={};", w.tokens.reader)),
        "{set}"
    );
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/board"] {
        assert!(set.contains(flag), "{set} lacks {flag}");
    }
    let wrong = login("vko_not_a_token", Some(&own)).await.unwrap();
    assert_eq!(wrong.status(), 303);
    assert_eq!(wrong.headers()["location"], "/board?login=refused");
    assert!(!wrong.headers().contains_key("set-cookie"));
    let odd = login("a;b c", Some(&own)).await.unwrap();
    assert_eq!(odd.headers()["location"], "/board?login=refused");
    // A login form on another site, or a request without an Origin: refused before anything.
    for (origin, code) in [
        (None, "origin_missing"),
        (Some("http://evil.example"), "origin_refused"),
    ] {
        let r = login(&w.tokens.reader, origin).await.unwrap();
        assert_eq!(r.status(), 403);
        assert!(!r.headers().contains_key("set-cookie"));
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], code, "{body}");
    }
    let out = board_support::http()
        .post(format!("{}/board/logout", w.base()))
        .header("origin", &own)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    let cleared = out.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with("vko_board=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_a_token_and_a_revoked_one_is_told_so() {
    let mut w = World::start(Duration::from_millis(5)).await;
    for path in [
        "/board/api/session",
        "/board/api/board",
        "/board/api/activity",
        "/board/api/events",
    ] {
        let a = get(&w, path, None).await;
        assert_eq!(
            (a.status.as_u16(), a.json["code"].as_str()),
            (401, Some("login_required")),
            "{path}"
        );
    }
    let s = get(&w, "/board/api/session", Some(&w.tokens.reader)).await;
    assert_eq!(s.status, 200, "{}", s.text);
    assert_eq!(
        (s.json["caller"].as_str(), s.json["can_approve"].as_bool()),
        (Some("reader"), Some(false))
    );
    assert_eq!(s.json["can_stop"], false);
    let op = get(&w, "/board/api/session", Some(&w.tokens.operator)).await;
    assert_eq!(
        (
            op.json["can_approve"].as_bool(),
            op.json["can_stop"].as_bool()
        ),
        (Some(true), Some(true))
    );
    // A bearer header works like the cookie (scripts); a wrong one is refused the same way.
    let bearer = board_support::http()
        .get(format!("{}/board/api/session", w.base()))
        .bearer_auth("vko_wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 401);
    w.revoke("reader");
    let stale = get(&w, "/board/api/board", Some(&w.tokens.reader)).await;
    assert_eq!(stale.status, 401);
    assert_eq!(stale.json["code"], "token_refused");
    assert!(
        stale.json["message"]
            .as_str()
            .unwrap()
            .contains("no longer accepted"),
        "{}",
        stale.text
    );
    w.shutdown().await;
}

fn asking(timeout: Duration) -> AttemptScript {
    AttemptScript {
        approval: Some(ApprovalScript {
            timeout,
            ask_after: Some(Duration::from_millis(100)),
            ..ApprovalScript::default()
        }),
        ..AttemptScript::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_from_the_board_goes_through_the_tool_and_its_audit() {
    let w = World::start(Duration::from_millis(5)).await;
    let task = w.sim.add_task(w.project, "Needs approval", None);
    let run = {
        let sim = w.sim.clone();
        tokio::spawn(async move {
            sim.run_attempt_script(task, asking(Duration::from_secs(120)))
                .await
        })
    };
    let waiting = card_until(&w, &w.tokens.reader, "approval", "Needs approval", WAIT).await;
    let approval = waiting["approvals"][0].clone();
    assert_eq!(approval["tool_name"], "Bash", "{waiting}");
    assert!(
        approval["expires_in_ms"].as_u64().unwrap() > 60_000,
        "{approval}"
    );
    let path = format!(
        "/board/api/approvals/{}",
        approval["approval_id"].as_str().unwrap()
    );
    let own = w.base();
    let approve = json!({"decision": "approve"});
    // A read token is refused by the tool's own grant check; forged requests by their Origin.
    let read = post(
        &w,
        &path,
        Some(&w.tokens.reader),
        Some(&own),
        approve.clone(),
    )
    .await;
    assert_eq!(
        (read.status.as_u16(), read.json["code"].as_str()),
        (403, Some("forbidden")),
        "{}",
        read.text
    );
    assert!(
        read.json["message"].as_str().unwrap().contains("approve"),
        "{}",
        read.text
    );
    for (origin, code) in [
        (None, "origin_missing"),
        (Some("http://evil.example"), "origin_refused"),
    ] {
        let forged = post(&w, &path, Some(&w.tokens.approver), origin, approve.clone()).await;
        assert_eq!(
            (forged.status.as_u16(), forged.json["code"].as_str()),
            (403, Some(code))
        );
    }
    let counted = |w: &World| {
        w.sim
            .counters()
            .by_route
            .get("POST /api/approvals/{id}/respond")
            .copied()
    };
    assert_eq!(counted(&w), None, "nothing refused reached VK");
    let ok = post(&w, &path, Some(&w.tokens.approver), Some(&own), approve).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.json["status"], "approved");
    assert_eq!(counted(&w), Some(1));
    let id: uuid::Uuid = approval["approval_id"].as_str().unwrap().parse().unwrap();
    let recorded = w
        .sim
        .approvals()
        .into_iter()
        .find(|(a, _, _)| *a == id)
        .map(|(_, _, s)| s);
    assert_eq!(
        recorded,
        Some(SimApprovalStatus::Approved),
        "VK records the answer"
    );
    // Audited as the tool, under the token's name.
    let audit: Value = board_support::http()
        .get(format!("{}/audit?tool=respond_approval", w.base()))
        .bearer_auth(&w.tokens.operator)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let entry = &audit["entries"][0];
    assert_eq!(
        (entry["caller"].as_str(), entry["outcome"].as_str()),
        (Some("approver"), Some("ok")),
        "{audit}"
    );
    run.await.unwrap();
    card_until(&w, &w.tokens.reader, "completed", "Needs approval", WAIT).await;
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_needs_write_and_runs_the_tool() {
    let w = World::start(Duration::from_millis(200)).await;
    let task = w.sim.add_task(w.project, "Runs long", None);
    let script = AttemptScript {
        normalized_entries: 500,
        ..AttemptScript::default()
    };
    let sim = w.sim.clone();
    let run = tokio::spawn(async move { sim.run_attempt_script(task, script).await });
    // Running, and once the agent logs, its last line on the card.
    let running = until("the agent's last line on its card", WAIT, || async {
        let b = get(&w, "/board/api/board", Some(&w.tokens.reader)).await;
        card(&b.json, "running", "Runs long").filter(|c| c["last_line"].is_string())
    })
    .await;
    let path = format!(
        "/board/api/attempts/{}/stop",
        running["attempt_id"].as_str().unwrap()
    );
    let own = w.base();
    let refused = post(&w, &path, Some(&w.tokens.approver), Some(&own), json!({})).await;
    assert_eq!(
        (refused.status.as_u16(), refused.json["code"].as_str()),
        (403, Some("forbidden"))
    );
    let stopped = post(&w, &path, Some(&w.tokens.operator), Some(&own), json!({})).await;
    assert_eq!(stopped.status, 200, "{}", stopped.text);
    assert_eq!(stopped.json["was_running"], true, "{}", stopped.text);
    card_until(&w, &w.tokens.reader, "failed", "Runs long", WAIT).await;
    run.abort();
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_token_sees_its_project_only_and_bad_ids_are_told() {
    let w = World::start(Duration::from_millis(5)).await;
    let mine = w.sim.add_task(w.other, "In the other project", None);
    let theirs = w.sim.add_task(w.project, "In Demo", None);
    let a = w
        .sim
        .run_attempt_script(mine, AttemptScript::default())
        .await;
    let b = w
        .sim
        .run_attempt_script(theirs, AttemptScript::default())
        .await;
    let full = card_until(&w, &w.tokens.reader, "completed", "In Demo", WAIT).await;
    assert_eq!(full["executor"], "CLAUDE_CODE");
    card_until(
        &w,
        &w.tokens.limited,
        "completed",
        "In the other project",
        WAIT,
    )
    .await;
    let limited = get(&w, "/board/api/board", Some(&w.tokens.limited))
        .await
        .json;
    let names: Vec<&str> = limited["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Other"]);
    assert!(card(&limited, "completed", "In Demo").is_none());
    let own = get(
        &w,
        &format!("/board/api/attempts/{}", a.attempt_id),
        Some(&w.tokens.limited),
    )
    .await;
    assert_eq!(own.status, 200, "{}", own.text);
    assert_eq!(own.json["task_title"], "In the other project");
    assert!(!own.json["log"]["entries"].as_array().unwrap().is_empty());
    let foreign = get(
        &w,
        &format!("/board/api/attempts/{}", b.attempt_id),
        Some(&w.tokens.limited),
    )
    .await;
    assert_eq!(
        (foreign.status.as_u16(), foreign.json["code"].as_str()),
        (403, Some("forbidden"))
    );
    let activity = get(&w, "/board/api/activity", Some(&w.tokens.limited))
        .await
        .json;
    assert!(
        activity["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["project_id"] == json!(w.other))
    );
    let unknown = get(
        &w,
        &format!("/board/api/attempts/{}", uuid::Uuid::new_v4()),
        Some(&w.tokens.reader),
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert!(
        unknown.json["message"]
            .as_str()
            .unwrap()
            .starts_with("No attempt"),
        "{}",
        unknown.text
    );
    let malformed = get(&w, "/board/api/attempts/not-an-id", Some(&w.tokens.reader)).await;
    assert_eq!(malformed.status, 400);
    assert!(
        malformed.json["message"]
            .as_str()
            .unwrap()
            .contains("not an attempt id")
    );
    w.shutdown().await;
}

/// One Server-Sent Event: (event, id, data).
type Sse = (String, String, Value);

/// Read events from `resp` until `done` says stop (or 20 s pass).
async fn read_events(
    resp: &mut reqwest::Response,
    buf: &mut String,
    mut done: impl FnMut(&[Sse]) -> bool,
) -> Vec<Sse> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done(&got) {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk()).await;
        let chunk = chunk
            .expect("events within 20 s")
            .expect("stream open")
            .expect("stream not ended");
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let field = |name: &str| {
                block
                    .lines()
                    .filter_map(|l| l.strip_prefix(name))
                    .map(str::trim_start)
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if field("event:").is_empty() {
                continue; // a heartbeat comment
            }
            let data = serde_json::from_str(&field("data:")).unwrap_or(Value::Null);
            got.push((field("event:"), field("id:"), data));
        }
    }
    got
}

async fn events(w: &World, token: &str, since: Option<(&str, &str)>) -> reqwest::Response {
    let mut req = board_support::http().get(format!("{}/board/api/events", w.base()));
    req = req
        .header("cookie", board_support::cookie(token))
        .timeout(Duration::from_secs(60));
    if let Some((name, value)) = since {
        req = req.header(name, value);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_resumes_after_last_event_id_with_no_gap() {
    let w = World::start(Duration::from_millis(5)).await;
    let first = w.sim.add_task(w.project, "First", None);
    w.sim
        .run_attempt_script(first, AttemptScript::default())
        .await;
    card_until(&w, &w.tokens.reader, "completed", "First", WAIT).await;
    let mut resp = events(&w, &w.tokens.reader, None).await;
    let mut buf = String::new();
    let hello = read_events(&mut resp, &mut buf, |got| !got.is_empty()).await;
    assert_eq!(hello[0].0, "hello");
    let second = w.sim.add_task(w.project, "Second", None);
    let ids = w
        .sim
        .run_attempt_script(second, AttemptScript::default())
        .await;
    let seen = read_events(&mut resp, &mut buf, |got| {
        got.iter().any(|(_, _, d)| {
            d["attempts"]
                .as_array()
                .is_some_and(|a| a.contains(&json!(ids.attempt_id)))
        })
    })
    .await;
    let last = seen.last().unwrap().1.clone();
    drop(resp); // the connection drops; the page holds `last`
    let third = w.sim.add_task(w.project, "Third", None);
    let gone = w
        .sim
        .run_attempt_script(third, AttemptScript::default())
        .await;
    card_until(&w, &w.tokens.reader, "completed", "Third", WAIT).await;
    let query = w.query();
    let settled = until("the store settles", WAIT, || {
        let q = query.clone();
        async move {
            let before = q.token();
            tokio::time::sleep(Duration::from_millis(600)).await;
            (q.token() == before).then_some(before)
        }
    })
    .await;
    let mut resp = events(&w, &w.tokens.reader, Some(("last-event-id", &last))).await;
    let mut buf = String::new();
    let resumed = read_events(&mut resp, &mut buf, |got| {
        got.last().is_some_and(|e| e.1 == settled)
    })
    .await;
    assert!(
        resumed
            .iter()
            .all(|e| e.0 == "change" && e.2["reset"] == false),
        "{resumed:?}"
    );
    let named: Vec<&Value> = resumed
        .iter()
        .flat_map(|e| e.2["attempts"].as_array().unwrap())
        .collect();
    assert!(
        named.contains(&&json!(gone.attempt_id)),
        "the attempt made while away is named"
    );
    // Exactly the project's feed after `last`, as the tool reads it: nothing missing, nothing twice.
    let streamed: Vec<String> = resumed
        .iter()
        .flat_map(|e| {
            e.2["activity"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| format!("{}:{}", i["token"], i["kind"]))
        })
        .collect();
    let req = vk_observer_query::activity::ActivityRequest::new(
        vk_observer_query::activity::ActivityScope::Project(w.project),
        Some(last.clone()),
        None,
        Some(200),
        None,
    )
    .unwrap();
    let feed = query.activity(&req).unwrap();
    assert!(!feed.has_more);
    let expected: Vec<String> = feed
        .items
        .iter()
        .map(|i| format!("\"{}\":{}", i.token, json!(i.kind)))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(streamed, expected);
    w.shutdown().await;
}
