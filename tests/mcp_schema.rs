//! Walks every tool's schemas: portable inputs (root `type: object`, no root combinator, no
//! nullable type unions), every property described (inputs and outputs, nested and `$defs`),
//! every description in the Use when / Required / Optional / Next / Avoid template, and
//! annotations present.

use std::sync::Arc;

use serde_json::Value;
use vk_observer::health::Health;
use vk_observer::mcp::VkTools;
use vk_observer::query::Query;
use vk_observer::store::StoreOwner;

fn tools() -> Vec<rmcp::model::Tool> {
    let store = StoreOwner::open_temporary(Default::default())
        .unwrap()
        .store();
    VkTools::new(Query::new(store, Arc::new(Health::new())), None, None).all_tools()
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
                // `if` conditions restate properties as constraints, not field definitions.
                if k != "properties" && k != "if" {
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
        assert!(
            d.chars().count() < 600,
            "{}: description is {} characters (max 599)",
            t.name,
            d.chars().count()
        );
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

#[test]
fn follow_up_requires_prompt_for_send_and_queue_without_a_root_combinator() {
    let tools = tools();
    let fu = tools.iter().find(|t| t.name == "follow_up").unwrap();
    let s = Value::Object(fu.input_schema.as_ref().clone());
    for k in ["oneOf", "anyOf", "allOf"] {
        assert!(s.get(k).is_none());
    }
    assert_eq!(
        s["if"]["properties"]["action"]["enum"],
        serde_json::json!(["send", "queue"])
    );
    assert_eq!(s["then"]["required"], serde_json::json!(["prompt"]));
    assert!(
        s["else"].get("required").is_none(),
        "cancel takes no prompt"
    );
    assert_eq!(s["required"], serde_json::json!(["action"]));
    assert_eq!(
        s["properties"]["action"]["enum"],
        serde_json::json!(["send", "queue", "cancel"])
    );
    // Exactly one target in both branches.
    for branch in ["then", "else"] {
        assert_eq!(s[branch]["then"]["not"]["required"][0], "session_id");
        assert_eq!(s[branch]["else"]["required"][0], "session_id");
    }
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for n in [
        "create_task",
        "update_task",
        "delete_task",
        "start_task_attempt",
        "follow_up",
        "stop_attempt",
        "get_attempt_file",
        "get_attempt_patch",
        "wait_for_attempt_change",
    ] {
        assert!(names.contains(&n), "{n}");
    }
    let destructive = |n: &str| {
        tools
            .iter()
            .find(|t| t.name == n)
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()
            .destructive_hint
    };
    assert_eq!(destructive("delete_task"), Some(true));
    assert_eq!(destructive("stop_attempt"), Some(true));
}
