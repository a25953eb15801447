//! Serde types of VK's frames and responses, as recorded from a real VK (tests/fixtures/vk-wire)
//! and described in docs/vk-contract.md. Only the fields the daemon reads are typed; entities
//! stay `serde_json::Value` so the cache keeps every field VK sends.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use uuid::Uuid;

/// VK's REST envelope: all four keys are always present.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope<T> {
    pub success: bool,
    pub data: Option<T>,
    #[serde(default)]
    pub error_data: Option<Value>,
    #[serde(default)]
    pub message: Option<String>,
}

/// `data` of an `invalidate` SSE event, and the `invalidate` companion of object-stream frames.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct InvalidateHints {
    #[serde(rename = "taskIds", default)]
    pub task_ids: Vec<Uuid>,
    #[serde(rename = "workspaceIds", default)]
    pub workspace_ids: Vec<Uuid>,
    #[serde(rename = "hasExecutionProcess", default)]
    pub has_execution_process: bool,
}

/// `data` of an `invalidate_all` SSE event.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct InvalidateAll {
    pub reason: String,
    #[serde(default)]
    pub watermark: Option<u64>,
    #[serde(default)]
    pub min_seq: Option<u64>,
    #[serde(default)]
    pub requested_after_seq: Option<u64>,
    #[serde(default)]
    pub skipped: Option<u64>,
}

/// A frame of an object WebSocket (projects, tasks, execution processes).
#[derive(Debug, Deserialize)]
pub struct PatchFrame {
    #[serde(default)]
    pub seq: Option<u64>,
    #[serde(rename = "JsonPatch")]
    pub patch: json_patch::Patch,
    #[serde(default)]
    pub invalidate: Option<InvalidateHints>,
}

/// A frame of a log WebSocket v2 (normalized or raw) as sent:
/// `{"type":"append"|"replace","entry_index":N,"entry":{…}}` or `{"type":"finished"}`.
/// A plain struct (not a tagged enum) so the entry stays VK's raw bytes.
#[derive(Debug, Deserialize)]
pub(crate) struct RawLogFrame {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub entry_index: Option<u64>,
    #[serde(default)]
    pub entry: Option<Box<RawValue>>,
}

#[derive(Debug)]
pub enum LogFrame {
    /// A new entry, or the same index with new content (`replace`).
    Entry {
        entry_index: u64,
        entry: Box<RawValue>,
    },
    Finished,
}

/// Why a log frame was not understood (counted as garbage and skipped).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("not a log frame: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unexpected log frame type {0:?} or missing fields")]
    Shape(String),
}

impl LogFrame {
    pub fn parse(text: &str) -> Result<LogFrame, FrameError> {
        let raw: RawLogFrame = serde_json::from_str(text)?;
        match (raw.kind.as_str(), raw.entry_index, raw.entry) {
            ("append" | "replace", Some(entry_index), Some(entry)) => {
                Ok(LogFrame::Entry { entry_index, entry })
            }
            ("finished", _, _) => Ok(LogFrame::Finished),
            (kind, _, _) => Err(FrameError::Shape(kind.to_string())),
        }
    }
}

/// One entry of a log history page.
#[derive(Debug, Deserialize)]
pub struct HistoryEntry {
    pub entry_index: u64,
    pub entry: Box<RawValue>,
}

/// `data` of `GET /api/execution-processes/{id}/{normalized,raw}-logs/v2`.
#[derive(Debug, Deserialize)]
pub struct HistoryPage {
    pub entries: Vec<HistoryEntry>,
    #[serde(default)]
    pub next_cursor: Option<u64>,
    #[serde(default)]
    pub has_more: bool,
    #[serde(default)]
    pub history_truncated: bool,
}

/// `data` of `GET /api/config/status`: `loaded_at_unix_ms` identifies VK's current run.
#[derive(Debug, Deserialize)]
pub struct ConfigStatus {
    #[serde(default)]
    pub loaded_at_unix_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_frames_parse() {
        let f = LogFrame::parse(
            r#"{"type":"append","entry_index":3,"entry":{"type":"STDOUT","content":"x"}}"#,
        )
        .unwrap();
        assert!(matches!(f, LogFrame::Entry { entry_index: 3, .. }));
        assert!(matches!(
            LogFrame::parse(r#"{"type":"finished"}"#),
            Ok(LogFrame::Finished)
        ));
        assert!(LogFrame::parse(r#"{"type":"append"}"#).is_err());
        assert!(LogFrame::parse("not json").is_err());
    }
}
