//! Typed views of the cached VK objects for hot read paths: only the fields a status needs,
//! decoded straight from the stored bytes (no full `Value` tree). Every field is lenient: a
//! value of the wrong type (hostile or newer upstream) reads as absent instead of dropping the
//! object.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use uuid::Uuid;

use super::vk::RELEVANT_REASONS;

fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

#[derive(Debug, Deserialize)]
pub struct AttemptRow {
    #[serde(default, deserialize_with = "lenient")]
    pub task_id: Option<Uuid>,
    #[serde(default, deserialize_with = "lenient")]
    pub branch: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub created_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "lenient")]
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Deserialize)]
pub struct SessionRow {
    #[serde(default, deserialize_with = "lenient")]
    pub executor: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub created_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "lenient")]
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Deserialize)]
pub struct ProcessRow {
    #[serde(default, deserialize_with = "lenient")]
    pub session_id: Option<Uuid>,
    #[serde(default, deserialize_with = "lenient")]
    pub run_reason: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub exit_code: Option<i64>,
    #[serde(default, deserialize_with = "lenient")]
    pub dropped: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub created_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "lenient")]
    pub updated_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "lenient")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "lenient")]
    pub completed_at: Option<DateTime<Utc>>,
}

impl ProcessRow {
    pub fn reason(&self) -> &str {
        self.run_reason.as_deref().unwrap_or("")
    }
    pub fn status(&self) -> &str {
        self.status.as_deref().unwrap_or("")
    }
    pub fn is_dropped(&self) -> bool {
        self.dropped.unwrap_or(false)
    }
}

/// The latest session: newest `created_at`, id ascending on ties (as `vk::latest`).
pub fn latest_session(rows: &[(Uuid, SessionRow)]) -> Option<&(Uuid, SessionRow)> {
    rows.iter()
        .min_by(|(ia, a), (ib, b)| b.created_at.cmp(&a.created_at).then(ia.cmp(ib)))
}

fn newest_of_reason<'a>(
    rows: &'a [(Uuid, ProcessRow)],
    reason: &str,
) -> Option<&'a (Uuid, ProcessRow)> {
    rows.iter()
        .filter(|(_, p)| p.reason() == reason && !p.is_dropped())
        .max_by(|(ia, a), (ib, b)| a.created_at.cmp(&b.created_at).then(ib.cmp(ia)))
}

/// VK's `latest_execution_process_id` rule (as `vk::status_process`).
pub fn status_process(rows: &[(Uuid, ProcessRow)]) -> Option<&(Uuid, ProcessRow)> {
    let mut best: Option<&(Uuid, ProcessRow)> = None;
    for reason in RELEVANT_REASONS {
        if let Some(p) = newest_of_reason(rows, reason) {
            if best.is_none_or(|b| p.1.created_at > b.1.created_at) {
                best = Some(p);
            }
        }
    }
    best
}
