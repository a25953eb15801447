//! Materialises one VK object stream (projects, tasks of a project, processes of a workspace):
//! applies each frame's JSON Patch to the current document and says, at entity level, what
//! changed. Pure (no I/O), so it is tested directly against recorded frames.
//!
//! VK's own use of JSON Patch is entity-grained (`replace /<root>` snapshots, `add`/`replace`/
//! `remove` of `/<root>/<id>`), but deeper paths are applied with the `json-patch` crate too. Two
//! quirks from the contract are absorbed here: `add` of an id already present is an upsert, and
//! `remove` of an unknown id is a no-op (VK sends it for objects that left a stream's filter).
//!
//! Each object is held as its compact JSON text and parsed only when a frame touches it or a
//! caller reads it: a parsed `Value` of a VK task costs ~5× its text, and a follower holds its
//! whole document for as long as the socket lives (10,000 tasks on a big board; issue 27's idle
//! RSS). A frame that fails is undone from a log of what it replaced, not from a copy of the
//! document taken before every frame.

use std::collections::{BTreeMap, BTreeSet};

use json_patch::PatchOperation;
use serde_json::Value;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Change {
    /// The whole set was replaced (first frame, or VK re-snapshotting a lagging client).
    Snapshot,
    Upsert(Uuid),
    Remove(Uuid),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum MaterializeError {
    #[error("patch does not apply: {0}")]
    Patch(String),
    #[error("frame before the first snapshot")]
    NoSnapshot,
}

/// A stream's objects by id, each as its compact JSON text.
type Document = BTreeMap<Uuid, Box<str>>;

pub(crate) struct Materializer {
    root: &'static str,
    doc: Option<Document>,
}

/// What one operation replaced, kept until its frame has applied whole.
enum Undo {
    /// The document before a snapshot (`None`: there was none yet).
    Document(Option<Document>),
    /// One object before an upsert or a remove (`None`: it was absent).
    Object(Uuid, Option<Box<str>>),
}

impl Materializer {
    pub(crate) fn new(root: &'static str) -> Self {
        Materializer { root, doc: None }
    }

    pub(crate) fn has_snapshot(&self) -> bool {
        self.doc.is_some()
    }

    /// Every object, parsed.
    pub(crate) fn objects(&self) -> impl Iterator<Item = Value> + '_ {
        self.doc
            .iter()
            .flat_map(|d| d.values())
            .filter_map(|text| parse_text(text).ok())
    }

    /// Every object's id (its key in the stream's document).
    pub(crate) fn ids(&self) -> impl Iterator<Item = Uuid> + '_ {
        self.doc.iter().flat_map(|d| d.keys().copied())
    }

    /// One object, parsed.
    pub(crate) fn get(&self, id: &Uuid) -> Option<Value> {
        parse_text(self.doc.as_ref()?.get(id)?).ok()
    }

    /// Apply one frame's operations. On error the document is unchanged and the caller should
    /// resync the stream (reconnect for a fresh snapshot).
    pub(crate) fn apply(
        &mut self,
        ops: &[PatchOperation],
    ) -> Result<Vec<Change>, MaterializeError> {
        let mut undo = Vec::new();
        let mut changes = Vec::new();
        for op in ops {
            if let Err(e) = self.apply_one(op, &mut undo, &mut changes) {
                self.roll_back(undo);
                return Err(e);
            }
        }
        Ok(dedup(changes))
    }

    fn apply_one(
        &mut self,
        op: &PatchOperation,
        undo: &mut Vec<Undo>,
        changes: &mut Vec<Change>,
    ) -> Result<(), MaterializeError> {
        let tokens: Vec<String> = op
            .path()
            .tokens()
            .map(|t| t.decoded().into_owned())
            .collect();
        if tokens.first().map(String::as_str) != Some(self.root) {
            return Ok(()); // another root: not this stream's business
        }
        if let (1, PatchOperation::Add(_) | PatchOperation::Replace(_)) = (tokens.len(), op) {
            let doc = parse_root(op_value(op))?;
            undo.push(Undo::Document(self.doc.replace(doc)));
            changes.push(Change::Snapshot);
            return Ok(());
        }
        let doc = self.doc.as_mut().ok_or(MaterializeError::NoSnapshot)?;
        match (tokens.len(), op) {
            (2, PatchOperation::Add(_) | PatchOperation::Replace(_)) => {
                let id = parse_id(&tokens[1])?;
                let old = doc.insert(id, to_text(op_value(op))?);
                undo.push(Undo::Object(id, old));
                changes.push(Change::Upsert(id));
            }
            (2, PatchOperation::Remove(_)) => {
                let id = parse_id(&tokens[1])?;
                if let Some(old) = doc.remove(&id) {
                    undo.push(Undo::Object(id, Some(old)));
                    changes.push(Change::Remove(id));
                }
            }
            (n, _) if n >= 3 => {
                // A change inside one object: apply the op to that object alone.
                let id = parse_id(&tokens[1])?;
                let Some(text) = doc.get(&id) else {
                    return Err(MaterializeError::Patch(format!(
                        "{} on unknown object",
                        op.path()
                    )));
                };
                let mut wrapper = serde_json::json!({ "o": parse_text(text)? });
                let inner = rebase(op, &tokens[2..])?;
                json_patch::patch(&mut wrapper, &[inner])
                    .map_err(|e| MaterializeError::Patch(e.to_string()))?;
                let old = doc.insert(id, to_text(&wrapper["o"])?);
                undo.push(Undo::Object(id, old));
                changes.push(Change::Upsert(id));
            }
            _ => {
                return Err(MaterializeError::Patch(format!(
                    "unsupported operation at {}",
                    op.path()
                )));
            }
        }
        Ok(())
    }

    /// Put back what a failing frame's earlier operations replaced, newest first.
    fn roll_back(&mut self, undo: Vec<Undo>) {
        for step in undo.into_iter().rev() {
            match step {
                Undo::Document(doc) => self.doc = doc,
                Undo::Object(id, old) => {
                    let Some(doc) = self.doc.as_mut() else {
                        continue;
                    };
                    match old {
                        Some(text) => doc.insert(id, text),
                        None => doc.remove(&id),
                    };
                }
            }
        }
    }
}

fn to_text(v: &Value) -> Result<Box<str>, MaterializeError> {
    serde_json::to_string(v)
        .map(String::into_boxed_str)
        .map_err(|e| MaterializeError::Patch(e.to_string()))
}

fn parse_text(text: &str) -> Result<Value, MaterializeError> {
    serde_json::from_str(text).map_err(|e| MaterializeError::Patch(e.to_string()))
}

/// The value an `add` or `replace` carries (`Null` for other operations).
fn op_value(op: &PatchOperation) -> &Value {
    static NULL: Value = Value::Null;
    match op {
        PatchOperation::Add(a) => &a.value,
        PatchOperation::Replace(r) => &r.value,
        _ => &NULL,
    }
}

/// The same operation with its path re-rooted at `/o/<rest>`.
fn rebase(op: &PatchOperation, rest: &[String]) -> Result<PatchOperation, MaterializeError> {
    let mut ptr = String::from("/o");
    for t in rest {
        ptr.push('/');
        ptr.push_str(&t.replace('~', "~0").replace('/', "~1"));
    }
    let mut v = serde_json::to_value(op).map_err(|e| MaterializeError::Patch(e.to_string()))?;
    v["path"] = Value::String(ptr);
    if v.get("from").is_some() {
        return Err(MaterializeError::Patch("move/copy inside an object".into()));
    }
    serde_json::from_value(v).map_err(|e| MaterializeError::Patch(e.to_string()))
}

fn parse_id(s: &str) -> Result<Uuid, MaterializeError> {
    s.parse()
        .map_err(|_| MaterializeError::Patch(format!("object key {s:?} is not a UUID")))
}

fn parse_root(v: &Value) -> Result<Document, MaterializeError> {
    let obj = v
        .as_object()
        .ok_or_else(|| MaterializeError::Patch("snapshot is not an object".into()))?;
    obj.iter()
        .map(|(k, v)| Ok((parse_id(k)?, to_text(v)?)))
        .collect()
}

/// Keep the last change per id, and nothing per id after a snapshot that covers it.
fn dedup(changes: Vec<Change>) -> Vec<Change> {
    let last_snapshot = changes.iter().rposition(|c| *c == Change::Snapshot);
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    if last_snapshot.is_some() {
        out.push(Change::Snapshot);
    }
    let start = last_snapshot.map(|i| i + 1).unwrap_or(0);
    for c in changes[start..].iter().rev() {
        let id = match c {
            Change::Upsert(id) | Change::Remove(id) => *id,
            Change::Snapshot => continue,
        };
        if seen.insert(id) {
            out.push(c.clone());
        }
    }
    let snap = usize::from(last_snapshot.is_some());
    out[snap..].reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(file: &str) -> Vec<json_patch::Patch> {
        let path = format!(
            "{}/tests/fixtures/vk-wire/samples/{file}",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../..")
        );
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let data = v.get("data")?;
                serde_json::from_value(data.get("JsonPatch")?.clone()).ok()
            })
            .collect()
    }

    #[test]
    fn recorded_task_stream_materialises_to_the_rest_snapshot() {
        let mut m = Materializer::new("tasks");
        for f in frames("ws_tasks.jsonl") {
            m.apply(&f.0).unwrap();
        }
        let rest: Value = serde_json::from_str(
            &std::fs::read_to_string(format!(
                "{}/tests/fixtures/vk-wire/samples/rest_tasks.json",
                concat!(env!("CARGO_MANIFEST_DIR"), "/../..")
            ))
            .unwrap(),
        )
        .unwrap();
        let expected = rest["response"]["data"].as_array().unwrap();
        assert_eq!(m.objects().count(), expected.len());
        for t in expected {
            let id: Uuid = t["id"].as_str().unwrap().parse().unwrap();
            assert_eq!(m.get(&id).as_ref(), Some(t));
        }
    }

    #[test]
    fn recorded_process_stream_upserts_the_duplicate_add() {
        let mut m = Materializer::new("execution_processes");
        let fs = frames("ws_execution_processes.jsonl");
        assert_eq!(m.apply(&fs[0].0).unwrap(), vec![Change::Snapshot]);
        for f in &fs[1..] {
            let ch = m.apply(&f.0).unwrap();
            assert!(matches!(ch.as_slice(), [Change::Upsert(_)]));
        }
        assert_eq!(m.objects().count(), 6);
    }

    #[test]
    fn remove_of_unknown_id_is_a_noop_and_deep_paths_apply() {
        let mut m = Materializer::new("tasks");
        let id = Uuid::from_u128(1);
        let p: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op":"replace","path":"/tasks","value":{ id.to_string(): {"id": id, "title":"a"} }},
            {"op":"remove","path":format!("/tasks/{}", Uuid::from_u128(2))},
            {"op":"replace","path":format!("/tasks/{id}/title"),"value":"b"}
        ]))
        .unwrap();
        let ch = m.apply(&p.0).unwrap();
        assert_eq!(ch, vec![Change::Snapshot, Change::Upsert(id)]);
        assert_eq!(m.get(&id).unwrap()["title"], "b");
    }

    #[test]
    fn a_failing_frame_leaves_the_document_unchanged() {
        let mut m = Materializer::new("tasks");
        let id = Uuid::from_u128(1);
        let ok: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op":"replace","path":"/tasks","value":{ id.to_string(): {"id": id} }}
        ]))
        .unwrap();
        m.apply(&ok.0).unwrap();
        let bad: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op":"add","path":format!("/tasks/{id}"),"value":{"id": id, "x": 1}},
            {"op":"remove","path":format!("/tasks/{id}/nope/deeper")}
        ]))
        .unwrap();
        assert!(m.apply(&bad.0).is_err());
        assert_eq!(m.get(&id).unwrap(), serde_json::json!({"id": id}));
    }

    #[test]
    fn a_failing_frame_after_a_snapshot_and_a_remove_puts_back_the_old_document() {
        let mut m = Materializer::new("tasks");
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let ok: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op":"replace","path":"/tasks","value":{ a.to_string(): {"id": a, "n": 1.5} }}
        ]))
        .unwrap();
        m.apply(&ok.0).unwrap();
        let bad: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op":"remove","path":format!("/tasks/{a}")},
            {"op":"replace","path":"/tasks","value":{ b.to_string(): {"id": b} }},
            {"op":"add","path":format!("/tasks/{a}"),"value":{"id": a}},
            {"op":"move","path":format!("/tasks/{b}"),"from":"/x"}
        ]))
        .unwrap();
        assert!(m.apply(&bad.0).is_err());
        assert_eq!(m.ids().collect::<Vec<_>>(), vec![a]);
        assert_eq!(m.get(&a).unwrap(), serde_json::json!({"id": a, "n": 1.5}));
    }
}
