//! The list indexes' promise on the real [`Writer`]: for any sequence of task, attempt, project
//! and removal batches, with restarts of the store in between and a migration from a store
//! written before the indexes (schema 1), before their counts (schema 2) or before the task
//! digests (schema 3), every index read agrees with a full scan of the rows: the same
//! tasks per project and status in newest-first order (also walked in pages of any size), the
//! same tasks updated since any time, the same attempts per task; and every task's kept digest
//! (`task_digest`) equals the one computed from its rows, the digest pages walk the same tasks.

use proptest::prelude::*;
use serde_json::{Value, json};
use uuid::Uuid;

use super::events::DomainEvent;
use super::keys::{meta, meta_key};
use super::list_index::{self, After, STATUSES, newest_first_rank};
use super::reader::{StoreReader, Stored};
use super::task_digest::{self, TASK_DIGESTS};
use super::{Retention, StoreOwner};

const PROJECTS: [Uuid; 2] = [Uuid::from_u128(0xA1), Uuid::from_u128(0xA2)];

fn task_id(n: u8) -> Uuid {
    Uuid::from_u128(0x1000 + n as u128)
}

fn attempt_id(n: u8) -> Uuid {
    Uuid::from_u128(0x2000 + n as u128)
}

/// One of a few times (so ties happen), or none.
fn time(t: Option<u8>) -> Value {
    t.map_or(Value::Null, |t| {
        json!(format!("2026-01-01T00:00:{:02}.000000Z", t % 60))
    })
}

#[derive(Debug, Clone)]
enum Op {
    Task {
        n: u8,
        status: u8,
        created: Option<u8>,
        updated: Option<u8>,
    },
    Remove {
        n: u8,
    },
    TasksSnapshot {
        project: usize,
        keep: Vec<u8>,
    },
    Attempts {
        n: u8,
        attempts: Vec<(u8, Option<u8>)>,
    },
    DropProject {
        project: usize,
    },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let t = proptest::option::of(0u8..6);
    prop_oneof![
        4 => (0u8..8, 0u8..6, t.clone(), t.clone()).prop_map(|(n, status, created, updated)| Op::Task { n, status, created, updated }),
        1 => (0u8..8).prop_map(|n| Op::Remove { n }),
        1 => (0usize..2, proptest::collection::vec(0u8..8, 0..5)).prop_map(|(project, keep)| Op::TasksSnapshot { project, keep }),
        3 => (0u8..8, proptest::collection::vec((0u8..10, t), 0..4)).prop_map(|(n, attempts)| Op::Attempts { n, attempts }),
        1 => (0usize..2).prop_map(|project| Op::DropProject { project }),
        1 => Just(Op::Restart),
    ]
}

fn task_json(n: u8, status: u8, created: Option<u8>, updated: Option<u8>) -> Value {
    let status = STATUSES.get(status as usize).copied().unwrap_or("archived");
    json!({"id": task_id(n), "project_id": PROJECTS[n as usize % 2], "title": format!("t{n}"),
           "status": status, "created_at": time(created), "updated_at": time(updated)})
}

/// The batch of an op; a task snapshot re-sends the kept tasks as they are stored.
fn events(op: &Op, reader: &StoreReader) -> Vec<DomainEvent> {
    match op {
        Op::Task {
            n,
            status,
            created,
            updated,
        } => vec![DomainEvent::TaskUpserted {
            task: task_json(*n, *status, *created, *updated),
        }],
        Op::Remove { n } => vec![DomainEvent::TaskRemoved {
            task_id: task_id(*n),
        }],
        Op::TasksSnapshot { project, keep } => {
            let tasks = keep
                .iter()
                .filter(|n| **n as usize % 2 == *project)
                .filter_map(|n| reader.task(task_id(*n)).ok().flatten())
                .map(|t| t.value)
                .collect();
            vec![DomainEvent::TasksSnapshot {
                project_id: PROJECTS[*project],
                tasks,
            }]
        }
        Op::Attempts { n, attempts } => {
            // An attempt id belongs to one task only (VK never moves a workspace).
            let attempts = attempts
                .iter()
                .filter(|(a, _)| a % 8 == *n)
                .map(|(a, c)| json!({"id": attempt_id(*a), "task_id": task_id(*n), "created_at": time(*c)}))
                .collect();
            vec![DomainEvent::AttemptsSnapshot {
                task_id: task_id(*n),
                attempts,
            }]
        }
        Op::DropProject { project } => {
            let projects = PROJECTS
                .iter()
                .enumerate()
                .filter(|(i, _)| i != project)
                .map(|(_, p)| json!({"id": p, "name": "p"}))
                .collect();
            vec![DomainEvent::ProjectsSnapshot { projects }]
        }
        Op::Restart => Vec::new(),
    }
}

fn rank(s: &Stored) -> (i64, Uuid) {
    let created = vk_observer_vk::ts_of(&s.value, "created_at").map(|t| t.timestamp_micros());
    (newest_first_rank(created), s.id)
}

fn newest_first(mut rows: Vec<Stored>) -> Vec<Uuid> {
    rows.sort_by_key(rank);
    rows.iter().map(|s| s.id).collect()
}

/// Every page of an index walk of `limit` items, concatenated; checks `total` and `has_more`.
fn walk(read: impl Fn(After) -> list_index::IndexPage, limit: usize) -> Vec<Uuid> {
    let (mut out, mut after) = (Vec::new(), None);
    loop {
        let page = read(after);
        assert!(page.items.len() <= limit);
        out.extend(page.items.iter().map(|s| s.id));
        assert!(out.len() <= page.total);
        match page.items.last() {
            Some(last) if page.has_more => after = Some(rank(last)),
            _ => {
                assert_eq!(out.len(), page.total, "the walk ended early");
                return out;
            }
        }
    }
}

fn check(r: &StoreReader, limit: usize) -> Result<(), TestCaseError> {
    for project in PROJECTS {
        let all = r.tasks_of_project(project).unwrap();
        let by_index = walk(
            |a| r.tasks_newest_first(project, None, a, limit).unwrap(),
            limit,
        );
        prop_assert_eq!(&by_index, &newest_first(all.clone()), "all tasks");
        for status in STATUSES {
            let scan: Vec<Stored> = all
                .iter()
                .filter(|t| vk_observer_vk::str_of(&t.value, "status") == Some(status))
                .cloned()
                .collect();
            let by_index = walk(
                |a| {
                    r.tasks_newest_first(project, Some(status), a, limit)
                        .unwrap()
                },
                limit,
            );
            prop_assert_eq!(by_index, newest_first(scan), "status {}", status);
        }
        for since in (0..7).map(|t| time(Some(t))) {
            let since = since
                .as_str()
                .unwrap()
                .parse::<chrono::DateTime<chrono::Utc>>()
                .unwrap();
            let mut scan: Vec<Uuid> = all
                .iter()
                .filter(|t| {
                    vk_observer_vk::ts_of(&t.value, "updated_at").is_some_and(|u| u >= since)
                })
                .map(|t| t.id)
                .collect();
            let mut by_index: Vec<Uuid> = r
                .tasks_updated_since(project, since.timestamp_micros())
                .unwrap()
                .iter()
                .map(|t| t.id)
                .collect();
            scan.sort();
            by_index.sort();
            prop_assert_eq!(by_index, scan, "updated since {}", since);
        }
    }
    check_digests(r, limit)?;
    for n in 0..8 {
        let scan = newest_first(r.attempts_of_task(task_id(n)).unwrap());
        let by_index = walk(
            |a| r.attempts_newest_first(task_id(n), a, limit).unwrap(),
            limit,
        );
        prop_assert_eq!(by_index, scan, "attempts of task {}", n);
    }
    Ok(())
}

/// Every task's kept digest is the one computed from its rows (none for a task not stored), and
/// the digest pages of each project and status list the index's tasks.
fn check_digests(r: &StoreReader, limit: usize) -> Result<(), TestCaseError> {
    for n in 0..8 {
        let kept = r.task_digest(task_id(n)).unwrap();
        let computed = task_digest::digest_of(r, task_id(n)).unwrap();
        prop_assert_eq!(kept, computed, "digest of task {}", n);
    }
    for project in PROJECTS {
        for status in STATUSES.iter().map(Some).chain([None]) {
            let (mut digests, mut after) = (Vec::new(), None);
            loop {
                let page = r
                    .task_digests_newest_first(project, status.copied(), after, limit)
                    .unwrap();
                digests.extend(page.items.iter().map(|(id, _)| *id));
                match page.items.last() {
                    Some((id, d)) if page.has_more => {
                        after = Some((newest_first_rank(d.created_micros), *id));
                    }
                    _ => break,
                }
            }
            let by_index = walk(
                |a| {
                    r.tasks_newest_first(project, status.copied(), a, limit)
                        .unwrap()
                },
                limit,
            );
            prop_assert_eq!(digests, by_index, "digest pages of {:?}", status);
        }
    }
    Ok(())
}

/// Rewrites the store as older builds left it: schema 1 (no index entries), or schema 2 (the
/// indexes without their counts), or schema 3 (no task digests).
fn downgrade(dir: &std::path::Path, version: u32) {
    // The dropped store's flusher thread may hold the lock for a moment. sled must be opened
    // with the compression the store was created with (`disk_format`: the default here).
    let config = sled::Config::new()
        .path(dir)
        .use_compression(super::StoreSettings::default().page_compression);
    let db = (0..200)
        .find_map(|_| {
            config
                .open()
                .inspect_err(|_| std::thread::sleep(std::time::Duration::from_millis(20)))
                .ok()
        })
        .expect("the data dir opens");
    let tree = db.open_tree("projections").unwrap();
    let dropped: Vec<u8> = match version {
        1 => [&list_index::TABLES[..], &[TASK_DIGESTS]].concat(),
        2 => vec![list_index::INDEX_COUNTS, TASK_DIGESTS],
        _ => vec![TASK_DIGESTS],
    };
    for t in dropped {
        for k in tree.scan_prefix([t]).keys() {
            tree.remove(k.unwrap()).unwrap();
        }
    }
    tree.insert(meta_key(meta::SCHEMA), version.to_be_bytes().to_vec())
        .unwrap();
    db.flush().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn indexes_agree_with_a_full_scan(
        ops in proptest::collection::vec(op(), 1..25),
        limit in 1usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let open = || StoreOwner::open(dir.path(), Retention::default()).unwrap();
        let mut owner = open();
        let mut w = owner.take_writer().unwrap();
        w.apply(events(&Op::DropProject { project: 9 }, &owner.store().read())).unwrap();
        for op in &ops {
            if let Op::Restart = op {
                drop(w);
                drop(owner);
                owner = open();
                w = owner.take_writer().unwrap();
            } else {
                w.apply(events(op, &owner.store().read())).unwrap();
            }
            check(&owner.store().read(), limit)?;
        }
        for version in [3, 2, 1] {
            drop(w);
            drop(owner);
            downgrade(dir.path(), version);
            owner = open();
            w = owner.take_writer().unwrap();
            check(&owner.store().read(), limit)?;
        }
    }
}
