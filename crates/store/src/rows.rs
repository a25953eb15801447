//! Typed views of the cached VK objects for hot read paths: only the fields a status needs,
//! decoded straight from the stored bytes (no full `Value` tree). Every field is lenient: a
//! value of the wrong type (hostile or newer upstream) reads as absent instead of dropping the
//! object.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use uuid::Uuid;

use vk_observer_vk::{KeyedProcessRow, KeyedRow};

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
    /// Set on a fleet node (`fleet::tag`).
    #[serde(default, deserialize_with = "lenient")]
    pub host: Option<String>,
    /// Set on a fleet node when several hosts report the attempt (`fleet::tag`).
    #[serde(default, deserialize_with = "lenient")]
    pub hosts: Option<Vec<String>>,
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

// The typed rows answer VK's selection rules (`vk_observer_vk::select`) without a `Value` tree.

impl KeyedRow for AttemptRow {
    fn created_at(&self) -> Option<DateTime<Utc>> {
        self.created_at
    }
}

impl KeyedRow for SessionRow {
    fn created_at(&self) -> Option<DateTime<Utc>> {
        self.created_at
    }
}

impl KeyedRow for ProcessRow {
    fn created_at(&self) -> Option<DateTime<Utc>> {
        self.created_at
    }
}

impl KeyedProcessRow for ProcessRow {
    fn run_reason(&self) -> &str {
        self.reason()
    }
    fn is_dropped(&self) -> bool {
        self.dropped.unwrap_or(false)
    }
    fn session_id(&self) -> Option<Uuid> {
        self.session_id
    }
}
