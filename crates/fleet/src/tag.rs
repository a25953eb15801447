//! Host-scoping on the fleet node: every project, task and attempt JSON gains `"host"`, and
//! each event that adds or removes one becomes its `Host*` form, which touches only what this
//! host reports (one id may live on several hosts): its project list `HostProjectsSnapshot`,
//! its task list of a project `HostTasksSnapshot`, a task `HostTaskUpserted` /
//! `HostTaskRemoved`, a task's attempts `HostAttemptsSnapshot`; the facts of one host's VK
//! server (`ServerInfo`) are kept per host (`HostServerInfo`).

use serde_json::Value;

use vk_observer_store::events::DomainEvent;

/// The key the owning host is recorded under in project, task and attempt JSON.
pub(crate) use vk_observer_store::events::HOST_FIELD as HOST_KEY;

/// A host's events as the fleet node applies them.
pub(crate) fn tag(host: &str, events: Vec<DomainEvent>) -> Vec<DomainEvent> {
    events
        .into_iter()
        .filter_map(|event| tag_one(host, event))
        .collect()
}

fn tag_one(host: &str, event: DomainEvent) -> Option<DomainEvent> {
    let all = |values: Vec<Value>| values.into_iter().map(|v| with_host(host, v)).collect();
    Some(match event {
        DomainEvent::ProjectsSnapshot { projects } => DomainEvent::HostProjectsSnapshot {
            host: host.to_owned(),
            projects: all(projects),
        },
        DomainEvent::TaskUpserted { task } => DomainEvent::HostTaskUpserted {
            host: host.to_owned(),
            task: with_host(host, task),
        },
        DomainEvent::TaskRemoved { task_id } => DomainEvent::HostTaskRemoved {
            host: host.to_owned(),
            task_id,
        },
        DomainEvent::TasksSnapshot { project_id, tasks } => DomainEvent::HostTasksSnapshot {
            host: host.to_owned(),
            project_id,
            tasks: all(tasks),
        },
        DomainEvent::AttemptsSnapshot { task_id, attempts } => DomainEvent::HostAttemptsSnapshot {
            host: host.to_owned(),
            task_id,
            attempts: all(attempts),
        },
        DomainEvent::ServerInfo { info } => DomainEvent::HostServerInfo {
            host: host.to_owned(),
            info,
        },
        other => other,
    })
}

fn with_host(host: &str, mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.insert(HOST_KEY.to_owned(), Value::String(host.to_owned()));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn projects_tasks_attempts_and_server_facts_name_their_host() {
        let events = vec![
            DomainEvent::ProjectsSnapshot {
                projects: vec![json!({"id": "p"})],
            },
            DomainEvent::TaskUpserted {
                task: json!({"id": "t"}),
            },
            DomainEvent::ServerInfo {
                info: json!({"executors": {}}),
            },
        ];
        let tagged = tag("box", events);
        assert_eq!(tagged.len(), 3);
        let DomainEvent::HostProjectsSnapshot { host, projects } = &tagged[0] else {
            panic!("{tagged:?}")
        };
        assert_eq!(
            (host.as_str(), &projects[0]["host"]),
            ("box", &json!("box"))
        );
        let DomainEvent::HostTaskUpserted { host, task } = &tagged[1] else {
            panic!("{tagged:?}")
        };
        assert_eq!((host.as_str(), &task["host"]), ("box", &json!("box")));
        let DomainEvent::HostServerInfo { host, info } = &tagged[2] else {
            panic!("{tagged:?}")
        };
        assert_eq!((host.as_str(), info), ("box", &json!({"executors": {}})));
    }
}
