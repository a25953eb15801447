//! Walks every tool's schemas: portable inputs (root `type: object`, no root combinator, no
//! nullable type unions), every property described (inputs and outputs, nested and `$defs`),
//! every description in the Use when / Required / Optional / Next / Avoid template,
//! annotations present, and only JSON Schema's own `format`s in input and output schemas.

use std::sync::Arc;

use serde_json::Value;
use vk_observer_mcp::VkTools;
use vk_observer_query::Query;
use vk_observer_store::StoreOwner;
use vk_observer_telemetry::health::Health;

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

/// JSON Schema 2020-12's formats (validation vocabulary, §7.3), spelled out here rather than
/// taken from the code under test.
const STANDARD_FORMATS: [&str; 19] = [
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

/// Every `format` keyword under `v` (a property *named* `format`, under `properties`, is not
/// one), with its path.
fn formats(v: &Value, path: &str, in_properties: bool, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                if k == "format" && !in_properties {
                    out.push((path.to_string(), child.clone()));
                }
                formats(child, &format!("{path}/{k}"), k == "properties", out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                formats(x, &format!("{path}[{i}]"), false, out);
            }
        }
        _ => {}
    }
}

#[test]
fn only_standard_formats_in_input_and_output_schemas() {
    let mut standard_seen = 0;
    for t in tools() {
        let output = t
            .output_schema
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no outputSchema", t.name));
        for (side, schema) in [("input", &t.input_schema), ("output", output)] {
            let schema = Value::Object(schema.as_ref().clone());
            let mut found = Vec::new();
            formats(&schema, &format!("{}:{side}", t.name), false, &mut found);
            for (path, f) in found {
                assert!(
                    f.as_str().is_some_and(|f| STANDARD_FORMATS.contains(&f)),
                    "{path}: non-standard format {f} (TypeScript-SDK clients warn `unknown format`)"
                );
                standard_seen += 1;
            }
        }
    }
    // Timestamps and ids keep their standard formats: the rewrite drops only the others.
    assert!(standard_seen > 0, "no standard format left anywhere");
}

#[test]
fn unsigned_outputs_keep_their_lower_bound() {
    let tools = tools();
    let wait = tools
        .iter()
        .find(|t| t.name == "wait_for_attempt_change")
        .unwrap();
    let out = Value::Object(wait.output_schema.as_ref().unwrap().as_ref().clone());
    let waited = &out["properties"]["waited_ms"];
    assert_eq!(waited["minimum"], 0, "{waited}");
    assert!(waited.get("format").is_none(), "{waited}");
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
        "get_attempt_branch_status",
        "rebase_attempt",
        "abort_attempt_conflicts",
        "merge_attempt",
        "push_attempt",
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
    assert_eq!(destructive("abort_attempt_conflicts"), Some(true));
    assert_eq!(destructive("merge_attempt"), Some(false));
}

/// `vk_observer_mcp::detail_tools()` (what the CLI and the tests ask for detail 2) names
/// exactly the tools whose input schema takes `detail`.
#[test]
fn the_detail_tools_list_matches_the_schemas() {
    let mut with_detail: Vec<String> = tools()
        .iter()
        .filter(|t| {
            Value::Object(t.input_schema.as_ref().clone())["properties"]
                .get("detail")
                .is_some()
        })
        .map(|t| t.name.to_string())
        .collect();
    with_detail.sort();
    let mut listed: Vec<String> = vk_observer_mcp::detail_tools()
        .iter()
        .map(|t| t.to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, with_detail);
}

/// Every tool takes `detail` (0 | 1 | 2, the same integer schema everywhere, documented), so
/// an orchestrator can send the same level to every call; tools with nothing to leave out say
/// in the field's description that the answer is the same at every level.
#[test]
fn every_tool_takes_detail() {
    let tools = tools();
    assert!(tools.len() >= 29, "{} tools", tools.len());
    for t in &tools {
        let s = Value::Object(t.input_schema.as_ref().clone());
        let d = &s["properties"]["detail"];
        assert_eq!(d["type"], "integer", "{}: detail {d}", t.name);
        assert_eq!(d["minimum"], 0, "{}", t.name);
        assert_eq!(d["maximum"], 2, "{}", t.name);
        assert_eq!(d["default"], 0, "{}", t.name);
        let doc = d["description"].as_str().unwrap_or_default();
        assert!(
            doc.contains("0 ") && doc.contains("default"),
            "{}: undocumented detail {doc}",
            t.name
        );
        assert!(vk_observer_mcp::takes_detail(&t.name), "{}", t.name);
    }
}

#[test]
fn activity_tools_keep_their_pagination_modes_apart_in_the_schema() {
    let tools = tools();
    for name in ["tail_project_activity", "tail_task_activity"] {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        let s = Value::Object(t.input_schema.as_ref().clone());
        assert_eq!(s["if"]["required"][0], "cursor", "{name}");
        assert_eq!(s["then"]["not"]["required"][0], "since_token", "{name}");
        assert_eq!(s["properties"]["detail"]["maximum"], 2, "{name}");
        let out = Value::Object(t.output_schema.as_ref().unwrap().as_ref().clone());
        for field in [
            "items",
            "next_since_token",
            "has_more",
            "next_cursor",
            "token_reset",
        ] {
            assert!(out["properties"].get(field).is_some(), "{name}: {field}");
        }
        assert_eq!(
            t.annotations.as_ref().unwrap().read_only_hint,
            Some(true),
            "{name}"
        );
    }
}

#[test]
fn approval_tools_carry_their_mode_rules() {
    let tools = tools();
    let get = |n: &str| {
        let t = tools
            .iter()
            .find(|t| t.name == n)
            .unwrap_or_else(|| panic!("{n} listed"));
        Value::Object(t.input_schema.as_ref().clone())
    };
    let list = get("list_approvals");
    assert_eq!(list["if"]["required"][0], "attempt_ids");
    assert_eq!(list["then"]["not"]["required"][0], "project_id");
    assert_eq!(list["else"]["required"][0], "project_id");
    assert_eq!(list["properties"]["attempt_ids"]["maxItems"], 100);
    let respond = get("respond_approval");
    assert_eq!(
        respond["properties"]["decision"]["enum"],
        serde_json::json!(["approve", "deny"])
    );
    let required: Vec<&str> = respond["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(required, vec!["approval_id", "decision"]);
}

/// `tools/list` as clients see it (names, titles, descriptions, input and output schemas,
/// annotations), byte for byte against `tests/fixtures/tools-list.json`: the MCP API changes
/// only on purpose. After a deliberate change, rewrite the file with
/// `VK_OBSERVER_BLESS=1 cargo test --test mcp_schema tools_list` and review its diff.
#[test]
fn tools_list_matches_the_golden_file() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tools-list.json"
    );
    let now = serde_json::to_string_pretty(&tools()).unwrap() + "\n";
    if std::env::var_os("VK_OBSERVER_BLESS").is_some() {
        std::fs::write(path, &now).unwrap();
    }
    let golden = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        now == golden,
        "tools/list differs from {path}; if on purpose, bless it (see this test's doc)"
    );
}
