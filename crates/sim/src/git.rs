//! The simulated git state behind VK's git routes (docs/vk-contract.md §9.8, recorded in
//! `../shared/vk-wire/README.md` "Git"): per project repo, the commits of each base branch; per
//! (attempt, repo), the attempt branch (its base point, its own commits, uncommitted files, a
//! rebase stopped on conflicts, direct merges, what was last pushed).
//!
//! The rules are VK's as recorded: a rebase onto a base whose new commits carry a conflicting
//! file stops mid-way (worktree mid-rebase, `head_oid` = the new base, the conflicted files
//! uncommitted); a merge is a squash commit on the target branch after which the attempt branch
//! points at that commit (so the next plain push is rejected: it is no descendant of what was
//! pushed); a worktree with tracked changes refuses rebase and push. Only state lives here; the
//! HTTP shapes are in `rest_git`.

use std::collections::HashMap;

use serde_json::{Value, json};
use uuid::Uuid;

use super::util::now_ts;

/// A fresh 40-hex-digit commit id.
fn new_oid() -> String {
    let a = Uuid::new_v4().simple().to_string();
    let b = Uuid::new_v4().simple().to_string();
    format!("{a}{}", &b[..8])
}

/// A commit on a base branch; `conflict` names a file that conflicts with attempt branches.
pub(crate) struct BaseCommit {
    pub oid: String,
    pub conflict: Option<String>,
}

/// An attempt branch in one repo.
#[derive(Default)]
pub(crate) struct Branch {
    /// How many commits of the target branch the attempt branch sits on.
    pub base_len: usize,
    /// The branch's own commits on top of that, oldest first.
    pub commits: Vec<String>,
    /// Tracked files with uncommitted changes.
    pub uncommitted: Vec<String>,
    pub untracked: u64,
    /// Conflicted files of a rebase stopped mid-way (None: no rebase in progress).
    pub rebase: Option<Vec<String>>,
    /// VK's direct merge records (`Merge::Direct` JSON), newest first.
    pub merges: Vec<Value>,
    /// The head last pushed, and whether the branch was rewritten since (a plain push would be
    /// rejected then).
    pub pushed: Option<String>,
    pub rewritten: bool,
}

/// What a git route did, in VK's terms (rendered by `rest_git`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GitOutcome {
    Ok,
    /// Rebase stopped on conflicts in these files.
    Conflicts(Vec<String>),
    /// 400 with this message.
    BadRequest(String),
    /// 409 `force_push_required`.
    ForcePushRequired,
    /// 500 with this message.
    Failed(String),
}

#[derive(Default)]
pub(crate) struct Git {
    /// (repo, branch name) → its commits, oldest first. `main` exists in every repo.
    bases: HashMap<(Uuid, String), Vec<BaseCommit>>,
    /// (attempt, repo) → the attempt branch.
    branches: HashMap<(Uuid, Uuid), Branch>,
}

impl Git {
    fn base(&mut self, repo: Uuid, name: &str) -> Option<&mut Vec<BaseCommit>> {
        if name == "main" {
            return Some(self.bases.entry((repo, name.into())).or_insert_with(|| {
                vec![BaseCommit {
                    oid: new_oid(),
                    conflict: None,
                }]
            }));
        }
        self.bases.get_mut(&(repo, name.to_string()))
    }

    fn base_len(&mut self, repo: Uuid, name: &str) -> usize {
        self.base(repo, name).map_or(0, |b| b.len())
    }

    /// The attempt branch, created on the current tip of `target` on first use.
    pub(crate) fn branch(&mut self, ws: Uuid, repo: Uuid, target: &str) -> &mut Branch {
        let len = self.base_len(repo, target);
        self.branches.entry((ws, repo)).or_insert_with(|| Branch {
            base_len: len,
            ..Branch::default()
        })
    }

    /// A scripted commit on a base branch (created from `main` when new); `conflict` names a
    /// file the attempt branches also changed, so rebasing onto it conflicts.
    pub(crate) fn move_base(&mut self, repo: Uuid, name: &str, conflict: Option<&str>) {
        self.ensure_base(repo, name);
        if let Some(b) = self.base(repo, name) {
            b.push(BaseCommit {
                oid: new_oid(),
                conflict: conflict.map(str::to_string),
            });
        }
    }

    /// Base branch `name` of the repo, created from `main`'s commits when new.
    pub(crate) fn ensure_base(&mut self, repo: Uuid, name: &str) {
        if self.base(repo, name).is_none() {
            let from: Vec<BaseCommit> = self
                .base(repo, "main")
                .map(|m| {
                    m.iter()
                        .map(|c| BaseCommit {
                            oid: c.oid.clone(),
                            conflict: None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            self.bases.insert((repo, name.to_string()), from);
        }
    }

    /// The agent (or VK's auto-commit after it) commits on the attempt branch.
    pub(crate) fn commit(&mut self, ws: Uuid, repo: Uuid, target: &str) {
        self.branch(ws, repo, target).commits.push(new_oid());
    }

    /// VK's `RepoBranchStatus` fields (without repo id and name).
    pub(crate) fn status_json(&mut self, ws: Uuid, repo: Uuid, target: &str) -> Value {
        let tip = self.tip(repo, target);
        let base_total = self.base_len(repo, target);
        let head_base = self.base_oid(ws, repo, target);
        let b = self.branch(ws, repo, target);
        let head = match (&b.rebase, b.commits.last()) {
            (Some(_), _) => tip,
            (None, Some(c)) => Some(c.clone()),
            (None, None) => head_base,
        };
        let conflicted = b.rebase.clone().unwrap_or_default();
        json!({
            "commits_behind": base_total.saturating_sub(b.base_len),
            "commits_ahead": b.commits.len(),
            "has_uncommitted_changes": !b.uncommitted.is_empty(),
            "head_oid": head,
            "uncommitted_count": b.uncommitted.len(),
            "untracked_count": b.untracked,
            "target_branch_name": target,
            // VK fills these only for an open pull request, which the simulator never has.
            "remote_commits_behind": null,
            "remote_commits_ahead": null,
            "merges": b.merges,
            "is_rebase_in_progress": b.rebase.is_some(),
            "conflict_op": if conflicted.is_empty() { Value::Null } else { json!("rebase") },
            "conflicted_files": conflicted,
        })
    }

    fn tip(&mut self, repo: Uuid, target: &str) -> Option<String> {
        self.base(repo, target)
            .and_then(|b| b.last())
            .map(|c| c.oid.clone())
    }

    fn base_oid(&mut self, ws: Uuid, repo: Uuid, target: &str) -> Option<String> {
        let at = self.branch(ws, repo, target).base_len;
        self.base(repo, target)
            .and_then(|b| at.checked_sub(1).and_then(|i| b.get(i)))
            .map(|c| c.oid.clone())
    }

    /// The repo's base branches (`main` always), for `GET /api/repos/{id}/branches`.
    pub(crate) fn base_names(&mut self, repo: Uuid) -> Vec<String> {
        self.base(repo, "main");
        let mut names: Vec<String> = self
            .bases
            .keys()
            .filter(|(r, _)| *r == repo)
            .map(|(_, n)| n.clone())
            .collect();
        names.sort();
        names
    }

    pub(crate) fn branch_exists(&mut self, repo: Uuid, name: &str) -> bool {
        self.base(repo, name).is_some()
    }

    /// `POST /rebase` after VK's branch check: the clean-worktree guard, then the rebase.
    pub(crate) fn rebase(
        &mut self,
        ws: Uuid,
        repo: Uuid,
        branch_name: &str,
        new_base: &str,
    ) -> GitOutcome {
        let b = self.branch(ws, repo, new_base);
        if !b.uncommitted.is_empty() {
            // Mid-rebase HEAD is detached, so VK names no branch (recorded).
            let name = if b.rebase.is_some() {
                "unknown branch"
            } else {
                branch_name
            };
            return GitOutcome::Failed(dirty(name, &b.uncommitted));
        }
        if b.rebase.is_some() {
            return GitOutcome::Failed(
                "GitServiceError: Rebase in progress; resolve or abort it before retrying".into(),
            );
        }
        let from = b.base_len;
        let (total, conflicts) = match self.base(repo, new_base) {
            Some(commits) => (
                commits.len(),
                commits
                    .iter()
                    .skip(from)
                    .filter_map(|c| c.conflict.clone())
                    .collect::<Vec<_>>(),
            ),
            None => return unknown_branch(new_base),
        };
        let b = self.branch(ws, repo, new_base);
        if !conflicts.is_empty() && !b.commits.is_empty() {
            b.uncommitted = conflicts.clone();
            b.rebase = Some(conflicts.clone());
            return GitOutcome::Conflicts(conflicts);
        }
        if total != b.base_len {
            b.base_len = total;
            b.rewritten |= !b.commits.is_empty();
            for c in b.commits.iter_mut() {
                *c = new_oid();
            }
        }
        GitOutcome::Ok
    }

    /// `POST /conflicts/abort`: back to the head before the rebase, clean; a no-op otherwise.
    pub(crate) fn abort(&mut self, ws: Uuid, repo: Uuid, target: &str) {
        let b = self.branch(ws, repo, target);
        if b.rebase.take().is_some() {
            b.uncommitted.clear();
        }
    }

    /// `POST /merge`: a squash commit on the target, the attempt branch moved onto it.
    /// Returns the merge commit.
    pub(crate) fn merge(
        &mut self,
        ws: Uuid,
        repo: Uuid,
        branch_name: &str,
        target: &str,
    ) -> Result<String, GitOutcome> {
        let total = self.base_len(repo, target);
        let b = self.branch(ws, repo, target);
        let behind = total.saturating_sub(b.base_len);
        if behind > 0 {
            return Err(GitOutcome::Failed(format!(
                "GitServiceError: Branches diverged: Cannot merge: base branch '{target}' is {behind} commits ahead of task branch '{branch_name}'. The base branch has moved forward since the task was created."
            )));
        }
        if b.commits.is_empty() {
            return Err(GitOutcome::Failed(format!(
                "GitServiceError: Invalid repository: CLI merge failed: git command failed: --- stderr\nOn branch {target}\nnothing to commit, working tree clean"
            )));
        }
        let oid = new_oid();
        let record = json!({
            "type": "direct", "id": Uuid::new_v4(), "workspace_id": ws, "repo_id": repo,
            "merge_commit": oid, "target_branch_name": target, "created_at": now_ts(),
        });
        b.commits.clear();
        b.base_len = total + 1;
        b.merges.insert(0, record);
        b.rewritten = true;
        if let Some(base) = self.base(repo, target) {
            base.push(BaseCommit {
                oid: oid.clone(),
                conflict: None,
            });
        }
        Ok(oid)
    }

    /// `POST /push` (`force` = `/push/force`).
    pub(crate) fn push(
        &mut self,
        ws: Uuid,
        repo: Uuid,
        branch_name: &str,
        target: &str,
        force: bool,
    ) -> GitOutcome {
        let head = self.status_json(ws, repo, target)["head_oid"]
            .as_str()
            .map(str::to_string);
        let b = self.branch(ws, repo, target);
        if !b.uncommitted.is_empty() {
            return GitOutcome::Failed(dirty(branch_name, &b.uncommitted));
        }
        if !force && b.pushed.is_some() && b.rewritten {
            return GitOutcome::ForcePushRequired;
        }
        b.pushed = head;
        b.rewritten = false;
        GitOutcome::Ok
    }
}

fn dirty(branch: &str, files: &[String]) -> String {
    format!(
        "GitServiceError: {branch} has uncommitted changes: {}",
        files.join(", ")
    )
}

/// VK's 400 for a base branch the repository does not have.
pub(crate) fn unknown_branch(name: &str) -> GitOutcome {
    GitOutcome::BadRequest(format!("Branch '{name}' does not exist in the repository"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicting_base_move_stops_a_rebase_and_abort_restores_it() {
        let (ws, repo) = (Uuid::new_v4(), Uuid::new_v4());
        let mut g = Git::default();
        g.commit(ws, repo, "main");
        g.move_base(repo, "main", Some("README.md"));
        assert_eq!(g.status_json(ws, repo, "main")["commits_behind"], 1);
        let out = g.rebase(ws, repo, "vk/x", "main");
        assert_eq!(out, GitOutcome::Conflicts(vec!["README.md".into()]));
        let s = g.status_json(ws, repo, "main");
        assert_eq!(s["is_rebase_in_progress"], true);
        assert_eq!(s["conflict_op"], "rebase");
        assert!(
            matches!(g.rebase(ws, repo, "vk/x", "main"), GitOutcome::Failed(m) if m.contains("unknown branch"))
        );
        g.abort(ws, repo, "main");
        let s = g.status_json(ws, repo, "main");
        assert_eq!(s["is_rebase_in_progress"], false);
        assert_eq!(s["commits_ahead"], 1);
    }

    #[test]
    fn merge_then_push_needs_force() {
        let (ws, repo) = (Uuid::new_v4(), Uuid::new_v4());
        let mut g = Git::default();
        g.commit(ws, repo, "main");
        assert_eq!(g.push(ws, repo, "vk/x", "main", false), GitOutcome::Ok);
        let merged = g.merge(ws, repo, "vk/x", "main").unwrap();
        let s = g.status_json(ws, repo, "main");
        assert_eq!(
            (s["commits_ahead"].clone(), s["commits_behind"].clone()),
            (json!(0), json!(0))
        );
        assert_eq!(s["head_oid"], json!(merged));
        assert!(g.merge(ws, repo, "vk/x", "main").is_err());
        assert_eq!(
            g.push(ws, repo, "vk/x", "main", false),
            GitOutcome::ForcePushRequired
        );
        assert_eq!(g.push(ws, repo, "vk/x", "main", true), GitOutcome::Ok);
    }
}
