//! `get_attempt_file`'s two modes: bytes (`start` / `max_bytes`) or lines (`start_line` /
//! `end_line`, with `max_bytes` as the cap). Decides the mode and rejects mixed or impossible
//! line arguments with an `invalid_argument` envelope naming the field.

use serde_json::json;

use super::control_requests::FileArgs;
use crate::proxy::file_lines::LineRange;
use crate::tool_error::ToolError;

/// The line range asked for, None in byte mode; mixing `start` with lines is an error.
pub fn line_range(a: &FileArgs) -> Result<Option<LineRange>, ToolError> {
    if a.start_line.is_none() && a.end_line.is_none() {
        return Ok(None);
    }
    if a.start.is_some() {
        return Err(ToolError::invalid_argument(
            "`start` is a byte offset and cannot be combined with `start_line`/`end_line`: pass either `start` (bytes) or `start_line`/`end_line` (lines), not both.",
        )
        .with_details(json!({ "field": "start", "conflicts_with": ["start_line", "end_line"] })));
    }
    let start = a.start_line.unwrap_or(1);
    if start == 0 || a.end_line == Some(0) {
        let field = if start == 0 { "start_line" } else { "end_line" };
        return Err(ToolError::invalid_field(
            field,
            "Lines are numbered from 1: the first line is start_line: 1.",
        ));
    }
    if let Some(end) = a.end_line.filter(|e| *e < start) {
        return Err(ToolError::invalid_field(
            "end_line",
            format!(
                "end_line ({end}) is before start_line ({start}); the range is inclusive, so one line is start_line = end_line."
            ),
        ));
    }
    Ok(Some(LineRange {
        start,
        end: a.end_line,
    }))
}
