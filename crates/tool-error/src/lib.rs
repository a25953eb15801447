//! The one error shape every tool returns: `{code, retryable, hint, details}`. Codes are stable
//! strings agents can branch on; hints name the next tool and field to use. Built by the query,
//! proxy and MCP layers; turned into an `isError: true` tool result by `mcp::tools::answer`. The codes
//! are a closed set, [`ErrorCode`] (`tool_error::code`).

mod code;

pub use code::{ErrorCode, InvalidReason};

use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use vk_observer_store::StoreError;

#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct ToolError {
    /// Stable machine-readable code, e.g. `not_found`, `invalid_argument`, `branch_behind`.
    /// A plain string in the schema, as it always was (the set is [`ErrorCode`]).
    #[schemars(with = "String")]
    pub code: ErrorCode,
    /// True when the same call may succeed later without changes (e.g. VK was down).
    pub retryable: bool,
    /// The next step to take, naming a tool and field where one applies.
    pub hint: String,
    /// Small structured facts about the failure (which field, which id, VK's message).
    pub details: Value,
}

impl ToolError {
    pub fn new(code: ErrorCode, retryable: bool, hint: impl Into<String>) -> Self {
        ToolError {
            code,
            retryable,
            hint: hint.into(),
            details: json!({}),
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn invalid_argument(hint: impl Into<String>) -> Self {
        ToolError::new(ErrorCode::InvalidArgument, false, hint)
    }

    /// A bad value in `field`; the hint says what a good one looks like.
    pub fn invalid_field(field: &str, hint: impl Into<String>) -> Self {
        ToolError::invalid_argument(hint).with_details(json!({ "field": field }))
    }

    pub fn not_found(what: &str, id: impl std::fmt::Display, hint: impl Into<String>) -> Self {
        ToolError::new(ErrorCode::NotFound, false, hint)
            .with_details(json!({ "kind": what, "id": id.to_string() }))
    }

    /// An `attempt_id` the cache does not hold: the one answer of every tool that targets an
    /// attempt (read or mutation), so agents see one code, one hint, one detail shape.
    pub fn unknown_attempt(id: Uuid) -> Self {
        ToolError::not_found(
            "attempt",
            id,
            "Unknown attempt_id. Call list_task_attempts with the task's `task_id` to find it.",
        )
    }

    /// A `session_id` the cache does not hold.
    pub fn unknown_session(id: Uuid) -> Self {
        ToolError::not_found(
            "session",
            id,
            "Unknown session_id. Pass the attempt's `attempt_id` instead to use its latest session.",
        )
    }

    /// A `task_id` the cache does not hold.
    pub fn unknown_task(id: Uuid) -> Self {
        ToolError::not_found(
            "task",
            id,
            "Unknown task_id. Call list_tasks with the project's `project_id` to find the task.",
        )
    }

    /// A `project_id` the cache does not hold.
    pub fn unknown_project(id: Uuid) -> Self {
        ToolError::not_found(
            "project",
            id,
            "Unknown project_id. Call list_projects and use one of its `project_id` values.",
        )
    }

    /// The attempt exists but VK has not created its first session yet (retryable: it will).
    pub fn no_session_yet(attempt: Uuid) -> Self {
        ToolError::new(
            ErrorCode::NoSessionYet,
            true,
            "The attempt has no session yet. Call get_attempt_status with this `attempt_id` (or wait_for_attempt_change) and retry once `latest_session_id` is non-null.",
        )
        .with_details(json!({ "attempt_id": attempt }))
    }

    /// An `invalid_argument` of a named class: `details` gets `reason` (and `extra`'s fields).
    pub fn invalid_because(reason: InvalidReason, hint: impl Into<String>, extra: Value) -> Self {
        let mut details = json!({ "reason": reason.as_str() });
        if let (Value::Object(d), Value::Object(x)) = (&mut details, extra) {
            d.extend(x);
        }
        ToolError::invalid_argument(hint).with_details(details)
    }

    /// None or several of mutually exclusive target fields: `invalid_argument`, reason
    /// `ambiguous_target`, the fields in `details.fields`.
    pub fn ambiguous_target(fields: &[&str]) -> Self {
        ToolError::invalid_because(
            InvalidReason::AmbiguousTarget,
            format!("Pass exactly one of {}.", fields.join(" / ")),
            json!({ "fields": fields }),
        )
    }

    /// Two pagination modes at once: `invalid_argument`, reason `mixed_pagination`.
    pub fn mixed_pagination(fields: &[&str], hint: impl Into<String>) -> Self {
        ToolError::invalid_because(
            InvalidReason::MixedPagination,
            hint,
            json!({ "fields": fields }),
        )
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        ToolError::new(
            ErrorCode::Internal,
            true,
            "The daemon's cache could not be read; retry, and check `vk-observer doctor` if it persists.",
        )
        .with_details(json!({ "error": detail.to_string() }))
    }

    /// The JSON text clients receive.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(
                r#"{{"code":"{}","retryable":false,"hint":"","details":{{}}}}"#,
                self.code.as_str()
            )
        })
    }
}

/// At most `max` characters of `s` (error texts echo caller and upstream input; keep them small).
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        ToolError::internal(e)
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.hint)
    }
}

impl std::error::Error for ToolError {}
