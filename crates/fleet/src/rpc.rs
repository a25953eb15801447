//! Mutations over NATS request/reply (design-notes §23): a fleet node sends a mutating tool
//! call to the owning host on `vko.<host>.rpc` ([`call`]); the host daemon, which needs only
//! its outbound NATS connection, answers every request on that subject ([`serve`]) by running
//! the tool through its own tool path (an [`Executor`], given by the daemon: this floor cannot
//! name the tools) and replying with the tool's result and the host token its cache reached
//! after it, so the fleet node can answer once its own cache has applied that far.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::wire;
use vk_observer_store::Store;

/// How long a reply waits for the token of a change its executor saw to be published.
const COVER_LIMIT: Duration = Duration::from_secs(5);

/// One mutating tool call, as the fleet node forwards it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpcRequest {
    /// The tool's name (`create_task`, `merge_attempt`, …).
    pub tool: String,
    /// Its arguments as the caller sent them, `host` left out.
    pub arguments: Map<String, Value>,
    /// Who called it on the fleet node (the name of its token), for the host's audit trail.
    pub caller: String,
}

/// The host's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpcReply {
    /// The tool's `CallToolResult` as JSON (an error result carries the envelope).
    pub result: Value,
    /// The host store's epoch and the token its cache had reached once the tool answered.
    pub epoch: u64,
    pub token: u64,
}

/// Why a forwarded call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum RpcFailure {
    #[error("the fleet node is not connected to NATS")]
    NatsDown,
    #[error("no daemon of host {0:?} listens on its RPC subject")]
    NoResponders(String),
    #[error("host {0:?} did not answer within {1:?}")]
    TimedOut(String, Duration),
    #[error("host {0:?} sent an answer that does not decode: {1}")]
    BadReply(String, String),
    #[error("NATS: {0}")]
    Nats(String),
}

/// Send `request` to `host` and wait up to `timeout` for its answer.
pub async fn call(
    client: &async_nats::Client,
    host: &str,
    request: &RpcRequest,
    timeout: Duration,
) -> Result<RpcReply, RpcFailure> {
    if client.connection_state() != async_nats::connection::State::Connected {
        return Err(RpcFailure::NatsDown);
    }
    let payload = serde_json::to_vec(request)
        .map_err(|e| RpcFailure::BadReply(host.into(), e.to_string()))?;
    let sent = client
        .send_request(
            wire::rpc_subject(host),
            async_nats::Request::new()
                .payload(Bytes::from(payload))
                .timeout(Some(timeout)),
        )
        .await;
    let message = sent.map_err(|e| match e.kind() {
        async_nats::RequestErrorKind::NoResponders => RpcFailure::NoResponders(host.into()),
        async_nats::RequestErrorKind::TimedOut => RpcFailure::TimedOut(host.into(), timeout),
        _ => RpcFailure::Nats(e.to_string()),
    })?;
    serde_json::from_slice(&message.payload)
        .map_err(|e| RpcFailure::BadReply(host.into(), e.to_string()))
}

/// What runs a forwarded tool call on the host (the daemon's tools); answers the
/// `CallToolResult` as JSON.
pub trait Executor: Send + Sync + 'static {
    fn execute(&self, request: RpcRequest) -> BoxFuture<'static, Value>;
}

/// Answer every request on `host`'s RPC subject until the subscription or `cancel` ends; each
/// runs in its own task (a merge may take a while; others need not wait).
pub(crate) async fn serve(
    client: async_nats::Client,
    host: &str,
    store: Store,
    executor: Arc<dyn Executor>,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let mut requests = client.subscribe(wire::rpc_subject(host)).await?;
    tracing::info!(host, subject = %wire::rpc_subject(host), "answering fleet mutations");
    loop {
        let message = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            m = requests.next() => match m {
                Some(m) => m,
                None => anyhow::bail!("the RPC subscription ended"),
            },
        };
        let Some(reply_to) = message.reply.clone() else {
            continue;
        };
        let (client, store, executor) = (client.clone(), store.clone(), executor.clone());
        tokio::spawn(async move {
            let result = match serde_json::from_slice::<RpcRequest>(&message.payload) {
                Ok(request) => executor.execute(request).await,
                Err(e) => undecodable(&e),
            };
            let reply = RpcReply {
                result,
                epoch: store.epoch().0,
                // Covers the change the executor saw (its token may be published a flush later).
                token: store.hub().covering(COVER_LIMIT).await,
            };
            let bytes = serde_json::to_vec(&reply).unwrap_or_default();
            if let Err(e) = client.publish(reply_to, Bytes::from(bytes)).await {
                tracing::warn!(error = %e, "a fleet mutation's answer was not sent");
            }
        });
    }
}

/// The result of a request that does not decode: a tool error any client can read.
fn undecodable(e: &serde_json::Error) -> Value {
    let envelope = serde_json::json!({
        "code": "invalid_argument",
        "retryable": false,
        "hint": format!("The fleet node sent a request this host daemon cannot read ({e}); are both the same version?"),
        "details": {},
    });
    serde_json::json!({
        "content": [{"type": "text", "text": envelope.to_string()}],
        "isError": true,
    })
}

/// A host daemon's side of the fleet beside its publisher: one NATS connection (outbound
/// only) answering `vko.<host>.rpc` and publishing heartbeats, reconnecting until `cancel`.
pub fn spawn_host(
    settings: vk_observer_config::FleetSettings,
    store: Store,
    executor: Arc<dyn Executor>,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let host = settings.host.clone();
        let mut pause = Duration::ZERO;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            let began = tokio::time::Instant::now();
            let name = format!("vk-observer host {host} rpc");
            let client = match super::connect(&settings, &name).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(host, error = %e, "fleet RPC cannot reach NATS; retrying");
                    pause = super::next_pause(pause);
                    continue;
                }
            };
            let beats = super::heartbeat::beat(
                client.clone(),
                &host,
                store.clone(),
                settings.heartbeat_every,
                cancel.clone(),
            );
            let answers = serve(
                client,
                &host,
                store.clone(),
                executor.clone(),
                cancel.clone(),
            );
            tokio::select! {
                _ = beats => return,
                ended = answers => match ended {
                    Ok(()) => return,
                    Err(e) => tracing::warn!(host, error = %e, "fleet RPC stopped; reconnecting"),
                },
            }
            pause = super::pause_after(pause, began.elapsed());
        }
    })
}
