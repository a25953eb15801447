//! The daemon's own numbering of a log on a dialect that renumbers (VK 0.1.x; design-notes §25).
//!
//! VK 0.1.x numbers a log's entries per connection: live, in the order its normalizers first
//! emit them; on a reconnect to a running process, the same (its in-memory history); once the
//! process ended, or after a VK restart, by re-normalizing the stored output, so the same
//! entries come at other indices, in their final states only, the coalesced stderr entry
//! usually last. Clients were promised indices that keep their meaning, so the daemon numbers
//! entries itself and reconciles each connection with what it already served.
//!
//! A [`Renumberer`] serves one (process, channel). It is built from the entries already served
//! (the store holds them, so it survives a daemon restart), told when a VK connection starts
//! ([`Renumberer::connect`]), and fed VK's patch ops one by one ([`Renumberer::apply`]); for
//! each it answers what the daemon writes in its own numbering: a [`Write::Append`] at the next
//! index, a [`Write::Replace`] of a served index, or nothing. Pure: no I/O, no clock.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use serde_json::Value;

/// One op of a VK log frame (`{"JsonPatch":[…]}`), at VK's index for this connection.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum VkOp {
    Add { index: usize, value: Value },
    Replace { index: usize, value: Value },
    Remove { index: usize },
}

impl VkOp {
    /// One element of a frame's `JsonPatch` array; `None` when it does not address
    /// `/entries/<n>` or lacks its value (VK's log frames always do; a stray op is skipped).
    pub(crate) fn parse(op: &Value) -> Option<VkOp> {
        let path = op.get("path")?.as_str()?;
        let index = path.strip_prefix("/entries/")?.parse().ok()?;
        let value = || op.get("value").cloned();
        match op.get("op")?.as_str()? {
            "add" => Some(VkOp::Add {
                index,
                value: value()?,
            }),
            "replace" => Some(VkOp::Replace {
                index,
                value: value()?,
            }),
            "remove" => Some(VkOp::Remove { index }),
            _ => None,
        }
    }

    /// The ops of one frame; `{"finished":true}` and any other frame have none.
    pub(crate) fn of_frame(frame: &Value) -> Vec<VkOp> {
        let Some(ops) = frame.get("JsonPatch").and_then(Value::as_array) else {
            return Vec::new();
        };
        ops.iter().filter_map(VkOp::parse).collect()
    }
}

/// What the daemon writes, in its own numbering.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Write {
    /// A new entry at the next index (the log's length before it): gapless.
    Append { index: u64, entry: Value },
    /// A served entry's new content, in place.
    Replace { index: u64, entry: Value },
}

/// How an entry is recognised in another connection (design-notes §25, "Identity").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// The bucket alone identifies it (a tool call, a state entry); its content changes freely.
    Keyed,
    /// Text that may grow by `replace`: the same content, or one a prefix of the other.
    Grows,
    /// Coalesced text (an error message, i.e. VK's stderr entry): as `Grows`, or the served
    /// content inside the new (VK overwrites the entry after a pause; its replay holds it all).
    Coalesced,
    /// The same content only (raw chunks, shapes this module does not know).
    Exact,
}

#[derive(Clone, Debug)]
struct Identity {
    /// What must be equal for any match: the kind (and a tool call's name and action).
    bucket: String,
    /// What `Grows`, `Coalesced` and `Exact` compare; empty for `Keyed`.
    content: String,
    rule: Rule,
}

/// Kinds that are one updated state rather than text: recognised by their kind alone.
const STATE_KINDS: [&str; 3] = ["token_usage_info", "next_action", "loading"];

fn identify(value: &Value) -> Identity {
    let exact = |bucket: &str, content: String| Identity {
        bucket: bucket.to_owned(),
        content,
        rule: Rule::Exact,
    };
    let kind = value.get("type").and_then(Value::as_str);
    let text = |v: &Value| v.get("content").and_then(Value::as_str).map(str::to_owned);
    match (kind, value.get("content")) {
        (Some("NORMALIZED_ENTRY"), Some(inner)) => match inner.get("entry_type") {
            Some(entry_type) => identify_normalized(entry_type, text(inner).unwrap_or_default()),
            None => exact("?", value.to_string()),
        },
        (Some(raw @ ("STDOUT" | "STDERR")), Some(Value::String(content))) => {
            exact(&format!("raw:{raw}"), content.clone())
        }
        _ => exact("?", value.to_string()),
    }
}

fn identify_normalized(entry_type: &Value, content: String) -> Identity {
    let kind = entry_type.get("type").and_then(Value::as_str).unwrap_or("");
    let keyed = |bucket: String| Identity {
        bucket,
        content: String::new(),
        rule: Rule::Keyed,
    };
    if kind == "tool_use" {
        // The action without its outcome: `status` and `action_type.result` change in place.
        let mut action = entry_type
            .get("action_type")
            .cloned()
            .unwrap_or(Value::Null);
        if let Some(fields) = action.as_object_mut() {
            fields.remove("result");
        }
        let tool = entry_type
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or("");
        return keyed(format!("tool_use:{tool}:{action}"));
    }
    if STATE_KINDS.contains(&kind) {
        return keyed(kind.to_owned());
    }
    let rule = if kind == "error_message" {
        Rule::Coalesced
    } else {
        Rule::Grows
    };
    Identity {
        bucket: entry_type.to_string(),
        content,
        rule,
    }
}

/// `new` is a later (or earlier) state of the served text `old` under `new`'s rule.
fn related(old: &Identity, new: &Identity) -> bool {
    if old.content.trim().is_empty() || new.content.trim().is_empty() {
        return false;
    }
    match new.rule {
        Rule::Grows => grows(old, new),
        Rule::Coalesced => grows(old, new) || new.content.contains(&old.content),
        Rule::Keyed | Rule::Exact => false,
    }
}

fn grows(old: &Identity, new: &Identity) -> bool {
    new.content.starts_with(&old.content) || old.content.starts_with(&new.content)
}

/// Fingerprint of (bucket, content): "has this entry ever shown this text".
fn fingerprint(id: &Identity) -> u64 {
    let mut h = DefaultHasher::new();
    (&id.bucket, &id.content).hash(&mut h);
    h.finish()
}

struct Served {
    entry: Value,
    id: Identity,
}

/// The state of one VK connection.
#[derive(Default)]
struct Connection {
    /// VK index → daemon index.
    map: HashMap<usize, usize>,
    /// Served entries this connection has not claimed yet, by bucket: each is matched once.
    open: HashMap<String, BTreeSet<usize>>,
}

/// The daemon's numbering of one (process, channel) log; see the module doc.
pub(crate) struct Renumberer {
    served: Vec<Served>,
    /// (bucket, content) fingerprint → daemon indices that have shown it since this was built
    /// (not `Keyed` ones). Earlier contents are only known in memory: the store keeps the last.
    shown: HashMap<u64, BTreeSet<usize>>,
    conn: Connection,
}

impl Renumberer {
    /// From the entries already served, in the daemon's order (index 0 first); ready for a
    /// first connection.
    pub(crate) fn new(served: impl IntoIterator<Item = Value>) -> Renumberer {
        let mut r = Renumberer {
            served: Vec::new(),
            shown: HashMap::new(),
            conn: Connection::default(),
        };
        for entry in served {
            let id = identify(&entry);
            r.remember(r.served.len(), &id);
            r.served.push(Served { entry, id });
        }
        r.connect();
        r
    }

    /// A new VK connection: its frames restart at `/entries/0` and every served entry may be
    /// matched once again.
    pub(crate) fn connect(&mut self) {
        self.conn.map.clear();
        self.conn.open.clear();
        for (d, s) in self.served.iter().enumerate() {
            self.conn
                .open
                .entry(s.id.bucket.clone())
                .or_default()
                .insert(d);
        }
    }

    /// The number of entries served (the next `Append`'s index).
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.served.len() as u64
    }

    /// One VK op of the current connection → what the daemon writes, if anything.
    pub(crate) fn apply(&mut self, op: VkOp) -> Option<Write> {
        match op {
            VkOp::Add { index, value } | VkOp::Replace { index, value } => {
                self.upsert(index, value)
            }
            VkOp::Remove { index } => {
                self.release(index);
                None
            }
        }
    }

    /// Every op of one frame, in order.
    pub(crate) fn apply_frame(&mut self, frame: &Value) -> Vec<Write> {
        VkOp::of_frame(frame)
            .into_iter()
            .filter_map(|op| self.apply(op))
            .collect()
    }

    /// `add` and `replace` alike (VK turns one into the other on replays): the entry mapped
    /// to `vk` in this connection, else a matched served one, else a new one.
    fn upsert(&mut self, vk: usize, value: Value) -> Option<Write> {
        let id = identify(&value);
        let d = match self.conn.map.get(&vk) {
            Some(&d) => d,
            None => match self.find(&id) {
                Some(d) => {
                    self.claim(vk, d);
                    d
                }
                None => return Some(self.append(vk, value, id)),
            },
        };
        if self.served[d].entry == value {
            return None;
        }
        self.remember(d, &id);
        self.served[d] = Served {
            entry: value.clone(),
            id,
        };
        Some(Write::Replace {
            index: d as u64,
            entry: value,
        })
    }

    /// The served entry an unmapped frame is: the lowest open index of its bucket that is the
    /// same entry (`Keyed`: any; else one that showed the same content or a related one).
    /// Lowest first: VK keeps each normalizer's order, so entries are matched in order.
    fn find(&self, id: &Identity) -> Option<usize> {
        let open = self.conn.open.get(&id.bucket)?;
        if id.rule == Rule::Keyed {
            return open.first().copied();
        }
        let shown = self.shown.get(&fingerprint(id));
        let same = shown.and_then(|s| s.iter().copied().find(|d| open.contains(d)));
        let below = open.range(..same.unwrap_or(usize::MAX));
        below
            .copied()
            .find(|&d| related(&self.served[d].id, id))
            .or(same)
    }

    fn claim(&mut self, vk: usize, d: usize) {
        if let Some(open) = self.conn.open.get_mut(&self.served[d].id.bucket) {
            open.remove(&d);
        }
        self.conn.map.insert(vk, d);
    }

    /// VK removed its entry: the daemon keeps it as served; it may be matched again.
    fn release(&mut self, vk: usize) {
        if let Some(d) = self.conn.map.remove(&vk) {
            let bucket = self.served[d].id.bucket.clone();
            self.conn.open.entry(bucket).or_default().insert(d);
        }
    }

    fn append(&mut self, vk: usize, entry: Value, id: Identity) -> Write {
        let d = self.served.len();
        self.remember(d, &id);
        self.served.push(Served {
            entry: entry.clone(),
            id,
        });
        self.conn.map.insert(vk, d);
        Write::Append {
            index: d as u64,
            entry,
        }
    }

    fn remember(&mut self, d: usize, id: &Identity) {
        if id.rule != Rule::Keyed {
            self.shown.entry(fingerprint(id)).or_default().insert(d);
        }
    }
}

#[cfg(test)]
#[path = "renumber_tests.rs"]
mod tests;
