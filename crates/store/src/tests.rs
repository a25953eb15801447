//! The store's own promises (ARCHITECTURE.md, Invariants), proved on the real [`Writer`] and
//! [`Store`] over a sled dir rather than through ingest: a batch that changes nothing consumes
//! no token, snapshots remove what their scope no longer holds down the cascade, the token
//! reservation survives a reopen even when the last batches were lost, and a replaced log entry
//! is found by "replaced since" from the token that replaced it on.
//!
//! Everything above the store (resyncs, reconnects, replays) is safe only because these hold,
//! so they are checked here where a regression would first appear.

use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use uuid::Uuid;

use super::events::{Channel, DomainEvent};
use super::keys::{self, meta};
use super::writer::{Applied, Writer};
use super::{Retention, Store, StoreOwner};

const PROJECT: Uuid = Uuid::from_u128(0x9000);

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn task(t: Uuid, title: &str) -> Value {
    json!({ "id": t, "project_id": PROJECT, "title": title, "status": "todo" })
}

fn attempt(a: Uuid, t: Uuid) -> Value {
    json!({ "id": a, "task_id": t, "branch": format!("vk/{a}") })
}

fn child(x: Uuid, parent_field: &str, parent: Uuid) -> Value {
    json!({ "id": x, parent_field: parent, "status": "running" })
}

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_string()).expect("valid json")
}

fn logs(a: Uuid, p: Uuid, entries: &[(u64, &str)]) -> DomainEvent {
    DomainEvent::LogEntriesPut {
        attempt_id: a,
        process_id: p,
        channel: Channel::Normalized,
        entries: entries.iter().map(|(i, s)| (*i, raw(s))).collect(),
    }
}

fn apply(w: &mut Writer, events: Vec<DomainEvent>) -> Applied {
    w.apply(events).expect("batch applies")
}

fn temporary() -> (Store, Writer) {
    let mut owner = StoreOwner::open_temporary(Retention::default()).expect("store opens");
    let writer = owner.take_writer().expect("the one writer");
    (owner.store(), writer)
}

#[test]
fn an_identical_upsert_consumes_no_token() {
    let (store, mut w) = temporary();
    let (t, a, p) = (id(1), id(2), id(3));
    let first = apply(
        &mut w,
        vec![DomainEvent::TaskUpserted { task: task(t, "x") }],
    );
    assert_eq!(first.token, Some(1));

    // The same task again, once as the same value and once parsed from text whose keys come in
    // another order: VK re-sends objects on every snapshot and never promises a key order.
    let reordered: Value = serde_json::from_str(&format!(
        r#"{{"status":"todo","title":"x","project_id":"{PROJECT}","id":"{t}"}}"#
    ))
    .unwrap();
    for again in [task(t, "x"), reordered] {
        let r = apply(&mut w, vec![DomainEvent::TaskUpserted { task: again }]);
        assert_eq!(r, Applied::default(), "an identical upsert moved something");
    }
    assert_eq!(store.current_token(), 1);
    assert_eq!(store.read().task(t).unwrap().unwrap().token, 1);

    // Log entries are kept as VK's raw bytes, so reordered keys are a real byte difference that
    // must still count as the same entry.
    let put = apply(&mut w, vec![logs(a, p, &[(0, r#"{"a":1,"b":[1,2]}"#)])]);
    assert_eq!(put.token, Some(2));
    let resent = apply(&mut w, vec![logs(a, p, &[(0, r#"{ "b":[1,2], "a":1 }"#)])]);
    assert_eq!(resent, Applied::default());

    // A real difference does consume a token: the comparison is not simply "always equal".
    let changed = apply(
        &mut w,
        vec![DomainEvent::TaskUpserted { task: task(t, "y") }],
    );
    assert_eq!(changed.token, Some(3));
    assert_eq!(store.current_token(), 3);
}

/// One task with an attempt, a session, a process and three log entries, under `PROJECT`.
fn tree_of(t: Uuid, a: Uuid, s: Uuid, p: Uuid) -> Vec<DomainEvent> {
    vec![
        DomainEvent::AttemptsSnapshot {
            task_id: t,
            attempts: vec![attempt(a, t)],
        },
        DomainEvent::SessionsSnapshot {
            attempt_id: a,
            sessions: vec![child(s, "workspace_id", a)],
        },
        DomainEvent::ProcessesSnapshot {
            attempt_id: a,
            processes: vec![child(p, "session_id", s)],
        },
        logs(a, p, &[(0, r#""one""#), (1, r#""two""#), (2, r#""three""#)]),
    ]
}

#[test]
fn a_snapshot_removes_what_its_scope_no_longer_holds_down_the_cascade() {
    let (store, mut w) = temporary();
    let (t1, a1, s1, p1) = (id(10), id(11), id(12), id(13));
    let (t2, a2, s2, p2) = (id(20), id(21), id(22), id(23));
    let both = || DomainEvent::TasksSnapshot {
        project_id: PROJECT,
        tasks: vec![task(t1, "one"), task(t2, "two")],
    };
    let mut setup = vec![both()];
    setup.extend(tree_of(t1, a1, s1, p1));
    setup.extend(tree_of(t2, a2, s2, p2));
    assert_eq!(apply(&mut w, setup).token, Some(1));
    // Replaying the same snapshot (a resync finding nothing new) moves nothing.
    assert_eq!(apply(&mut w, vec![both()]), Applied::default());

    let only_t2 = || DomainEvent::TasksSnapshot {
        project_id: PROJECT,
        tasks: vec![task(t2, "two")],
    };
    let r = apply(&mut w, vec![only_t2()]);
    assert_eq!(r.token, Some(2));
    assert_eq!(
        r.attempts,
        vec![a1],
        "only the removed attempt's token moves"
    );

    let read = store.read();
    assert!(read.task(t1).unwrap().is_none());
    assert!(read.attempt(a1).unwrap().is_none());
    assert!(read.attempts_of_task(t1).unwrap().is_empty());
    assert!(read.session(s1).unwrap().is_none());
    assert!(read.process(p1).unwrap().is_none());
    assert_eq!(read.attempt_of_process(p1).unwrap(), None);
    assert_eq!(read.log_count(p1, Channel::Normalized), 0);
    // The removed attempt keeps its token as a tombstone so a waiter on it wakes.
    assert_eq!(read.attempt_token(a1).unwrap(), 2);

    // What the snapshot still holds is untouched, tokens included.
    assert_eq!(read.task(t2).unwrap().unwrap().token, 1);
    assert_eq!(read.attempt(a2).unwrap().unwrap().token, 1);
    assert_eq!(read.session(s2).unwrap().unwrap().token, 1);
    assert_eq!(read.attempt_token(a2).unwrap(), 1);
    assert_eq!(read.log_count(p2, Channel::Normalized), 3);
    assert_eq!(apply(&mut w, vec![only_t2()]), Applied::default());

    // A process snapshot without p2 takes its log entries with it, and moves only a2.
    let r = apply(
        &mut w,
        vec![DomainEvent::ProcessesSnapshot {
            attempt_id: a2,
            processes: vec![],
        }],
    );
    assert_eq!((r.token, r.attempts), (Some(3), vec![a2]));
    let read = store.read();
    assert!(read.process(p2).unwrap().is_none());
    assert_eq!(read.log_count(p2, Channel::Normalized), 0);
    assert_eq!(read.log_bounds(p2, Channel::Normalized).unwrap(), None);
    assert_eq!(read.session(s2).unwrap().unwrap().token, 1);
    assert_eq!(read.task(t2).unwrap().unwrap().token, 1);
    assert_eq!(read.attempt_token(a2).unwrap(), 3);
    assert_eq!(store.current_token(), 3);
}

/// Open the store in `dir`, publish `batches` new tasks one batch each, and return the tokens
/// they got. The store and writer are dropped on return, releasing sled's lock.
fn publish(dir: &std::path::Path, first_task: u128, batches: u128) -> Vec<u64> {
    let mut owner = StoreOwner::open(dir, Retention::default()).expect("store opens");
    let mut w = owner.take_writer().expect("the one writer");
    (first_task..first_task + batches)
        .map(|n| {
            let r = apply(
                &mut w,
                vec![DomainEvent::TaskUpserted {
                    task: task(id(n), "t"),
                }],
            );
            r.token.expect("a new task consumes a token")
        })
        .collect()
}

/// Simulate a crash that lost the last committed batches: the persisted token falls back to
/// `to`, while the reservation (flushed before any token above it was published) survives.
fn lose_batches_after(dir: &std::path::Path, to: u64) {
    let owner = StoreOwner::open(dir, Retention::default()).expect("store opens");
    owner
        .store()
        .tree()
        .insert(keys::meta_key(meta::TOKEN), to.to_be_bytes().to_vec())
        .unwrap();
    owner.flush().unwrap();
}

#[test]
fn the_token_reservation_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = publish(dir.path(), 100, 3);
    assert_eq!(seen, vec![1, 2, 3]);

    // Clean reopen: the store continues above everything published before.
    let store = StoreOwner::open(dir.path(), Retention::default())
        .unwrap()
        .store();
    assert!(store.current_token() >= 3);
    assert!(store.reserved_token() > 3, "a reservation was flushed");
    drop(store);
    seen.extend(publish(dir.path(), 200, 2));

    // Crash that lost the batches behind tokens 2..: clients may have seen them, so the next
    // run must not hand them out again.
    let published = *seen.last().unwrap();
    lose_batches_after(dir.path(), 1);
    let store = StoreOwner::open(dir.path(), Retention::default())
        .unwrap()
        .store();
    assert!(
        store.current_token() >= published,
        "reopened at {} below the published {published}",
        store.current_token()
    );
    drop(store);
    seen.extend(publish(dir.path(), 300, 2));

    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "tokens across reopens must strictly increase: {seen:?}"
    );
}

#[test]
fn a_replaced_log_entry_is_found_by_replaced_since() {
    let (store, mut w) = temporary();
    let (a, p, ch) = (id(1), id(2), Channel::Normalized);
    let put = apply(
        &mut w,
        vec![logs(a, p, &[(0, "0"), (1, r#""old""#), (2, "2")])],
    );
    assert_eq!(put.token, Some(1));
    assert!(
        store.read().replaced_since(p, ch, 0).unwrap().is_empty(),
        "appends are not replacements"
    );

    let replace = apply(&mut w, vec![logs(a, p, &[(1, r#""new""#)])]);
    assert_eq!(replace.token, Some(2));
    let read = store.read();
    assert_eq!(read.replaced_since(p, ch, 0).unwrap(), vec![(1, false)]);
    assert_eq!(read.replaced_since(p, ch, 1).unwrap(), vec![(1, false)]);
    assert!(
        read.replaced_since(p, ch, 2).unwrap().is_empty(),
        "a client at the replacing token has already seen it"
    );
    let entry = read.log_entry(p, ch, 1).unwrap().unwrap();
    assert_eq!((entry.token, entry.entry.get()), (2, r#""new""#));
    assert!(read.replaced_since(p, Channel::Raw, 0).unwrap().is_empty());

    // Re-sending the new content replaces nothing; replacing again is found from token 2 on.
    assert_eq!(
        apply(&mut w, vec![logs(a, p, &[(1, r#""new""#)])]),
        Applied::default()
    );
    assert_eq!(
        apply(&mut w, vec![logs(a, p, &[(1, r#""newer""#)])]).token,
        Some(3)
    );
    assert_eq!(
        store.read().replaced_since(p, ch, 2).unwrap(),
        vec![(1, false)]
    );
    assert!(store.read().replaced_since(p, ch, 3).unwrap().is_empty());
}

/// A tool call that only got its outcome is marked as kept; once any replacement since the
/// client's token changed the call itself, the mark is gone for that client.
#[test]
fn replaced_since_says_whether_the_tool_call_was_kept() {
    let (store, mut w) = temporary();
    let (a, p, ch) = (id(1), id(2), Channel::Normalized);
    let call = |cmd: &str, status: &str| {
        serde_json::json!({"type": "NORMALIZED_ENTRY", "content": {"entry_type": {
            "type": "tool_use", "tool_name": "Bash", "action_type": {"action": "command_run",
            "command": cmd}, "status": {"status": status}}, "content": cmd}})
        .to_string()
    };
    apply(&mut w, vec![logs(a, p, &[(0, &call("ls", "created"))])]);
    apply(&mut w, vec![logs(a, p, &[(0, &call("ls", "success"))])]);
    assert_eq!(
        store.read().replaced_since(p, ch, 1).unwrap(),
        vec![(0, true)]
    );
    apply(&mut w, vec![logs(a, p, &[(0, &call("ls -la", "success"))])]);
    let read = store.read();
    assert_eq!(read.replaced_since(p, ch, 1).unwrap(), vec![(0, false)]);
    assert_eq!(read.replaced_since(p, ch, 2).unwrap(), vec![(0, false)]);
    apply(&mut w, vec![logs(a, p, &[(0, &call("ls -la", "failed"))])]);
    assert_eq!(
        store.read().replaced_since(p, ch, 3).unwrap(),
        vec![(0, true)]
    );
    assert_eq!(
        store.read().replaced_since(p, ch, 1).unwrap(),
        vec![(0, false)]
    );
}

/// VK's `history_truncated` is kept only when the cache really misses something below VK's
/// oldest entry; a log the daemon streamed from entry 0 stays whole. Removing the process
/// removes the mark with its entries.
#[test]
fn a_history_loss_is_recorded_only_for_entries_the_cache_lacks() {
    let (store, mut w) = temporary();
    let (a, whole, holed, ch) = (id(1), id(2), id(3), Channel::Normalized);
    let lost = |p: Uuid, oldest_available: u64| DomainEvent::LogHistoryLost {
        attempt_id: a,
        process_id: p,
        channel: ch,
        oldest_available,
    };
    let streamed = apply(
        &mut w,
        vec![
            logs(a, whole, &[(0, "0"), (1, "1"), (2, "2")]),
            lost(whole, 2),
        ],
    );
    assert_eq!(streamed.token, Some(1), "only the entries moved the token");
    assert!(!store.read().log_history_lost(whole, ch).unwrap());

    let paged = apply(
        &mut w,
        vec![logs(a, holed, &[(4, "4"), (5, "5")]), lost(holed, 4)],
    );
    assert_eq!(paged.token, Some(2));
    let read = store.read();
    assert!(read.log_history_lost(holed, ch).unwrap());
    assert!(!read.log_history_lost(holed, Channel::Raw).unwrap());
    assert_eq!(
        apply(&mut w, vec![lost(holed, 4)]),
        Applied::default(),
        "a repeated loss changes nothing"
    );

    apply(
        &mut w,
        vec![DomainEvent::ProcessRemoved {
            attempt_id: a,
            process_id: holed,
        }],
    );
    assert!(!store.read().log_history_lost(holed, ch).unwrap());
}

/// One step of the property below, over a handful of tasks and log indices so that sequences
/// often revisit the same ids (the interesting case for "identical changes nothing").
#[derive(Debug, Clone)]
enum Op {
    Upsert(u8, u8),
    Remove(u8),
    /// Every task of the project: (task, title) for each bit set in the mask.
    Snapshot(u8, u8),
    Log(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u8, 0..3u8).prop_map(|(t, v)| Op::Upsert(t, v)),
        (0..4u8).prop_map(Op::Remove),
        (0..16u8, 0..3u8).prop_map(|(m, v)| Op::Snapshot(m, v)),
        (0..6u8, 0..3u8).prop_map(|(i, v)| Op::Log(i, v)),
    ]
}

/// What the store should hold after the ops so far: task titles and log entries.
#[derive(Default, Clone, PartialEq, Debug)]
struct Model {
    tasks: std::collections::BTreeMap<u8, u8>,
    logs: std::collections::BTreeMap<u8, u8>,
}

impl Model {
    fn events(&mut self, op: &Op) -> Vec<DomainEvent> {
        let title = |v: u8| format!("title {v}");
        let tid = |t: u8| id(1000 + t as u128);
        match *op {
            Op::Upsert(t, v) => {
                self.tasks.insert(t, v);
                vec![DomainEvent::TaskUpserted {
                    task: task(tid(t), &title(v)),
                }]
            }
            Op::Remove(t) => {
                self.tasks.remove(&t);
                vec![DomainEvent::TaskRemoved { task_id: tid(t) }]
            }
            Op::Snapshot(mask, v) => {
                self.tasks = (0..4u8)
                    .filter(|t| mask & (1 << t) != 0)
                    .map(|t| (t, v))
                    .collect();
                let tasks = self
                    .tasks
                    .keys()
                    .map(|&t| task(tid(t), &title(v)))
                    .collect();
                vec![DomainEvent::TasksSnapshot {
                    project_id: PROJECT,
                    tasks,
                }]
            }
            Op::Log(i, v) => {
                self.logs.insert(i, v);
                vec![logs(id(1), id(2), &[(i as u64, &format!("[{v}]"))])]
            }
        }
    }

    fn matches(&self, store: &Store) -> bool {
        let read = store.read();
        let tasks: std::collections::BTreeMap<u8, u8> = read
            .tasks_of_project(PROJECT)
            .unwrap()
            .into_iter()
            .map(|s| {
                let t = (s.id.as_u128() - 1000) as u8;
                let title = s.value["title"].as_str().unwrap();
                (t, title.trim_start_matches("title ").parse().unwrap())
            })
            .collect();
        let logs: std::collections::BTreeMap<u8, u8> = read
            .log_range(id(2), Channel::Normalized, 0, u64::MAX, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|e| {
                (
                    e.index as u8,
                    serde_json::from_str::<[u8; 1]>(e.entry.get()).unwrap()[0],
                )
            })
            .collect();
        tasks == self.tasks && logs == self.logs
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any sequence of upserts, removals, snapshots and log writes: a token is consumed exactly
    /// when the state really changed, tokens only go up, re-applying a batch at once consumes
    /// nothing, and the store always holds what the ops describe.
    #[test]
    fn tokens_move_exactly_on_real_changes(ops in proptest::collection::vec(op(), 1..40)) {
        let (store, mut w) = temporary();
        let mut model = Model::default();
        let mut last = store.current_token();
        for op in &ops {
            let before = model.clone();
            let events = model.events(op);
            let r = apply(&mut w, events.clone());
            prop_assert_eq!(r.token.is_some(), model != before, "{:?}", op);
            if let Some(t) = r.token {
                prop_assert!(t > last, "token {} after {}", t, last);
                last = t;
            }
            prop_assert_eq!(store.current_token(), last);
            prop_assert_eq!(apply(&mut w, events), Applied::default(), "re-applied {:?}", op);
            prop_assert!(model.matches(&store), "store differs from the model after {:?}", op);
        }
    }
}

/// VK's branch status of an attempt: a re-read that finds the same status moves no token but
/// renews its read time; a different status moves the global and the attempt token.
#[test]
fn branch_status_moves_tokens_only_when_it_differs_and_always_renews_its_read_time() {
    let (store, mut w) = temporary();
    let (t, a) = (id(1), id(2));
    apply(
        &mut w,
        vec![
            DomainEvent::TaskUpserted { task: task(t, "T") },
            DomainEvent::AttemptsSnapshot {
                task_id: t,
                attempts: vec![attempt(a, t)],
            },
        ],
    );
    let read = |ahead: u64, at: i64| DomainEvent::BranchStatusRead {
        attempt_id: a,
        repos: vec![json!({"repo_id": id(3), "commits_ahead": ahead, "commits_behind": 0})],
        read_at_ms: at,
    };
    let first = apply(&mut w, vec![read(1, 1_000)]);
    assert!(first.token.is_some());
    assert_eq!(first.attempts, vec![a]);
    let same = apply(&mut w, vec![read(1, 2_000)]);
    assert_eq!(
        same,
        Applied::default(),
        "an identical status moves nothing"
    );
    let (stored, read_at) = store.read().branch_status(a).unwrap().unwrap();
    assert_eq!(read_at, 2_000, "the read time is renewed anyway");
    assert_eq!(stored.token, first.token.unwrap());
    let moved = apply(&mut w, vec![read(2, 3_000)]);
    assert!(moved.token > first.token);
    assert_eq!(store.read().attempt_token(a).unwrap(), moved.token.unwrap());
    // The attempt's removal takes its branch status along.
    apply(
        &mut w,
        vec![DomainEvent::AttemptsSnapshot {
            task_id: t,
            attempts: vec![],
        }],
    );
    assert!(store.read().branch_status(a).unwrap().is_none());
}

/// An attempt removed alone (its task stays) still wakes its project's waits: the writer finds
/// the project from the rows as they were before the batch removed the attempt.
#[test]
fn removing_an_attempt_wakes_its_project() {
    let (store, mut w) = temporary();
    let (t, a, s, p) = (id(30), id(31), id(32), id(33));
    let mut setup = vec![DomainEvent::TasksSnapshot {
        project_id: PROJECT,
        tasks: vec![task(t, "kept")],
    }];
    setup.extend(tree_of(t, a, s, p));
    apply(&mut w, setup);
    let mut project = store.hub().subscribe_project(PROJECT);
    project.mark_unchanged();
    let gone = apply(
        &mut w,
        vec![DomainEvent::AttemptsSnapshot {
            task_id: t,
            attempts: vec![],
        }],
    );
    assert_eq!(gone.attempts, vec![a]);
    assert!(
        project.has_changed().expect("the hub keeps the channel"),
        "the project's channel fired"
    );
    assert_eq!(*project.borrow(), gone.token.expect("a change"));
}
