//! Turning query results into MCP tool results: success as `structuredContent` (+ its JSON text)
//! through rmcp's `Json`, failure as `isError: true` with the envelope as JSON text only, so
//! clients that validate `outputSchema` even on errors (the MCP Inspector) accept it.

use rmcp::Json;
use rmcp::model::{CallToolResult, ContentBlock};

use crate::tool_error::ToolError;

pub type ToolResult<T> = Result<Json<T>, CallToolResult>;

pub fn error_result(e: &ToolError) -> CallToolResult {
    metrics::counter!(crate::telemetry::TOOL_ERRORS, crate::telemetry::label::CODE => e.code.as_str())
        .increment(1);
    CallToolResult::error(vec![ContentBlock::text(e.to_json_string())])
}

/// A success built from pre-rendered parts (value for `structuredContent`, the same document
/// as text), for answers whose pieces are memoized; the tool declares its output schema
/// explicitly since its return type no longer names it.
pub fn rendered(r: Result<(serde_json::Value, String), ToolError>) -> CallToolResult {
    match r {
        Ok((value, text)) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            result.structured_content = Some(value);
            result
        }
        Err(e) => error_result(&e),
    }
}

pub fn respond<T>(r: Result<T, ToolError>) -> ToolResult<T> {
    r.map(Json).map_err(|e| error_result(&e))
}
