//! `start_task_attempt`'s `branch_prefix` (seed 003 §7), as far as VK allows it
//! (docs/vk-contract.md §11.3): VK names an attempt's branch `<git_branch_prefix>/<4 hex>-<slug>`
//! with one prefix for all of VK (its global setting, default `vk`), and its create route takes
//! no name. So a prefix equal to VK's needs nothing; another one is applied by VK's
//! `rename-branch` route right after VK created the attempt (`<branch_prefix>/<4 hex>-<slug>`).
//! A rename VK refuses leaves the attempt running on VK's name and says why: the attempt was
//! started, so the call does not fail for it.

use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::{Proxy, upstream_error};
use vk_observer_tool_error::ToolError;
use vk_observer_upstream::git::RenameAnswer;

/// What became of a requested `branch_prefix`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BranchPrefixApplied {
    /// The prefix asked for.
    pub requested: String,
    /// `vk_global` (VK's own prefix is this one: nothing to do), `renamed` (the branch was
    /// renamed right after VK created it) or `not_applied` (VK refused the rename: the attempt
    /// runs on VK's branch name; see `reason`).
    pub outcome: PrefixOutcome,
    /// VK's refusal (e.g. `branch_already_exists`, `rebase_in_progress`) or error code when
    /// `not_applied`.
    pub reason: Option<String>,
}

/// The outcome of a `branch_prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PrefixOutcome {
    VkGlobal,
    Renamed,
    NotApplied,
}

/// A prefix git accepts in front of `/<name>`: one or more ref components, none starting with
/// `.`, without `..`, `@{`, spaces or `~^:?*[\` (the rules VK checks with git's).
pub(crate) fn check_prefix(prefix: &str) -> Result<String, ToolError> {
    let p = prefix.trim();
    let valid = !p.is_empty()
        && !p.starts_with('-')
        && !p.contains("..")
        && !p.contains("@{")
        && !p.chars().any(|c| c.is_control() || " ~^:?*[\\".contains(c))
        && p.split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with(".lock"));
    if valid {
        Ok(p.to_string())
    } else {
        Err(ToolError::invalid_field(
            "branch_prefix",
            "branch_prefix must be a valid git branch prefix: letters, digits, `-`, `_`, `.` and `/` between non-empty parts (e.g. `orchestrator` or `runs/42`); no spaces, `..`, `~^:?*[\\` or leading `.`.",
        ))
    }
}

/// VK's branch split into its prefix (all before the last `/`, empty without one) and the
/// `<4 hex>-<slug>` name VK generated (it holds no `/`).
fn split_branch(branch: &str) -> (&str, &str) {
    branch.rsplit_once('/').unwrap_or(("", branch))
}

impl Proxy {
    /// Apply `prefix` to the branch VK gave the new attempt; the branch's name afterwards.
    pub(super) async fn apply_prefix(
        &self,
        attempt: Uuid,
        vk_branch: &str,
        prefix: &str,
    ) -> (String, BranchPrefixApplied) {
        let (vk_prefix, name) = split_branch(vk_branch);
        let applied = |outcome, reason| BranchPrefixApplied {
            requested: prefix.to_string(),
            outcome,
            reason,
        };
        if vk_prefix == prefix {
            return (
                vk_branch.to_string(),
                applied(PrefixOutcome::VkGlobal, None),
            );
        }
        let wanted = format!("{prefix}/{name}");
        match self.client.rename_branch(attempt, &wanted).await {
            Ok(RenameAnswer::Renamed(b)) => (b, applied(PrefixOutcome::Renamed, None)),
            Ok(RenameAnswer::Refused { kind, .. }) => (
                vk_branch.to_string(),
                applied(PrefixOutcome::NotApplied, Some(kind)),
            ),
            Err(e) => {
                let code = upstream_error(e).code.as_str().to_string();
                (
                    vk_branch.to_string(),
                    applied(PrefixOutcome::NotApplied, Some(code)),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_git_accepts() {
        for ok in ["orch", "runs/42", "a.b-c_d", " team "] {
            assert!(check_prefix(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", " ", "a b", "a..b", ".hidden", "a//b", "a/", "/a", "x.lock", "a~1", "-x",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn vk_branch_splits_at_its_last_slash() {
        assert_eq!(
            split_branch("vk/ba7d-add-a-greeting-f"),
            ("vk", "ba7d-add-a-greeting-f")
        );
        assert_eq!(split_branch("ba7d-x"), ("", "ba7d-x"));
    }
}
