//! The board over plain HTTP (issue 41), against the simulator and a real daemon: its strict
//! headers, the login cookie and its refusals, reads by the tools' grants (a project-limited
//! token sees its project only), clear answers for ids that are not attempts, an attempt's
//! branch status as cached and the chart's counts. Its actions:
//! `tests/board_actions.rs`; its event stream: `tests/board_events.rs`; the page itself, in a
//! real browser: `tests/board_browser.rs`.

mod board_support;

use std::time::Duration;

use board_support::{World, card, card_until, get, until};
use serde_json::json;
use vk_observer_sim::AttemptScript;

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
    // No inline script or style: two scripts and one stylesheet, all by URL.
    assert_eq!(page.text.matches("<script").count(), 2);
    for script in ["board-chart.js", "board.js"] {
        let tag = format!(r#"<script src="/board/{script}" defer></script>"#);
        assert!(page.text.contains(&tag), "{tag}");
    }
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
    // A name rebound to this address (DNS rebinding) reads nothing, token or not.
    let rebound = board_support::http()
        .get(format!("{}/board/api/session", w.base()))
        .header("host", "evil.example")
        .header("cookie", board_support::cookie(&w.tokens.reader))
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    let body: serde_json::Value = rebound.json().await.unwrap();
    assert_eq!(body["code"], "host_refused", "{body}");
    for (path, kind) in [
        ("/board/board.js", "text/javascript"),
        ("/board/board-chart.js", "text/javascript"),
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
        let body: serde_json::Value = r.json().await.unwrap();
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

/// `path` as `token` reads it: (status, code, message).
async fn read_as(w: &World, path: &str, token: &str) -> (u16, String, String) {
    let a = get(w, path, Some(token)).await;
    let text = |k: &str| a.json[k].as_str().unwrap_or_default().to_string();
    (a.status.as_u16(), text("code"), text("message"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_token_sees_its_project_only() {
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
    let other = "In the other project";
    card_until(&w, &w.tokens.limited, "completed", other, WAIT).await;
    let limited = get(&w, "/board/api/board", Some(&w.tokens.limited))
        .await
        .json;
    let projects = limited["projects"].as_array().unwrap();
    let names: Vec<&str> = projects
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Other"]);
    assert!(card(&limited, "completed", "In Demo").is_none());
    let path = format!("/board/api/attempts/{}", a.attempt_id);
    let own = get(&w, &path, Some(&w.tokens.limited)).await;
    assert_eq!(own.status, 200, "{}", own.text);
    assert_eq!(own.json["task_title"], other);
    assert!(!own.json["log"]["entries"].as_array().unwrap().is_empty());
    let foreign = format!("/board/api/attempts/{}", b.attempt_id);
    let (status, code, _) = read_as(&w, &foreign, &w.tokens.limited).await;
    assert_eq!((status, code.as_str()), (403, "forbidden"));
    let activity = get(&w, "/board/api/activity", Some(&w.tokens.limited))
        .await
        .json;
    let items = activity["items"].as_array().unwrap();
    assert!(!items.is_empty());
    assert!(items.iter().all(|i| i["project_id"] == json!(w.other)));
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_are_not_a_cached_attempt_are_told_plainly() {
    let w = World::start(Duration::from_millis(5)).await;
    let unknown = format!("/board/api/attempts/{}", uuid::Uuid::new_v4());
    let (status, code, message) = read_as(&w, &unknown, &w.tokens.reader).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    assert!(message.starts_with("No attempt"), "{message}");
    let malformed = "/board/api/attempts/not-an-id";
    let (status, _, message) = read_as(&w, malformed, &w.tokens.reader).await;
    assert_eq!(status, 400);
    assert!(message.contains("not an attempt id"), "{message}");
    let bad_after = format!("{unknown}?after=-1");
    let (status, code, message) = read_as(&w, &bad_after, &w.tokens.reader).await;
    assert_eq!(
        (status, code.as_str()),
        (400, "invalid_argument"),
        "{message}"
    );
    let long = format!("/board/api/attempts/{}", "x".repeat(5000));
    let (status, _, message) = read_as(&w, &long, &w.tokens.reader).await;
    assert_eq!(status, 400);
    assert!(message.len() < 300, "the echo is clipped: {message}");
    w.shutdown().await;
}

/// Ask ingest to read `attempt`'s branch status from VK, as get_attempt_branch_status does, and
/// wait until it is stored.
async fn read_branch_status(w: &World, attempt: uuid::Uuid) {
    let (done, stored) = tokio::sync::oneshot::channel();
    let signal = vk_observer_ingest::Signal::RefreshBranchStatus {
        attempt_id: attempt,
        done: Some(done),
    };
    w.daemon().ingest.signals.send(signal).unwrap();
    stored.await.unwrap().expect("VK answers the branch status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_shows_its_cached_branch_status_and_the_chart_counts_it() {
    let w = World::start(Duration::from_millis(5)).await;
    let done = w.sim.add_task(w.project, "Commits one file", None);
    let ids = w
        .sim
        .run_attempt_script(done, AttemptScript::default())
        .await;
    let failing = w.sim.add_task(w.project, "Fails", None);
    let script = AttemptScript {
        agent: vk_observer_sim::AgentOutcome::Fail,
        ..AttemptScript::default()
    };
    w.sim.run_attempt_script(failing, script).await;
    card_until(&w, &w.tokens.reader, "failed", "Fails", WAIT).await;
    let board = card_until(&w, &w.tokens.reader, "completed", "Commits one file", WAIT).await;
    assert_eq!(board["attempt_id"], json!(ids.attempt_id));
    let chart = get(&w, "/board/api/board", Some(&w.tokens.reader))
        .await
        .json["chart"]
        .clone();
    let totals = |k: &str| chart[k].as_u64().unwrap();
    assert_eq!(
        (totals("started"), totals("finished"), totals("failed")),
        (2, 1, 1),
        "{chart}"
    );
    let buckets = chart["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 24);
    let summed: u64 = buckets.iter().map(|b| b["started"].as_u64().unwrap()).sum();
    assert_eq!(summed, 2);

    let path = format!("/board/api/attempts/{}", ids.attempt_id);
    let before = get(&w, &path, Some(&w.tokens.reader)).await;
    assert_eq!(before.status, 200, "{}", before.text);
    assert_eq!(before.json["branch"], json!(null), "not read from VK yet");
    read_branch_status(&w, ids.attempt_id).await;
    let after = get(&w, &path, Some(&w.tokens.reader)).await.json;
    let repo = &after["branch"]["repos"][0];
    assert_eq!(repo["repo_id"], json!(w.repo), "{after}");
    assert_eq!(repo["target_branch"], "main");
    assert_eq!(
        (
            repo["commits_ahead"].as_u64(),
            repo["commits_behind"].as_u64()
        ),
        (Some(1), Some(0))
    );
    assert_eq!(repo["ready_to_merge"], true);
    assert!(after["branch"]["as_of"].as_str().is_some());
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_read_for_one_page_serves_another_only_if_it_covers_what_that_page_saw() {
    let w = World::start(Duration::from_millis(5)).await;
    let reader = Some(w.tokens.reader.as_str());
    let first = get(&w, "/board/api/board", reader).await;
    let seen_then = first.json["token"].as_str().unwrap().to_string();
    let same = get(&w, &format!("/board/api/board?seen={seen_then}"), reader).await;
    assert_eq!(
        same.text, first.text,
        "a page that saw the same token shares the read"
    );

    let task = w.sim.add_task(w.project, "After the memo", None);
    let ids = w
        .sim
        .run_attempt_script(task, AttemptScript::default())
        .await;
    let q = w.query();
    until("the attempt cached", WAIT, || async {
        q.store.read().attempt(ids.attempt_id).ok().flatten()
    })
    .await;
    let seen_now = q.token();
    let fresh = get(&w, &format!("/board/api/board?seen={seen_now}"), reader).await;
    assert!(
        fresh.text.contains("After the memo"),
        "a page that saw the change never gets a board from before it: {}",
        fresh.text
    );
    for odd in ["not-a-token", "0.0", ""] {
        let answer = get(&w, &format!("/board/api/board?seen={odd}"), reader).await;
        assert_eq!(answer.status, 200, "seen={odd}: {}", answer.text);
        assert!(answer.text.contains("After the memo"), "seen={odd}");
    }
    w.shutdown().await;
}
