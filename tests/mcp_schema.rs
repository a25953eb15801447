//! Walks every tool's schemas: portable inputs (root `type: object`, no root combinator, no
//! nullable type unions), every property described (inputs and outputs, nested and `$defs`),
//! every description in the Use when / Required / Optional / Next / Avoid template, and
//! annotations present.

use std::sync::Arc;

use serde_json::Value;
use vk_observer::health::Health;
use vk_observer::mcp::VkTools;
use vk_observer::query::Query;
use vk_observer::store::Store;

fn tools() -> Vec<rmcp::model::Tool> {
    let store = Store::open_temporary(Default::default()).unwrap();
    VkTools::new(Query::new(store, Arc::new(Health::new())), None).all_tools()
}

/// Every property of every object schema under `v`, with its path.
fn walk_properties(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Object(props)) = o.get("properties") {
                for (name, schema) in props {
                    out.push((format!("{path}.{name}"), schema.clone()));
                    walk_properties(schema, &format!("{path}.{name}"), out);
                }
            }
            for (k, child) in o {
                if k != "properties" {
                    walk_properties(child, &format!("{path}/{k}"), out);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk_properties(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_tool_has_the_description_template() {
    let tools = tools();
    assert!(tools.len() >= 11, "tools: {}", tools.len());
    for t in &tools {
        let d = t.description.as_deref().unwrap_or("");
        for heading in ["Use when:", "Required:", "Optional:", "Next:", "Avoid:"] {
            assert!(
                d.contains(heading),
                "{}: description lacks {heading:?}",
                t.name
            );
        }
        let ann = t
            .annotations
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no annotations", t.name));
        assert!(ann.title.is_some(), "{} has no title", t.name);
        assert!(
            ann.read_only_hint.is_some(),
            "{} lacks readOnlyHint",
            t.name
        );
    }
}

#[test]
fn input_schemas_are_portable() {
    for t in tools() {
        let schema = Value::Object(t.input_schema.as_ref().clone());
        assert_eq!(schema["type"], "object", "{}: root type", t.name);
        for k in ["oneOf", "anyOf", "allOf"] {
            assert!(
                schema.get(k).is_none(),
                "{}: root {k} (rejected by Claude clients)",
                t.name
            );
        }
        let text = schema.to_string();
        assert!(
            !text.contains("\"null\""),
            "{}: nullable union in input schema: {text}",
            t.name
        );
        assert!(
            !text.contains("uint"),
            "{}: non-standard integer format: {text}",
            t.name
        );
    }
}

#[test]
fn every_property_is_described() {
    let mut checked = 0;
    for t in tools() {
        let input = Value::Object(t.input_schema.as_ref().clone());
        let output = Value::Object(
            t.output_schema
                .as_ref()
                .unwrap_or_else(|| panic!("{} has no outputSchema", t.name))
                .as_ref()
                .clone(),
        );
        for (side, schema) in [("input", input), ("output", output)] {
            let mut props = Vec::new();
            walk_properties(&schema, &format!("{}:{side}", t.name), &mut props);
            for (path, p) in props {
                let d = p.get("description").and_then(Value::as_str).unwrap_or("");
                assert!(!d.trim().is_empty(), "{path} has no description: {p}");
                checked += 1;
            }
        }
    }
    assert!(checked > 150, "only {checked} properties walked");
}

#[test]
fn mode_rules_are_in_the_schema() {
    let tools = tools();
    let get = |n: &str| {
        Value::Object(
            tools
                .iter()
                .find(|t| t.name == n)
                .unwrap()
                .input_schema
                .as_ref()
                .clone(),
        )
    };
    let status = get("get_attempt_status");
    assert_eq!(status["if"]["required"][0], "attempt_id");
    assert_eq!(status["else"]["required"][0], "attempt_ids");
    assert_eq!(status["properties"]["attempt_ids"]["maxItems"], 100);
    let logs = get("tail_attempt_logs");
    assert_eq!(logs["then"]["not"]["required"][0], "after_entry_index");
    assert_eq!(
        logs["properties"]["channel"]["enum"],
        serde_json::json!(["normalized", "raw"])
    );
    let msgs = get("tail_session_messages");
    assert_eq!(msgs["else"]["required"][0], "attempt_id");
}

#[test]
#[ignore]
fn dump_schemas() {
    for t in tools() {
        println!(
            "== {}\n{}\n{}",
            t.name,
            serde_json::to_string_pretty(&*t.input_schema).unwrap(),
            serde_json::to_string(&t.output_schema).unwrap()
        );
    }
}
