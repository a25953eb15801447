//! The rewrites of `lean`, one by one, and on the tools' real output schemas.

use serde_json::{Value, json};

use super::lean;

fn leaned(v: Value) -> Value {
    let Value::Object(o) = v else {
        panic!("not an object")
    };
    Value::Object(lean(o))
}

#[test]
fn a_ref_is_inlined_with_both_descriptions() {
    let out = leaned(json!({
        "$defs": {"P": {"type": "object", "description": "inner",
                        "properties": {"a": {"type": "string", "description": "a"}}}},
        "properties": {"p": {"$ref": "#/$defs/P", "description": "outer"}}
    }));
    assert_eq!(
        out,
        json!({"properties": {"p": {"type": "object", "description": "outer\n\ninner",
                                    "properties": {"a": {"type": "string", "description": "a"}}}}})
    );
}

#[test]
fn a_recursive_ref_stays_with_its_defs() {
    let node = json!({"type": "object", "properties": {
        "next": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]}}});
    let out = leaned(json!({"$defs": {"N": node}, "properties": {"n": {"$ref": "#/$defs/N"}}}));
    assert_eq!(out["properties"]["n"]["type"], "object");
    assert_eq!(
        out["properties"]["n"]["properties"]["next"]["anyOf"][0]["$ref"],
        "#/$defs/N"
    );
    assert_eq!(out["$defs"]["N"], node);
}

#[test]
fn a_ref_beside_a_constraint_stays() {
    let schema = json!({"$defs": {"P": {"type": "string"}},
                        "properties": {"p": {"$ref": "#/$defs/P", "maxLength": 3}}});
    assert_eq!(leaned(schema.clone()), schema);
}

#[test]
fn documented_constants_become_an_enum() {
    let out = leaned(
        json!({"properties": {"s": {"description": "State.", "oneOf": [
            {"const": "idle", "type": "string", "description": "Nothing ran."},
            {"const": "running", "type": "string"}
        ]}}}),
    );
    assert_eq!(
        out["properties"]["s"],
        json!({"description": "State.\n- `idle`: Nothing ran.", "enum": ["idle", "running"],
               "type": "string"})
    );
}

#[test]
fn repeated_or_mixed_branches_stay_unions() {
    for schema in [
        json!({"oneOf": [{"const": "a"}, {"const": "a"}]}),
        json!({"oneOf": [{"const": "a"}, {"type": "integer"}]}),
        json!({"oneOf": [{"const": "a", "type": "integer"}, {"const": "b"}]}),
    ] {
        assert_eq!(leaned(schema.clone()), schema);
    }
}

#[test]
fn an_optional_enum_takes_null() {
    let out = leaned(json!({
        "$defs": {"E": {"description": "E.", "oneOf": [{"const": "x", "type": "string"},
                                                       {"const": "y", "type": "string"}]}},
        "properties": {"e": {"description": "Maybe.",
                             "anyOf": [{"$ref": "#/$defs/E"}, {"type": "null"}]}}
    }));
    assert_eq!(
        out,
        json!({"properties": {"e": {"description": "Maybe.\n\nE.", "enum": ["x", "y", null],
                                    "type": ["string", "null"]}}})
    );
}

#[test]
fn an_optional_object_takes_null_in_its_type() {
    let out = leaned(json!({"properties": {"o": {"anyOf": [
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}},
        {"type": "null"}
    ]}}}));
    assert_eq!(
        out["properties"]["o"],
        json!({"type": ["object", "null"], "properties": {"a": {"type": "integer", "minimum": 0}}})
    );
}

#[test]
fn a_nullable_union_binding_every_type_stays() {
    let schema = json!({"anyOf": [{"type": "string", "not": {"const": "x"}}, {"type": "null"}]});
    assert_eq!(leaned(schema.clone()), schema);
}

#[test]
fn properties_named_like_keywords_are_schemas_too() {
    let out = leaned(json!({
        "$defs": {"P": {"type": "string"}},
        "properties": {"default": {"$ref": "#/$defs/P"}, "enum": {"$ref": "#/$defs/P"}}
    }));
    assert_eq!(
        out,
        json!({"properties": {"default": {"type": "string"}, "enum": {"type": "string"}}})
    );
}

/// Every union of constants, every `$ref` and every `Option` union is gone from the tools'
/// output schemas (none is recursive).
#[test]
fn the_tools_output_schemas_are_lean() {
    fn costly(v: &Value, path: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                for k in ["$ref", "$defs", "oneOf"] {
                    if o.contains_key(k) {
                        out.push(format!("{path}: {k}"));
                    }
                }
                if let Some(Value::Array(b)) = o.get("anyOf")
                    && b.iter().any(|b| b.get("type").is_some_and(|t| t == "null"))
                {
                    out.push(format!("{path}: anyOf with null"));
                }
                for (k, child) in o {
                    costly(child, &format!("{path}/{k}"), out);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    costly(x, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    for (name, route) in &crate::tools::router().map {
        let out = route.attr.output_schema.as_ref().expect("an output schema");
        costly(&Value::Object(out.as_ref().clone()), name, &mut found);
    }
    assert!(found.is_empty(), "left in output schemas: {found:#?}");
}
