//! Whose object a call targets: the project (and attempt) a mutation's ids belong to, read from
//! the cache, so a caller limited to some projects or to its own attempt (`mcp::access`) is
//! refused before VK is asked. An id the cache does not hold has no owner: a limited caller is
//! refused for it, as it cannot be shown to be its own.

use serde_json::{Map, Value};
use uuid::Uuid;

use super::Query;
use crate::store::StoreReader;
use crate::tool_error::ToolError;
use crate::vk::fields::uuid_of;

/// The project a target belongs to, and its attempt when the target is one (or inside one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub project: Uuid,
    pub task: Option<Uuid>,
    pub attempt: Option<Uuid>,
}

/// The id arguments that name a target, most specific first.
const TARGET_FIELDS: [&str; 6] = [
    "attempt_id",
    "session_id",
    "execution_process_id",
    "approval_id",
    "task_id",
    "project_id",
];

impl Query {
    /// The owner of the first target id among a call's arguments; None when the call names
    /// none, or names one the cache does not hold.
    pub fn owner_of(&self, args: &Map<String, Value>) -> Result<Option<Owner>, ToolError> {
        let reader = self.read();
        for field in TARGET_FIELDS {
            let Some(id) = args.get(field).and_then(Value::as_str) else {
                continue;
            };
            let Ok(id) = Uuid::parse_str(id.trim()) else {
                return Ok(None);
            };
            return owner(&reader, field, id);
        }
        Ok(None)
    }
}

fn owner(reader: &StoreReader, field: &str, id: Uuid) -> Result<Option<Owner>, ToolError> {
    let attempt = match field {
        "attempt_id" => Some(id),
        "session_id" => reader
            .session(id)?
            .and_then(|s| uuid_of(&s.value, "workspace_id")),
        "execution_process_id" => reader.attempt_of_process(id)?,
        "approval_id" => reader.approval(id)?.map(|a| a.attempt_id),
        "task_id" => {
            return Ok(project_of_task(reader, id)?.map(|p| Owner {
                project: p,
                task: Some(id),
                attempt: None,
            }));
        }
        _ => {
            return Ok(reader.project(id)?.map(|_| Owner {
                project: id,
                task: None,
                attempt: None,
            }));
        }
    };
    let Some(attempt) = attempt else {
        return Ok(None);
    };
    let Some(task) = reader
        .attempt(attempt)?
        .and_then(|a| uuid_of(&a.value, "task_id"))
    else {
        return Ok(None);
    };
    Ok(project_of_task(reader, task)?.map(|project| Owner {
        project,
        task: Some(task),
        attempt: Some(attempt),
    }))
}

fn project_of_task(reader: &StoreReader, task: Uuid) -> Result<Option<Uuid>, ToolError> {
    Ok(reader
        .task(task)?
        .and_then(|t| uuid_of(&t.value, "project_id")))
}
