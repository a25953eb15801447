//! Mutating and artifact tools, forwarded to VK's REST API. The cache is never written here:
//! after VK accepts a change, the proxy nudges ingest to refetch the touched scope and waits
//! (bounded) until ingest has applied it, so the caller's next read sees its own write
//! (`pending_ingest: false`) — one writer, one truth. Creating calls go through
//! [`idempotency::Idempotency`].

pub mod approvals;
pub mod artifacts;
pub mod attempts;
pub mod audit;
pub(crate) mod branch_prefix;
pub mod file_lines;
pub(crate) mod follow_up_v01;
pub mod git;
pub(crate) mod git_refusals;
pub mod idempotency;
pub(crate) mod patch_guard;
pub mod repos;
pub(crate) mod start_v01;
pub mod stop;
pub(crate) mod task_handles;
pub mod tasks;
pub(crate) mod tasks_v01;

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use idempotency::Idempotency;
use vk_observer_ingest::signal::Signal;
use vk_observer_query::Query;
use vk_observer_store::StoreReader;
use vk_observer_tool_error::{ErrorCode, ToolError, clip};
use vk_observer_upstream::UpstreamError;
use vk_observer_upstream::refusal::KeyConflict;
use vk_observer_upstream::rest::VkClient;

/// How long a mutating tool waits for ingest to show its change before answering
/// `pending_ingest: true`.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Proxy {
    pub client: VkClient,
    pub query: Query,
    pub signals: UnboundedSender<Signal>,
    pub idem: Idempotency,
    pub settle_timeout: Duration,
    /// Repositories' branch reads kept a few seconds (`repos`).
    pub branches: repos::RepoBranches,
}

/// Where the cache stood when the tool answered.
pub(crate) struct Settled {
    pub token: String,
    pub pending_ingest: bool,
}

impl Proxy {
    /// The VK is a 0.1.x (the workspace-first dialect), as ingest found it: some tools take
    /// other routes there (`tasks_v01`, `start_v01`, …).
    pub(crate) fn on_vk_01(&self) -> bool {
        self.client.dialect() == Some(vk_observer_upstream::dialect::Dialect::Workspaces)
    }

    /// Ask ingest to refetch a task and/or an attempt now (instead of waiting for VK's SSE,
    /// which lags its writes by up to ~2 s).
    pub(crate) fn nudge(&self, task_id: Option<Uuid>, attempt_id: Option<Uuid>) {
        let _ = self.signals.send(Signal::Nudge {
            task_id,
            attempt_id,
        });
    }

    /// Wait until `visible` holds on the cache (the write came back through ingest) or the
    /// settle timeout passes. Wakes on every commit; costs no polling.
    pub(crate) async fn settle(&self, visible: impl Fn(&StoreReader) -> bool) -> Settled {
        let store = &self.query.store;
        let mut commits = store.hub().subscribe_global();
        let deadline = tokio::time::Instant::now() + self.settle_timeout;
        loop {
            if visible(&store.read()) {
                // The change may be visible before its token is published (the writer makes a
                // batch durable in between): the answer's token must cover it.
                store.hub().covering(self.settle_timeout).await;
                return Settled {
                    token: self.query.token(),
                    pending_ingest: false,
                };
            }
            tokio::select! {
                r = commits.changed() => if r.is_err() { break },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        Settled {
            token: self.query.token(),
            pending_ingest: true,
        }
    }
}

/// VK's answer as an error envelope.
pub(crate) fn upstream_error(e: UpstreamError) -> ToolError {
    match e {
        UpstreamError::Unreachable { url, reason } => ToolError::new(
            ErrorCode::UpstreamUnavailable,
            true,
            "Vibe Kanban is not reachable; retry later (reads still work from the cache). With request_id the retry is safe.",
        )
        .with_details(json!({ "url": clip(&url, 200), "reason": clip(&reason, 300) })),
        UpstreamError::NotFound { path } => ToolError::new(
            ErrorCode::NotFound,
            false,
            "VK does not know this id. Re-list (list_tasks / list_task_attempts) to get current ids.",
        )
        .with_details(json!({ "path": path })),
        UpstreamError::Status { status, path, message } => {
            let message = clip(&message, 300);
            let details = json!({ "status": status, "path": path, "message": message });
            match status {
                400 | 422 => ToolError::new(
                    ErrorCode::InvalidArgument,
                    false,
                    format!("VK rejected the request: {message}"),
                ),
                404 => ToolError::new(ErrorCode::NotFound, false, format!("VK: {message}")),
                409 => match KeyConflict::of_message(&message) {
                    Some(KeyConflict::InProgress) => ToolError::new(
                        ErrorCode::InProgress,
                        true,
                        "VK is still executing an earlier request with this key; retry shortly with the same request_id.",
                    ),
                    Some(KeyConflict::Reused) => ToolError::new(
                        ErrorCode::IdempotencyConflict,
                        false,
                        "VK has seen this request_id with different arguments; use a new request_id.",
                    ),
                    None => ToolError::new(
                        ErrorCode::Conflict,
                        false,
                        format!("VK refused in the current state: {message}"),
                    ),
                },
                s if s >= 500 => ToolError::new(
                    ErrorCode::UpstreamError,
                    true,
                    format!("VK failed ({s}): {message}. Retry later; with request_id the retry is safe."),
                ),
                _ => ToolError::new(ErrorCode::UpstreamError, false, format!("VK answered {status}: {message}")),
            }
            .with_details(details)
        }
        UpstreamError::Decode { path, reason } => ToolError::new(
            ErrorCode::UpstreamError,
            true,
            "VK sent a reply the daemon cannot read; the change may still have happened: check with a read tool before retrying without request_id.",
        )
        .with_details(json!({ "path": clip(&path, 200), "reason": clip(&reason, 300) })),
    }
}
