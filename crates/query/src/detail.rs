//! Detail levels (`detail` 0 | 1 | 2 on every read tool, the wait and the mutations' answers):
//! the one place that decides which fields an answer carries at which level.
//!
//! Every answer is computed once, in full, by its query (that full answer is level 2, VK's
//! objects verbatim: exactly what the tools answered before levels existed). Levels 0 and 1
//! are that answer with fields taken away by a per-family [`Rules`] table, so no query grows
//! `if detail` branches and level 2 cannot drift from the verbatim answer:
//!
//! - **0** (the default): the fields an agent needs to decide its next call. Fields listed as
//!   `standard` or `verbatim` are left out, and so is every field whose value is null, false or
//!   an empty list (absent means null / false / none) — except the `kept` fields: the ones a
//!   seed's scenario or "SHALL include" list names, shown at every level with their null,
//!   false or empty value, so a client written from the seed finds them. `freshness` is left out while the
//!   daemon is connected and bootstrapped (absent means "current"), and shown in full
//!   otherwise: then it matters.
//! - **1**: level 0 plus the `standard` fields (timestamps, metadata, per-item stats); nulls
//!   and empty lists are still left out.
//! - **2**: the full answer, untouched.
//!
//! Log entries are not shaped here but built per level by `query::compact_log` (their level-2
//! form is VK's raw bytes, never parsed on the way out).

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// How much of an answer to return.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Detail {
    /// 0: what the next call needs.
    #[default]
    Compact,
    /// 1: plus timestamps, metadata and per-item stats.
    Standard,
    /// 2: VK's objects verbatim (the full answer).
    Verbatim,
}

impl Detail {
    pub(crate) fn from_level(level: u64) -> Option<Detail> {
        match level {
            0 => Some(Detail::Compact),
            1 => Some(Detail::Standard),
            2 => Some(Detail::Verbatim),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Detail {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(d)?;
        Detail::from_level(n)
            .ok_or_else(|| serde::de::Error::custom(format!("detail must be 0, 1 or 2 (got {n})")))
    }
}

impl JsonSchema for Detail {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Detail".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "integer", "minimum": 0, "maximum": 2, "default": 0})
    }
}

/// Which fields of one object (and of the objects nested in it) each level keeps. Fields not
/// named are kept at every level (a field added to an answer later shows at level 0 unless it
/// is listed here).
#[derive(Debug)]
pub struct Rules {
    /// Shown at every level, with a null, false or empty value too (the seed's named fields).
    pub kept: &'static [&'static str],
    /// Shown from level 1 on.
    pub standard: &'static [&'static str],
    /// Shown at level 2 only.
    pub verbatim: &'static [&'static str],
    /// Fields holding an object or a list of objects, with the rules of those objects.
    pub nested: &'static [(&'static str, &'static Rules)],
    /// A last step for this object below level 2, after the fields above (for a rule that
    /// depends on values, e.g. a status's `result` that only says "wait").
    pub finish: Option<Finish>,
}

/// A value-dependent last step of [`Rules`]: edits one object at a level below 2.
pub(crate) type Finish = fn(&mut Map<String, Value>, Detail);

impl Rules {
    #[cfg(test)]
    pub(crate) const NONE: Rules = Rules {
        finish: None,
        kept: &[],
        standard: &[],
        verbatim: &[],
        nested: &[],
    };
}

/// `answer` as `detail` shows it: unchanged at level 2, shaped by `rules` below.
pub fn shape(mut answer: Value, rules: &Rules, detail: Detail) -> Value {
    if detail == Detail::Verbatim {
        return answer;
    }
    if let Value::Object(m) = &mut answer {
        shape_object(m, rules, detail);
        if detail == Detail::Compact {
            compact_freshness(m);
        }
    }
    answer
}

/// Apply `rules` to one object at a level below 2.
pub(crate) fn shape_object(m: &mut Map<String, Value>, rules: &Rules, detail: Detail) {
    for k in rules.verbatim {
        m.remove(*k);
    }
    if detail == Detail::Compact {
        for k in rules.standard {
            m.remove(*k);
        }
    }
    for (k, inner) in rules.nested {
        match m.get_mut(*k) {
            Some(Value::Object(o)) => shape_object(o, inner, detail),
            Some(Value::Array(items)) => {
                for item in items {
                    if let Value::Object(o) = item {
                        shape_object(o, inner, detail);
                    }
                }
            }
            _ => {}
        }
    }
    m.retain(|k, v| rules.kept.contains(&k.as_str()) || !is_empty(v, detail));
    if let Some(finish) = rules.finish {
        finish(m, detail);
    }
}

/// Left out below level 2: null and the empty list; at level 0 also false.
fn is_empty(v: &Value, detail: Detail) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Bool(b) => !b && detail == Detail::Compact,
        _ => false,
    }
}

/// Level 0's freshness: left out while all is well (connected and bootstrapped: absent means
/// the cache is current), in full when it is not.
pub(crate) fn compact_freshness(answer: &mut Map<String, Value>) {
    let Some(Value::Object(f)) = answer.get("freshness") else {
        return;
    };
    let healthy = f.get("upstream").and_then(Value::as_str) == Some("connected")
        && f.get("bootstrapped").and_then(Value::as_bool) == Some(true);
    if healthy {
        answer.remove("freshness");
    }
}

/// Clip `text` to at most `max` characters (on a char boundary); the bool says whether it was.
pub(crate) fn clip(text: &str, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((at, _)) => (text[..at].to_string(), true),
        None => (text.to_string(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ITEM: Rules = Rules {
        finish: None,
        kept: &[],
        standard: &["created_at"],
        verbatim: &["description"],
        nested: &[],
    };
    const PAGE: Rules = Rules {
        finish: None,
        kept: &[],
        standard: &["total"],
        verbatim: &[],
        nested: &[("items", &ITEM)],
    };

    #[test]
    fn levels_take_fields_away_and_two_is_untouched() {
        let full = json!({"items": [{"id": 1, "created_at": "t", "description": "d", "x": null}],
                          "total": 3, "empty": [], "next_cursor": null, "has_more": false,
                          "freshness": {"upstream": "connected", "bootstrapped": true, "last_event_age_ms": 5}});
        assert_eq!(shape(full.clone(), &PAGE, Detail::Verbatim), full);
        assert_eq!(
            shape(full.clone(), &PAGE, Detail::Standard),
            json!({"items": [{"id": 1, "created_at": "t"}], "total": 3, "has_more": false,
                   "freshness": {"upstream": "connected", "bootstrapped": true, "last_event_age_ms": 5}})
        );
        assert_eq!(
            shape(full, &PAGE, Detail::Compact),
            json!({"items": [{"id": 1}]})
        );
        let down = json!({"freshness": {"upstream": "down", "bootstrapped": true}});
        assert_eq!(shape(down.clone(), &Rules::NONE, Detail::Compact), down);
    }

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("héllo", 2), ("hé".to_string(), true));
        assert_eq!(clip("hé", 2), ("hé".to_string(), false));
    }

    #[test]
    fn detail_parses_levels_only() {
        assert_eq!(
            serde_json::from_value::<Detail>(json!(2)).unwrap(),
            Detail::Verbatim
        );
        assert!(serde_json::from_value::<Detail>(json!(3)).is_err());
        assert!(serde_json::from_value::<Detail>(json!("0")).is_err());
    }
}
