//! Small helpers shared by the simulator: VK-style timestamps, branch slugs, fake paths.

use chrono::{SecondsFormat, Utc};
use uuid::Uuid;

/// Now as VK writes it: RFC 3339, nanoseconds, `Z`.
pub(crate) fn now_ts() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0)
}

/// VK's `git_branch_id`: lowercase, non-alphanumerics to `-`, trimmed, at most 16 chars.
pub(crate) fn branch_slug(title: &str) -> String {
    let lower = title.to_lowercase();
    let mut slug = String::new();
    let mut last_dash = false;
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            slug.push(c);
            last_dash = false;
        } else if !last_dash {
            slug.push('-');
            last_dash = true;
        }
    }
    let trimmed = slug.trim_matches('-');
    let cut: String = trimmed.chars().take(16).collect();
    cut.trim_end_matches('-').to_string()
}

/// First 4 hex digits of a uuid (VK's `short_uuid`).
pub(crate) fn short_uuid(id: &Uuid) -> String {
    id.simple().to_string().chars().take(4).collect()
}

/// The attempt folder name VK uses for branch and worktree.
pub(crate) fn attempt_dir(id: &Uuid, title: &str) -> String {
    format!("{}-{}", short_uuid(id), branch_slug(title))
}

/// Fake worktree root standing in for VK's worktree folder.
pub(crate) const WORKTREES: &str = "/tmp/vk-sim/worktrees";
/// Fake data dir standing in for VK's data dir.
pub(crate) const VK_DATA: &str = "/tmp/vk-sim/data";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slug_matches_recorded_branches() {
        assert_eq!(branch_slug("Add a greeting file"), "add-a-greeting-f");
        assert_eq!(branch_slug("Task that should FAIL"), "task-that-should");
        assert_eq!(branch_slug("  --Hi!!  "), "hi");
    }
}
