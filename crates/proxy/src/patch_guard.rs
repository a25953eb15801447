//! The caller's bounds on artifacts (seed 003 §12): a patch `guard` (`max_files`,
//! `max_total_bytes`) that withholds a patch over it with `blocked: true`, in the vocabulary of
//! `get_attempt_changes` (`too_many_files`, `threshold_exceeded`, a narrowing hint), and a file
//! `encoding` (`utf8` | `base64`). Pure functions over what VK answered; `artifacts` calls them.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::artifacts::{FileSlice, PATCH_MAX_BYTES};
use vk_observer_tool_error::ToolError;

/// How `get_attempt_file` returns content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Text (the default). `utf-8` (seed 003's spelling) is accepted too.
    #[default]
    #[serde(alias = "utf-8")]
    Utf8,
    /// The base64 (standard alphabet, padded) of the text's UTF-8 bytes.
    Base64,
}

/// Limits the caller puts on a patch; over one, the patch is withheld (`blocked: true`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchGuard {
    /// Most paths the patch may cover (counted from `paths`); more → `too_many_files`.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_files: Option<u64>,
    /// Most bytes the whole patch may have (before `max_bytes` cuts it); more →
    /// `threshold_exceeded`.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_total_bytes: Option<u64>,
}

impl PatchGuard {
    /// A limit of 0 would withhold every patch: refused (`invalid_argument`, the field named).
    pub(crate) fn validate(&self) -> Result<(), ToolError> {
        for (field, v) in [
            ("guard.max_files", self.max_files),
            ("guard.max_total_bytes", self.max_total_bytes),
        ] {
            if v == Some(0) {
                return Err(ToolError::invalid_field(
                    field,
                    format!(
                        "{field} is at least 1 (0 would withhold every patch); leave it out for no limit."
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `too_many_files` when more paths are asked for than `max_files` allows (VK not asked).
    pub(crate) fn files_refusal(&self, paths: usize) -> Option<(&'static str, String)> {
        let max = self.max_files?;
        (paths as u64 > max).then(|| {
            (
                "too_many_files",
                format!(
                    "{paths} paths asked for, guard.max_files is {max}: ask for at most {max} paths per call (the paths you care about first, from get_attempt_changes), or raise guard.max_files."
                ),
            )
        })
    }

    /// Bytes to ask VK for: enough to tell whether the whole patch is over `max_total_bytes`
    /// (one byte more than it), and at least the `max_bytes` to return.
    pub(crate) fn bytes_to_ask(&self, max_bytes: u64) -> u64 {
        let probe = self
            .max_total_bytes
            .map_or(0, |m| m.saturating_add(1).min(PATCH_MAX_BYTES));
        max_bytes.max(probe)
    }

    /// `threshold_exceeded` when the patch VK produced (`got` bytes of at most `asked`,
    /// `truncated` when more existed) is longer than `max_total_bytes`.
    pub(crate) fn bytes_refusal(
        &self,
        got: u64,
        truncated: bool,
        asked: u64,
    ) -> Option<(&'static str, String)> {
        let max = self.max_total_bytes?;
        (got > max || (truncated && asked > max)).then(|| {
            (
                "threshold_exceeded",
                format!(
                    "The patch is over guard.max_total_bytes ({max} bytes): ask for fewer paths (get_attempt_changes lists them, with per-file line counts at detail 1), or raise guard.max_total_bytes; max_bytes alone returns the first bytes."
                ),
            )
        })
    }
}

/// `text` cut to at most `max` bytes at a character boundary, and whether it was cut.
pub(crate) fn cut_at(mut text: String, max: u64) -> (String, bool) {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

const LOSSY_HINT: &str = "The slice holds U+FFFD: bytes that are not UTF-8 (a binary file, or a slice cut inside a character) were replaced by VK, which serves file contents only as text; the original bytes cannot be returned, base64 included. A cut character: move `start` by 1-3 bytes.";

impl FileSlice {
    /// The answer in `encoding`, with `lossy` (and its hint) set from the text VK sent.
    pub fn encoded(mut self, encoding: Encoding) -> FileSlice {
        self.encoding = encoding;
        if let Some(text) = self.content.as_deref() {
            self.lossy = text.contains('\u{FFFD}');
            if self.lossy && self.hint.is_none() {
                self.hint = Some(LOSSY_HINT.to_string());
            }
            if encoding == Encoding::Base64 {
                self.content = Some(STANDARD.encode(text.as_bytes()));
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_counts_paths_and_whole_patch_bytes() {
        let g = PatchGuard {
            max_files: Some(2),
            max_total_bytes: Some(100),
        };
        assert!(g.files_refusal(2).is_none());
        assert_eq!(g.files_refusal(3).unwrap().0, "too_many_files");
        assert_eq!(g.bytes_to_ask(20), 101);
        assert_eq!(g.bytes_to_ask(500), 500);
        assert!(g.bytes_refusal(100, false, 101).is_none());
        assert_eq!(
            g.bytes_refusal(101, true, 101).unwrap().0,
            "threshold_exceeded"
        );
        assert!(g.bytes_refusal(500, false, 500).is_some());
        assert!(
            PatchGuard::default()
                .bytes_refusal(9_999_999, true, 1)
                .is_none()
        );
        assert_eq!(PatchGuard::default().bytes_to_ask(7), 7);
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        assert_eq!(cut_at("abc".into(), 5), ("abc".into(), false));
        assert_eq!(cut_at("aé".into(), 2), ("a".into(), true));
        assert_eq!(cut_at("aéb".into(), 3), ("aé".into(), true));
    }
}
