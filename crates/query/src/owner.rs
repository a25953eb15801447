//! Whose object a call targets: the project (and attempt) a mutation's ids belong to, read from
//! the cache, so a caller limited to some projects or to its own attempt (`mcp::access`) is
//! refused before VK is asked. An id the cache does not hold has no owner: a limited caller is
//! refused for it, as it cannot be shown to be its own. Reads of a limited caller are placed
//! the same way, every id they name ([`Query::read_targets`]): a couple of key reads per id.

use serde_json::{Map, Value};
use uuid::Uuid;

use super::Query;
use vk_observer_store::StoreReader;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::fields::uuid_of;

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

/// One id a read names, where the cache places it (None: not cached).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadTarget {
    pub field: &'static str,
    pub id: Uuid,
    pub owner: Option<Owner>,
}

impl Query {
    /// Every id a read's arguments name (the single target fields and each of `attempt_ids`),
    /// placed. A value that is not a UUID is skipped: the tool refuses it as invalid before
    /// reading anything.
    pub fn read_targets(&self, args: &Map<String, Value>) -> Result<Vec<ReadTarget>, ToolError> {
        let reader = self.read();
        let mut named: Vec<(&'static str, Uuid)> = TARGET_FIELDS
            .iter()
            .filter_map(|f| Some((*f, parse(args.get(*f)?)?)))
            .collect();
        if let Some(ids) = args.get("attempt_ids").and_then(Value::as_array) {
            named.extend(ids.iter().filter_map(parse).map(|id| ("attempt_ids", id)));
        }
        named
            .into_iter()
            .map(|(field, id)| {
                let lookup = if field == "attempt_ids" {
                    "attempt_id"
                } else {
                    field
                };
                Ok(ReadTarget {
                    field,
                    id,
                    owner: owner(&reader, lookup, id)?,
                })
            })
            .collect()
    }

    /// The owner of an attempt (its task and project), or None when it is not cached.
    pub fn owner_of_attempt(&self, attempt: Uuid) -> Result<Option<Owner>, ToolError> {
        owner(&self.read(), "attempt_id", attempt)
    }
}

fn parse(v: &Value) -> Option<Uuid> {
    Uuid::parse_str(v.as_str()?.trim()).ok()
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
