//! Per-file line counts of an attempt's change (`get_attempt_changes` at detail ≥ 1). VK's
//! `/changes` names the changed files but counts lines only in total; its `/patch` answers a
//! unified diff of the files asked for (docs/vk-contract.md §6.5). Ingest asks for it when it
//! stores a summary that differs from the cached one, within the limits below, and this module
//! turns the diff into (added, deleted) per file: cut into files here (by the hunk headers'
//! line counts), each file's hunks parsed by `diffy`.
//!
//! One VK quirk is undone here: VK diffs a file that did not exist (or no longer does) against
//! an empty text it first ends with a newline, so a created file's hunk also deletes one empty
//! line (and a deleted file's adds one). git's counts, which VK's summary totals come from, have
//! no such line; a hunk whose whole old (new) side is that one empty line counts it as nothing.

use std::collections::BTreeMap;

use diffy::{Hunk, Line, Patch};
use serde_json::{Map, Value, json};

/// Most paths VK's `/patch` takes in one call.
pub(crate) const MAX_FILES: usize = 100;
/// Most changed lines (added + deleted, VK's summary) for which the patch is read: keeps the
/// patch well under `PATCH_MAX_BYTES` and its parsing cheap.
pub(crate) const MAX_LINES: u64 = 20_000;
/// `max_bytes` asked of VK (its ceiling); a truncated patch gives no stats.
pub(crate) const PATCH_MAX_BYTES: u64 = 2 * 1024 * 1024;

/// The files whose counts one `/patch` call can give: VK's summary neither blocked nor failed,
/// 1 to `MAX_FILES` files and at most `MAX_LINES` changed lines. None otherwise.
pub(crate) fn eligible(changes: &Map<String, Value>) -> Option<Vec<String>> {
    if changes.get("blocked").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let summary = changes.get("summary")?;
    let n = |k: &str| summary.get(k).and_then(Value::as_u64).unwrap_or(0);
    if n("added") + n("deleted") > MAX_LINES {
        return None;
    }
    let files = vk_observer_vk::strings(changes.get("files"));
    (!files.is_empty() && files.len() <= MAX_FILES).then_some(files)
}

/// `/patch`'s body for `files`.
pub(crate) fn patch_request(files: &[String]) -> Value {
    json!({"paths": files, "force": true, "max_bytes": PATCH_MAX_BYTES})
}

/// The counts of VK's `/patch` answer (`data`) as stored beside the summary:
/// `{"<repo>/<path>": {"added": n, "deleted": n}}`. None when VK withheld or cut the patch, or
/// the patch does not parse.
pub(crate) fn from_patch_answer(answer: &Value) -> Option<Value> {
    if answer.get("blocked").and_then(Value::as_bool) == Some(true)
        || answer.get("truncated").and_then(Value::as_bool) == Some(true)
    {
        return None;
    }
    let counts = count(answer.get("patch")?.as_str()?)?;
    let map: Map<String, Value> = counts
        .into_iter()
        .map(|(path, (added, deleted))| (path, json!({"added": added, "deleted": deleted})))
        .collect();
    Some(Value::Object(map))
}

/// (added, deleted) per file of a unified diff in VK's format (`--- a/<path>` / `+++ b/<path>`
/// per file, then its hunks; none for a file whose text did not change, e.g. a binary file or
/// a mode change); None when it does not parse.
pub(crate) fn count(patch: &str) -> Option<BTreeMap<String, (u64, u64)>> {
    let mut out = BTreeMap::new();
    for (path, section, has_hunks) in sections(patch)? {
        let (mut added, mut deleted) = (0u64, 0u64);
        if has_hunks {
            for hunk in Patch::from_str(section).ok()?.hunks() {
                let (a, d) = hunk_counts(hunk);
                added += a;
                deleted += d;
            }
        }
        let e = out.entry(path.to_string()).or_insert((0, 0));
        e.0 += added;
        e.1 += deleted;
    }
    Some(out)
}

/// The patch cut into files: (path, the file's text, whether it has hunks). diffy's multi-file
/// parser refuses a file with headers and no hunk, which VK writes, so the cut is made here,
/// walking each hunk by the line counts of its `@@` header (a content line that looks like a
/// header is not taken for one).
fn sections(patch: &str) -> Option<Vec<(&str, &str, bool)>> {
    let lines: Vec<(usize, &str)> = patch
        .split_inclusive('\n')
        .scan(0, |at, l| {
            let start = *at;
            *at += l.len();
            Some((start, l))
        })
        .collect();
    let text = |i: usize| lines.get(i).map(|(_, l)| l.trim_end_matches(['\n', '\r']));
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        text(i)?.strip_prefix("--- ")?;
        let path = text(i + 1)?.strip_prefix("+++ ")?;
        let path = path.strip_prefix("b/").unwrap_or(path);
        let start = lines[i].0;
        i += 2;
        let mut has_hunks = false;
        while let Some((mut old, mut new)) = text(i).and_then(hunk_lengths) {
            has_hunks = true;
            i += 1;
            while old + new > 0 {
                match text(i)?.chars().next() {
                    Some('-') if old > 0 => old -= 1,
                    Some('+') if new > 0 => new -= 1,
                    Some(' ') | None if old > 0 && new > 0 => (old, new) = (old - 1, new - 1),
                    Some('\\') => {}
                    _ => return None,
                }
                i += 1;
            }
            while text(i).is_some_and(|l| l.starts_with('\\')) {
                i += 1;
            }
        }
        let end = lines.get(i).map_or(patch.len(), |(at, _)| *at);
        out.push((path, &patch[start..end], has_hunks));
    }
    Some(out)
}

/// The old and new line counts of a hunk header `@@ -a[,b] +c[,d] @@…`.
fn hunk_lengths(line: &str) -> Option<(usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let len = |r: &str| match r.split_once(',') {
        Some((_, n)) => n.parse().ok(),
        None => r.parse::<usize>().ok().map(|_| 1),
    };
    Some((len(old)?, len(new)?))
}

/// One hunk's (added, deleted), without the empty line VK puts on the side of a file that
/// does not exist.
fn hunk_counts(hunk: &Hunk<'_, str>) -> (u64, u64) {
    let (mut added, mut deleted) = (0u64, 0u64);
    let (mut old_side, mut new_side) = (Vec::new(), Vec::new());
    for line in hunk.lines() {
        match line {
            Line::Insert(t) => {
                added += 1;
                new_side.push(*t);
            }
            Line::Delete(t) => {
                deleted += 1;
                old_side.push(*t);
            }
            Line::Context(t) => {
                old_side.push(*t);
                new_side.push(*t);
            }
        }
    }
    let blank = |t: &str| t.trim_end_matches(['\n', '\r']).is_empty();
    // The one line of that side is the changed (not a context) line, and it is empty.
    if hunk.old_range().len() == 1 && old_side.len() == 1 && deleted == 1 && blank(old_side[0]) {
        deleted = 0;
    }
    if hunk.new_range().len() == 1 && new_side.len() == 1 && added == 1 && blank(new_side[0]) {
        added = 0;
    }
    (added, deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// VK's format (`concatenate_diff_hunks`): `--- a/` / `+++ b/` headers, no `diff --git`.
    #[test]
    fn counts_per_file_in_vks_format() {
        let patch = "--- a/demo/src/lib.rs\n+++ b/demo/src/lib.rs\n@@ -1,3 +1,4 @@\n fn a() {}\n-fn b() {}\n+fn b() { 1 }\n+fn c() {}\n fn d() {}\n@@ -10,2 +11,1 @@\n-x\n-y\n+z\n--- a/demo/README.md\n+++ b/demo/README.md\n@@ -1 +1,3 @@\n-\n+# Demo\n+\n+Hello.\n";
        let c = count(patch).unwrap();
        assert_eq!(c["demo/src/lib.rs"], (3, 3));
        assert_eq!(
            c["demo/README.md"],
            (3, 0),
            "a created file's blank old side is no deletion"
        );
    }

    #[test]
    fn a_deleted_file_counts_no_blank_addition() {
        let patch = "--- a/demo/old.txt\n+++ b/demo/old.txt\n@@ -1,2 +1 @@\n-one\n-two\n+\n";
        assert_eq!(count(patch).unwrap()["demo/old.txt"], (0, 2));
        // A real edit of a one-line file is not mistaken for it.
        let edit = "--- a/demo/one.txt\n+++ b/demo/one.txt\n@@ -1 +1 @@\n-old\n+new\n";
        assert_eq!(count(edit).unwrap()["demo/one.txt"], (1, 1));
    }

    /// VK writes the headers of a file whose text did not change (a mode change) with no hunk.
    #[test]
    fn a_file_without_hunks_counts_nothing() {
        let patch = "--- a/r/run.sh\n+++ b/r/run.sh\n--- a/r/f\n+++ b/r/f\n@@ -1 +1 @@\n-a\n+b\n";
        let c = count(patch).unwrap();
        assert_eq!(c.get("r/f"), Some(&(1, 1)), "{c:?}");
        assert_eq!(c.get("r/run.sh").copied().unwrap_or((0, 0)), (0, 0));
    }

    /// A hunk line that looks like a file header is content: the hunk's counts say so.
    #[test]
    fn header_like_content_is_content() {
        let patch = "--- a/r/p.diff\n+++ b/r/p.diff\n@@ -1,2 +1,2 @@\n--- a/x\n keep\n+++ b/x\n";
        assert_eq!(count(patch).unwrap()["r/p.diff"], (1, 1));
    }

    proptest::proptest! {
        /// Files rendered as VK renders them (context around the changed lines; a missing
        /// side as one empty line) count back to their added and deleted lines. Lines are not
        /// blank: VK's own diff cannot tell a blank one-line file from a missing one.
        #[test]
        fn vk_rendered_files_count_back(files in proptest::collection::vec(
            (0usize..6, 0usize..6, 0usize..3, "[a-z-][a-z -]{0,7}"), 1..6)) {
            let mut patch = String::new();
            for (i, (del, add, ctx, word)) in files.iter().enumerate() {
                let (old_len, new_len) = (del + ctx, add + ctx);
                let side = |n: usize| match n { 0 => (1, true), n => (n, false) };
                let ((o, blank_old), (n, blank_new)) = (side(old_len), side(new_len));
                patch.push_str(&format!("--- a/r/f{i}\n+++ b/r/f{i}\n@@ -1,{o} +1,{n} @@\n"));
                for _ in 0..*ctx { patch.push_str(&format!(" {word}\n")); }
                if blank_old { patch.push_str("-\n"); }
                for _ in 0..*del { patch.push_str(&format!("-{word}\n")); }
                if blank_new { patch.push_str("+\n"); }
                for _ in 0..*add { patch.push_str(&format!("+{word}\n")); }
            }
            let c = count(&patch).unwrap();
            for (i, (del, add, _, _)) in files.iter().enumerate() {
                proptest::prop_assert_eq!(c[&format!("r/f{i}")], (*add as u64, *del as u64));
            }
        }
    }

    #[test]
    fn withheld_cut_or_garbled_patches_give_nothing() {
        assert!(from_patch_answer(&json!({"blocked": true, "patch": null})).is_none());
        assert!(from_patch_answer(&json!({"truncated": true, "patch": "--- a/x\n"})).is_none());
        assert!(from_patch_answer(&json!({"patch": "@@ -1 +1 @@\n-a\n+b\n"})).is_none());
        let ok = from_patch_answer(&json!({"blocked": false, "truncated": false,
            "patch": "--- a/r/f\n+++ b/r/f\n@@ -1 +1 @@\n-a\n+b\n"}))
        .unwrap();
        assert_eq!(ok, json!({"r/f": {"added": 1, "deleted": 1}}));
    }

    #[test]
    fn eligibility_follows_vks_limits() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let files: Vec<String> = (0..3).map(|i| format!("r/{i}")).collect();
        let base =
            json!({"summary": {"added": 10, "deleted": 2}, "blocked": false, "files": files});
        assert_eq!(eligible(&m(base.clone())), Some(files));
        let mut many = base.clone();
        many["files"] = json!(
            (0..=MAX_FILES)
                .map(|i| format!("r/{i}"))
                .collect::<Vec<_>>()
        );
        assert!(eligible(&m(many)).is_none());
        let mut big = base.clone();
        big["summary"]["added"] = json!(MAX_LINES + 1);
        assert!(eligible(&m(big)).is_none());
        let mut blocked = base;
        blocked["blocked"] = json!(true);
        assert!(eligible(&m(blocked)).is_none());
    }
}
