//! The long-poll tool `wait_for_attempt_change`: parse → `Query::wait_for_change` → answer,
//! ending early if the client cancels the request. Timeouts are capped at `WAIT_MAX_MS` (50 s,
//! below common client request timeouts), or at `WAIT_MAX_PROGRESS_MS` (600 s) for a wait
//! `transport::park` keeps alive with progress notifications (a `progressToken` on an
//! SSE-answering endpoint: `transport::progress`).

use std::time::Duration;

use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};

use super::WaitArgs;
use super::describe;
use crate::VkTools;
use crate::tools::answer::{detail_output_schema, level_of, shaped};
use crate::tools::args::{Args, input_schema};
use crate::tools::paging::MAX_BATCH;
use vk_observer_query::Since;
use vk_observer_query::until::Until;
use vk_observer_query::wait::{
    WAIT_DEFAULT_MS, WAIT_MAX_MS, WAIT_MAX_PROGRESS_MS, WAIT_RULES, WaitClock, WaitResult,
    WaitScope,
};
use vk_observer_tool_error::ToolError;

#[tool_router(router = wait_router, vis = "pub(crate)")]
impl VkTools {
    #[tool(description = describe::WAIT_FOR_ATTEMPT_CHANGE, input_schema = input_schema::<WaitArgs>(),
           output_schema = detail_output_schema::<WaitResult>(),
           annotations(title = "Wait for attempt change", read_only_hint = true, open_world_hint = false))]
    async fn wait_for_attempt_change(
        &self,
        ctx: RequestContext<RoleServer>,
        Args(a): Args<WaitArgs>,
    ) -> CallToolResult {
        let level = level_of(&a, |a| a.detail);
        // Not parked (a wait `transport::park` let through): no progress is sent, so the short cap.
        let WaitPlan {
            scope,
            until,
            since,
            timeout,
        } = match a.and_then(|a| plan(&self.query, a, false)) {
            Ok(p) => p,
            Err(e) => return shaped(Err::<WaitResult, _>(e), &WAIT_RULES, level),
        };
        // Parked in front of rmcp already (see `transport::park`): keep its clock and baseline.
        let parked = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Parked>())
            .cloned();
        let started_with = parked.as_ref().map(|p| p.watched.clone());
        let (clock, since) = match (parked, since) {
            // Without `until`, a wait without a token waits for changes after the park began;
            // with it, attempts already in a target state count (no baseline).
            (Some(p), Since::None) if until.is_none() => (
                p.clock,
                Since::After(vk_observer_query::Cut::local(p.since)),
            ),
            (Some(p), since) => (p.clock, since),
            (None, since) => (WaitClock::start(timeout), since),
        };
        let ct = ctx.ct.clone();
        shaped(
            self.query
                .wait_for_change(
                    scope,
                    until,
                    since,
                    clock,
                    started_with,
                    ct.cancelled_owned(),
                )
                .await,
            &WAIT_RULES,
            level,
        )
    }
}

/// What a validated wait call asks for (shared with `transport::park`).
pub(crate) struct WaitPlan {
    pub scope: WaitScope,
    /// The target states (`until`), if any.
    pub until: Option<Until>,
    pub since: Since,
    pub timeout: Duration,
}

/// Validate a wait call; `with_progress`: progress notifications keep the client alive, so the
/// longer timeout cap applies.
pub(crate) fn plan(
    query: &vk_observer_query::Query,
    a: WaitArgs,
    with_progress: bool,
) -> Result<WaitPlan, ToolError> {
    if a.include_activity == Some(true) && a.project_id.is_none() {
        return Err(ToolError::invalid_field(
            "include_activity",
            "include_activity needs project_id (activity is per project); for one task use tail_task_activity.",
        ));
    }
    let scope = match (a.attempt_ids, a.project_id) {
        (Some(ids), None) if !ids.is_empty() && ids.len() <= MAX_BATCH => WaitScope::Attempts(ids),
        (Some(ids), None) => {
            return Err(ToolError::invalid_field(
                "attempt_ids",
                format!(
                    "attempt_ids must hold 1 to {MAX_BATCH} ids (got {}); or watch the whole project with project_id.",
                    ids.len()
                ),
            ));
        }
        (None, Some(p)) if a.include_activity == Some(true) => WaitScope::ProjectActivity(p),
        (None, Some(p)) => WaitScope::Project(p),
        _ => return Err(ToolError::ambiguous_target(&["attempt_ids", "project_id"])),
    };
    let until = a.until.as_ref().map(Until::parse).transpose()?;
    let timeout = timeout_of(a.timeout_ms, with_progress)?;
    let since = query.since(a.since_token.as_deref(), "since_token")?;
    Ok(WaitPlan {
        scope,
        until,
        since,
        timeout,
    })
}

/// How long a wait may park: as asked, capped by `WAIT_MAX_MS`, or by the longer
/// `WAIT_MAX_PROGRESS_MS` when progress notifications keep the client alive.
fn timeout_of(timeout_ms: Option<u64>, with_progress: bool) -> Result<Duration, ToolError> {
    let ms = match timeout_ms {
        Some(0) => {
            return Err(ToolError::invalid_field(
                "timeout_ms",
                "timeout_ms must be at least 1.",
            ));
        }
        Some(ms) if with_progress => ms.min(WAIT_MAX_PROGRESS_MS),
        Some(ms) => ms.min(WAIT_MAX_MS),
        None => WAIT_DEFAULT_MS,
    };
    Ok(Duration::from_millis(ms))
}

/// Set on a request's extensions by `transport::park` once it has held the wait: the wait's
/// clock (so the timeout is not served twice) and the token it compared against (the baseline
/// of a wait without `since_token` or `until`), and the attempts it watched when it began.
#[derive(Debug, Clone)]
pub(crate) struct Parked {
    pub clock: WaitClock,
    pub since: u64,
    pub watched: std::sync::Arc<[uuid::Uuid]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(ms: Option<u64>, with_progress: bool) -> Duration {
        timeout_of(ms, with_progress).unwrap()
    }

    #[test]
    fn long_timeouts_only_with_progress() {
        let ms = Duration::from_millis;
        assert_eq!(timeout(Some(120_000), false), ms(WAIT_MAX_MS));
        assert_eq!(timeout(Some(120_000), true), ms(120_000));
        assert_eq!(timeout(Some(9_000_000), true), ms(WAIT_MAX_PROGRESS_MS));
        assert_eq!(timeout(None, true), ms(WAIT_DEFAULT_MS));
        assert_eq!(timeout(Some(10), false), ms(10));
    }
}
