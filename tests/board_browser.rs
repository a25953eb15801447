//! The board in a real headless chromium (issue 41), against the simulator and a real daemon:
//! the demo's roads each in their group, a log followed live (a new entry on the page within a
//! second of the cache), an approval answered by pressing the page's button (VK records it)
//! while a read token sees no button and its forged POST is refused, a revoked token sent back
//! to the login form, a page left open across a daemon restart that resumes with no gap, an
//! unknown attempt in the URL told plainly, the chart of attempts over time showing what the
//! cache holds, and a rebase's conflicts in the attempt's branch status. The fleet's board
//! (`demo --hosts 3`): `tests/board_fleet_browser.rs`. Screenshots: `target/board-screenshots/`.
//!
//! One browser at a time (`ONE_BROWSER`): this machine has two cores, and the latency check
//! must not measure another test's chromium.

mod board_support;

use std::time::{Duration, Instant};

use board_support::World;
use board_support::browser::{self, Browser};
use fantoccini::Locator;
use serde_json::{Value, json};
use vk_observer::demo::roads;
use vk_observer_sim::{ApprovalScript, AttemptScript, SimApprovalStatus};

static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SHOWN: Duration = Duration::from_secs(60);

/// The entry indices the page's log shows, in page order.
async fn log_indices(b: &Browser) -> Vec<u64> {
    let script = "return Array.from(document.querySelectorAll('#log li')).map(e => Number(e.dataset.index));";
    let v = b
        .client
        .execute(script, vec![])
        .await
        .unwrap_or(Value::Null);
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// The newest normalized entry the cache holds for `attempt`.
fn cached_latest(w: &World, attempt: uuid::Uuid) -> Option<u64> {
    use vk_observer_query::logs::{LogMode, LogRequest};
    let page = w.query().tail_logs(LogRequest {
        attempt,
        channel: vk_observer_store::keys::Channel::Normalized,
        mode: LogMode::Tail,
        limit: 1,
        since: vk_observer_query::Since::None,
        process: None,
        detail: vk_observer_query::detail::Detail::Compact,
    });
    page.ok()?.latest_entry_index
}

fn contiguous(indices: &[u64]) -> bool {
    indices.windows(2).all(|p| p[1] == p[0] + 1)
}

/// The attempt of the card whose title is `title` on the page.
async fn card_attempt(b: &Browser, title: &str) -> uuid::Uuid {
    let script = "const t = arguments[0]; const c = Array.from(document.querySelectorAll('.card')).find(c => c.querySelector('.title').textContent === t); return c ? c.dataset.attempt : null;";
    let v = b.client.execute(script, vec![json!(title)]).await.unwrap();
    v.as_str()
        .unwrap_or_else(|| panic!("no card titled {title}"))
        .parse()
        .unwrap()
}

#[test]
fn where_no_chromium_is_installed_the_tests_say_they_are_skipped() {
    let empty = tempfile::tempdir().unwrap();
    let why = browser::find_browser(empty.path().as_os_str()).unwrap_err();
    assert!(
        why.contains("apt-get install chromium chromium-driver"),
        "{why}"
    );
    let line = browser::skip_line("board_browser::demo", why);
    assert_eq!(
        line,
        "SKIPPED board_browser::demo: chromium or chromedriver is not installed (apt-get install chromium chromium-driver)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_board_shows_every_road_and_a_log_follows_within_a_second() {
    let _one = ONE_BROWSER.lock().await;
    let Some(b) = browser::open("board_browser::demo").await else {
        return;
    };
    let w = World::start(Duration::from_millis(300)).await;
    let _roads = roads::start(&w.sim, w.project, w.repo);
    b.login(&w.base(), &w.tokens.operator).await;
    let started = Instant::now();
    for group in ["approval", "failed", "running", "completed"] {
        b.wait_for(&format!(".group-{group} .card"), SHOWN).await;
    }
    println!("every road shown {:?} after sign-in", started.elapsed());
    let failed = b.texts(".group-failed .card .error-code").await;
    assert!(
        failed.iter().any(|t| t == "agent_exit_nonzero"),
        "{failed:?}"
    );
    assert!(b.count(".group-approval .card button.approve").await >= 1);
    assert!(
        b.count(".group-running .card .line").await >= 1,
        "the last log line shows"
    );
    b.screenshot("demo-laptop").await;
    b.client.set_window_size(390, 844).await.unwrap();
    b.screenshot("demo-phone").await;
    b.client.set_window_size(1280, 1000).await.unwrap();

    let attempt = card_attempt(&b, roads::LONG_RUNNING).await;
    b.client
        .goto(&format!("{}/board#attempt={attempt}", w.base()))
        .await
        .unwrap();
    b.wait_for("#log li", SHOWN).await;
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let shown = log_indices(&b).await.last().copied().unwrap_or(0);
        // The moment the cache holds an entry the page does not show yet...
        let newer = b
            .until("a new entry in the cache", SHOWN, || async {
                cached_latest(&w, attempt).filter(|&i| i > shown)
            })
            .await;
        let cached_at = Instant::now();
        // ...until the page shows it.
        b.until(
            "the new entry on the page",
            Duration::from_secs(5),
            || async { log_indices(&b).await.contains(&newer).then_some(()) },
        )
        .await;
        worst = worst.max(cached_at.elapsed());
    }
    println!("a new log entry reached the page at most {worst:?} after the cache held it");
    assert!(worst < Duration::from_secs(1), "{worst:?}");
    let indices = log_indices(&b).await;
    assert!(contiguous(&indices), "the log has no hole: {indices:?}");
    b.screenshot("attempt-live").await;
    b.close().await;
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

/// The POST a forged page would send, made from inside the board's page (its cookie goes along).
async fn post_from_page(b: &Browser, path: &str) -> u64 {
    let script = "const done = arguments[arguments.length - 1]; fetch(arguments[0], {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({decision: 'approve'})}).then(r => done(r.status), e => done(String(e)));";
    let v = b
        .client
        .execute_async(script, vec![json!(path)])
        .await
        .unwrap();
    v.as_u64().unwrap_or_else(|| panic!("fetch failed: {v}"))
}

/// Start an attempt on a new task titled `title` whose agent asks for approval (5 min).
fn start_asking(w: &World, title: &str) {
    let task = w.sim.add_task(w.project, title, None);
    let sim = w.sim.clone();
    let script = asking(Duration::from_secs(300));
    tokio::spawn(async move { sim.run_attempt_script(task, script).await });
}

/// Attempts (started, completed, failed) the cache holds, read as the tools list them.
fn cached_counts(w: &World) -> (u64, u64, u64) {
    use vk_observer_query::paging::PageArgs;
    use vk_observer_query::status::AttemptState;
    let q = w.query();
    let page = |limit| PageArgs {
        cursor: None,
        limit,
    };
    let mut ids = Vec::new();
    for p in q.list_projects_within(&page(100), None).unwrap().projects {
        let filter = vk_observer_query::tasks::TaskFilter::default();
        for t in q
            .list_tasks(p.project_id, &filter, &page(200))
            .unwrap()
            .tasks
        {
            let attempts = q.list_task_attempts(t.task_id, &page(100)).unwrap();
            ids.extend(attempts.attempts.iter().map(|a| a.attempt_id));
        }
    }
    let statuses = q.attempt_statuses(&ids, vk_observer_query::Since::None);
    let states: Vec<AttemptState> = statuses
        .unwrap()
        .attempts
        .iter()
        .map(|i| i.0.status.state)
        .collect();
    let count = |s: AttemptState| states.iter().filter(|&&x| x == s).count() as u64;
    let started = states.len() as u64;
    (
        started,
        count(AttemptState::Completed),
        count(AttemptState::Failed),
    )
}

/// What the page's chart shows: the bars' counts summed over the buckets, and the legend's.
async fn chart_counts(b: &Browser) -> ((u64, u64, u64), (u64, u64, u64)) {
    let script = "const sum = (k) => Array.from(document.querySelectorAll('#chart g.bucket')).reduce((n, g) => n + Number(g.dataset[k]), 0); const key = (k) => Number((document.querySelector(`#chart [data-series=${k}]`) || {dataset: {count: -1}}).dataset.count); return [sum('started'), sum('finished'), sum('failed'), key('started'), key('finished'), key('failed')];";
    let v = b.client.execute(script, vec![]).await.unwrap();
    let n: Vec<u64> = v
        .as_array()
        .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(u64::MAX)).collect())
        .unwrap_or_default();
    assert_eq!(n.len(), 6, "{v}");
    ((n[0], n[1], n[2]), (n[3], n[4], n[5]))
}

/// Ask ingest to read `attempt`'s branch status from VK (as get_attempt_branch_status does);
/// true once VK answered and it is stored.
async fn read_branch_status(w: &World, attempt: uuid::Uuid) -> bool {
    let (done, stored) = tokio::sync::oneshot::channel();
    let signal = vk_observer_ingest::Signal::RefreshBranchStatus {
        attempt_id: attempt,
        done: Some(done),
    };
    w.daemon().ingest.signals.send(signal).is_ok() && matches!(stored.await, Ok(Ok(())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_counts_what_the_cache_holds_and_an_attempt_shows_its_conflicts() {
    let _one = ONE_BROWSER.lock().await;
    let Some(b) = browser::open("board_browser::chart_and_branch").await else {
        return;
    };
    let w = World::start(Duration::from_millis(300)).await;
    let _roads = roads::start(&w.sim, w.project, w.repo);
    b.login(&w.base(), &w.tokens.reader).await;
    b.wait_for(".group-failed .card", SHOWN).await;
    let shown = b
        .until("the chart shows the cache's counts", SHOWN, || async {
            let cached = cached_counts(&w);
            let (bars, legend) = chart_counts(&b).await;
            let every_series = cached.1 >= 1 && cached.2 >= 1;
            (every_series && bars == cached && legend == cached).then_some(cached)
        })
        .await;
    println!("the chart shows (started, finished, failed) = {shown:?}, as the cache holds");
    assert!(shown.0 >= 5, "every road started: {shown:?}");
    for series in ["started", "finished", "failed"] {
        let bars = b.count(&format!("#chart rect.bar-{series}")).await;
        assert!(bars >= 1, "a {series} bar");
    }

    let attempt = card_attempt(&b, roads::REBASE_CONFLICT).await;
    b.until("the rebase stopped on conflicts", SHOWN, || async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let read = read_branch_status(&w, attempt).await;
        let cached = vk_observer_query::branch::cached(&w.query().read(), attempt).ok()??;
        (read && cached.repos.iter().any(|r| r.has_conflicts())).then_some(())
    })
    .await;
    b.client
        .goto(&format!("{}/board#attempt={attempt}", w.base()))
        .await
        .unwrap();
    let text = b
        .until("the branch's conflicts on the page", SHOWN, || async {
            let t = b.texts("#branch").await.join(" ");
            t.contains(roads::CONFLICT_FILE).then_some(t)
        })
        .await;
    assert!(
        text.contains(&format!("→ {}", roads::REBASE_BASE)),
        "{text}"
    );
    assert!(text.contains("rebase stopped on conflicts"), "{text}");
    b.screenshot("attempt-branch-and-chart").await;
    b.close().await;
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_answered_by_pressing_the_pages_button() {
    let _one = ONE_BROWSER.lock().await;
    let Some(b) = browser::open("board_browser::approval").await else {
        return;
    };
    let w = World::start(Duration::from_millis(5)).await;
    start_asking(&w, "Approve me");
    start_asking(&w, "Leave me waiting");
    b.login(&w.base(), &w.tokens.approver).await;
    b.until("both approvals on the page", SHOWN, || async {
        (b.count(".group-approval .card button.approve").await == 2).then_some(())
    })
    .await;
    assert_eq!(
        b.count("button.stop").await,
        0,
        "approve without write: no stop button"
    );
    b.screenshot("approval-waiting").await;
    let attempt = card_attempt(&b, "Approve me").await;
    let button = format!(".card[data-attempt='{attempt}'] button.approve");
    let approve = b.client.find(Locator::Css(&button)).await.unwrap();
    approve.click().await.unwrap();
    b.until(
        "VK records the approval",
        Duration::from_secs(15),
        || async {
            let approvals = w.sim.approvals();
            approvals
                .into_iter()
                .find(|(_, _, s)| *s == SimApprovalStatus::Approved)
        },
    )
    .await;
    b.until(
        "the card leaves the approval group",
        Duration::from_secs(15),
        || async { (b.count(".group-approval .card").await == 1).then_some(()) },
    )
    .await;
    let notice = b.texts("#notice").await.join(" ");
    assert!(notice.contains("Approved Bash"), "{notice}");
    b.screenshot("approval-answered").await;
    b.client
        .find(Locator::Css("#logout button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for("#login:not([hidden])", SHOWN).await;
    assert!(
        b.texts("#login-message")
            .await
            .join(" ")
            .contains("Signed out")
    );
    b.close().await;
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_gets_no_button_and_its_forged_post_is_refused_until_revoked() {
    let _one = ONE_BROWSER.lock().await;
    let Some(b) = browser::open("board_browser::read_token").await else {
        return;
    };
    let mut w = World::start(Duration::from_millis(5)).await;
    start_asking(&w, "Leave me waiting");
    b.login(&w.base(), &w.tokens.reader).await;
    b.wait_for(".group-approval .card", SHOWN).await;
    assert_eq!(b.count("button.approve, button.deny, button.stop").await, 0);
    let cookie = b
        .client
        .execute("return document.cookie;", vec![])
        .await
        .unwrap();
    assert_eq!(cookie, json!(""), "the token cookie is HttpOnly");
    let waiting = w.sim.approvals().into_iter().next().unwrap();
    let forged = post_from_page(&b, &format!("/board/api/approvals/{}", waiting.0)).await;
    assert_eq!(forged, 403, "a read token's POST is refused");
    let pending = |s: &SimApprovalStatus| *s == SimApprovalStatus::Pending;
    assert!(
        w.sim
            .approvals()
            .iter()
            .any(|(id, _, s)| *id == waiting.0 && pending(s))
    );
    b.screenshot("read-token").await;
    // The token is revoked while the page is open: the login form says so.
    w.revoke("reader");
    b.client.refresh().await.unwrap();
    b.wait_for("#login:not([hidden])", SHOWN).await;
    let told = b.texts("#login-message").await.join(" ");
    assert!(told.contains("no longer accepted"), "{told}");
    b.screenshot("revoked-token").await;
    b.close().await;
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_left_open_across_a_daemon_restart_resumes_with_no_gap() {
    let _one = ONE_BROWSER.lock().await;
    let Some(b) = browser::open("board_browser::restart").await else {
        return;
    };
    let mut w = World::start(Duration::from_millis(300)).await;
    let task = w.sim.add_task(w.project, "Logs steadily", None);
    let script = AttemptScript {
        normalized_entries: 2000,
        ..AttemptScript::default()
    };
    let sim = w.sim.clone();
    let run = tokio::spawn(async move { sim.run_attempt_script(task, script).await });
    b.login(&w.base(), &w.tokens.reader).await;
    b.wait_for(".group-running .card", SHOWN).await;
    let attempt = card_attempt(&b, "Logs steadily").await;
    b.client
        .goto(&format!("{}/board#attempt={attempt}", w.base()))
        .await
        .unwrap();
    b.wait_for("#log li", SHOWN).await;
    w.stop_daemon().await;
    b.until(
        "the page says it reconnects",
        Duration::from_secs(10),
        || async {
            b.texts("#live")
                .await
                .join("")
                .contains("reconnecting")
                .then_some(())
        },
    )
    .await;
    let hosts = b.texts("#hosts").await.join(" ");
    assert!(
        hosts.contains("unreachable"),
        "the page says the daemon is away: {hosts}"
    );
    let before = log_indices(&b).await.last().copied().unwrap();
    b.screenshot("daemon-down").await;
    tokio::time::sleep(Duration::from_secs(3)).await; // the agent logs on; nobody reads it
    w.restart_daemon().await;
    let target = b
        .until("the cache catches up", SHOWN, || async {
            cached_latest(&w, attempt).filter(|&i| i > before + 5)
        })
        .await;
    b.until(
        "the page shows what was logged while the daemon was down",
        SHOWN,
        || async { log_indices(&b).await.contains(&target).then_some(()) },
    )
    .await;
    assert!(b.texts("#live").await.join("").contains("live"));
    b.until("the hosts line back", Duration::from_secs(10), || async {
        let hosts = b.texts("#hosts").await.join(" ");
        hosts.contains("VK: connected").then_some(())
    })
    .await;
    let indices = log_indices(&b).await;
    assert!(
        contiguous(&indices),
        "no gap across the restart: {indices:?}"
    );
    b.screenshot("after-restart").await;
    run.abort();
    b.close().await;
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_attempt_in_the_url_is_told_plainly() {
    let _one = ONE_BROWSER.lock().await;
    // In the system's dark theme (`prefers-color-scheme: dark`), which the page follows.
    let dark = [
        "--force-dark-mode",
        "--blink-settings=preferredColorScheme=0",
    ];
    let Some(b) = browser::open_with("board_browser::unknown", &dark).await else {
        return;
    };
    let w = World::start(Duration::from_millis(5)).await;
    b.login(&w.base(), &w.tokens.reader).await;
    let unknown = uuid::Uuid::new_v4();
    for (fragment, says) in [
        (unknown.to_string(), "No attempt"),
        ("bogus".to_string(), "not an attempt id"),
    ] {
        b.client
            .goto(&format!("{}/board#attempt={fragment}", w.base()))
            .await
            .unwrap();
        b.client.refresh().await.unwrap();
        let text = b
            .until("the message", SHOWN, || async {
                let t = b.texts("#attempt [role=alert]").await.join(" ");
                (!t.is_empty()).then_some(t)
            })
            .await;
        assert!(text.contains(says), "{text}");
        assert_eq!(
            b.count("#main:not([hidden]) .project").await,
            2,
            "the board stays"
        );
    }
    let script = "return getComputedStyle(document.body).backgroundColor;";
    let background = b.client.execute(script, vec![]).await.unwrap();
    assert_eq!(background, json!("rgb(15, 18, 22)"), "the dark theme");
    b.screenshot("unknown-attempt-dark").await;
    b.close().await;
    w.shutdown().await;
}
