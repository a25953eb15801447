//! Line ranges of `get_attempt_file` (`start_line` / `end_line`, 1-based, inclusive). VK serves
//! byte ranges only (docs/vk-contract.md §6.4), so the lines are found here: the file is read
//! from its start in 512 KiB slices and newlines are counted until the requested lines are
//! collected, the answer cap (`max_bytes`) is reached or the file ends.
//!
//! **Lines.** A line ends after `\n`; a file's last line may lack one; an empty file has no
//! lines. Content is returned verbatim, so `\r\n` stays `\r\n`. Only whole lines are returned,
//! except when the first requested line alone is longer than the cap: then its first
//! `max_bytes` (cut at a character boundary) come back with a hint to read on by bytes.
//!
//! **Byte offsets stay exact although VK decodes lossily.** VK returns each slice as UTF-8 with
//! invalid bytes replaced, so a slice that ends inside a multi-byte character ends in one
//! U+FFFD. That one is dropped and the next slice starts where the valid text ended, so every
//! slice starts on a character boundary and offsets are the lengths of valid text. Any other
//! U+FFFD means bytes that are not UTF-8 (or a literal U+FFFD): line offsets could drift, so
//! the answer is blocked `not_utf8` and byte ranges remain the way to read such a file.
//!
//! On a VK 0.1.x, which has no file route, the read is refused before the first slice is asked
//! for, as every `get_attempt_file` is (`artifacts`, `file_precheck`).

use serde_json::Value;
use uuid::Uuid;

use super::artifacts::{FILE_MAX_BYTES, FileSlice};
use super::{Proxy, upstream_error};
use vk_observer_tool_error::ToolError;

/// Bytes a line-range read may scan before the first requested line (16 VK reads).
pub(crate) const LINE_SCAN_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// The lines asked for: `start`..=`end` (1-based; `end` None = as many as fit the cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    pub start: u64,
    pub end: Option<u64>,
}

/// Why the lines could not be located.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineScanRefusal {
    /// The first requested line lies beyond `LINE_SCAN_MAX_BYTES`.
    TooFar,
    /// The scanned text is not valid UTF-8.
    NotUtf8,
}

/// What a line-range read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lines {
    /// The lines, verbatim.
    pub content: String,
    /// Byte offset of `content` in the file (the file size when no line was returned).
    pub start_byte: u64,
    /// Last line returned whole; None when none was.
    pub last_line: Option<u64>,
    /// The line to ask for next when lines follow; None at the end of the file or when
    /// `clipped` (then read on by bytes).
    pub next_line: Option<u64>,
    /// The first requested line alone was longer than the cap: `content` is its beginning.
    pub clipped: bool,
    /// Lines in the whole file, when the reads reached its end.
    pub total_lines: Option<u64>,
    /// Bytes remain in the file after `content`.
    pub truncated: bool,
}

/// Collects the requested lines from consecutive pieces of valid text.
#[derive(Debug)]
pub(crate) struct Collector {
    want: LineRange,
    cap: usize,
    /// The line the cursor is in (1-based) and the cursor's byte offset.
    line: u64,
    pos: u64,
    out: String,
    out_start: Option<u64>,
    /// `out.len()` where the current line began (rolled back to when a line overflows).
    line_mark: usize,
    last_complete: Option<u64>,
    clipped: bool,
    done: bool,
    /// A piece without its newline was seen last (a final line lacking `\n`).
    open_line: bool,
    /// Every piece of that open line so far went into `out`.
    open_taken: bool,
}

impl Collector {
    pub(crate) fn new(want: LineRange, cap: usize) -> Self {
        Collector {
            want,
            cap: cap.max(1),
            line: 1,
            pos: 0,
            out: String::new(),
            out_start: None,
            line_mark: 0,
            last_complete: None,
            clipped: false,
            done: false,
            open_line: false,
            open_taken: false,
        }
    }

    /// Byte offset where the next piece starts.
    pub(crate) fn pos(&self) -> u64 {
        self.pos
    }

    /// All requested lines (or as many as fit) are collected.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// The first requested line has not been reached yet.
    pub(crate) fn before_range(&self) -> bool {
        self.line < self.want.start
    }

    fn wanted(&self, line: u64) -> bool {
        line >= self.want.start && self.want.end.is_none_or(|e| line <= e)
    }

    /// Take the next piece of text, which starts at `pos()`.
    pub(crate) fn feed(&mut self, text: &str) {
        for piece in text.split_inclusive('\n') {
            let complete = piece.ends_with('\n');
            if !self.done && self.wanted(self.line) {
                self.take(piece, complete);
            }
            self.pos += piece.len() as u64;
            self.open_line = !complete;
            if complete {
                self.open_taken = false;
                self.line += 1;
                self.line_mark = self.out.len();
                if self.want.end.is_some_and(|e| self.line > e) {
                    self.done = true;
                }
            }
        }
    }

    fn take(&mut self, piece: &str, complete: bool) {
        self.out_start.get_or_insert(self.pos);
        if self.out.len() + piece.len() <= self.cap {
            self.out.push_str(piece);
            if complete {
                self.last_complete = Some(self.line);
            }
            self.open_taken = !complete;
            return;
        }
        self.done = true;
        self.open_taken = false;
        if self.last_complete.is_some() {
            // Whole lines only: drop the part of this line already taken.
            self.out.truncate(self.line_mark);
            return;
        }
        let room = self.cap - self.out.len();
        let mut cut = room.min(piece.len());
        while !piece.is_char_boundary(cut) {
            cut -= 1;
        }
        self.out.push_str(&piece[..cut]);
        self.clipped = true;
    }

    /// The answer, given the file size and whether the reads reached its end.
    pub(crate) fn finish(mut self, total_bytes: u64, read_to_end: bool) -> Lines {
        // The file's last line, without a newline, was returned whole.
        if read_to_end && self.open_line && self.open_taken {
            self.last_complete = Some(self.line);
        }
        let start_byte = self.out_start.unwrap_or(total_bytes);
        let end_byte = start_byte + self.out.len() as u64;
        let truncated = end_byte < total_bytes;
        let next_line = (truncated && !self.clipped)
            .then(|| self.last_complete.map_or(self.want.start, |l| l + 1));
        // `line` counts the lines begun so far, plus one when the last one was closed by `\n`.
        let total_lines = read_to_end.then(|| {
            if self.pos == 0 {
                0
            } else {
                self.line - u64::from(!self.open_line)
            }
        });
        Lines {
            content: self.out,
            start_byte,
            last_line: self.last_complete,
            next_line,
            clipped: self.clipped,
            total_lines,
            truncated,
        }
    }
}

/// The valid text of one slice VK answered (`content`, `bytes`), read at the collector's
/// position: a trailing U+FFFD of a character cut by the slice end is dropped (unless the slice
/// ends the file); any other means the bytes are not UTF-8.
pub(crate) fn valid_text(slice: &Value, ends_file: bool) -> Result<String, LineScanRefusal> {
    let mut text = slice
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let raw = slice.get("bytes").and_then(Value::as_u64).unwrap_or(0);
    if !ends_file && text.ends_with('\u{FFFD}') {
        text.pop();
    }
    if text.contains('\u{FFFD}') || text.len() as u64 > raw || (text.is_empty() && raw > 0) {
        return Err(LineScanRefusal::NotUtf8);
    }
    Ok(text)
}

impl Proxy {
    /// `get_attempt_file` in line mode: lines `range` of `path`, at most `max_bytes` of them.
    pub async fn attempt_file_lines(
        &self,
        attempt: Uuid,
        path: String,
        range: LineRange,
        max_bytes: u64,
    ) -> Result<FileSlice, ToolError> {
        if let Some(blocked) = self.file_precheck(attempt, &path, 0, max_bytes)? {
            return Ok(blocked);
        }
        let mut lines = Collector::new(range, max_bytes.max(1) as usize);
        let mut total = 0;
        loop {
            let at = lines.pos();
            let v = self
                .client
                .attempt_file(attempt, &path, at, FILE_MAX_BYTES)
                .await
                .map_err(upstream_error)?;
            if v.get("blocked").and_then(Value::as_bool) == Some(true) {
                let reason = v.get("blockedReason").and_then(Value::as_str);
                return Ok(self.blocked_file(
                    attempt,
                    &path,
                    at,
                    reason.unwrap_or("blocked"),
                    "VK refused to read this path (e.g. a symlink leaving the workspace).",
                ));
            }
            total = v.get("totalBytes").and_then(Value::as_u64).unwrap_or(total);
            let bytes = v.get("bytes").and_then(Value::as_u64).unwrap_or(0);
            let ends_file = at + bytes >= total;
            match valid_text(&v, ends_file) {
                Ok(text) => lines.feed(&text),
                Err(r) => return Ok(self.refused(attempt, &path, at, r)),
            }
            // Done, at the end, or VK gave no bytes before the end (nothing more to learn).
            if lines.done() || ends_file || lines.pos() == at {
                break;
            }
            if lines.before_range() && lines.pos() >= LINE_SCAN_MAX_BYTES {
                return Ok(self.refused(attempt, &path, lines.pos(), LineScanRefusal::TooFar));
            }
        }
        let read_to_end = lines.pos() >= total;
        let found = lines.finish(total, read_to_end);
        let hint = found.clipped.then(|| {
            format!(
                "Line {} is longer than max_bytes: this is its beginning. Read on by bytes with start = {}.",
                range.start,
                found.start_byte + found.content.len() as u64
            )
        });
        Ok(FileSlice {
            attempt_id: attempt,
            path,
            blocked: false,
            blocked_reason: None,
            hint,
            truncated: found.truncated,
            start: found.start_byte,
            bytes: found.content.len() as u64,
            total_bytes: Some(total),
            start_line: Some(range.start),
            end_line: found.last_line,
            next_line: found.next_line,
            total_lines: found.total_lines,
            content: Some(found.content),
            encoding: super::artifacts::Encoding::Utf8,
            lossy: false,
            freshness: self.query.freshness(),
        })
    }

    fn refused(&self, attempt: Uuid, path: &str, at: u64, why: LineScanRefusal) -> FileSlice {
        let (reason, hint) = match why {
            LineScanRefusal::TooFar => (
                "line_scan_exceeded",
                "The line lies beyond the first 8 MiB of the file, further than line ranges scan: read it by bytes with `start` / `max_bytes`.",
            ),
            LineScanRefusal::NotUtf8 => (
                "not_utf8",
                "The file is not valid UTF-8 before or in these lines, so lines cannot be located exactly: read it by bytes with `start` / `max_bytes`.",
            ),
        };
        self.blocked_file(attempt, path, at, reason, hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str, start: u64, end: Option<u64>, cap: usize) -> Lines {
        let mut c = Collector::new(LineRange { start, end }, cap);
        // Fed in small pieces, as slices would arrive.
        let mut rest = text;
        while !rest.is_empty() && !c.done() {
            let mut n = 3.min(rest.len());
            while !rest.is_char_boundary(n) {
                n += 1;
            }
            c.feed(&rest[..n]);
            rest = &rest[n..];
        }
        let to_end = rest.is_empty();
        c.finish(text.len() as u64, to_end)
    }

    #[test]
    fn first_and_last_lines() {
        let f = "one\ntwo\nthree\n";
        let first = lines(f, 1, Some(1), 1000);
        assert_eq!(
            (first.content.as_str(), first.last_line, first.next_line),
            ("one\n", Some(1), Some(2))
        );
        assert!(first.truncated);
        let last = lines(f, 3, Some(3), 1000);
        assert_eq!(
            (
                last.content.as_str(),
                last.start_byte,
                last.next_line,
                last.total_lines
            ),
            ("three\n", 8, None, Some(3))
        );
        assert!(!last.truncated);
    }

    #[test]
    fn past_the_end_and_empty_file() {
        let past = lines("a\nb\n", 5, None, 1000);
        assert_eq!(
            (
                past.content.as_str(),
                past.start_byte,
                past.last_line,
                past.total_lines
            ),
            ("", 4, None, Some(2))
        );
        assert!(!past.truncated && past.next_line.is_none());
        let empty = lines("", 1, Some(3), 1000);
        assert_eq!((empty.content.as_str(), empty.total_lines), ("", Some(0)));
    }

    #[test]
    fn no_trailing_newline_and_crlf() {
        let open = lines("a\nb", 2, Some(9), 1000);
        assert_eq!(
            (open.content.as_str(), open.last_line, open.total_lines),
            ("b", Some(2), Some(2))
        );
        let crlf = lines("a\r\nb\r\nc\r\n", 2, Some(2), 1000);
        assert_eq!((crlf.content.as_str(), crlf.start_byte), ("b\r\n", 3));
    }

    #[test]
    fn the_cap_keeps_whole_lines_or_clips_one_long_line() {
        let f = "aaaa\nbbbb\ncccc\n";
        let capped = lines(f, 1, Some(3), 12);
        assert_eq!(
            (capped.content.as_str(), capped.last_line, capped.next_line),
            ("aaaa\nbbbb\n", Some(2), Some(3))
        );
        let long = lines("ééééé\nx\n", 1, Some(2), 5);
        assert!(long.clipped);
        assert_eq!((long.content.as_str(), long.next_line), ("éé", None));
        assert_eq!(long.last_line, None);
    }

    #[test]
    fn slices_cut_inside_a_character_lose_nothing() {
        let cut = serde_json::json!({"content": "ab\u{FFFD}", "bytes": 3});
        assert_eq!(valid_text(&cut, false).unwrap(), "ab");
        let bad = serde_json::json!({"content": "a\u{FFFD}b", "bytes": 3});
        assert_eq!(valid_text(&bad, false), Err(LineScanRefusal::NotUtf8));
        let end = serde_json::json!({"content": "ab\u{FFFD}", "bytes": 3});
        assert_eq!(valid_text(&end, true), Err(LineScanRefusal::NotUtf8));
    }
}
