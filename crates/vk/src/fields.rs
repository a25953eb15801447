//! Lenient field access over VK's JSON objects as sent and cached: a field of the wrong type
//! (hostile or newer upstream) reads as absent rather than failing, so one odd object never
//! drops a whole snapshot or answer.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

pub fn str_of<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field)?.as_str()
}

pub fn string_of(v: &Value, field: &str) -> Option<String> {
    str_of(v, field).map(str::to_owned)
}

/// The strings of a list (`v` itself, not a field of it); anything else in it is skipped, and a
/// `v` that is not a list reads as empty.
pub fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

pub fn ts_of(v: &Value, field: &str) -> Option<DateTime<Utc>> {
    str_of(v, field)?.parse().ok()
}

/// A UUID-valued field (`task_id`, `project_id`, `workspace_id`, …).
pub fn uuid_of(v: &Value, field: &str) -> Option<Uuid> {
    str_of(v, field)?.parse().ok()
}

/// The `id` field of a VK object as a UUID.
pub fn object_id(v: &Value) -> Option<Uuid> {
    uuid_of(v, "id")
}

/// RFC 3339 with millisecond precision and `Z`, the form every tool returns.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn ts_string(v: &Value, field: &str) -> Option<String> {
    ts_of(v, field).map(rfc3339)
}

/// The prompt a coding-agent process was started with, if its action carries one.
pub fn prompt_of(p: &Value) -> Option<String> {
    p.get("executor_action")?
        .get("typ")?
        .get("prompt")?
        .as_str()
        .map(str::to_owned)
}

/// The executor named in a process's action (`executor_profile_id.executor`).
pub fn executor_of_process(p: &Value) -> Option<String> {
    p.get("executor_action")?
        .get("typ")?
        .get("executor_profile_id")?
        .get("executor")?
        .as_str()
        .map(str::to_owned)
}
