//! Artifact tools: `get_attempt_file` (bytes or lines of one workspace file) and
//! `get_attempt_patch` (the diff of chosen files). Parse → `proxy::artifacts` /
//! `proxy::file_lines` (bounded reads from VK) → answer. Without an upstream client (schema
//! tests) they answer `not_configured`. A file is read by bytes (`start` / `max_bytes`) or by
//! lines (`start_line` / `end_line`, `max_bytes` the cap); `line_range` decides which and
//! refuses mixed or impossible line arguments with an `invalid_argument` naming the field.

use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use super::answer::{plain, plain_output_schema};
use super::args::{Args, input_schema};
use super::{Family, Scope, VkTools};
use vk_observer_proxy::artifacts::{
    Encoding, FILE_DEFAULT_BYTES, FileSlice, PATCH_DEFAULT_BYTES, PatchGuard, PatchText,
};
use vk_observer_proxy::file_lines::LineRange;
use vk_observer_query::detail::Detail;
use vk_observer_tool_error::ToolError;

pub(crate) const GET_ATTEMPT_FILE: &str = "get_attempt_file";
pub(crate) const GET_ATTEMPT_PATCH: &str = "get_attempt_patch";

pub(crate) const FAMILY: Family = Family {
    name: "artifacts",
    tools: &[
        (GET_ATTEMPT_FILE, Scope::Read),
        (GET_ATTEMPT_PATCH, Scope::Read),
    ],
    router: VkTools::artifacts_router,
};

#[tool_router(router = artifacts_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::GET_ATTEMPT_FILE, input_schema = input_schema::<FileArgs>(),
           output_schema = plain_output_schema::<FileSlice>(),
           annotations(title = "Get attempt file", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_file(&self, Args(a): Args<FileArgs>) -> CallToolResult {
        let r = async {
            let a = a?;
            let max = a.max_bytes.unwrap_or(FILE_DEFAULT_BYTES);
            let encoding = a.encoding.unwrap_or_default();
            let slice = match line_range(&a)? {
                Some(range) => {
                    self.proxy()?
                        .attempt_file_lines(a.attempt_id, a.path, range, max)
                        .await
                }
                None => {
                    self.proxy()?
                        .attempt_file(a.attempt_id, a.path, a.start.unwrap_or(0), max)
                        .await
                }
            }?;
            Ok(slice.encoded(encoding))
        };
        plain(r.await)
    }

    #[tool(description = describe::GET_ATTEMPT_PATCH, input_schema = input_schema::<PatchArgs>(),
           output_schema = plain_output_schema::<PatchText>(),
           annotations(title = "Get attempt patch", read_only_hint = true, open_world_hint = false))]
    async fn get_attempt_patch(&self, Args(a): Args<PatchArgs>) -> CallToolResult {
        let r = async {
            let a = a?;
            let max = a.max_bytes.unwrap_or(PATCH_DEFAULT_BYTES);
            self.proxy()?
                .attempt_patch(
                    a.attempt_id,
                    a.paths,
                    a.force.unwrap_or(false),
                    max,
                    a.guard.unwrap_or_default(),
                )
                .await
        };
        plain(r.await)
    }
}

/// The line range asked for, None in byte mode; mixing `start` with lines is an error.
pub(crate) fn line_range(a: &FileArgs) -> Result<Option<LineRange>, ToolError> {
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

// ---- arguments: every field described; the schema is what clients see ----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// File path inside the workspace, `<repo>/<path>` as get_attempt_changes lists it. No
    /// absolute paths, no `..`.
    pub path: String,
    /// Byte offset to start at (default 0). Byte mode only: not with `start_line`/`end_line`.
    #[serde(default)]
    pub start: Option<u64>,
    /// Most bytes to return, 1–524288 (default 20000). In line mode the cap on the lines
    /// returned (whole lines only).
    #[serde(default)]
    #[schemars(range(min = 1, max = 524288))]
    pub max_bytes: Option<u64>,
    /// Line mode: first line to return, 1-based (default 1 when only `end_line` is given).
    /// Lines end after `\n`; content comes back verbatim (`\r\n` stays). Not with `start`.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub start_line: Option<u64>,
    /// Line mode: last line to return, inclusive, ≥ `start_line` (default: as many lines as fit
    /// `max_bytes`). Not with `start`.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub end_line: Option<u64>,
    /// `utf8` (default: text) or `base64` (the text's UTF-8 bytes, base64). VK sends file
    /// contents as text with non-UTF-8 bytes replaced, so base64 cannot restore those: the
    /// answer's `lossy` says when some were replaced.
    #[serde(default)]
    pub encoding: Option<Encoding>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatchArgs {
    /// Attempt id (UUID string).
    pub attempt_id: Uuid,
    /// 1–100 paths, `<repo>/<path>` as get_attempt_changes lists them.
    #[schemars(length(min = 1, max = 100))]
    pub paths: Vec<String>,
    /// Produce the patch even when the diff guard's thresholds are exceeded (default false).
    #[serde(default)]
    pub force: Option<bool>,
    /// Most bytes of patch text to return, 1–2097152 (default 20000); longer patches are cut
    /// with `truncated: true`.
    #[serde(default)]
    #[schemars(range(min = 1, max = 2097152))]
    pub max_bytes: Option<u64>,
    /// Your limits: over one the patch is withheld (`blocked: true`, `blocked_reason`
    /// `too_many_files` for `max_files` paths, `threshold_exceeded` for `max_total_bytes` of
    /// whole patch, and a hint to narrow `paths`). Not bypassed by `force`.
    #[serde(default)]
    pub guard: Option<PatchGuard>,
    /// Detail level: 0 (default), 1 or 2, as every tool takes it. Accepted for uniformity;
    /// this answer is the same at every level (it has nothing to leave out).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "in the schema: every tool takes `detail`; this answer has one shape"
    )]
    pub detail: Option<Detail>,
}

/// Descriptions in the seed template (`Use when:` / `Required:` / `Optional:` / `Next:` /
/// `Avoid:`), kept short: agents pattern-match on them.
mod describe {
    pub(crate) const GET_ATTEMPT_FILE: &str = "Read part of one file in an attempt's workspace (bounded), by bytes or lines.
Use when: you need a file the agent changed, or lines around a line number.
Required: attempt_id, path (`<repo>/<path>` from get_attempt_changes).
Optional: start (bytes) or start_line/end_line (1-based, inclusive); max_bytes (default 20000, max 524288); encoding (utf8 | base64; see `lossy`).
Next: while truncated: start = start + bytes, or start_line = next_line; get_attempt_patch for diffs.
Avoid: absolute paths or `..` (path_outside_workspace); start with start_line/end_line; whole large files.";

    pub(crate) const GET_ATTEMPT_PATCH: &str = "Get the unified diff of selected changed files of an attempt (bounded).
Use when: reviewing exactly what changed in some files.
Required: attempt_id, paths (1-100, `<repo>/<path>` from get_attempt_changes).
Optional: force (bypass VK's diff guard), max_bytes (default 20000, max 2097152), guard {max_files, max_total_bytes} (blocked when over).
Next: read `patch_text`; follow_up with review comments, or update_task to mark it done.
Avoid: asking for every path of a huge change at once (blocked: too_many_paths / size_exceeded / your guard); paths without the repo prefix.";
}
