//! The activity-feed invariants of the fault schedules (tests/ingest_faults.rs): a follower
//! reads the project's feed by `since_token` throughout a schedule, across the daemon restart,
//! and once converged its items must equal the stored feed, in commit order, with every task,
//! attempt and process of the truth created/started once and every ended process ended once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vk_observer_query::detail::Detail;

use vk_observer_query::Query;

/// Items a follower collected: (token, kind, task, attempt, process).
pub type FeedSeen = Vec<(u64, String, String, String, String)>;

/// Follow the project's activity with `since_token` from the start, through whichever daemon
/// is current (none while it restarts), as a client would.
pub fn follow_feed(
    current: Arc<std::sync::RwLock<Option<vk_observer_store::Store>>>,
    stop: Arc<AtomicBool>,
    project: uuid::Uuid,
) -> tokio::task::JoinHandle<FeedSeen> {
    use vk_observer_query::activity::{ActivityRequest, ActivityScope};
    tokio::spawn(async move {
        let health = Arc::new(vk_observer_telemetry::health::Health::new());
        let mut since: Option<String> = None;
        let mut seen = FeedSeen::new();
        loop {
            // Once stopped, one more pass to the end: every item committed before the stop is
            // read, however late this task is scheduled on a loaded machine.
            let stopping = stop.load(Ordering::Relaxed);
            let store = current.read().unwrap().clone();
            if let Some(store) = store {
                let q = Query::new(store, health.clone());
                let since_now = since.get_or_insert_with(|| q.token()).clone();
                let scope = ActivityScope::Project(project);
                let req = ActivityRequest::new(
                    scope,
                    Some(since_now),
                    None,
                    Some(7),
                    Some(Detail::Compact),
                )
                .unwrap();
                if let Ok(page) = q.activity(&req) {
                    assert!(!page.token_reset, "the feed follower was reset: {page:?}");
                    for i in &page.items {
                        seen.push(item_ident(&serde_json::to_value(i).unwrap()));
                    }
                    since = Some(page.next_since_token);
                    if page.has_more {
                        continue;
                    }
                }
            }
            if stopping {
                break;
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        seen
    })
}

/// An item as the feed checks compare it: its local token (0 for a fleet node's token, which
/// names places in the hosts' streams, not a local token), kind and ids.
pub fn item_ident(v: &serde_json::Value) -> (u64, String, String, String, String) {
    let raw = v["token"].as_str().unwrap();
    let token = match super::fleet_tokens::places(raw) {
        Some(_) => 0,
        None => vk_observer_store::token::Token::parse(raw).unwrap().seq,
    };
    let s = |f: &str| v[f].as_str().unwrap_or_default().to_string();
    (
        token,
        s("kind"),
        s("task_id"),
        s("attempt_id"),
        s("execution_process_id"),
    )
}

/// The feed invariants, once converged: the follower saw exactly the stored feed (no gap, no
/// duplicate, across the restart), in commit order, and every task, attempt and process the
/// truth made appears once as created/started, every ended process once as ended.
pub async fn check_feed(
    daemon: &vk_observer_daemon::Daemon,
    sim: &vk_observer_sim::Sim,
    project: uuid::Uuid,
    seed: u64,
    stop: &Arc<AtomicBool>,
    follower: tokio::task::JoinHandle<FeedSeen>,
) {
    check_store_feed(&daemon.store, sim, project, seed, stop, follower).await
}

/// [`check_feed`] on any store (a fleet node's too), against the truth of `sim`.
pub async fn check_store_feed(
    store: &vk_observer_store::Store,
    sim: &vk_observer_sim::Sim,
    project: uuid::Uuid,
    seed: u64,
    stop: &Arc<AtomicBool>,
    follower: tokio::task::JoinHandle<FeedSeen>,
) {
    use vk_observer_store::feed::FeedScope;
    // Let the last batches be published (a group's flush comes before its tokens), then stop
    // the follower, which reads to the end once stopped (`follow_feed`).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reader = store.read();
    let (stored, _) = reader
        .activity_after(FeedScope::Project(project), 0, u64::MAX, usize::MAX)
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let seen = follower.await.unwrap();
    let q = Query::new(
        store.clone(),
        Arc::new(vk_observer_telemetry::health::Health::new()),
    );
    let req = vk_observer_query::activity::ActivityRequest::new(
        vk_observer_query::activity::ActivityScope::Project(project),
        Some(format!("{}.0", q.store.epoch())),
        None,
        Some(200),
        Some(Detail::Compact),
    )
    .unwrap();
    let mut all: FeedSeen = Vec::new();
    let mut page = q.activity(&req).unwrap();
    loop {
        all.extend(
            page.items
                .iter()
                .map(|i| item_ident(&serde_json::to_value(i).unwrap())),
        );
        if !page.has_more {
            break;
        }
        let next = vk_observer_query::activity::ActivityRequest::new(
            vk_observer_query::activity::ActivityScope::Project(project),
            Some(page.next_since_token.clone()),
            None,
            Some(200),
            Some(Detail::Compact),
        )
        .unwrap();
        page = q.activity(&next).unwrap();
    }
    assert_eq!(
        all.len(),
        stored.len(),
        "seed {seed}: paged feed != stored feed"
    );
    // A follower of a fleet node over MCP holds no local tokens: compare kinds and ids.
    let (seen, all) = if seen.iter().any(|i| i.0 == 0) {
        let strip =
            |v: FeedSeen| -> FeedSeen { v.into_iter().map(|i| (0, i.1, i.2, i.3, i.4)).collect() };
        (strip(seen), strip(all))
    } else {
        (seen, all)
    };
    assert_eq!(
        seen, all,
        "seed {seed}: the follower's feed has a gap or a duplicate"
    );
    assert!(
        stored
            .windows(2)
            .all(|w| (w[0].token, w[0].seq) < (w[1].token, w[1].seq)),
        "seed {seed}: feed out of commit order"
    );
    let truth = sim.truth();
    let count = |kind: &str, field: usize, id: &str| {
        all.iter()
            .filter(|i| {
                i.1 == kind
                    && match field {
                        2 => i.2 == id,
                        3 => i.3 == id,
                        _ => i.4 == id,
                    }
            })
            .count()
    };
    for t in truth.tasks.keys() {
        assert_eq!(
            count("task_created", 2, &t.to_string()),
            1,
            "seed {seed}: task {t}"
        );
        assert_eq!(
            count("task_deleted", 2, &t.to_string()),
            0,
            "seed {seed}: task {t}"
        );
    }
    for (pid, p) in &truth.processes {
        let id = pid.to_string();
        assert_eq!(
            count("process_started", 4, &id),
            1,
            "seed {seed}: process {pid} started"
        );
        let ended = p["status"] != "running";
        assert_eq!(
            count("process_ended", 4, &id),
            usize::from(ended),
            "seed {seed}: process {pid} ({}) ended",
            p["status"]
        );
    }
    for a in truth.attempts.keys() {
        let n = count("attempt_started", 3, &a.to_string());
        assert_eq!(n, 1, "seed {seed}: attempt {a} started {n} times");
    }
}
