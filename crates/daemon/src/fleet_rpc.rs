//! The two ends of the fleet's mutations (design-notes §23), wired here where both the tools
//! and NATS can be named: [`HostTools`] runs what a fleet node forwards through this host
//! daemon's own tool handlers (`fleet::rpc::serve` calls it), and [`NatsForward`] is a fleet
//! node's `mcp::Forward`: the request to `vko.<host>.rpc`, then the wait until this node's
//! cache has applied the host's stream up to the token the host answered with.

use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use vk_observer_config::FleetSettings;
use vk_observer_fleet::rpc::{self, Executor, RpcFailure, RpcReply, RpcRequest};
use vk_observer_mcp::{Forward, VkTools};
use vk_observer_store::Store;
use vk_observer_tool_error::{ErrorCode, ToolError};

/// A host daemon's tools, as the fleet's RPC runs them.
pub(crate) struct HostTools(pub VkTools);

impl Executor for HostTools {
    fn execute(&self, request: RpcRequest) -> BoxFuture<'static, Value> {
        let tools = self.0.clone();
        Box::pin(async move {
            let result = tools
                .call_forwarded(&request.tool, request.arguments, &request.caller)
                .await;
            serde_json::to_value(result).unwrap_or_default()
        })
    }
}

/// A fleet node's forwarder: one NATS connection, made on first use.
pub(crate) struct NatsForward {
    settings: FleetSettings,
    store: Store,
    client: tokio::sync::OnceCell<async_nats::Client>,
}

impl NatsForward {
    pub(crate) fn new(settings: FleetSettings, store: Store) -> Self {
        NatsForward {
            settings,
            store,
            client: tokio::sync::OnceCell::new(),
        }
    }

    async fn client(&self) -> Result<&async_nats::Client, RpcFailure> {
        self.client
            .get_or_try_init(|| vk_observer_fleet::connect(&self.settings, "vk-observer fleet rpc"))
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "fleet node cannot reach NATS for a mutation");
                RpcFailure::NatsDown
            })
    }

    /// Wait (bounded) until this node applied `host`'s stream up to the reply's token; the
    /// token reached when it did not.
    async fn settle(&self, host: &str, reply: &RpcReply) -> Result<(), u64> {
        let mut commits = self.store.hub().subscribe_global();
        let deadline = tokio::time::Instant::now() + self.settings.rpc_settle_timeout;
        loop {
            let reached = self
                .store
                .read()
                .fleet_positions()
                .unwrap_or_default()
                .into_iter()
                .find(|(h, _)| h == host)
                .map(|(_, p)| p);
            let applied = reached.as_ref().filter(|p| p.epoch == reply.epoch);
            match applied {
                Some(p) if p.token >= reply.token => return Ok(()),
                _ if tokio::time::Instant::now() >= deadline => {
                    return Err(applied.map_or(0, |p| p.token));
                }
                _ => {}
            }
            // A host batch that changes nothing here moves only the position (no commit).
            tokio::select! {
                _ = commits.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    async fn forward_call(
        &self,
        host: &str,
        tool: &str,
        arguments: JsonObject,
        caller: &str,
    ) -> Result<CallToolResult, ToolError> {
        let with_key = arguments.get("request_id").is_some_and(|v| !v.is_null());
        let request = RpcRequest {
            tool: tool.into(),
            arguments,
            caller: caller.into(),
        };
        let timeout = self.settings.rpc_timeout;
        let client = self.client().await.map_err(|f| failure(host, f))?;
        let reply = rpc::call(client, host, &request, timeout)
            .await
            .map_err(|f| failure(host, f))?;
        let result: CallToolResult = serde_json::from_value(reply.result.clone())
            .map_err(|e| failure(host, RpcFailure::BadReply(host.into(), e.to_string())))?;
        if result.is_error != Some(true)
            && let Err(applied) = self.settle(host, &reply).await
        {
            return Err(behind(host, &reply, applied, with_key, &self.settings));
        }
        Ok(result)
    }
}

impl Forward for NatsForward {
    fn forward<'a>(
        &'a self,
        host: &'a str,
        tool: &'a str,
        arguments: JsonObject,
        caller: &'a str,
    ) -> BoxFuture<'a, Result<CallToolResult, ToolError>> {
        Box::pin(self.forward_call(host, tool, arguments, caller))
    }
}

/// A forwarded call that got no answer, as the envelope (nothing was changed, except after a
/// timeout, when it may have been).
fn failure(host: &str, f: RpcFailure) -> ToolError {
    let (code, reason, hint) = match &f {
        RpcFailure::NatsDown => (
            ErrorCode::UpstreamUnavailable,
            "nats_unreachable",
            format!(
                "This fleet node cannot reach NATS, so host {host} cannot be asked; nothing was changed. Reads still answer from the cache. Retry later."
            ),
        ),
        RpcFailure::NoResponders(_) => (
            ErrorCode::UpstreamUnavailable,
            "host_not_listening",
            format!(
                "No daemon of host {host} is connected to NATS (freshness.hosts shows it stale); nothing was changed. Retry once it is back."
            ),
        ),
        RpcFailure::TimedOut(..) => (
            ErrorCode::UpstreamTimeout,
            "host_timeout",
            format!(
                "Host {host} did not answer in time; the change may still have happened there. Retry with the same request_id (the host replays it), or check with a read before retrying without one."
            ),
        ),
        RpcFailure::BadReply(..) | RpcFailure::Nats(_) => (
            ErrorCode::UpstreamError,
            "host_reply",
            format!(
                "Asking host {host} failed ({f}); the change may have happened. Retry with the same request_id, or check with a read first."
            ),
        ),
    };
    ToolError::new(code, true, hint)
        .with_details(json!({"host": host, "reason": reason, "error": f.to_string()}))
}

/// The host made the change but this node's cache did not show it in time.
fn behind(
    host: &str,
    reply: &RpcReply,
    applied: u64,
    with_key: bool,
    settings: &FleetSettings,
) -> ToolError {
    let again = if with_key {
        "Retry with the same request_id in a moment: the host replays its answer"
    } else {
        "Do not retry (no request_id: it would do it again); read it with get_task / get_attempt_status once freshness.hosts shows the host caught up"
    };
    ToolError::new(
        ErrorCode::UpstreamTimeout,
        with_key,
        format!(
            "Host {host} made the change, but this fleet node had not applied it within {:?}. {again}.",
            settings.rpc_settle_timeout
        ),
    )
    .with_details(json!({
        "host": host,
        "reason": "fleet_behind",
        "host_token": reply.token,
        "applied_token": applied,
    }))
}
