//! The one way a tool answers: every handler returns a `CallToolResult` made here. Success is
//! `structuredContent` plus the same document as JSON text; failure is `isError: true` with the
//! error envelope as JSON text only (no `structuredContent`), so clients that validate
//! `outputSchema` even on errors (the MCP Inspector) accept it.
//!
//! Three shapes of success: [`plain`] (the answer as it is), [`shaped`] / [`shaped_with`] (the
//! query's full answer cut to a detail level by its family's `Rules`, `query::detail`), and
//! [`rendered`] (parts rendered and memoized by the query). Every tool declares its output
//! schema: [`plain_output_schema`] for plain answers, [`detail_output_schema`] for shaped ones.
//!
//! The detail schema is the full answer's with every `required` list removed: levels 0 and 1
//! leave fields out (nulls, empty lists, the level's extras), and one schema per tool must
//! accept all three. Kept simple on purpose: clients such as the official Python SDK validate
//! every `structuredContent` against it, and a smaller schema costs them less per call.
//!
//! Both are then made [`lean`]: no `$ref`, no union of constants, no `anyOf [X, null]` (an
//! enum, a type list instead), accepting the same documents and describing every field as
//! before. That cuts the Python SDK's time per batch of 50 statuses (docs/performance.md,
//! "What the Python SDK takes in").

mod lean;

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use vk_observer_query::detail::{self, Detail, Rules};
use vk_observer_tool_error::ToolError;

/// The envelope of a failed call, counted by code (`vk_observer_tool_errors_total`).
pub(crate) fn error_result(e: &ToolError) -> CallToolResult {
    metrics::counter!(vk_observer_telemetry::TOOL_ERRORS, vk_observer_telemetry::label::CODE => e.code.as_str())
        .increment(1);
    CallToolResult::error(vec![ContentBlock::text(e.to_json_string())])
}

/// Success as the answer itself, or the error envelope.
pub(crate) fn plain<T: Serialize>(r: Result<T, ToolError>) -> CallToolResult {
    match r.and_then(|a| serde_json::to_value(&a).map_err(ToolError::internal)) {
        Ok(v) => success(v),
        Err(e) => error_result(&e),
    }
}

/// Success as `answer` shaped for `level`, or the error envelope.
pub(crate) fn shaped<T: Serialize>(
    r: Result<T, ToolError>,
    rules: &Rules,
    level: Detail,
) -> CallToolResult {
    shaped_with(r, rules, level, |_| {})
}

/// Like [`shaped`], then `edit` on the shaped value (a tool's own switches, e.g. `include_*`).
pub(crate) fn shaped_with<T: Serialize>(
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
            success(v)
        }
        Err(e) => error_result(&e),
    }
}

/// A success built from pre-rendered parts (value for `structuredContent`, the same document
/// as text), for answers whose pieces are memoized.
pub(crate) fn rendered(r: Result<(Value, String), ToolError>) -> CallToolResult {
    match r {
        Ok((value, text)) => with_text(value, text),
        Err(e) => error_result(&e),
    }
}

/// Success as `v` (structured content and the same document as text).
pub(crate) fn success(v: Value) -> CallToolResult {
    let text = v.to_string();
    with_text(v, text)
}

fn with_text(value: Value, text: String) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

/// The detail level a call asked for (0 when absent or when the arguments did not parse).
pub(crate) fn level_of<T>(
    args: &Result<T, ToolError>,
    field: impl Fn(&T) -> Option<Detail>,
) -> Detail {
    args.as_ref().ok().and_then(field).unwrap_or_default()
}

/// Remove `fields` from every object of the list `list` (a tool's `include_*: false`).
pub(crate) fn drop_in_items(m: &mut serde_json::Map<String, Value>, list: &str, fields: &[&str]) {
    if let Some(Value::Array(items)) = m.get_mut(list) {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            for f in fields {
                item.remove(*f);
            }
        }
    }
}

/// The output schema of a tool answering plainly: `T`'s, as rmcp derives it, made lean.
pub(crate) fn plain_output_schema<T: JsonSchema + std::any::Any>() -> Arc<JsonObject> {
    let full = rmcp::handler::server::tool::schema_for_output::<T>();
    Arc::new(lean::lean(full.as_ref().clone()))
}

/// The output schema of a tool answering at detail levels: `T`'s, with no `required` lists,
/// made lean.
pub(crate) fn detail_output_schema<T: JsonSchema + std::any::Any>() -> Arc<JsonObject> {
    let full = rmcp::handler::server::tool::schema_for_output::<T>();
    let mut v = Value::Object(full.as_ref().clone());
    drop_required(&mut v);
    match v {
        Value::Object(o) => Arc::new(lean::lean(o)),
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
