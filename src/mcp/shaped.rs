//! Answers at a detail level: the query's full answer shaped by its family's `Rules`
//! (`query::detail`) and sent as `structuredContent` plus the same document as text, and the
//! output schema that covers every level.
//!
//! The schema is the full answer's, with every `required` list removed: levels 0 and 1 leave
//! fields out (nulls, empty lists, the level's extras), and one schema per tool must accept
//! all three. Kept simple on purpose: clients such as the official Python SDK validate every
//! `structuredContent` against it, and a smaller schema costs them less per call.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::respond::error_result;
use crate::query::detail::{self, Detail, Rules};
use crate::tool_error::ToolError;

/// Success as `answer` shaped for `level`, or the error envelope.
pub fn shaped<T: Serialize>(
    r: Result<T, ToolError>,
    rules: &Rules,
    level: Detail,
) -> CallToolResult {
    shaped_with(r, rules, level, |_| {})
}

/// Like [`shaped`], then `edit` on the shaped value (a tool's own switches, e.g. `include_*`).
pub fn shaped_with<T: Serialize>(
    r: Result<T, ToolError>,
    rules: &Rules,
    level: Detail,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> CallToolResult {
    let value = r.and_then(|a| serde_json::to_value(&a).map_err(ToolError::internal));
    match value {
        Ok(v) => {
            let mut v = detail::shape(v, rules, level);
            if let Value::Object(m) = &mut v {
                edit(m);
            }
            let text = v.to_string();
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            result.structured_content = Some(v);
            result
        }
        Err(e) => error_result(&e),
    }
}

/// The output schema of a tool answering at detail levels: `T`'s, with no `required` lists.
pub fn detail_output_schema<T: JsonSchema + std::any::Any>() -> Arc<JsonObject> {
    let full = rmcp::handler::server::tool::schema_for_output::<T>();
    let mut v = Value::Object(full.as_ref().clone());
    drop_required(&mut v);
    match v {
        Value::Object(o) => Arc::new(o),
        _ => unreachable!("an object stays an object"),
    }
}

fn drop_required(v: &mut Value) {
    match v {
        Value::Object(o) => {
            // A property *named* `required` is a schema, not a list: left alone.
            if o.get("required").is_some_and(Value::is_array) {
                o.remove("required");
            }
            o.values_mut().for_each(drop_required);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_required),
        _ => {}
    }
}
