//! `start_task_attempt` on a VK 0.1.x: one `POST /api/workspaces/start` (a workspace named
//! after the task, on the chosen repos and target branches, its agent started with the task's
//! description as the prompt, or its title when it has none), then the board is told the new
//! workspace is an attempt of this task (`Signal::Linked`).
//!
//! **Exactly once without VK's help.** VK 0.1.x takes no idempotency key: a retried start
//! makes a second workspace. The daemon records the intent before it calls
//! (`Idempotency::run_recovering`); a call that may have reached VK without an answer keeps
//! the record, and its retry first looks for what it made: a workspace VK lists with the
//! task's name, created since the first call began (less [`CLOCK_SLACK_MS`]), on the same
//! repos, and not yet an attempt of another task. Only when none is found is VK asked again.
//! Two such workspaces (another client started one with the same name and repos in that
//! window) cannot be told apart; the oldest is taken (docs/agent-guide.md "Which VK").

use std::collections::BTreeSet;

use serde_json::{Value, json};
use uuid::Uuid;

use super::attempts::{AttemptStarted, StartAttempt, StartedRepo, check_repos};
use super::{Proxy, upstream_error};
use vk_observer_ingest::signal::Signal;
use vk_observer_query::target;
use vk_observer_tool_error::{ErrorCode, ToolError};
use vk_observer_vk as vk;

/// How far VK's clock may be behind the daemon's when a first call is looked for.
const CLOCK_SLACK_MS: i64 = 5_000;

/// `POST /api/workspaces/start`'s body for `task` (named `name`), and the request's
/// fingerprint for its `request_id` record.
fn start_body(s: &StartAttempt, task: &Value, name: &str, repos: &[StartedRepo]) -> (Value, Value) {
    let prompt = vk::string_of(task, "description")
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| name.to_owned());
    let repo_list: Vec<Value> = repos
        .iter()
        .map(|r| json!({"repo_id": r.repo_id, "target_branch": r.target_branch}))
        .collect();
    let body = json!({
        "name": name,
        "repos": repo_list,
        "linked_issue": null,
        "executor_config": {"executor": s.executor, "variant": s.variant},
        "prompt": prompt,
        "attachment_ids": null,
    });
    let fingerprint = json!({
        "task_id": s.task_id,
        "executor": s.executor,
        "variant": s.variant,
        "repos": repo_list,
    });
    (body, fingerprint)
}

impl Proxy {
    pub(crate) async fn start_attempt_v01(
        &self,
        s: StartAttempt,
        request_id: Option<&str>,
    ) -> Result<AttemptStarted, ToolError> {
        let reader = self.query.read();
        let task = target::task(&reader, s.task_id)?;
        if s.reuse_running_attempt
            && let Some(running) = self.running_attempt(&reader, s.task_id)?
        {
            return Ok(running);
        }
        if s.branch_prefix.is_some() {
            return Err(ToolError::invalid_field(
                "branch_prefix",
                "On VK 0.1.x the workspace's branch is named by VK (vk/<id>-<name>); start without branch_prefix.",
            ));
        }
        self.check_executor(&s.executor, s.variant.as_deref())?;
        check_repos(&reader, &task, &s.repos)?;
        drop(reader);
        let repos = self.target_branches(&s.repos).await?;
        let name = vk::string_of(&task.value, "title").unwrap_or_default();
        let (body, fingerprint) = start_body(&s, &task.value, &name, &repos);
        let wanted: BTreeSet<Uuid> = repos.iter().map(|r| r.repo_id).collect();
        let outcome = self
            .idem
            .run_recovering(
                "start_task_attempt",
                request_id,
                &fingerprint,
                |since_ms| self.find_started(s.task_id, &name, &wanted, since_ms),
                || async {
                    let reply = self
                        .client
                        .start_workspace(&body)
                        .await
                        .map_err(upstream_error)?;
                    Ok(reply.get("workspace").cloned().unwrap_or(Value::Null))
                },
            )
            .await?;
        let attempt_id = vk::object_id(&outcome.result).ok_or_else(|| {
            ToolError::new(
                ErrorCode::UpstreamError,
                true,
                "VK's reply has no workspace id",
            )
            .with_details(outcome.result.clone())
        })?;
        let _ = self.signals.send(Signal::Linked {
            task_id: s.task_id,
            workspace_id: attempt_id,
        });
        let settled = self.settle_started(attempt_id, None).await;
        let status = self.status_of(attempt_id)?;
        let workspace_branch = status
            .as_ref()
            .and_then(|st| st.workspace_branch.clone())
            .or_else(|| vk::string_of(&outcome.result, "branch"));
        Ok(AttemptStarted {
            attempt_id,
            task_id: s.task_id,
            workspace_branch,
            repos,
            branch_prefix: None,
            reused: false,
            replayed: outcome.replayed,
            status,
            token: settled.token,
            pending_ingest: settled.pending_ingest,
            freshness: self.query.freshness(),
        })
    }

    /// The workspace a first start may have made (see the module doc), asked of VK itself.
    async fn find_started(
        &self,
        task_id: Uuid,
        name: &str,
        repos: &BTreeSet<Uuid>,
        since_ms: i64,
    ) -> Option<Value> {
        let listed = self.client.workspaces().await.ok()?;
        let mut candidates: Vec<&Value> = listed
            .iter()
            .filter(|w| vk::string_of(w, "name").as_deref() == Some(name))
            .filter(|w| {
                vk::ts_of(w, "created_at")
                    .is_some_and(|t| t.timestamp_millis() >= since_ms - CLOCK_SLACK_MS)
            })
            .filter(|w| self.free_for(w, task_id))
            .collect();
        candidates.sort_by_key(|w| vk::ts_of(w, "created_at"));
        for w in candidates {
            let id = vk::object_id(w)?;
            let theirs = self.client.workspace_repos(id).await.ok()?;
            let theirs: BTreeSet<Uuid> = theirs.iter().filter_map(vk::object_id).collect();
            if &theirs == repos {
                return Some(w.clone());
            }
        }
        None
    }

    /// Not yet an attempt of a task other than `task_id` (per the cache).
    fn free_for(&self, workspace: &Value, task_id: Uuid) -> bool {
        let Some(id) = vk::object_id(workspace) else {
            return false;
        };
        let stored = self.query.read().attempt(id).ok().flatten();
        let task = stored.and_then(|a| vk::uuid_of(&a.value, "task_id"));
        task.is_none_or(|t| t == id || t == task_id)
    }
}
