//! A snapshot of a whole host store as domain events, cut into parts of bounded size
//! (design-notes §23). Published when a host's stream cannot be resumed; the fleet node
//! applies it like any snapshot, so over a current fleet it changes nothing.

use std::collections::BTreeSet;

use serde_json::Value;
use uuid::Uuid;

use vk_observer_store::StoreError;
use vk_observer_store::StoreReader;
use vk_observer_store::events::{Channel, DomainEvent};
use vk_observer_vk::uuid_of;

/// A part is closed once its events' JSON passes this many bytes (NATS' default payload limit
/// is 1 MiB; one entity may still make a part larger).
pub(crate) const PART_BYTES: usize = 256 * 1024;
/// Log entries read per step.
const LOG_STEP: usize = 512;

/// Collects events into parts of about [`PART_BYTES`].
struct Parts {
    parts: Vec<Vec<DomainEvent>>,
    current: Vec<DomainEvent>,
    bytes: usize,
}

impl Parts {
    fn push(&mut self, event: DomainEvent, bytes: usize) {
        if self.bytes + bytes > PART_BYTES && !self.current.is_empty() {
            self.parts.push(std::mem::take(&mut self.current));
            self.bytes = 0;
        }
        self.bytes += bytes;
        self.current.push(event);
    }

    fn push_values(&mut self, make: impl FnOnce(Vec<Value>) -> DomainEvent, values: Vec<Value>) {
        let bytes = values.iter().map(|v| v.to_string().len()).sum();
        self.push(make(values), bytes);
    }
}

/// Every replicable fact of the store (VK's server facts first), in parent-before-child order.
pub(crate) fn build(reader: &StoreReader) -> Result<Vec<Vec<DomainEvent>>, StoreError> {
    let mut parts = Parts {
        parts: Vec::new(),
        current: Vec::new(),
        bytes: 0,
    };
    let values = |rows: Vec<vk_observer_store::reader::Stored>| -> Vec<Value> {
        rows.into_iter().map(|r| r.value).collect()
    };
    if let Some(info) = reader.server_info()? {
        let bytes = info.to_string().len();
        parts.push(DomainEvent::ServerInfo { info }, bytes);
    }
    let projects = reader.projects()?;
    let ids: Vec<Uuid> = projects.iter().map(|p| p.id).collect();
    parts.push_values(
        |projects| DomainEvent::ProjectsSnapshot { projects },
        values(projects),
    );
    let mut listed = BTreeSet::new();
    for project_id in ids {
        let repos = values(reader.repos_of_project(project_id)?);
        parts.push_values(
            |repos| DomainEvent::ReposSnapshot { project_id, repos },
            repos,
        );
        let tasks = reader.tasks_of_project(project_id)?;
        let task_ids: Vec<Uuid> = tasks.iter().map(|t| t.id).collect();
        parts.push_values(
            |tasks| DomainEvent::TasksSnapshot { project_id, tasks },
            values(tasks),
        );
        for task_id in task_ids {
            listed.insert(task_id);
            task_attempts(reader, task_id, &mut parts)?;
        }
    }
    // Attempts stored before their task (VK's attempts can be read before the tasks stream
    // delivers the task) are under no project yet; the task's later batch carries only the
    // task, so a node that starts from this snapshot would never get them otherwise.
    let orphaned: BTreeSet<Uuid> = reader
        .attempts()?
        .iter()
        .filter_map(|a| uuid_of(&a.value, "task_id"))
        .filter(|t| !listed.contains(t))
        .collect();
    for task_id in orphaned {
        task_attempts(reader, task_id, &mut parts)?;
    }
    if !parts.current.is_empty() {
        parts.parts.push(parts.current);
    }
    Ok(parts.parts)
}

/// A task's attempts, each with what it holds.
fn task_attempts(reader: &StoreReader, task_id: Uuid, parts: &mut Parts) -> Result<(), StoreError> {
    let attempts = reader.attempts_of_task(task_id)?;
    let attempt_ids: Vec<Uuid> = attempts.iter().map(|a| a.id).collect();
    let values = attempts.into_iter().map(|a| a.value).collect();
    parts.push_values(
        |attempts| DomainEvent::AttemptsSnapshot { task_id, attempts },
        values,
    );
    for attempt_id in attempt_ids {
        attempt(reader, attempt_id, parts)?;
    }
    Ok(())
}

/// An attempt's sessions, processes (with their logs and usage), repos, changes and branch
/// status.
fn attempt(reader: &StoreReader, attempt_id: Uuid, parts: &mut Parts) -> Result<(), StoreError> {
    let values = |rows: Vec<vk_observer_store::reader::Stored>| -> Vec<Value> {
        rows.into_iter().map(|r| r.value).collect()
    };
    let sessions = values(reader.sessions_of_attempt(attempt_id)?);
    parts.push_values(
        |sessions| DomainEvent::SessionsSnapshot {
            attempt_id,
            sessions,
        },
        sessions,
    );
    let processes = reader.processes_of_attempt(attempt_id)?;
    let process_ids: Vec<Uuid> = processes.iter().map(|p| p.id).collect();
    parts.push_values(
        |processes| DomainEvent::ProcessesSnapshot {
            attempt_id,
            processes,
        },
        values(processes),
    );
    for process_id in process_ids {
        for channel in [Channel::Normalized, Channel::Raw] {
            logs(reader, attempt_id, process_id, channel, parts)?;
        }
        if let Some(usage) = reader.process_usage(process_id)? {
            let event = DomainEvent::ProcessUsage {
                attempt_id,
                process_id,
                usage,
            };
            parts.push(event, 256);
        }
    }
    let repos = values(reader.attempt_repos(attempt_id)?);
    parts.push_values(
        |repos| DomainEvent::AttemptReposSnapshot { attempt_id, repos },
        repos,
    );
    if let Some(changes) = reader.changes(attempt_id)? {
        let bytes = changes.value.to_string().len();
        let changes = changes.value;
        parts.push(
            DomainEvent::ChangesUpdated {
                attempt_id,
                changes,
            },
            bytes,
        );
    }
    if let Some((status, read_at_ms)) = reader.branch_status(attempt_id)? {
        let repos = match status.value {
            Value::Array(list) => list,
            other => vec![other],
        };
        parts.push_values(
            |repos| DomainEvent::BranchStatusRead {
                attempt_id,
                repos,
                read_at_ms,
            },
            repos,
        );
    }
    Ok(())
}

/// A process log in steps of [`LOG_STEP`] entries, then whether it is complete.
fn logs(
    reader: &StoreReader,
    attempt_id: Uuid,
    process_id: Uuid,
    channel: Channel,
    parts: &mut Parts,
) -> Result<(), StoreError> {
    let mut from = 0;
    loop {
        let step = reader.log_range(process_id, channel, from, u64::MAX, LOG_STEP)?;
        let Some(last) = step.last() else { break };
        from = last.index + 1;
        let bytes = step.iter().map(|e| e.entry.get().len()).sum();
        let entries = step.into_iter().map(|e| (e.index, e.entry)).collect();
        parts.push(
            DomainEvent::LogEntriesPut {
                attempt_id,
                process_id,
                channel,
                entries,
            },
            bytes,
        );
    }
    if reader.logs_complete(process_id, channel)? {
        parts.push(
            DomainEvent::LogsComplete {
                process_id,
                channel,
                attempt_id: Some(attempt_id),
            },
            0,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use vk_observer_store::{Retention, StoreOwner};

    /// Fleet seed 47's missing attempt: the host cut its snapshot while an attempt was stored
    /// and its task was not yet (VK's attempts can be read before the tasks stream delivers the
    /// task). A node that starts from the snapshot, then applies the task's batch, must hold the
    /// attempt and its process as the host does.
    #[test]
    fn an_attempt_stored_before_its_task_is_in_the_snapshot() {
        let (project, task, attempt, process) = (
            Uuid::from_u128(1),
            Uuid::from_u128(2),
            Uuid::from_u128(3),
            Uuid::from_u128(4),
        );
        let mut host = StoreOwner::open_temporary(Retention::default()).unwrap();
        let mut host_writer = host.take_writer().unwrap();
        let task_batch = vec![DomainEvent::TaskUpserted {
            task: json!({"id": task, "project_id": project, "title": "t", "status": "inprogress"}),
        }];
        host_writer
            .apply(vec![
                DomainEvent::ProjectsSnapshot {
                    projects: vec![json!({"id": project, "name": "p"})],
                },
                DomainEvent::AttemptsSnapshot {
                    task_id: task,
                    attempts: vec![json!({"id": attempt, "task_id": task})],
                },
                DomainEvent::ProcessUpserted {
                    attempt_id: attempt,
                    process: json!({"id": process, "status": "completed"}),
                },
            ])
            .unwrap();
        let parts = build(&host.store().read()).unwrap();
        host_writer.apply(task_batch.clone()).unwrap();

        let mut node = StoreOwner::open_temporary(Retention::default()).unwrap();
        let mut node_writer = node.take_writer().unwrap();
        for part in parts {
            node_writer.apply(part).unwrap();
        }
        node_writer.apply(task_batch).unwrap();
        let reader = node.store().read();
        let attempts: Vec<Uuid> = reader
            .attempts_of_task(task)
            .unwrap()
            .iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(attempts, vec![attempt]);
        assert!(reader.process(process).unwrap().is_some());
    }
}
