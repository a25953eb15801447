//! `start_task_attempt` and `follow_up` (send / queue / cancel), forwarded to
//! VK; targets resolved and arguments checked against the cache first so mistakes come back as
//! precise envelopes instead of VK's generic 400s.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::branch_prefix::{BranchPrefixApplied, check_prefix};
use super::idempotency::Outcome;
use super::{Proxy, Settled, upstream_error};
use vk_observer_query::Freshness;
use vk_observer_query::status::{AttemptState, AttemptStatus, attempt_status};
use vk_observer_query::target::{self, SessionTarget};
use vk_observer_store::StoreReader;
use vk_observer_store::reader::Stored;
use vk_observer_tool_error::{ErrorCode, InvalidReason, ToolError};
use vk_observer_vk as vk;

/// Answer of `start_task_attempt`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AttemptStarted {
    /// The attempt (UUID): use it with get_attempt_status, tail_attempt_logs, follow_up.
    pub attempt_id: Uuid,
    /// Its task (UUID).
    pub task_id: Uuid,
    /// The attempt's git branch (VK names it; the agent commits there); null only when neither
    /// VK's reply nor the cache has it.
    pub workspace_branch: Option<String>,
    /// Each repo's target branch as sent to VK, and where it came from. Empty when
    /// `reused` (the running attempt keeps its own).
    pub repos: Vec<StartedRepo>,
    /// What became of `branch_prefix` (absent when none was given).
    pub branch_prefix: Option<BranchPrefixApplied>,
    /// True when `reuse_running_attempt` returned an attempt already running instead of
    /// starting another.
    pub reused: bool,
    /// True when this answer was stored by an earlier call with the same `request_id`.
    pub replayed: bool,
    /// The attempt's status once the cache has it; null while `pending_ingest` is true.
    pub status: Option<AttemptStatus>,
    /// Store token at which the attempt is visible (opaque); pass it to wait_for_attempt_change.
    pub token: String,
    /// True when VK started the attempt but the cache had not shown it (with its session and
    /// first process) within 5 s.
    pub pending_ingest: bool,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// A repository of a started attempt.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StartedRepo {
    /// Repository id (UUID).
    pub repo_id: Uuid,
    /// The branch the attempt is based on and merges into.
    pub target_branch: String,
    /// `given` (the caller's `target_branch`) or `default_current` (omitted: the branch
    /// checked out in the repo's checkout, as list_repos' `current_branch` shows it).
    pub target_branch_source: TargetBranchSource,
}

/// Where a started attempt's target branch came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetBranchSource {
    Given,
    DefaultCurrent,
}

/// Answer of `follow_up`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FollowUpDone {
    /// `send`, `queue` or `cancel`.
    pub action: String,
    /// The session acted on (UUID).
    pub session_id: Uuid,
    /// Its attempt (UUID).
    pub attempt_id: Option<Uuid>,
    /// `send`: the execution process VK started for the prompt (UUID); null otherwise.
    pub execution_process_id: Option<Uuid>,
    /// `queue` / `cancel`: `queued` or `empty`; null for `send`.
    pub queue_status: Option<String>,
    /// True when this answer was stored by an earlier call with the same `request_id`.
    pub replayed: bool,
    /// Store token at which the new process is visible (opaque).
    pub token: String,
    /// True when VK accepted it but the cache had not shown the new process within 5 s.
    pub pending_ingest: bool,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

pub struct StartAttempt {
    pub task_id: Uuid,
    pub executor: String,
    pub variant: Option<String>,
    /// (repo id, target branch; None: default to the repo's current branch)
    pub repos: Vec<(Uuid, Option<String>)>,
    pub reuse_running_attempt: bool,
    /// Seed 003's `branch_prefix` (`branch_prefix`): None keeps VK's name.
    pub branch_prefix: Option<String>,
}

/// What `follow_up` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowUpAction {
    Send,
    Queue,
    Cancel,
}

pub struct FollowUp {
    pub action: FollowUpAction,
    pub prompt: Option<String>,
    pub variant: Option<String>,
    pub attempt_id: Option<Uuid>,
    pub session_id: Option<Uuid>,
}

/// The repos of a new attempt: at least one, each a repository of the task's project (when the
/// cache knows the project), each with a target branch; checked here so VK's generic 400 never
/// reaches the agent.
pub(crate) fn check_repos(
    reader: &StoreReader,
    task: &Stored,
    repos: &[(Uuid, Option<String>)],
) -> Result<(), ToolError> {
    if repos.is_empty() {
        return Err(ToolError::invalid_field(
            "repos",
            "Give at least one {repo_id, target_branch}; list_repos gives the project's repo ids.",
        ));
    }
    if let Some(project) = vk::uuid_of(&task.value, "project_id") {
        let known: Vec<Uuid> = reader
            .repos_of_project(project)?
            .into_iter()
            .map(|r| r.id)
            .collect();
        if let Some((bad, _)) = repos.iter().find(|(r, _)| !known.contains(r)) {
            return Err(ToolError::invalid_field(
                "repos",
                "A repo_id is not a repository of the task's project; call list_repos with the task's project_id.",
            )
            .with_details(json!({ "field": "repos", "repo_id": bad })));
        }
    }
    let blank = |b: &Option<String>| b.as_deref().is_some_and(|b| b.trim().is_empty());
    if let Some((r, _)) = repos.iter().find(|(_, b)| blank(b)) {
        return Err(ToolError::invalid_field(
            "repos",
            "A given target_branch must not be blank (e.g. main); omit it to use the repo's current branch.",
        )
        .with_details(json!({ "field": "repos", "repo_id": r })));
    }
    Ok(())
}

/// What one follow-up action did at VK.
pub(crate) struct ActionDone {
    pub(crate) pid: Option<Uuid>,
    pub(crate) queue_status: Option<String>,
    pub(crate) replayed: bool,
    pub(crate) settled: Settled,
}

/// The prompt of `send` and `queue`: required and not blank (sent as given, untrimmed).
pub(crate) fn required_prompt(f: &FollowUp) -> Result<String, ToolError> {
    match f.prompt.as_deref().map(str::trim) {
        Some(p) if !p.is_empty() => Ok(f.prompt.clone().unwrap_or_default()),
        _ => Err(ToolError::invalid_field(
            "prompt",
            "prompt is required for action=send and action=queue.",
        )),
    }
}

impl Proxy {
    pub(super) fn status_of(&self, attempt: Uuid) -> Result<Option<AttemptStatus>, ToolError> {
        let reader = self.query.read();
        let t = reader.attempt_token(attempt)?;
        attempt_status(&reader, attempt, t, self.query.store.epoch())
    }

    pub(crate) fn check_executor(
        &self,
        executor: &str,
        variant: Option<&str>,
    ) -> Result<(), ToolError> {
        let Some(info) = self.query.read().server_info()? else {
            return Ok(()); // not loaded yet: VK validates
        };
        let Some(map) = info.get("executors").and_then(Value::as_object) else {
            return Ok(());
        };
        let known: Vec<&String> = map.keys().collect();
        let Some(variants) = map.get(executor) else {
            return Err(ToolError::invalid_field(
                "executor",
                "Unknown executor. Call list_executors and pass one of its `executor` values verbatim.",
            )
            .with_details(json!({ "field": "executor", "known": known })));
        };
        if let Some(v) = variant {
            let vs: Vec<&String> = variants
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            if !vs.iter().any(|x| x.as_str() == v) {
                return Err(ToolError::invalid_field(
                    "variant",
                    "Unknown variant for this executor. Use one of list_executors' `variants`, or omit variant for the default.",
                )
                .with_details(json!({ "field": "variant", "known": vs })));
            }
        }
        Ok(())
    }

    /// `reuse_running_attempt`: an attempt of the task already running, answered as started.
    pub(crate) fn running_attempt(
        &self,
        reader: &StoreReader,
        task_id: Uuid,
    ) -> Result<Option<AttemptStarted>, ToolError> {
        let epoch = self.query.store.epoch();
        for a in reader.attempts_of_task(task_id)? {
            let st = attempt_status(reader, a.id, reader.attempt_token(a.id)?, epoch)?;
            if let Some(st) = st.filter(|st| st.state == AttemptState::Running) {
                return Ok(Some(AttemptStarted {
                    attempt_id: a.id,
                    task_id,
                    workspace_branch: st.workspace_branch.clone(),
                    repos: Vec::new(),
                    branch_prefix: None,
                    reused: true,
                    replayed: false,
                    status: Some(st),
                    token: self.query.token(),
                    pending_ingest: false,
                    freshness: self.query.freshness(),
                }));
            }
        }
        Ok(None)
    }

    pub async fn start_attempt(
        &self,
        s: StartAttempt,
        request_id: Option<&str>,
    ) -> Result<AttemptStarted, ToolError> {
        if self.on_vk_01() {
            return self.start_attempt_v01(s, request_id).await;
        }
        let reader = self.query.read();
        let task = target::task(&reader, s.task_id)?;
        if s.reuse_running_attempt
            && let Some(running) = self.running_attempt(&reader, s.task_id)?
        {
            return Ok(running);
        }
        self.check_executor(&s.executor, s.variant.as_deref())?;
        check_repos(&reader, &task, &s.repos)?;
        let prefix = s.branch_prefix.as_deref().map(check_prefix).transpose()?;
        let repos = self.target_branches(&s.repos).await?;
        let body = json!({
            "task_id": s.task_id,
            "executor_profile_id": { "executor": s.executor, "variant": s.variant },
            "repos": repos.iter().map(|r| json!({"repo_id": r.repo_id, "target_branch": r.target_branch})).collect::<Vec<_>>(),
        });
        // The idempotency record covers the prefix too (VK's body does not carry it).
        let mut fingerprint = body.clone();
        if let Some(p) = &prefix {
            fingerprint["branch_prefix"] = json!(p);
        }
        let outcome = self
            .idem
            .run("start_task_attempt", request_id, &fingerprint, || async {
                self.client
                    .create_attempt(&body, request_id)
                    .await
                    .map_err(upstream_error)
            })
            .await?;
        let attempt_id = vk::uuid_of(&outcome.result, "id").ok_or_else(|| {
            ToolError::new(
                ErrorCode::UpstreamError,
                true,
                "VK's reply has no attempt id",
            )
            .with_details(outcome.result.clone())
        })?;
        self.nudge(Some(s.task_id), Some(attempt_id));
        let vk_branch = outcome.result["branch"].as_str().map(str::to_string);
        let (wanted_branch, branch_prefix) = match (prefix, &vk_branch) {
            (Some(p), Some(b)) => {
                let (name, applied) = self.apply_prefix(attempt_id, b, &p).await;
                (Some(name), Some(applied))
            }
            _ => (vk_branch.clone(), None),
        };
        let settled = self
            .settle_started(attempt_id, wanted_branch.as_deref())
            .await;
        let status = self.status_of(attempt_id)?;
        let workspace_branch = status
            .as_ref()
            .and_then(|st| st.workspace_branch.clone())
            .or(wanted_branch);
        Ok(AttemptStarted {
            attempt_id,
            task_id: s.task_id,
            workspace_branch,
            repos,
            branch_prefix,
            reused: false,
            replayed: outcome.replayed,
            status,
            token: settled.token,
            pending_ingest: settled.pending_ingest,
            freshness: self.query.freshness(),
        })
    }

    /// Wait until the cache shows the new attempt with its session and first process (VK
    /// starts that process, setup script or agent, before it answers: so the answer's status
    /// is `running`, never an `idle` that routes to follow_up) and, after a rename, its branch.
    pub(crate) async fn settle_started(&self, attempt_id: Uuid, branch: Option<&str>) -> Settled {
        self.settle(|r| {
            let Some(attempt) = r.attempt(attempt_id).ok().flatten() else {
                return false;
            };
            let renamed = branch.is_none_or(|b| attempt.value["branch"].as_str() == Some(b));
            renamed
                && !r
                    .sessions_of_attempt(attempt_id)
                    .unwrap_or_default()
                    .is_empty()
                && !r
                    .processes_of_attempt(attempt_id)
                    .unwrap_or_default()
                    .is_empty()
        })
        .await
    }

    /// Each repo's target branch: the one given, else the repo's current branch at VK (VK
    /// itself requires one and has no default, docs/vk-contract.md §11.3).
    pub(crate) async fn target_branches(
        &self,
        repos: &[(Uuid, Option<String>)],
    ) -> Result<Vec<StartedRepo>, ToolError> {
        let mut out = Vec::with_capacity(repos.len());
        for (repo_id, given) in repos {
            let (target_branch, target_branch_source) = match given {
                Some(b) => (b.clone(), TargetBranchSource::Given),
                None => (
                    self.default_branch(*repo_id).await?,
                    TargetBranchSource::DefaultCurrent,
                ),
            };
            out.push(StartedRepo {
                repo_id: *repo_id,
                target_branch,
                target_branch_source,
            });
        }
        Ok(out)
    }

    /// The current branch of a repo whose `target_branch` was omitted.
    async fn default_branch(&self, repo_id: Uuid) -> Result<String, ToolError> {
        let read = self.repo_branch(repo_id).await.map_err(|mut e| {
            e.hint = format!("{} Or pass target_branch for this repo: its current branch could not be read from VK.", e.hint);
            e
        })?;
        read.current.ok_or_else(|| {
            ToolError::invalid_because(
                InvalidReason::NoCurrentBranch,
                "target_branch was omitted, but this repo has no current branch at VK (detached HEAD); pass target_branch for it.",
                json!({ "field": "repos", "repo_id": repo_id }),
            )
        })
    }

    /// The session a follow-up goes to, and its attempt (the one named, else the session's).
    fn follow_up_target(&self, f: &FollowUp) -> Result<(Uuid, Option<Uuid>), ToolError> {
        let Some(to) = SessionTarget::from_ids(f.session_id, f.attempt_id) else {
            return Err(ToolError::ambiguous_target(&["attempt_id", "session_id"]));
        };
        let session = target::session(&self.query.read(), to)?;
        let attempt_id = match to {
            SessionTarget::Attempt(a) => Some(a),
            SessionTarget::Session(_) => vk::uuid_of(&session.value, "workspace_id"),
        };
        Ok((session.id, attempt_id))
    }

    pub async fn follow_up(
        &self,
        f: FollowUp,
        request_id: Option<&str>,
    ) -> Result<FollowUpDone, ToolError> {
        let (session_id, attempt_id) = self.follow_up_target(&f)?;
        let (action, done) = match f.action {
            FollowUpAction::Send => (
                "send",
                self.send_prompt(session_id, attempt_id, &f, request_id)
                    .await?,
            ),
            FollowUpAction::Queue => (
                "queue",
                self.queue_prompt(session_id, &f, request_id).await?,
            ),
            FollowUpAction::Cancel => (
                "cancel",
                self.cancel_queued(session_id, &f, request_id).await?,
            ),
        };
        Ok(FollowUpDone {
            action: action.to_string(),
            session_id,
            attempt_id,
            execution_process_id: done.pid,
            queue_status: done.queue_status,
            replayed: done.replayed,
            token: done.settled.token,
            pending_ingest: done.settled.pending_ingest,
            freshness: self.query.freshness(),
        })
    }

    /// `action=send`: the prompt starts a coding-agent process on the session at once.
    async fn send_prompt(
        &self,
        session_id: Uuid,
        attempt_id: Option<Uuid>,
        f: &FollowUp,
        request_id: Option<&str>,
    ) -> Result<ActionDone, ToolError> {
        if self.on_vk_01() {
            return self
                .send_prompt_v01(session_id, attempt_id, f, request_id)
                .await;
        }
        let body = json!({ "prompt": required_prompt(f)?, "variant": f.variant });
        let key_payload = json!({ "action": "send", "session_id": session_id, "body": body });
        let outcome = self
            .idem
            .run("follow_up", request_id, &key_payload, || async {
                self.client
                    .follow_up(session_id, &body, request_id)
                    .await
                    .map_err(upstream_error)
            })
            .await?;
        Ok(self.sent(attempt_id, outcome).await)
    }

    /// A sent prompt's answer (both dialects): its process once the cache shows it.
    pub(crate) async fn sent(&self, attempt_id: Option<Uuid>, outcome: Outcome) -> ActionDone {
        let pid = vk::uuid_of(&outcome.result, "id");
        self.nudge(None, attempt_id);
        let settled = self
            .settle(|r| pid.is_some_and(|p| r.process(p).ok().flatten().is_some()))
            .await;
        ActionDone {
            pid,
            queue_status: None,
            replayed: outcome.replayed,
            settled,
        }
    }

    /// A queue action's answer (both dialects): VK's queue status; nothing cached to wait for.
    pub(crate) fn queued(&self, outcome: Outcome) -> ActionDone {
        ActionDone {
            pid: None,
            queue_status: vk::string_of(&outcome.result, "status"),
            replayed: outcome.replayed,
            settled: self.unsettled(),
        }
    }

    /// `action=queue`: VK holds the message until the session's running process ends.
    async fn queue_prompt(
        &self,
        session_id: Uuid,
        f: &FollowUp,
        request_id: Option<&str>,
    ) -> Result<ActionDone, ToolError> {
        if self.on_vk_01() {
            return self.queue_prompt_v01(session_id, f, request_id).await;
        }
        let body = json!({ "message": required_prompt(f)?, "variant": f.variant });
        let key_payload = json!({ "action": "queue", "session_id": session_id, "body": body });
        let outcome = self
            .idem
            .run("follow_up", request_id, &key_payload, || async {
                self.client
                    .queue_message(session_id, &body, request_id)
                    .await
                    .map_err(upstream_error)
            })
            .await?;
        Ok(self.queued(outcome))
    }

    /// `action=cancel`: drop the queued message (nothing is cached about the queue). With a
    /// `request_id` a retry answers the first cancel's queue status instead of cancelling a
    /// message queued in between.
    async fn cancel_queued(
        &self,
        session_id: Uuid,
        f: &FollowUp,
        request_id: Option<&str>,
    ) -> Result<ActionDone, ToolError> {
        if f.prompt.is_some() {
            return Err(ToolError::invalid_field(
                "prompt",
                "action=cancel takes no prompt; it cancels the queued message.",
            ));
        }
        let key_payload = json!({ "action": "cancel", "session_id": session_id });
        let outcome = self
            .idem
            .run("follow_up", request_id, &key_payload, || async {
                self.client
                    .cancel_queued(session_id)
                    .await
                    .map_err(upstream_error)
            })
            .await?;
        Ok(self.queued(outcome))
    }

    /// The answer of an action that changes nothing the cache holds: nothing to wait for.
    pub(super) fn unsettled(&self) -> Settled {
        Settled {
            token: self.query.token(),
            pending_ingest: false,
        }
    }
}
