//! MCP resources: cached answers addressed by URI, listed as resource templates and read with
//! `resources/read`. Each family is one [`ResourceKind`] in [`KINDS`]: a URI template with one
//! `{id}`, the read that answers it (from the cache, like the tool it mirrors), and the notify
//! hub channel whose firing means it may have changed ([`Wake`]; `subscriptions` watches it).
//!
//! A new family is one more entry, as the project's activity feed is
//! (`vk-observer://projects/{id}/activity`, read by the feed query, woken by [`Wake::Project`]).
//!
//! Errors are JSON-RPC errors (resources are not tools): an unknown id is `-32002` (resource not
//! found; rmcp sends `-32602` to 2026-07-28 peers, as that revision asks), a URI no template
//! matches is `-32602`; `data` carries the tool error envelope `{code, retryable, hint, details}`.

use rmcp::ErrorData;
use rmcp::model::{ReadResourceResult, ResourceContents, ResourceTemplate};
use uuid::Uuid;

use vk_observer_query::activity::{ActivityRequest, ActivityScope};
use vk_observer_query::detail::{self, Detail};
use vk_observer_query::logs::{LOG_PAGE_DEFAULT, LOG_PAGE_RULES, LogMode, LogRequest};
use vk_observer_query::status::{Shape, StatusView};
use vk_observer_query::{Query, Since};
use vk_observer_tool_error::ToolError;
use vk_observer_vk::Channel;

/// Every resource answers JSON, the same document the matching tool returns.
const MIME_JSON: &str = "application/json";

/// The notify hub channel that fires when a resource may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Wake {
    /// Any commit touching the attempt (its row, sessions, processes, log entries).
    Attempt(Uuid),
    /// Any commit touching the project (its tasks and their attempts).
    Project(Uuid),
    /// An MCP task (`mcp::tasks`): its attempt's channel, found through the task's handle.
    Task(Uuid),
}

impl Wake {
    /// The hub channel this wake listens on: a task's is its attempt's (None for a task id no
    /// call handed out).
    pub(crate) fn resolved(self, query: &Query) -> Option<Wake> {
        match self {
            Wake::Task(id) => query
                .task_handle(id)
                .ok()
                .flatten()
                .map(|h| Wake::Attempt(h.attempt_id)),
            other => Some(other),
        }
    }
}

/// One family of resources: `<prefix>{id}<suffix>`.
pub(crate) struct ResourceKind {
    /// The template's programmatic name.
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// The URI up to `{id}`.
    pub prefix: &'static str,
    /// The URI after `{id}` (may be empty).
    pub suffix: &'static str,
    /// The resource's JSON text, from the cache.
    pub read: fn(&Query, Uuid) -> Result<String, ToolError>,
    /// Which hub channel wakes subscribers of the resource with this id.
    pub wake: fn(Uuid) -> Wake,
}

impl ResourceKind {
    pub(crate) fn template(&self) -> String {
        format!("{}{{id}}{}", self.prefix, self.suffix)
    }

    fn uri(&self, id: Uuid) -> String {
        format!("{}{id}{}", self.prefix, self.suffix)
    }

    /// The id in `uri` if it belongs to this family.
    fn id_in(&self, uri: &str) -> Option<Uuid> {
        let rest = uri.strip_prefix(self.prefix)?.strip_suffix(self.suffix)?;
        Uuid::parse_str(rest).ok()
    }
}

/// The resource families the daemon serves.
pub(crate) const KINDS: &[ResourceKind] = &[
    ResourceKind {
        name: "attempt_status",
        title: "Attempt status",
        description: "The attempt's status, as get_attempt_status answers it for one attempt_id: \
            state, latest process, result (next action), token and freshness. Subscribe to be told \
            when anything under the attempt changes.",
        prefix: "vk-observer://attempts/",
        suffix: "",
        read: read_status,
        wake: Wake::Attempt,
    },
    ResourceKind {
        name: "attempt_logs",
        title: "Attempt log tail",
        description: "The latest normalized log entries of the attempt's agent process, as \
            tail_attempt_logs answers with no arguments but attempt_id. Subscribe to be told when \
            anything under the attempt changes; page older history with tail_attempt_logs.",
        prefix: "vk-observer://attempts/",
        suffix: "/logs",
        read: read_latest_logs,
        wake: Wake::Attempt,
    },
    ResourceKind {
        name: "project_activity",
        title: "Project activity",
        description: "The project's newest activity items (tasks created/updated/deleted, \
            attempts, processes, follow-ups, approvals, merges), as tail_project_activity answers \
            with only project_id. Subscribe to be told when the project changes; continue exactly \
            with tail_project_activity since_token.",
        prefix: "vk-observer://projects/",
        suffix: "/activity",
        read: read_project_activity,
        wake: Wake::Project,
    },
    ResourceKind {
        name: "task",
        title: "MCP task",
        description: "An attempt run as an MCP task (tasks extension): the task as tasks/get \
            answers it (status, inputRequests while an approval waits, result or error at the \
            end). Subscribe (or listen) to be told the moment its attempt changes: the push \
            stand-in for notifications/tasks.",
        prefix: "vk-observer://tasks/",
        suffix: "",
        read: read_task,
        wake: Wake::Task,
    },
];

/// A URI resolved to its family and id.
#[derive(Clone)]
pub(crate) struct Resource {
    pub kind: &'static ResourceKind,
    pub id: Uuid,
    pub uri: String,
}

impl Resource {
    /// The resource `uri` names; a URI no template matches is an invalid-params error.
    pub(crate) fn parse(uri: &str) -> Result<Resource, ErrorData> {
        KINDS
            .iter()
            .find_map(|kind| {
                kind.id_in(uri).map(|id| Resource {
                    kind,
                    id,
                    uri: kind.uri(id),
                })
            })
            .ok_or_else(|| {
                let templates: Vec<String> = KINDS.iter().map(ResourceKind::template).collect();
                let e = ToolError::invalid_field(
                    "uri",
                    format!(
                        "No resource has this URI. Use one of the templates of resources/templates/list with a UUID for {{id}}: {}.",
                        templates.join(", ")
                    ),
                )
                .with_details(serde_json::json!({ "uri": uri, "templates": templates }));
                with_uri(ErrorData::invalid_params(e.hint.clone(), Some(envelope(&e))), uri)
            })
    }

    pub(crate) fn wake(&self) -> Wake {
        (self.kind.wake)(self.id)
    }

    /// The resource's current contents, from the cache.
    pub(crate) fn read(&self, query: &Query) -> Result<ReadResourceResult, ErrorData> {
        let text = (self.kind.read)(query, self.id)
            .map_err(|e| with_uri(to_protocol_error(&e), &self.uri))?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, self.uri.clone()).with_mime_type(MIME_JSON),
        ]))
    }
}

/// The templates of every family, for `resources/templates/list`.
pub(crate) fn templates() -> Vec<ResourceTemplate> {
    KINDS
        .iter()
        .map(|k| {
            ResourceTemplate::new(k.template(), k.name)
                .with_title(k.title)
                .with_description(k.description)
                .with_mime_type(MIME_JSON)
        })
        .collect()
}

fn envelope(e: &ToolError) -> serde_json::Value {
    serde_json::to_value(e).unwrap_or_default()
}

/// A resource request's error with the requested URI beside the envelope in `data` (`data.uri`,
/// as SEP-2164 asks of an unknown resource).
fn with_uri(mut error: ErrorData, uri: &str) -> ErrorData {
    if let Some(serde_json::Value::Object(data)) = error.data.as_mut() {
        data.insert("uri".into(), uri.into());
    }
    error
}

/// A tool error as the JSON-RPC error of a resource request, the envelope in `data`.
pub(crate) fn to_protocol_error(e: &ToolError) -> ErrorData {
    let data = Some(envelope(e));
    match e.code {
        vk_observer_tool_error::ErrorCode::NotFound => {
            ErrorData::resource_not_found(e.hint.clone(), data)
        }
        vk_observer_tool_error::ErrorCode::InvalidArgument => {
            ErrorData::invalid_params(e.hint.clone(), data)
        }
        _ => ErrorData::internal_error(e.hint.clone(), data),
    }
}

/// `vk-observer://attempts/{id}`: get_attempt_status's single-attempt answer at the default
/// detail (0).
fn read_status(query: &Query, id: Uuid) -> Result<String, ToolError> {
    let page = query.attempt_statuses(&[id], Since::None)?;
    if !page.not_found.is_empty() {
        return Err(ToolError::unknown_attempt(id));
    }
    let view = StatusView {
        detail: Detail::Compact,
        include_result: true,
    };
    Ok(page.render(Shape::Single, view)?.1)
}

/// `vk-observer://attempts/{id}/logs`: tail_attempt_logs's answer with only `attempt_id` given
/// (the newest page of the agent's normalized log, compact entries: detail 0).
fn read_latest_logs(query: &Query, id: Uuid) -> Result<String, ToolError> {
    let page = query.tail_logs(LogRequest {
        attempt: id,
        channel: Channel::Normalized,
        mode: LogMode::Tail,
        limit: LOG_PAGE_DEFAULT,
        since: Since::None,
        process: None,
        detail: Detail::Compact,
    })?;
    let value = serde_json::to_value(&page).map_err(ToolError::internal)?;
    Ok(detail::shape(value, &LOG_PAGE_RULES, Detail::Compact).to_string())
}

/// `vk-observer://tasks/{id}`: the task as `tasks/get` answers it.
fn read_task(query: &Query, id: Uuid) -> Result<String, ToolError> {
    let handle = query.task_handle(id)?.ok_or_else(|| {
        ToolError::new(
            vk_observer_tool_error::ErrorCode::NotFound,
            false,
            "No task has this id: use the taskId a task-augmented start_task_attempt or follow_up returned.",
        )
        .with_details(serde_json::json!({ "task_id": id }))
    })?;
    let task = crate::tasks::state::detailed(query, id, &handle)?;
    serde_json::to_string(&task).map_err(ToolError::internal)
}

/// `vk-observer://projects/{id}/activity`: tail_project_activity's answer with only
/// `project_id` given (the newest items, newest first, compact).
fn read_project_activity(query: &Query, id: Uuid) -> Result<String, ToolError> {
    let req = ActivityRequest::new(ActivityScope::Project(id), None, None, None, None)?;
    let page = query.activity(&req)?;
    serde_json::to_string(&page).map_err(ToolError::internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_resolve_to_their_family_only() {
        let id = Uuid::new_v4();
        let status = Resource::parse(&format!("vk-observer://attempts/{id}")).unwrap();
        assert_eq!(status.kind.name, "attempt_status");
        assert_eq!(status.wake(), Wake::Attempt(id));
        let logs = Resource::parse(&format!("vk-observer://attempts/{id}/logs")).unwrap();
        assert_eq!(logs.kind.name, "attempt_logs");
        for bad in [
            "vk-observer://attempts/".to_string(),
            "vk-observer://attempts/nope".to_string(),
            format!("vk-observer://attempts/{id}/other"),
            format!("vk-observer://tasks/{id}/x"),
            format!("file:///attempts/{id}"),
        ] {
            let e = Resource::parse(&bad).err().expect("refused");
            assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn every_template_has_one_id_and_json() {
        for t in templates() {
            assert_eq!(
                t.uri_template.matches("{id}").count(),
                1,
                "{}",
                t.uri_template
            );
            assert_eq!(t.mime_type.as_deref(), Some(MIME_JSON));
        }
    }
}
