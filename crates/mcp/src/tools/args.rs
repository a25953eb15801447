//! Tool arguments: an extractor that turns bad input into the error envelope (rmcp's own
//! `Parameters` answers with a bare JSON-RPC error), and the input-schema shaping that keeps
//! every schema portable: root `type: object`, no root `oneOf/anyOf/allOf`, optional fields
//! typed plainly (`"string"`, not `["string","null"]`). Input and output schemas alike carry
//! only JSON Schema's own `format`s: schemars adds `uint64`, `uint32`, `double`..., which
//! TypeScript-SDK clients (ajv) warn about (`unknown format "uint64" ignored in schema`); the
//! bounds they imply stay as `minimum`.

use std::sync::Arc;

use rmcp::handler::server::common::FromContextPart;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use vk_observer_tool_error::ToolError;

/// Deserialized arguments, or the envelope to answer with.
pub(crate) struct Args<T>(pub Result<T, ToolError>);

impl<S, T: DeserializeOwned> FromContextPart<ToolCallContext<'_, S>> for Args<T> {
    fn from_context_part(ctx: &mut ToolCallContext<S>) -> Result<Self, rmcp::ErrorData> {
        Ok(Args::parse(ctx.arguments.take().unwrap_or_default()))
    }
}

impl<T: DeserializeOwned> Args<T> {
    /// A call's arguments as `T`, or the envelope naming what does not match.
    pub(crate) fn parse(args: JsonObject) -> Self {
        Args(serde_json::from_value(Value::Object(args)).map_err(|e| {
            let msg = vk_observer_tool_error::clip(&e.to_string(), 300);
            ToolError::invalid_argument(format!(
                "The arguments do not match the tool's input schema: {msg}. Check field names and types against the schema."
            ))
            .with_details(json!({ "error": msg }))
        }))
    }
}

/// The portable input schema of `T` (panics at tool-list build time if `T` is not an object:
/// a programming error caught by the schema test).
pub(crate) fn input_schema<T: JsonSchema + std::any::Any>() -> Arc<JsonObject> {
    let raw = rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("input schema of {}: {e}", std::any::type_name::<T>()));
    let mut v = Value::Object(raw.as_ref().clone());
    portable(&mut v);
    match v {
        Value::Object(o) => Arc::new(o),
        _ => unreachable!("an object stays an object"),
    }
}

/// The `format` values JSON Schema 2020-12 defines (validation vocabulary, §7.3); any other is
/// dropped from every schema.
pub(crate) const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// An output schema with only standard formats. Nullable unions stay: outputs do carry nulls,
/// and clients validate `structuredContent` against this schema.
pub(crate) fn output_schema(schema: &JsonObject) -> Arc<JsonObject> {
    let mut v = Value::Object(schema.clone());
    strip_formats(&mut v);
    match v {
        Value::Object(o) => Arc::new(o),
        _ => unreachable!("an object stays an object"),
    }
}

/// Drop every non-standard `format`, recursively.
fn strip_formats(v: &mut Value) {
    match v {
        Value::Object(o) => {
            drop_format(o);
            o.values_mut().for_each(strip_formats);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_formats),
        _ => {}
    }
}

fn drop_format(o: &mut JsonObject) {
    // A property *named* `format` is an object schema, not a string: left alone.
    if o.get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !STANDARD_FORMATS.contains(&f))
    {
        o.remove("format");
    }
}

/// Rewrite nullable unions to their non-null type, drop non-standard formats, recursively.
fn portable(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Array(types)) = o.get("type") {
                let non_null: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                if non_null.len() == 1 {
                    o.insert("type".into(), non_null[0].clone());
                }
            }
            // `Option<Enum>` renders as anyOf [enum, null]: keep the enum.
            if let Some(Value::Array(branches)) = o.get("anyOf") {
                let non_null: Vec<Value> = branches
                    .iter()
                    .filter(|b| b.get("type") != Some(&json!("null")))
                    .cloned()
                    .collect();
                if non_null.len() == 1
                    && let Value::Object(inner) = &non_null[0]
                {
                    o.remove("anyOf");
                    for (k, val) in inner {
                        o.entry(k.clone()).or_insert(val.clone());
                    }
                }
            }
            if let Some(Value::Array(values)) = o.get_mut("enum") {
                values.retain(|x| !x.is_null());
            }
            drop_format(o);
            if o.get("default") == Some(&Value::Null) {
                o.remove("default");
            }
            for (_, child) in o.iter_mut() {
                portable(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(portable),
        _ => {}
    }
}
