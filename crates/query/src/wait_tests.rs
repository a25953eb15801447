//! `wait_for_attempt_change` with `until` holds an answer for a finished run whose log is still
//! being read (VK reports a run's end and streams its last lines apart): the answer comes when the
//! log is read to its end, with the run's last message; at the latest `LOG_SETTLE_MS` after the
//! end; and a wait whose time is up meanwhile answers what it holds instead of a timeout.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::until::Until;
use crate::wait::{WaitClock, WaitOutcome, WaitResult, WaitScope};
use crate::{Query, Since};
use vk_observer_store::StoreOwner;
use vk_observer_store::events::{Channel, DomainEvent};
use vk_observer_store::writer::Writer;
use vk_observer_telemetry::health::Health;

struct Run {
    attempt: Uuid,
    session: Uuid,
    pid: Uuid,
}

fn at(ago: Duration) -> String {
    (chrono::Utc::now() - chrono::TimeDelta::from_std(ago).unwrap()).to_rfc3339()
}

fn process(run: &Run, status: &str, completed_at: Option<String>) -> serde_json::Value {
    let started = "2026-11-29T10:00:00Z";
    json!({"id": run.pid, "session_id": run.session, "run_reason": "codingagent",
           "status": status, "exit_code": completed_at.as_ref().map(|_| 0),
           "created_at": started, "updated_at": completed_at.clone().unwrap_or(started.into()),
           "started_at": started, "completed_at": completed_at, "dropped": false})
}

fn said(run: &Run, index: u64, text: &str) -> DomainEvent {
    let entry = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}});
    DomainEvent::LogEntriesPut {
        attempt_id: run.attempt,
        process_id: run.pid,
        channel: Channel::Normalized,
        entries: vec![(index, RawValue::from_string(entry.to_string()).unwrap())],
    }
}

/// A store with one running coding agent that has said "working" (entry 0).
fn running() -> (StoreOwner, Writer, Query, Run) {
    let mut owner = StoreOwner::open_temporary(Default::default()).unwrap();
    let query = Query::new(owner.store(), Arc::new(Health::new()));
    let mut writer = owner.take_writer().expect("the one writer");
    let (project, task) = (Uuid::new_v4(), Uuid::new_v4());
    let run = Run {
        attempt: Uuid::new_v4(),
        session: Uuid::new_v4(),
        pid: Uuid::new_v4(),
    };
    let t0 = "2026-11-29T10:00:00Z";
    writer
        .apply(vec![
            DomainEvent::TaskUpserted {
                task: json!({"id": task, "project_id": project, "title": "t",
                             "status": "inprogress", "created_at": t0, "updated_at": t0}),
            },
            DomainEvent::AttemptsSnapshot {
                task_id: task,
                attempts: vec![json!({"id": run.attempt, "task_id": task, "branch": "b",
                                      "created_at": t0, "updated_at": t0})],
            },
            DomainEvent::SessionsSnapshot {
                attempt_id: run.attempt,
                sessions: vec![json!({"id": run.session, "workspace_id": run.attempt,
                                      "executor": "CLAUDE_CODE", "created_at": t0, "updated_at": t0})],
            },
            DomainEvent::ProcessUpserted {
                attempt_id: run.attempt,
                process: process(&run, "running", None),
            },
            said(&run, 0, "working"),
        ])
        .unwrap();
    (owner, writer, query, run)
}

/// The run's end as VK reports it, `ago` before now by VK's clock.
fn end_run(writer: &mut Writer, run: &Run, ago: Duration) {
    let end = process(run, "completed", Some(at(ago)));
    writer
        .apply(vec![DomainEvent::ProcessUpserted {
            attempt_id: run.attempt,
            process: end,
        }])
        .unwrap();
}

/// A wait until `completed` on the run's attempt, parked in a task of its own.
fn wait_until_completed(
    query: &Query,
    run: &Run,
    timeout: Duration,
) -> tokio::task::JoinHandle<WaitResult> {
    let (query, attempt) = (query.clone(), run.attempt);
    tokio::spawn(async move {
        let until = Until::parse(&json!(["completed"])).unwrap();
        let scope = WaitScope::Attempts(vec![attempt]);
        let clock = WaitClock::start(timeout);
        let never = std::future::pending::<()>();
        query
            .wait_for_change(scope, Some(until), Since::None, clock, None, never)
            .await
            .unwrap()
    })
}

fn final_text(r: &WaitResult) -> &str {
    r.final_messages
        .first()
        .map_or("(none)", |m| m.text.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reached_answer_waits_for_the_runs_last_log_lines() {
    let (_owner, mut writer, query, run) = running();
    let wait = wait_until_completed(&query, &run, Duration::from_secs(30));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The end is read before the last line (REST at the SSE hint, the log socket behind it).
    end_run(&mut writer, &run, Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !wait.is_finished(),
        "answered before the run's log was whole"
    );
    writer
        .apply(vec![said(&run, 1, "done: 3 tests pass")])
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!wait.is_finished(), "a line is not the log's end");
    // The log read to its end: a batch that moves no token, which still wakes the wait.
    let complete = DomainEvent::LogsComplete {
        process_id: run.pid,
        channel: Channel::Normalized,
        attempt_id: Some(run.attempt),
    };
    assert_eq!(writer.apply(vec![complete]).unwrap().token, None);
    let r = tokio::time::timeout(Duration::from_secs(1), wait)
        .await
        .expect("woken by the log's end, long before the settle")
        .unwrap();
    assert_eq!(r.outcome, WaitOutcome::Reached);
    assert_eq!(final_text(&r), "done: 3 tests pass");
    assert_eq!(r.final_messages[0].entry_index, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_never_read_to_its_end_holds_the_answer_only_until_the_settle() {
    let (_owner, mut writer, query, run) = running();
    // Ended 1.7 s ago by VK's clock: at most 0.3 s of the 2 s settle is left.
    end_run(&mut writer, &run, Duration::from_millis(1_700));
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        wait_until_completed(&query, &run, Duration::from_secs(30)),
    )
    .await
    .expect("the hold ends with the settle, not the wait's time")
    .unwrap();
    assert_eq!(r.outcome, WaitOutcome::Reached);
    assert_eq!(final_text(&r), "working");
    // Ended long ago: no hold at all.
    end_run(&mut writer, &run, Duration::from_secs(60));
    let r = wait_until_completed(&query, &run, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.outcome, WaitOutcome::Reached);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_time_is_up_answers_what_it_holds_not_a_timeout() {
    let (_owner, mut writer, query, run) = running();
    end_run(&mut writer, &run, Duration::ZERO);
    let r = wait_until_completed(&query, &run, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(
        r.outcome,
        WaitOutcome::Reached,
        "a timeout's token would pass the change"
    );
    assert_eq!(final_text(&r), "working");
}
