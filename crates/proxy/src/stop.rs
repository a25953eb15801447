//! `stop_attempt`: stop an attempt's running agent and scripts (VK's attempt stop, which leaves
//! dev servers alone) or one execution process (VK's process stop, dev servers included), then
//! wait until the cache shows each stopped process ended (read-your-writes) and say which
//! processes were stopped, how they ended, and how long VK took.
//!
//! What VK does (docs/vk-contract.md, "Stop"): both routes return only once the processes have
//! ended; VK interrupts the agent, gives it about 5 s to honour the interrupt, then kills the
//! process group (about 7 s observed for an agent that ignores it), and records `killed` with no
//! exit code. `force` maps to VK's `?force=true` on the attempt stop, which additionally marks
//! processes VK has no live handle for (e.g. after a VK restart) as killed; it is not a harder
//! kill. VK's process stop has no force variant, so `force` with `execution_process_id` is
//! refused rather than silently ignored.
//!
//! On a VK 0.1.x (`dialect()` = `Workspaces`; attempt id = workspace id) an attempt stop is
//! `POST /api/workspaces/{id}/execution/stop` (every running process but dev servers, as here)
//! and a process stop the fork's path. Both write `killed` at once and return once the process
//! group is gone (about 9 s for an agent, 4 s for a script). 0.1.x has no force variant, and
//! needs none: at its start it marks the processes it holds no handle for `failed` itself. So
//! there `force` on an attempt stop is the plain stop (sent even when the cache shows nothing
//! running, as on the fork). An id VK does not know (its 404 without a body) is named as the
//! attempt or process the call gave.

use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::{Proxy, upstream_error};
use vk_observer_query::Freshness;
use vk_observer_query::rows::{AttemptRow, ProcessRow};
use vk_observer_query::status::AttemptStatus;
use vk_observer_store::StoreReader;
use vk_observer_tool_error::ToolError;
use vk_observer_upstream::UpstreamError;
use vk_observer_upstream::dialect::Dialect;
use vk_observer_vk::{ProcessStatus, RunReason};

/// What `stop_attempt` stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopTarget {
    /// Every running process of the attempt except dev servers.
    Attempt(Uuid),
    /// This one process (a dev server included).
    Process(Uuid),
}

/// One process the stop acted on, as the cache shows it after the stop.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StoppedProcess {
    /// Execution process id (UUID).
    pub execution_process_id: Uuid,
    /// `codingagent`, `setupscript`, `cleanupscript` or `devserver`.
    pub run_reason: String,
    /// Final status as cached: `killed` after a stop (`completed`/`failed` if it ended on its
    /// own first); `running` only while `pending_ingest` is true.
    pub status: String,
    /// Exit code; null when killed.
    pub exit_code: Option<i64>,
}

/// Answer of `stop_attempt`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AttemptStopped {
    /// The attempt (UUID): the one named, or the named process's.
    pub attempt_id: Uuid,
    /// The process named by `execution_process_id` (UUID); null for an attempt stop.
    pub execution_process_id: Option<Uuid>,
    /// True if a targeted process was running when the call arrived.
    pub was_running: bool,
    /// The processes that were running and were stopped, with their final status as cached
    /// after the stop (empty when nothing was running).
    pub stopped: Vec<StoppedProcess>,
    /// Milliseconds VK took to answer the stop (it returns once the processes ended: about 5 s
    /// for an agent that ignores the interrupt, then a kill); null when VK was not called
    /// because nothing was running.
    pub vk_ms: Option<u64>,
    /// True when this answer is a replay of an earlier stop with the same `request_id` (VK was
    /// not called again; `stopped` shows those processes as cached now).
    pub replayed: bool,
    /// The attempt's status after the stop (no longer `running` unless `pending_ingest`).
    pub status: Option<AttemptStatus>,
    /// Store token at which the stop is visible (opaque).
    pub token: String,
    /// True when the cache still showed a stopped process running 5 s after VK's answer.
    pub pending_ingest: bool,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// What a stop did, as kept in its request_id record.
#[derive(Deserialize)]
struct StopDone {
    attempt_id: Uuid,
    running: Vec<Uuid>,
    vk_ms: Option<u64>,
}

/// What a stop will act on, read from the cache before calling VK.
struct StopPlan {
    attempt_id: Uuid,
    task_id: Option<Uuid>,
    /// The running processes the stop targets.
    running: Vec<Uuid>,
}

impl Proxy {
    /// Stop `target`; with `request_id`, a retry with the same key and arguments answers the
    /// first stop's outcome (`replayed: true`) without calling VK again.
    pub async fn stop(
        &self,
        target: StopTarget,
        force: bool,
        request_id: Option<&str>,
    ) -> Result<AttemptStopped, ToolError> {
        let named = match target {
            StopTarget::Process(p) => Some(p),
            StopTarget::Attempt(_) => None,
        };
        let payload = json!({ "attempt_id": match target { StopTarget::Attempt(a) => Some(a), _ => None },
            "execution_process_id": named, "force": force });
        let outcome = self
            .idem
            .run("stop_attempt", request_id, &payload, || async {
                let plan = self.stop_plan(target, force)?;
                // An attempt stop with force still goes to VK: it may hold processes as running
                // that it lost the handle of, which only its force path marks killed.
                let call_vk = !plan.running.is_empty() || (force && named.is_none());
                let mut vk_ms = None;
                if call_vk {
                    let started = Instant::now();
                    self.call_stop(target, force).await?;
                    vk_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
                    self.nudge(plan.task_id, Some(plan.attempt_id));
                }
                Ok(json!({ "attempt_id": plan.attempt_id, "running": plan.running, "vk_ms": vk_ms }))
            })
            .await?;
        let done: StopDone = serde_json::from_value(outcome.result).map_err(ToolError::internal)?;
        let settled = if done.vk_ms.is_some() && !outcome.replayed {
            let (attempt, running) = (done.attempt_id, done.running.clone());
            self.settle(|r| none_running(r, attempt, &running)).await
        } else {
            self.unsettled()
        };
        Ok(AttemptStopped {
            attempt_id: done.attempt_id,
            execution_process_id: named,
            was_running: !done.running.is_empty(),
            stopped: self.stopped_rows(done.attempt_id, &done.running)?,
            vk_ms: done.vk_ms,
            replayed: outcome.replayed,
            status: self.status_of(done.attempt_id)?,
            token: settled.token,
            pending_ingest: settled.pending_ingest,
            freshness: self.query.freshness(),
        })
    }

    /// VK's stop of `target`, on the dialect the client follows (see the module doc).
    async fn call_stop(&self, target: StopTarget, force: bool) -> Result<(), ToolError> {
        if self.client.dialect() != Some(Dialect::Workspaces) {
            return match target {
                StopTarget::Attempt(a) => self.client.stop_attempt(a, force).await,
                StopTarget::Process(p) => self.client.stop_process(p).await,
            }
            .map_err(upstream_error);
        }
        let stopped = match target {
            StopTarget::Attempt(a) => self.client.stop_workspace(a).await,
            StopTarget::Process(p) => self.client.stop_process_v01(p).await,
        };
        stopped.map_err(|e| match (e, target) {
            (UpstreamError::NotFound { .. }, StopTarget::Attempt(a)) => {
                ToolError::unknown_attempt(a)
            }
            (UpstreamError::NotFound { .. }, StopTarget::Process(p)) => unknown_process(p),
            (e, _) => upstream_error(e),
        })
    }

    /// The target resolved against the cache: its attempt and the running processes it stops.
    fn stop_plan(&self, target: StopTarget, force: bool) -> Result<StopPlan, ToolError> {
        let reader = self.query.read();
        let (attempt_id, only) = match target {
            StopTarget::Attempt(a) => (a, None),
            StopTarget::Process(p) => {
                if force {
                    return Err(no_process_force());
                }
                let attempt = reader
                    .attempt_of_process(p)?
                    .ok_or_else(|| unknown_process(p))?;
                (attempt, Some(p))
            }
        };
        let Some(attempt) = reader.attempt_as::<AttemptRow>(attempt_id)? else {
            return Err(ToolError::unknown_attempt(attempt_id));
        };
        let processes = reader.processes_of_attempt_as::<ProcessRow>(attempt_id)?;
        if let Some(p) = only
            && !processes.iter().any(|(id, _)| *id == p)
        {
            return Err(unknown_process(p));
        }
        let running = processes
            .iter()
            .filter(|(id, p)| match only {
                Some(named) => *id == named,
                // VK's attempt stop skips dev servers.
                None => !RunReason::DevServer.is(p.reason()),
            })
            .filter(|(_, p)| ProcessStatus::Running.is(p.status()))
            .map(|(id, _)| *id)
            .collect();
        Ok(StopPlan {
            attempt_id,
            task_id: attempt.task_id,
            running,
        })
    }

    /// The stopped processes as the cache shows them now.
    fn stopped_rows(&self, attempt: Uuid, ids: &[Uuid]) -> Result<Vec<StoppedProcess>, ToolError> {
        let processes = self
            .query
            .read()
            .processes_of_attempt_as::<ProcessRow>(attempt)?;
        Ok(ids
            .iter()
            .filter_map(|id| processes.iter().find(|(pid, _)| pid == id))
            .map(|(pid, p)| StoppedProcess {
                execution_process_id: *pid,
                run_reason: p.reason().to_string(),
                status: p.status().to_string(),
                exit_code: p.exit_code,
            })
            .collect())
    }
}

/// True when none of `ids` (processes of `attempt`) is running in the cache.
fn none_running(reader: &StoreReader, attempt: Uuid, ids: &[Uuid]) -> bool {
    let Ok(processes) = reader.processes_of_attempt_as::<ProcessRow>(attempt) else {
        return false;
    };
    processes
        .iter()
        .filter(|(id, _)| ids.contains(id))
        .all(|(_, p)| !ProcessStatus::Running.is(p.status()))
}

fn unknown_process(id: Uuid) -> ToolError {
    ToolError::not_found(
        "execution_process",
        id,
        "No cached execution process has that id; get_attempt_status with detail 1 gives latest_execution_process_id (and latest_process), or stop by attempt_id.",
    )
}

fn no_process_force() -> ToolError {
    ToolError::invalid_field(
        "force",
        "force applies to attempt stops only: VK's process stop has no force variant (it always interrupts, waits about 5 s, then kills). Omit force, or pass attempt_id with force=true.",
    )
}
