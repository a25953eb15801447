//! Output schemas in the shape clients validate fastest, accepting exactly what they accepted
//! (issue 39 item 7). The official Python SDK checks every `structuredContent` with
//! `jsonschema`, whose cost is per keyword applied: a `$ref` is a lookup through `referencing`
//! and a fresh validator; a `oneOf` of `const`s (how schemars writes a documented enum) tries
//! every branch and builds an error for each miss; an `anyOf [X, null]` (an `Option`) does the
//! same for two. Three rewrites remove them, each keeping the set of documents accepted:
//!
//! - every local `$ref` is replaced by the definition it names (the referring schema holds only
//!   annotations beside it, so the two merge); a `$ref` into a definition being inlined (a
//!   recursive type) stays, with `$defs`;
//! - a `oneOf`/`anyOf` whose branches are distinct `const`s becomes one `enum` (and `type`),
//!   each branch's description kept as a line of the schema's own;
//! - an `anyOf`/`oneOf` of `{"type": "null"}` and a typed schema `X` becomes `X` with `"null"`
//!   added to its `type` (and to its `enum`): `X`'s other keywords bind only their own types.
//!
//! Descriptions are kept: where two schemas merge, both texts are, the referring one first.

use rmcp::model::JsonObject;
use serde_json::{Map, Value};

/// Keywords that only annotate a schema: a schema holding only these beside a `$ref` (or a
/// union) means the same as the two merged.
const ANNOTATIONS: [&str; 8] = [
    "description",
    "title",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
];

/// Keywords whose value is a schema, or a list of schemas (`items` in older drafts too).
const SCHEMA_OR_LIST: [&str; 15] = [
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
    "allOf",
    "anyOf",
    "oneOf",
    "prefixItems",
];

/// Keywords whose value maps names to schemas. Every other keyword's value is data or an
/// annotation (`enum`, `const`, `default`, `required`, ...): never rewritten.
const SCHEMA_MAP: [&str; 5] = [
    "properties",
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
];

/// Keywords that bind instances of every type: a nullable union whose other branch holds one
/// of these (but `enum`, which gets `null`) is left as it is (null would have to satisfy it).
const ANY_TYPE: [&str; 9] = [
    "const", "not", "allOf", "anyOf", "oneOf", "if", "$ref", "then", "else",
];

/// The schemas directly under schema `o`.
fn subschemas(o: &JsonObject) -> Vec<&Value> {
    let mut out = Vec::new();
    for (k, v) in o {
        let k = k.as_str();
        match (SCHEMA_OR_LIST.contains(&k), v) {
            (true, Value::Array(a)) => out.extend(a),
            (true, v) => out.push(v),
            (false, Value::Object(m)) if SCHEMA_MAP.contains(&k) => out.extend(m.values()),
            _ => {}
        }
    }
    out
}

/// [`subschemas`], to rewrite.
fn subschemas_mut(o: &mut JsonObject) -> Vec<&mut Value> {
    let mut out = Vec::new();
    for (k, v) in o.iter_mut() {
        let k = k.as_str();
        match (SCHEMA_OR_LIST.contains(&k), v) {
            (true, Value::Array(a)) => out.extend(a.iter_mut()),
            (true, v) => out.push(v),
            (false, Value::Object(m)) if SCHEMA_MAP.contains(&k) => out.extend(m.values_mut()),
            _ => {}
        }
    }
    out
}

/// `schema` with its local `$ref`s inlined, its enums of `const`s as `enum`s and its nullable
/// unions as type lists.
pub(super) fn lean(mut schema: JsonObject) -> JsonObject {
    let defs = match schema.remove("$defs") {
        Some(Value::Object(defs)) => defs,
        Some(other) => {
            schema.insert("$defs".into(), other);
            Map::new()
        }
        None => Map::new(),
    };
    let mut root = Value::Object(schema);
    inline(&mut root, &defs, &mut Vec::new());
    fold(&mut root);
    let keep_defs = !defs.is_empty() && refers(&root);
    let Value::Object(mut root) = root else {
        unreachable!("an object stays an object")
    };
    if keep_defs {
        // A recursive type: its `$ref`s resolve in the definitions, kept (folded alike).
        let mut defs = Value::Object(defs);
        if let Value::Object(m) = &mut defs {
            m.values_mut().for_each(fold);
        }
        root.insert("$defs".into(), defs);
    }
    root
}

/// The definition a local `$ref` names (`#/$defs/<name>`), when the schema holds only
/// annotations beside it.
fn local_ref(o: &JsonObject) -> Option<&str> {
    let name = o.get("$ref")?.as_str()?.strip_prefix("#/$defs/")?;
    let only_annotations = o
        .keys()
        .all(|k| k == "$ref" || ANNOTATIONS.contains(&k.as_str()));
    (only_annotations && !name.contains('/') && !name.contains('~')).then_some(name)
}

/// Replace every local `$ref` under `v` by its definition (itself inlined), except a `$ref`
/// into a definition being inlined (`stack`), which recursion would never end.
fn inline(v: &mut Value, defs: &JsonObject, stack: &mut Vec<String>) {
    // `true`/`false` schemas: nothing to inline.
    let Value::Object(o) = v else { return };
    let target = local_ref(o)
        .filter(|name| !stack.iter().any(|s| s == name))
        .and_then(|name| Some((name.to_string(), defs.get(name)?.as_object()?.clone())));
    if let Some((name, def)) = target {
        let mut def = Value::Object(def);
        stack.push(name);
        inline(&mut def, defs, stack);
        stack.pop();
        o.remove("$ref");
        if let Value::Object(def) = def {
            merge(o, def);
        }
        return;
    }
    for child in subschemas_mut(o) {
        inline(child, defs, stack);
    }
}

/// Whether a `$ref` is left anywhere under `v`.
fn refers(v: &Value) -> bool {
    v.as_object().is_some_and(|o| {
        o.get("$ref").is_some_and(Value::is_string) || subschemas(o).into_iter().any(refers)
    })
}

/// `inner`'s keywords added to `outer` (which holds only annotations where they overlap):
/// `outer`'s annotations win, but both descriptions are kept, `outer`'s first.
fn merge(outer: &mut JsonObject, inner: JsonObject) {
    for (k, val) in inner {
        match (outer.get_mut(&k), val) {
            (Some(Value::String(mine)), Value::String(theirs)) if k == "description" => {
                if *mine != theirs {
                    mine.push_str("\n\n");
                    mine.push_str(&theirs);
                }
            }
            (Some(_), _) => {}
            (None, val) => {
                outer.insert(k, val);
            }
        }
    }
}

/// The enum and nullable rewrites, bottom-up (a union's branches are folded before it).
fn fold(v: &mut Value) {
    if let Value::Object(o) = v {
        subschemas_mut(o).into_iter().for_each(fold);
        for union in ["oneOf", "anyOf"] {
            consts_to_enum(o, union);
            flatten_nullable(o, union);
        }
    }
}

/// The JSON Schema type name of a value (`integer` for whole numbers).
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A branch that is one documented constant (`{const, type?, description?, title?}`, its
/// `type` matching it): the constant, its type and its description.
fn constant(branch: &Value) -> Option<(&Value, &'static str, Option<&str>)> {
    let b = branch.as_object()?;
    let c = b.get("const")?;
    let allowed = ["const", "type", "description", "title"];
    if !b.keys().all(|k| allowed.contains(&k.as_str())) {
        return None;
    }
    let t = type_name(c);
    if let Some(declared) = b.get("type")
        && declared.as_str() != Some(t)
        && !(declared == "number" && t == "integer")
    {
        return None;
    }
    Some((c, t, b.get("description").and_then(Value::as_str)))
}

/// `union` of distinct constants → `enum` (and `type` when they share one and the schema
/// names none); the branches' descriptions become lines of the schema's description.
fn consts_to_enum(o: &mut JsonObject, union: &str) {
    let Some(Value::Array(branches)) = o.get(union) else {
        return;
    };
    let Some(consts) = branches.iter().map(constant).collect::<Option<Vec<_>>>() else {
        return;
    };
    let distinct = consts
        .iter()
        .enumerate()
        .all(|(i, (c, ..))| consts[..i].iter().all(|(d, ..)| d != c));
    if consts.is_empty() || !distinct || o.contains_key("enum") || o.contains_key("const") {
        return;
    }
    let values: Vec<Value> = consts.iter().map(|(c, ..)| (*c).clone()).collect();
    let shared = consts
        .iter()
        .all(|(_, t, _)| *t == consts[0].1)
        .then_some(consts[0].1);
    let lines: Vec<String> = consts
        .iter()
        .filter_map(|&(c, _, d)| Some(format!("- {}: {}", shown(c), d?)))
        .collect();
    o.remove(union);
    o.insert("enum".into(), Value::Array(values));
    if let Some(t) = shared
        && !o.contains_key("type")
    {
        o.insert("type".into(), t.into());
    }
    if !lines.is_empty() {
        let mut text = o
            .get("description")
            .and_then(Value::as_str)
            .map(|d| format!("{d}\n"))
            .unwrap_or_default();
        text.push_str(&lines.join("\n"));
        o.insert("description".into(), text.into());
    }
}

/// A constant as its description line names it: a string in backticks, else its JSON.
fn shown(c: &Value) -> String {
    match c {
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}

/// `union` of `{"type": "null"}` and a typed schema `X` (nothing binding every type in it),
/// in a schema holding only annotations beside it → `X` with `null` allowed.
fn flatten_nullable(o: &mut JsonObject, union: &str) {
    let Some(Value::Array(branches)) = o.get(union) else {
        return;
    };
    let is_null = |b: &Value| {
        b.get("type").is_some_and(|t| t == "null") && b.as_object().is_some_and(|b| b.len() == 1)
    };
    let [a, b] = branches.as_slice() else {
        return;
    };
    let other = match (is_null(a), is_null(b)) {
        (true, false) => b,
        (false, true) => a,
        _ => return,
    };
    let Some(x) = other.as_object() else {
        return;
    };
    let types: Vec<Value> = match x.get("type") {
        Some(Value::String(t)) => vec![Value::String(t.clone())],
        Some(Value::Array(ts)) if ts.iter().all(Value::is_string) => ts.clone(),
        _ => return,
    };
    let binds_all = x.keys().any(|k| ANY_TYPE.contains(&k.as_str()));
    let beside_only_annotations = o
        .keys()
        .all(|k| k == union || ANNOTATIONS.contains(&k.as_str()));
    let enum_ok = x.get("enum").is_none_or(Value::is_array);
    if binds_all || !beside_only_annotations || !enum_ok {
        return;
    }
    let mut x = x.clone();
    let mut types = types;
    if !types.iter().any(|t| t == "null") {
        types.push("null".into());
    }
    x.insert("type".into(), Value::Array(types));
    if let Some(Value::Array(values)) = x.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    o.remove(union);
    merge(o, x);
}

#[cfg(test)]
#[path = "lean_tests.rs"]
mod tests;
