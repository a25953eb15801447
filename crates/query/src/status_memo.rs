//! Memo of attempt statuses as served: the computed `AttemptStatus`, its JSON value and its
//! compact JSON text, keyed by attempt and valid for exactly one attempt token.
//!
//! Why it is correct: an attempt's token moves on every commit that touches the attempt or
//! anything under it (sessions, processes, log entries, changes, the approvals index derived
//! from those entries in the same batch), and a status is a pure
//! function of those rows. A memo entry is used only when the store epoch and the attempt's
//! current token both equal the ones it was computed under, so a hit returns what a fresh
//! computation would. The token is read before the rows: a commit landing in between makes the
//! entry hold newer rows under an older token, and the next read (seeing the newer token)
//! recomputes — never older data under a newer token.
//!
//! Why it exists: a batch of 100 statuses spent most of its time decoding the same process and
//! session rows and re-rendering the same JSON on every call (docs/performance.md).
//!
//! Detail levels (`query::detail`): the entry keeps the full rendering (detail 2) and, made on
//! first use, the renderings at detail 0 and 1 — pure functions of the full one, so they are
//! exact for the same token and a memo hit at any level costs no shaping.

use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::detail::{self, Detail};
use super::status::{AttemptStatus, STATUS_RULES, attempt_status_printed};
use vk_observer_store::StoreReader;
use vk_observer_store::token::Epoch;
use vk_observer_tool_error::ToolError;

/// Entries kept before the memo is emptied and refilled (bounds memory at a few MB whatever
/// the number of attempts in VK).
pub(crate) const STATUS_MEMO_CAPACITY: usize = 4096;

/// One attempt's status with its renderings, computed once per attempt token.
#[derive(Debug)]
pub struct RenderedStatus {
    epoch: Epoch,
    attempt_token: u64,
    pub status: AttemptStatus,
    /// `status` as a JSON value (for `structuredContent`).
    pub value: Value,
    /// `status` as compact JSON text (for the text content block).
    pub json: String,
    /// The renderings at detail 0 and 1, made on first use (so a memo hit costs no shaping).
    below: [OnceLock<Shown>; 2],
}

/// One rendering of a status: the value and its compact JSON text.
#[derive(Debug)]
pub(crate) struct Shown {
    pub value: Value,
    pub json: String,
}

impl RenderedStatus {
    fn new(epoch: Epoch, attempt_token: u64, status: AttemptStatus) -> Result<Self, ToolError> {
        let value = serde_json::to_value(&status).map_err(ToolError::internal)?;
        let json = value.to_string();
        Ok(RenderedStatus {
            epoch,
            attempt_token,
            status,
            value,
            json,
            below: Default::default(),
        })
    }

    /// The status as `level` shows it: (value, JSON text), shaped once per level.
    pub(crate) fn shown(&self, level: Detail) -> (&Value, &str) {
        let slot = match level {
            Detail::Verbatim => return (&self.value, &self.json),
            Detail::Compact => &self.below[0],
            Detail::Standard => &self.below[1],
        };
        let s = slot.get_or_init(|| {
            let value = detail::shape(self.value.clone(), &STATUS_RULES, level);
            let json = value.to_string();
            Shown { value, json }
        });
        (&s.value, &s.json)
    }
}

/// A served status: shared with the memo, serialized as the plain `AttemptStatus`.
#[derive(Debug, Clone)]
pub struct StatusItem(pub Arc<RenderedStatus>);

impl std::ops::Deref for StatusItem {
    type Target = AttemptStatus;
    fn deref(&self) -> &AttemptStatus {
        &self.0.status
    }
}

impl PartialEq for StatusItem {
    fn eq(&self, other: &Self) -> bool {
        self.0.status == other.0.status
    }
}

impl Serialize for StatusItem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.status.serialize(s)
    }
}

/// The memo itself; one per daemon, shared by every request.
#[derive(Debug, Default)]
pub struct StatusMemo {
    entries: DashMap<Uuid, Arc<RenderedStatus>>,
}

impl StatusMemo {
    /// The status of `id` as of `attempt_token` (read from `reader` before calling), from the
    /// memo when it holds that exact token, else computed from `reader` and remembered.
    /// `None` when the attempt is unknown.
    pub(crate) fn status(
        &self,
        reader: &StoreReader,
        id: Uuid,
        attempt_token: u64,
        epoch: Epoch,
        print: &dyn Fn(u64) -> String,
    ) -> Result<Option<StatusItem>, ToolError> {
        if let Some(hit) = self.entries.get(&id)
            && hit.epoch == epoch
            && hit.attempt_token == attempt_token
        {
            return Ok(Some(StatusItem(hit.clone())));
        }
        let Some(status) = attempt_status_printed(reader, id, print(attempt_token))? else {
            self.entries.remove(&id);
            return Ok(None);
        };
        let rendered = Arc::new(RenderedStatus::new(epoch, attempt_token, status)?);
        if self.entries.len() >= STATUS_MEMO_CAPACITY {
            self.entries.clear();
        }
        // Never replace a newer entry with an older one (two requests racing).
        self.entries
            .entry(id)
            .and_modify(|e| {
                if e.epoch != epoch || e.attempt_token <= attempt_token {
                    *e = rendered.clone();
                }
            })
            .or_insert_with(|| rendered.clone());
        Ok(Some(StatusItem(rendered)))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use uuid::Uuid;

    use crate::status::{AttemptState, Shape, StatusView};
    use crate::{Query, Since};
    use vk_observer_store::StoreOwner;
    use vk_observer_store::events::DomainEvent;
    use vk_observer_telemetry::health::Health;

    fn process(id: Uuid, session: Uuid, status: &str, at: &str) -> serde_json::Value {
        json!({"id": id, "session_id": session, "run_reason": "codingagent", "status": status,
               "exit_code": null, "created_at": at, "updated_at": at, "started_at": at,
               "completed_at": null, "dropped": false})
    }

    /// One task with one attempt whose coding agent is running.
    fn running_attempt(
        project: Uuid,
        task: Uuid,
        attempt: Uuid,
        session: Uuid,
        pid: Uuid,
    ) -> Vec<DomainEvent> {
        let at = "2026-11-22T10:00:00Z";
        vec![
            DomainEvent::TaskUpserted {
                task: json!({"id": task, "project_id": project, "title": "t", "status": "inprogress",
                         "created_at": at, "updated_at": at}),
            },
            DomainEvent::AttemptsSnapshot {
                task_id: task,
                attempts: vec![json!({"id": attempt, "task_id": task, "branch": "b",
                                  "created_at": at, "updated_at": at})],
            },
            DomainEvent::SessionsSnapshot {
                attempt_id: attempt,
                sessions: vec![json!({"id": session, "workspace_id": attempt,
                                  "executor": "CLAUDE_CODE", "created_at": at, "updated_at": at})],
            },
            DomainEvent::ProcessUpserted {
                attempt_id: attempt,
                process: process(pid, session, "running", at),
            },
        ]
    }

    /// A hit returns exactly what a fresh computation would; any commit under the attempt
    /// (here a process finishing) is seen on the next read; the rendered page's text and value
    /// are the same document.
    #[test]
    fn memo_serves_the_current_token_only() {
        let mut owner = StoreOwner::open_temporary(Default::default()).unwrap();
        let store = owner.store();
        let query = Query::new(store.clone(), Arc::new(Health::new()));
        let mut writer = owner.take_writer().expect("the one writer");
        let (project, task, attempt, session, pid) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        writer
            .apply(running_attempt(project, task, attempt, session, pid))
            .unwrap();
        let first = query.attempt_statuses(&[attempt], Since::None).unwrap();
        assert_eq!(first.attempts[0].state, AttemptState::Running);
        let again = query.attempt_statuses(&[attempt], Since::None).unwrap();
        assert!(
            Arc::ptr_eq(&first.attempts[0].0, &again.attempts[0].0),
            "memo hit"
        );
        assert_eq!(query.status_memo.len(), 1);

        writer
            .apply(vec![DomainEvent::ProcessUpserted {
                attempt_id: attempt,
                process: process(pid, session, "completed", "2026-11-22T10:05:00Z"),
            }])
            .unwrap();
        let after = query.attempt_statuses(&[attempt], Since::None).unwrap();
        assert_eq!(after.attempts[0].state, AttemptState::Completed);
        let fresh = crate::status::attempt_status(
            &store.read(),
            attempt,
            store.read().attempt_token(attempt).unwrap(),
            store.epoch(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            after.attempts[0].0.status, fresh,
            "memo equals a fresh computation"
        );

        let (value, text) = after.render(Shape::Batch, StatusView::VERBATIM).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, value);
        assert_eq!(value, serde_json::to_value(&after).unwrap());
        // The single shape: the status fields at the top level beside the page's.
        let (value, text) = after.render(Shape::Single, StatusView::VERBATIM).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, value);
        assert_eq!(value["state"], "completed");
        assert_eq!(value["token"], json!(after.token));
        assert!(value.get("attempts").is_none());

        // Unknown attempts are not remembered.
        let missing = query
            .attempt_statuses(&[Uuid::new_v4()], Since::None)
            .unwrap();
        assert_eq!(missing.not_found.len(), 1);
        assert_eq!(query.status_memo.len(), 1);
    }
}
