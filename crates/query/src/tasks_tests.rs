//! `list_tasks` read from the store's list indexes answers what a full scan would: for any set
//! of tasks and every combination of `status`, `q` and `updated_since`, a walk in pages of any
//! size returns exactly the matching tasks, newest created first (id ascending on ties), once
//! each, with the right `total`.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::Query;
use crate::paging::PageArgs;
use crate::tasks::{TaskFilter, TaskStatus};
use vk_observer_store::StoreOwner;
use vk_observer_store::events::DomainEvent;
use vk_observer_telemetry::health::Health;

const PROJECT: Uuid = Uuid::from_u128(0xB0A4D);
const STATUSES: [TaskStatus; 3] = [TaskStatus::Todo, TaskStatus::Done, TaskStatus::Inreview];

fn time(t: Option<u8>) -> Value {
    t.map_or(Value::Null, |t| {
        json!(format!("2026-02-01T00:00:{:02}Z", t))
    })
}

fn task(
    n: usize,
    (status, created, updated, title): &(usize, Option<u8>, Option<u8>, bool),
) -> Value {
    json!({"id": Uuid::from_u128(0x100 + n as u128), "project_id": PROJECT,
           "title": if *title { "Fix the Parser" } else { "other" }, "description": null,
           "status": STATUSES[*status].as_str(), "created_at": time(*created),
           "updated_at": time(*updated)})
}

/// What a scan answers: the matching tasks, newest created first, id ascending on ties.
fn expected(tasks: &[Value], f: &TaskFilter) -> Vec<Uuid> {
    let ts = |v: &Value, k: &str| v[k].as_str().and_then(|s| s.parse::<DateTime<Utc>>().ok());
    let mut hits: Vec<&Value> = tasks
        .iter()
        .filter(|t| f.status.is_none_or(|s| t["status"] == s.as_str()))
        .filter(|t| f.q.is_none() || t["title"] == "Fix the Parser")
        .filter(|t| {
            f.updated_since
                .is_none_or(|s| ts(t, "updated_at").is_some_and(|u| u >= s))
        })
        .collect();
    hits.sort_by_key(|t| {
        let rank = ts(t, "created_at").map_or(i64::MAX, |c| -c.timestamp_micros());
        (rank, t["id"].as_str().unwrap_or_default().to_string())
    });
    hits.iter()
        .filter_map(|t| t["id"].as_str()?.parse().ok())
        .collect()
}

fn walk(q: &Query, f: &TaskFilter, limit: usize) -> (Vec<Uuid>, usize) {
    let (mut ids, mut cursor) = (Vec::new(), None);
    loop {
        let page = q
            .list_tasks(PROJECT, f, &PageArgs { cursor, limit })
            .unwrap();
        assert!(page.count <= limit);
        assert_eq!(page.has_more, page.next_cursor.is_some());
        ids.extend(page.tasks.iter().map(|t| t.task_id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return (ids, page.total),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn indexed_list_tasks_answers_what_a_scan_would(
        rows in proptest::collection::vec(
            (0usize..3, proptest::option::of(0u8..5), proptest::option::of(0u8..5), any::<bool>()),
            0..12,
        ),
        limit in 1usize..4,
    ) {
        let mut owner = StoreOwner::open_temporary(Default::default()).unwrap();
        let mut w = owner.take_writer().unwrap();
        let tasks: Vec<Value> = rows.iter().enumerate().map(|(n, r)| task(n, r)).collect();
        w.apply(vec![
            DomainEvent::ProjectsSnapshot { projects: vec![json!({"id": PROJECT, "name": "p"})] },
            DomainEvent::TasksSnapshot { project_id: PROJECT, tasks: tasks.clone() },
        ]).unwrap();
        let q = Query::new(owner.store(), Arc::new(Health::new()));
        let since = time(Some(2)).as_str().and_then(|s| s.parse().ok());
        for status in [None, Some(TaskStatus::Todo), Some(TaskStatus::Done)] {
            for text in [None, Some("parser".to_string())] {
                for updated_since in [None, since] {
                    let f = TaskFilter { only: None, status, q: text.clone(), updated_since };
                    let want = expected(&tasks, &f);
                    let (got, total) = walk(&q, &f, limit);
                    prop_assert_eq!(&got, &want, "{:?}", f);
                    prop_assert_eq!(total, want.len(), "{:?}", f);
                }
            }
        }
    }
}
