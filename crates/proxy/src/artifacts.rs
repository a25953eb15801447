//! `get_attempt_file` and `get_attempt_patch`: bounded reads of an attempt's workspace,
//! forwarded to VK (docs/vk-contract.md §6.4–6.5). Paths that could leave the workspace and
//! requests over the limits are blocked here, before VK is asked, so they are never read.
//! Both answer at most 20,000 bytes unless asked for more (seed 003 §12); the caller's patch
//! `guard` and the file `encoding` are applied here (`patch_guard`).
//!
//! A VK 0.1.x (workspace-first dialect) has neither route: its only view of a workspace's
//! changes is the diff WebSocket `/api/workspaces/{id}/git/diff/ws`, which streams whole files
//! of every changed path and which the daemon does not follow. On it both tools (the line mode
//! too) answer `not_configured` with `details.reason: "unsupported_by_upstream"` and the
//! workspace's directory on VK's host, before VK is asked.

use std::path::{Component, Path};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::patch_guard::cut_at;
pub use super::patch_guard::{Encoding, PatchGuard};
use super::{Proxy, upstream_error};
use vk_observer_query::Freshness;
use vk_observer_tool_error::{ErrorCode, ToolError};
use vk_observer_upstream::dialect::Dialect;

/// Bytes a file read returns unless `max_bytes` says otherwise (seed 003 §12: small by default).
pub const FILE_DEFAULT_BYTES: u64 = 20_000;
pub(crate) const FILE_MAX_BYTES: u64 = 512 * 1024;
/// Bytes of patch text returned unless `max_bytes` says otherwise (seed 003 §12).
pub const PATCH_DEFAULT_BYTES: u64 = 20_000;
pub(crate) const PATCH_MAX_BYTES: u64 = 2 * 1024 * 1024;
pub(crate) const PATCH_MAX_PATHS: usize = 100;
/// Longest path accepted (Linux PATH_MAX); longer ones cannot name a file.
pub(crate) const MAX_PATH_LEN: usize = 4096;

/// Answer of `get_attempt_file`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileSlice {
    /// The attempt (UUID).
    pub attempt_id: Uuid,
    /// The requested path, relative to the workspace (`<repo>/<path>`).
    pub path: String,
    /// True when nothing was read (see `blocked_reason`).
    pub blocked: bool,
    /// `path_outside_workspace` (absolute path or `..`) or `size_exceeded` (max_bytes above
    /// 524288); null when not blocked.
    pub blocked_reason: Option<String>,
    /// What to do instead when blocked; null otherwise.
    pub hint: Option<String>,
    /// True when bytes remain after this slice: call again with `start` = start + bytes.
    pub truncated: bool,
    /// Byte offset of this slice.
    pub start: u64,
    /// Bytes in this slice.
    pub bytes: u64,
    /// Size of the whole file in bytes; null when blocked.
    pub total_bytes: Option<u64>,
    /// The slice: text (`encoding: utf8`, bytes VK could not decode replaced by U+FFFD) or the
    /// base64 of that text's UTF-8 bytes (`encoding: base64`); null when blocked.
    pub content: Option<String>,
    /// How `content` is encoded: `utf8` (the default) or `base64`, as asked.
    pub encoding: Encoding,
    /// True when the slice holds U+FFFD: bytes that are not UTF-8 (a binary file, or a slice
    /// cut inside a character) were replaced by VK before the daemon saw them. VK serves file
    /// contents only as text, so those bytes cannot be returned, base64 included (see `hint`).
    pub lossy: bool,
    /// Line mode: the first line asked for (1-based); null in byte mode.
    pub start_line: Option<u64>,
    /// Line mode: the last line returned whole (inclusive); null in byte mode, past the end of
    /// the file, or when one line longer than max_bytes was cut (see `hint`).
    pub end_line: Option<u64>,
    /// Line mode: the `start_line` to ask for next when more lines follow; null at the end of
    /// the file and in byte mode.
    pub next_line: Option<u64>,
    /// Line mode: lines in the whole file, known when the reads reached its end (always for
    /// files up to 512 KiB); null otherwise and in byte mode.
    pub total_lines: Option<u64>,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// Answer of `get_attempt_patch`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PatchText {
    /// The attempt (UUID).
    pub attempt_id: Uuid,
    /// The requested paths (`<repo>/<path>`).
    pub paths: Vec<String>,
    /// True when no patch was produced (see `blocked_reason`).
    pub blocked: bool,
    /// `path_outside_workspace`, `size_exceeded` (max_bytes above 2097152), `too_many_paths`
    /// (more than 100), `threshold_exceeded` (diff guard; retry with force) or
    /// `summary_failed`; null when not blocked.
    pub blocked_reason: Option<String>,
    /// What to do instead when blocked; null otherwise.
    pub hint: Option<String>,
    /// True when the patch was cut at `max_bytes`.
    pub truncated: bool,
    /// Bytes of patch text returned.
    pub bytes: u64,
    /// Unified diff of the selected paths (empty when they did not change); null when blocked.
    pub patch_text: Option<String>,
    /// Deprecated (goes away in 0.3.0): the same text as `patch_text`.
    pub patch: Option<String>,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// True for a path that is absolute, has a `..` component, or a Windows drive/root.
pub(crate) fn escapes_workspace(path: &str) -> bool {
    let p = Path::new(path);
    path.starts_with('/')
        || path.starts_with('\\')
        || path.contains('\0')
        || path.get(1..2) == Some(":")
        || path.split(['/', '\\']).any(|c| c == "..")
        || p.components().any(|c| {
            matches!(
                c,
                Component::ParentDir | Component::RootDir | Component::Prefix(_)
            )
        })
}

fn num(v: &Value, f: &str) -> Option<u64> {
    v.get(f).and_then(Value::as_u64)
}

/// Why a patch request is refused before VK is asked: `Err` for a malformed `paths`,
/// `Some((reason, hint))` for a guard the answer reports as `blocked`.
fn patch_refusal(
    paths: &[String],
    max_bytes: u64,
) -> Result<Option<(&'static str, &'static str)>, ToolError> {
    if paths.is_empty() {
        return Err(ToolError::invalid_field(
            "paths",
            "Give 1 to 100 paths (`<repo>/<path>`) from get_attempt_changes.",
        ));
    }
    if paths.iter().any(|p| p.is_empty() || p.len() > MAX_PATH_LEN) {
        return Err(ToolError::invalid_field(
            "paths",
            "Every path must be 1 to 4096 bytes: `<repo>/<path>` from get_attempt_changes.",
        ));
    }
    if paths.len() > PATCH_MAX_PATHS {
        return Ok(Some((
            "too_many_paths",
            "At most 100 paths per call; split the list into several calls.",
        )));
    }
    if max_bytes > PATCH_MAX_BYTES {
        return Ok(Some((
            "size_exceeded",
            "max_bytes is at most 2097152; ask for fewer paths per call.",
        )));
    }
    if paths
        .iter()
        .any(|p| escapes_workspace(p) || !p.contains('/'))
    {
        metrics::counter!(vk_observer_telemetry::ARTIFACT_BLOCKED, vk_observer_telemetry::label::REASON => vk_observer_telemetry::ArtifactBlockReason::PathOutsideWorkspace.as_str()).increment(1);
        return Ok(Some((
            "path_outside_workspace",
            "Paths must be `<repo>/<path>` inside the workspace, as listed by get_attempt_changes; no absolute paths or `..`.",
        )));
    }
    Ok(None)
}

impl Proxy {
    pub(super) fn known_attempt(&self, attempt: Uuid) -> Result<(), ToolError> {
        vk_observer_query::target::attempt(&self.query.read(), attempt)?;
        Ok(())
    }

    /// Refuses on a VK 0.1.x, which has no file or patch route (module doc), naming the
    /// workspace's worktree (`container_ref`: one directory per repository) when VK made one.
    fn served_by_upstream(&self, attempt: Uuid) -> Result<(), ToolError> {
        if self.client.dialect() != Some(Dialect::Workspaces) {
            return Ok(());
        }
        let stored = vk_observer_query::target::attempt(&self.query.read(), attempt)?;
        let worktree = stored.value.get("container_ref").and_then(Value::as_str);
        Err(ToolError::new(
            ErrorCode::NotConfigured,
            false,
            "VK 0.1.x has no file/patch route (only a diff WebSocket the daemon does not follow); read the workspace's worktree instead: details.worktree (when known) holds one directory per repository, so `<repo>/<path>` is `<worktree>/<repo>/<path>`, and `git diff` there gives the patch.",
        )
        .with_details(json!({
            "reason": "unsupported_by_upstream",
            "dialect": Dialect::Workspaces.as_str(),
            "attempt_id": attempt,
            "worktree": worktree,
        })))
    }

    /// The checks every file read passes before VK is asked: a known attempt and a sane path
    /// (else an error), a path inside the workspace and `max_bytes` within the hard maximum
    /// (else the blocked answer to give).
    pub(super) fn file_precheck(
        &self,
        attempt: Uuid,
        path: &str,
        start: u64,
        max_bytes: u64,
    ) -> Result<Option<FileSlice>, ToolError> {
        self.known_attempt(attempt)?;
        self.served_by_upstream(attempt)?;
        if path.trim().is_empty() || path.len() > MAX_PATH_LEN {
            return Err(ToolError::invalid_field(
                "path",
                "path is required and at most 4096 bytes: `<repo>/<path>` as listed by get_attempt_changes.",
            ));
        }
        if escapes_workspace(path) {
            metrics::counter!(vk_observer_telemetry::ARTIFACT_BLOCKED, vk_observer_telemetry::label::REASON => vk_observer_telemetry::ArtifactBlockReason::PathOutsideWorkspace.as_str()).increment(1);
            return Ok(Some(self.blocked_file(
                attempt,
                path,
                start,
                "path_outside_workspace",
                "Use a path inside the workspace, `<repo>/<path>` as listed by get_attempt_changes; no absolute paths or `..`.",
            )));
        }
        if max_bytes > FILE_MAX_BYTES {
            return Ok(Some(self.blocked_file(
                attempt,
                path,
                start,
                "size_exceeded",
                "max_bytes is at most 524288; read the file in slices with `start` (or `start_line`).",
            )));
        }
        Ok(None)
    }

    /// A file answer that read nothing, for `reason`.
    pub(super) fn blocked_file(
        &self,
        attempt: Uuid,
        path: &str,
        start: u64,
        reason: &str,
        hint: &str,
    ) -> FileSlice {
        FileSlice {
            attempt_id: attempt,
            path: path.to_string(),
            blocked: true,
            blocked_reason: Some(reason.to_string()),
            hint: Some(hint.to_string()),
            truncated: false,
            start,
            bytes: 0,
            total_bytes: None,
            content: None,
            encoding: Encoding::Utf8,
            lossy: false,
            start_line: None,
            end_line: None,
            next_line: None,
            total_lines: None,
            freshness: self.query.freshness(),
        }
    }

    pub async fn attempt_file(
        &self,
        attempt: Uuid,
        path: String,
        start: u64,
        max_bytes: u64,
    ) -> Result<FileSlice, ToolError> {
        if let Some(blocked) = self.file_precheck(attempt, &path, start, max_bytes)? {
            return Ok(blocked);
        }
        let v = self
            .client
            .attempt_file(attempt, &path, start, max_bytes.max(1))
            .await
            .map_err(upstream_error)?;
        Ok(FileSlice {
            attempt_id: attempt,
            path: path.clone(),
            blocked: v.get("blocked").and_then(Value::as_bool).unwrap_or(false),
            blocked_reason: v
                .get("blockedReason")
                .and_then(Value::as_str)
                .map(str::to_owned),
            hint: None,
            truncated: v.get("truncated").and_then(Value::as_bool).unwrap_or(false),
            start: num(&v, "start").unwrap_or(start),
            bytes: num(&v, "bytes").unwrap_or(0),
            total_bytes: num(&v, "totalBytes"),
            content: v.get("content").and_then(Value::as_str).map(str::to_owned),
            encoding: Encoding::Utf8,
            lossy: false,
            start_line: None,
            end_line: None,
            next_line: None,
            total_lines: None,
            freshness: self.query.freshness(),
        })
    }

    pub async fn attempt_patch(
        &self,
        attempt: Uuid,
        paths: Vec<String>,
        force: bool,
        max_bytes: u64,
        guard: PatchGuard,
    ) -> Result<PatchText, ToolError> {
        guard.validate()?;
        self.known_attempt(attempt)?;
        self.served_by_upstream(attempt)?;
        let refusal = match patch_refusal(&paths, max_bytes)? {
            Some((reason, hint)) => Some((reason, hint.to_string())),
            None => guard.files_refusal(paths.len()),
        };
        if let Some((reason, hint)) = refusal {
            return Ok(self.blocked_patch(attempt, paths, reason, hint));
        }
        let ask = guard.bytes_to_ask(max_bytes.max(1));
        let body = json!({ "paths": paths, "force": force, "max_bytes": ask });
        let v = self
            .client
            .attempt_patch(attempt, &body)
            .await
            .map_err(upstream_error)?;
        let vk_truncated = v.get("truncated").and_then(Value::as_bool).unwrap_or(false);
        let text = v.get("patch").and_then(Value::as_str).map(str::to_owned);
        if let Some((reason, hint)) = text
            .as_deref()
            .and_then(|t| guard.bytes_refusal(t.len() as u64, vk_truncated, ask))
        {
            return Ok(self.blocked_patch(attempt, paths, reason, hint));
        }
        let (text, cut) = match text {
            Some(t) => {
                let (t, cut) = cut_at(t, max_bytes.max(1));
                (Some(t), cut)
            }
            None => (None, false),
        };
        let reason = v
            .get("blockedReason")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let hint = match reason.as_deref() {
            Some("threshold_exceeded") => Some(
                "The diff is over the guard's thresholds: retry with force: true, or fewer paths."
                    .to_string(),
            ),
            Some(_) => {
                Some("VK could not produce the patch; check get_attempt_changes.".to_string())
            }
            None => None,
        };
        Ok(PatchText {
            attempt_id: attempt,
            paths,
            blocked: v.get("blocked").and_then(Value::as_bool).unwrap_or(false),
            blocked_reason: reason,
            hint,
            truncated: vk_truncated || cut,
            bytes: text.as_deref().map_or(0, |t| t.len() as u64),
            patch: text.clone(),
            patch_text: text,
            freshness: self.query.freshness(),
        })
    }

    fn blocked_patch(
        &self,
        attempt: Uuid,
        paths: Vec<String>,
        reason: &str,
        hint: String,
    ) -> PatchText {
        PatchText {
            attempt_id: attempt,
            paths,
            blocked: true,
            blocked_reason: Some(reason.to_string()),
            hint: Some(hint),
            truncated: false,
            bytes: 0,
            patch_text: None,
            patch: None,
            freshness: self.query.freshness(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escapes_workspace;

    #[test]
    fn paths_that_leave_the_workspace_are_caught() {
        for bad in [
            "../../etc/passwd",
            "/etc/passwd",
            "demo/../../x",
            "C:\\Windows",
            "\\\\srv\\x",
            "demo/..",
            "a\0b",
        ] {
            assert!(escapes_workspace(bad), "{bad:?}");
        }
        for ok in ["demo/src/main.rs", "docs/a..b.md", "demo/.hidden"] {
            assert!(!escapes_workspace(ok), "{ok:?}");
        }
    }
}
