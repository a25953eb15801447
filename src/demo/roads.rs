//! The demo's roads: five tasks started at once when `vk-observer demo` starts, each showing one
//! kind of attempt within the first minute, found by its fixed title (README "demo"):
//!
//! - [`SUCCESS`]: setup → agent (edits one file) → cleanup, `result.outcome: success` (~5 s).
//! - [`FAILURE`]: the agent exits 1, `outcome: failure`, `last_error_code: agent_exit_nonzero` (~3 s).
//! - [`APPROVAL`]: the agent asks before a Bash call and waits [`APPROVAL_TIMEOUT`] (VK: 1 h):
//!   answer it with respond_approval meanwhile; unanswered it times out as VK does (the entry
//!   turns `timed_out`, the agent goes on and completes).
//! - [`REBASE_CONFLICT`]: targets base branch [`REBASE_BASE`]; once the agent committed, someone
//!   commits a conflicting change on that base (the branch is one behind), and [`REBASE_AFTER`]
//!   later the demo rebases it as a user in VK's UI would: stopped on conflicts in
//!   [`CONFLICT_FILE`] (get_attempt_branch_status with `refresh: true`). abort_attempt_conflicts
//!   then rebase_attempt plays it again.
//! - [`LONG_RUNNING`]: an agent that logs one entry every 0.3 s for about [`LONG_RUNNING_ENTRIES`]
//!   × 0.3 s (10 minutes), then completes.

use std::time::Duration;

use tokio::task::JoinHandle;
use uuid::Uuid;

use vk_observer_sim::{AgentOutcome, ApprovalScript, AttemptScript, Sim, SimFile};

pub const SUCCESS: &str = "Demo road: success";
pub const FAILURE: &str = "Demo road: failure";
pub const APPROVAL: &str = "Demo road: approval";
pub const REBASE_CONFLICT: &str = "Demo road: rebase conflict";
pub const LONG_RUNNING: &str = "Demo road: long-running";

/// Every road's title, in the order they are created.
pub const TITLES: [&str; 5] = [SUCCESS, FAILURE, APPROVAL, REBASE_CONFLICT, LONG_RUNNING];

/// How long the approval road's request stays pending before it times out.
pub const APPROVAL_TIMEOUT: Duration = Duration::from_secs(40);
/// The base branch the rebase road targets (made from `main`, so other attempts stay current).
pub const REBASE_BASE: &str = "demo-base";
/// The file the base's new commit and the attempt both change.
pub const CONFLICT_FILE: &str = "src/roads/shared.rs";
/// How long the rebase road's branch stays behind before the demo rebases it.
pub const REBASE_AFTER: Duration = Duration::from_secs(5);
/// Normalized (and raw) entries of the long-running agent.
pub const LONG_RUNNING_ENTRIES: usize = 2000;

fn file(path: &str, content: &str) -> SimFile {
    SimFile {
        repo: "demo".into(),
        path: path.into(),
        change: "added".into(),
        additions: content.lines().count() as u64,
        deletions: 0,
        content: content.into(),
    }
}

/// Start every road on `project` (whose one repo is `repo`); each runs in its own task, whose
/// handles are returned (abort them to stop the roads).
pub fn start(sim: &Sim, project: Uuid, repo: Uuid) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    let mut road = |title: &str, script: AttemptScript| {
        let (sim, task) = (
            sim.clone(),
            sim.add_task(project, title, Some(describe(title))),
        );
        handles.push(tokio::spawn(async move {
            sim.run_attempt_script(task, script).await;
        }));
    };
    road(
        SUCCESS,
        AttemptScript {
            files: vec![file("src/roads/success.rs", "pub fn done() {}\n")],
            ..AttemptScript::default()
        },
    );
    road(
        FAILURE,
        AttemptScript {
            agent: AgentOutcome::Fail,
            ..AttemptScript::default()
        },
    );
    road(
        APPROVAL,
        AttemptScript {
            approval: Some(ApprovalScript {
                timeout: APPROVAL_TIMEOUT,
                ..ApprovalScript::default()
            }),
            ..AttemptScript::default()
        },
    );
    road(
        LONG_RUNNING,
        AttemptScript {
            normalized_entries: LONG_RUNNING_ENTRIES,
            raw_entries: LONG_RUNNING_ENTRIES,
            ..AttemptScript::default()
        },
    );
    let task = sim.add_task(project, REBASE_CONFLICT, Some(describe(REBASE_CONFLICT)));
    handles.push(tokio::spawn(rebase_conflict(sim.clone(), task, repo)));
    handles
}

/// The rebase road: an attempt on [`REBASE_BASE`], a conflicting commit on that base once the
/// agent committed, then the rebase that stops on it.
async fn rebase_conflict(sim: Sim, task: Uuid, repo: Uuid) {
    sim.move_base(repo, REBASE_BASE, None);
    let script = AttemptScript {
        files: vec![file(CONFLICT_FILE, "pub fn ours() {}\n")],
        ..AttemptScript::default()
    };
    let ids = sim
        .run_attempt_script_on(task, Some(REBASE_BASE), script)
        .await;
    sim.move_base(repo, REBASE_BASE, Some(CONFLICT_FILE));
    tokio::time::sleep(REBASE_AFTER).await;
    sim.rebase(ids.attempt_id, repo);
}

fn describe(title: &str) -> &'static str {
    match title {
        SUCCESS => "Scripted by the demo: an attempt that succeeds.",
        FAILURE => "Scripted by the demo: the agent exits 1 (last_error_code agent_exit_nonzero).",
        APPROVAL => {
            "Scripted by the demo: the agent waits on a tool approval (40 s, then timed out)."
        }
        REBASE_CONFLICT => {
            "Scripted by the demo: the branch falls behind its base and the rebase stops on a conflict."
        }
        _ => "Scripted by the demo: an agent that logs steadily for about 10 minutes.",
    }
}
