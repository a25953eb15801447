//! Text rendering for the terminal commands: truncation to the terminal width, relative times,
//! short ids, one line per log entry, tables and the freshness footer.

use std::io::IsTerminal;

use chrono::{DateTime, Utc};
use serde_json::Value;

/// Width used when stdout is not a terminal or its size is unknown.
pub(crate) const DEFAULT_WIDTH: usize = 120;

/// Columns of the terminal on stdout: `COLUMNS`, else `stty size` on the controlling terminal,
/// else [`DEFAULT_WIDTH`] (also when stdout is a pipe or a file).
pub(crate) fn term_width() -> usize {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|n| *n >= 20)
    {
        return n;
    }
    if !std::io::stdout().is_terminal() {
        return DEFAULT_WIDTH;
    }
    stty_columns().unwrap_or(DEFAULT_WIDTH)
}

fn stty_columns() -> Option<usize> {
    let tty = std::fs::File::open("/dev/tty").ok()?;
    let out = std::process::Command::new("stty")
        .arg("size")
        .stdin(tty)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let cols = text.split_whitespace().nth(1)?.parse::<usize>().ok()?;
    (cols >= 20).then_some(cols)
}

/// Write a line on stdout. When stdout is gone (a closed pipe), end the process: with 0 for a
/// reader that stopped reading (`| head`), 1 otherwise.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if let Err(e) = writeln!(o, "{line}").and_then(|()| o.flush()) {
        std::process::exit(if e.kind() == std::io::ErrorKind::BrokenPipe {
            0
        } else {
            1
        });
    }
}

/// At most `max` characters, the last one `…` when something was cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// Whitespace runs (newlines included) collapsed to one space, control characters dropped.
pub(crate) fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = !out.is_empty();
        } else if !c.is_control() {
            if space {
                out.push(' ');
                space = false;
            }
            out.push(c);
        }
    }
    out
}

/// The first 8 characters of a UUID (what the table shows).
pub(crate) fn short_id(id: &str) -> String {
    id.chars().take(8).collect()
}

/// A duration in milliseconds as `12s`, `3m`, `2h`, `5d`.
pub(crate) fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// An RFC 3339 instant relative to `now`: `3m ago`, `just now`, `-` when absent.
pub(crate) fn relative(ts: Option<&str>, now: DateTime<Utc>) -> String {
    let Some(t) = ts.and_then(|t| t.parse::<DateTime<Utc>>().ok()) else {
        return "-".into();
    };
    let ms = (now - t).num_milliseconds();
    if ms < 1000 {
        return "just now".into();
    }
    format!("{} ago", span(ms as u64))
}

/// The `freshness` object of an answer, plus the token, as one footer line.
pub(crate) fn freshness_line(freshness: &Value, token: Option<&str>) -> String {
    let upstream = freshness["upstream"].as_str().unwrap_or("unknown");
    let mut parts = vec![format!("upstream {upstream}")];
    parts.push(match freshness["last_event_age_ms"].as_u64() {
        Some(ms) if ms < 1000 => "last event just now".into(),
        Some(ms) => format!("last event {} ago", span(ms)),
        None => "no event applied yet".into(),
    });
    if freshness["bootstrapped"].as_bool() == Some(false) {
        parts.push(
            "bootstrapped: false (still catching up with VK; the cache may be incomplete)".into(),
        );
    }
    if let Some(t) = token {
        parts.push(format!("token {t}"));
    }
    format!("freshness: {}", parts.join(" · "))
}

/// A fleet node's hosts (`freshness.hosts`), one line each: state, lag, last message age.
/// Empty on a single host.
pub(crate) fn host_lines(freshness: &Value) -> Vec<String> {
    let Some(hosts) = freshness["hosts"].as_object() else {
        return Vec::new();
    };
    hosts
        .iter()
        .map(|(host, h)| {
            let state = match h["state"].as_str() {
                Some(s) => s.to_owned(),
                None if h["connected"].as_bool() == Some(true) => "connected".into(),
                None => "not connected".into(),
            };
            let mut parts = vec![state];
            if h["stale"].as_bool() == Some(true) {
                parts.push("stale".into());
            }
            parts.push(format!("lag {}", h["lag"].as_u64().unwrap_or(0)));
            parts.push(match h["last_message_age_ms"].as_u64() {
                Some(ms) if ms < 1000 => "last message just now".into(),
                Some(ms) => format!("last message {} ago", span(ms)),
                None => "no message since the node started".into(),
            });
            format!("host {host}: {}", parts.join(" · "))
        })
        .collect()
}

/// One log entry (normalized or raw) as one line: index, kind, text; `edited` marks an entry
/// rewritten in place. Cut to `width` characters.
pub(crate) fn entry_line(index: u64, entry: &Value, edited: bool, width: usize) -> String {
    let (kind, text) = entry_parts(entry);
    let mark = if edited { "[edited] " } else { "" };
    let line = format!("{index:>5}  {kind:<18} {mark}{}", one_line(&text));
    truncate(line.trim_end(), width)
}

/// (kind, text) of a VK log entry.
pub(crate) fn entry_parts(entry: &Value) -> (String, String) {
    match entry["type"].as_str() {
        Some("NORMALIZED_ENTRY") => {
            let c = &entry["content"];
            let et = &c["entry_type"];
            let mut kind = et["type"].as_str().unwrap_or("entry").to_string();
            if let Some(tool) = et["tool_name"].as_str() {
                kind = format!("{kind} {tool}");
            }
            let mut text = c["content"].as_str().unwrap_or_default().to_string();
            if let Some(st) = et["status"]["status"].as_str().filter(|s| *s != "created") {
                text = format!("{text} ({st})");
            }
            (kind, text)
        }
        Some(t @ ("STDOUT" | "STDERR")) => (
            t.to_lowercase(),
            entry["content"].as_str().unwrap_or_default().to_string(),
        ),
        Some(other) => (other.to_lowercase(), entry["content"].to_string()),
        None => ("entry".into(), entry.to_string()),
    }
}

/// A plain text table: header row, then rows, columns padded to their widest cell (the last
/// column is not padded).
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn truncation_and_lines() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(one_line("  a\n\n b\tc \n"), "a b c");
        assert_eq!(span(59_000), "59s");
        assert_eq!(span(180_000), "3m");
        assert_eq!(span(7_200_000), "2h");
        let now: DateTime<Utc> = "2026-01-01T00:10:00Z".parse().unwrap();
        assert_eq!(relative(Some("2026-01-01T00:07:00Z"), now), "3m ago");
        assert_eq!(relative(None, now), "-");
    }

    #[test]
    fn entries_render_as_one_line() {
        let e = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
            "entry_type": {"type": "tool_use", "tool_name": "Bash",
                           "status": {"status": "success"}},
            "content": "echo step 3"}});
        assert_eq!(
            entry_line(3, &e, true, 120),
            "    3  tool_use Bash      [edited] echo step 3 (success)"
        );
        let raw = json!({"type": "STDERR", "content": "boom\n"});
        assert_eq!(
            entry_line(0, &raw, false, 120),
            "    0  stderr             boom"
        );
        assert_eq!(entry_line(0, &raw, false, 10).chars().count(), 10);
    }

    #[test]
    fn tables_pad_columns() {
        let t = table(
            &["A", "BB"],
            &[vec!["xxx".into(), "y".into()], vec!["z".into(), "".into()]],
        );
        assert_eq!(t, "A    BB\nxxx  y\nz\n");
    }
}
