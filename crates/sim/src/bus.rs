//! VK's in-memory sequenced message store: every dispatched change gets the next seq, is kept
//! in history for resume, and is broadcast to the SSE and object-stream subscribers.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::broadcast;

/// One sequenced JSON Patch (an array of operations).
#[derive(Debug, Clone)]
pub(crate) struct SeqMsg {
    pub seq: u64,
    pub patch: Value,
}

/// `min_seq`/`max_seq` of the history, as VK's `SequencedHistoryMetadata`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub min_seq: Option<u64>,
    pub max_seq: Option<u64>,
}

impl Meta {
    /// VK's `can_resume_from`: only the lower bound is checked.
    pub(crate) fn can_resume_from(&self, after: u64) -> bool {
        match self.min_seq {
            Some(min) => after >= min.saturating_sub(1),
            None => after == 0,
        }
    }
}

struct State {
    last_seq: u64,
    history: Vec<Arc<SeqMsg>>,
}

pub(crate) struct Bus {
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<SeqMsg>>,
}

pub(crate) type Subscription = (Vec<Arc<SeqMsg>>, broadcast::Receiver<Arc<SeqMsg>>, Meta);

impl Bus {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                last_seq: 0,
                history: Vec::new(),
            }),
            tx: broadcast::channel(16_384).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn meta_of(st: &State) -> Meta {
        Meta {
            min_seq: st.history.first().map(|m| m.seq),
            max_seq: st.history.last().map(|m| m.seq),
        }
    }

    /// Assigns the next seq and publishes; under the lock so subscribers never miss or dup.
    pub(crate) fn push(&self, patch: Value) -> u64 {
        let mut st = self.lock();
        st.last_seq += 1;
        let msg = Arc::new(SeqMsg {
            seq: st.last_seq,
            patch,
        });
        st.history.push(msg.clone());
        let _ = self.tx.send(msg);
        st.last_seq
    }

    /// History after `after` (all when None), a live receiver, and the metadata, atomically.
    pub(crate) fn subscribe_from(&self, after: Option<u64>) -> Subscription {
        let st = self.lock();
        let rx = self.tx.subscribe();
        let history = st
            .history
            .iter()
            .filter(|m| after.is_none_or(|a| m.seq > a))
            .cloned()
            .collect();
        (history, rx, Self::meta_of(&st))
    }

    pub(crate) fn meta(&self) -> Meta {
        Self::meta_of(&self.lock())
    }

    /// A VK restart: history gone, ids restart at 1.
    pub(crate) fn reset(&self) {
        let mut st = self.lock();
        st.last_seq = 0;
        st.history.clear();
    }
}

/// VK's `invalidation_hints_from_patch`: task ids, workspace ids, "some process changed".
pub(crate) fn hints(patch: &Value) -> Option<Value> {
    let mut task_ids = std::collections::BTreeSet::new();
    let mut ws_ids = std::collections::BTreeSet::new();
    let mut has_proc = false;
    for op in patch.as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let path = op.get("path").and_then(Value::as_str).unwrap_or("");
        let Some(stripped) = path.strip_prefix('/') else {
            continue;
        };
        let (root, rest) = stripped.split_once('/').unwrap_or((stripped, ""));
        let id = rest.split('/').next().unwrap_or("");
        match root {
            "tasks" if !id.is_empty() => {
                task_ids.insert(id.replace("~1", "/").replace("~0", "~"));
            }
            "workspaces" => {
                if !id.is_empty() {
                    ws_ids.insert(id.to_string());
                }
                if let Some(t) = op.pointer("/value/task_id").and_then(Value::as_str) {
                    task_ids.insert(t.to_string());
                }
            }
            "execution_processes" => has_proc = true,
            _ => {}
        }
    }
    if task_ids.is_empty() && ws_ids.is_empty() && !has_proc {
        return None;
    }
    Some(json!({
        "taskIds": task_ids.into_iter().collect::<Vec<_>>(),
        "workspaceIds": ws_ids.into_iter().collect::<Vec<_>>(),
        "hasExecutionProcess": has_proc,
    }))
}

/// A sequenced WS frame: `{seq, JsonPatch, invalidate?}`.
pub(crate) fn ws_frame(seq: u64, patch: &Value) -> String {
    let mut v = json!({"seq": seq, "JsonPatch": patch});
    if let (Some(h), Some(o)) = (hints(patch), v.as_object_mut()) {
        o.insert("invalidate".into(), h);
    }
    v.to_string()
}
