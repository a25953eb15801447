//! `vk-observer mcp`: an MCP server on stdio for clients that spawn their servers, forwarding
//! every request to the running daemon's Streamable HTTP endpoint. It holds no state and no
//! store (sled allows one process per data dir); it tells the daemon its working directory so
//! `get_context` works for agents running inside an attempt workspace. A tool call's progress
//! notifications (the daemon's keep-alives of a long wait, `mcp::transport::progress`) are relayed to the
//! stdio client under its own token, and a call the client cancels is cancelled at the daemon.
//! Resource templates and reads are forwarded too, and resource updates are followed both ways
//! a client asks for them, `resources/subscribe` (2025-11-25) and `subscriptions/listen`
//! (2026-07-28): the daemon leg's session is subscribed while anyone follows a URI
//! (`bridge_followers`), and its `notifications/resources/updated` reach those followers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam,
    ClientRequest, ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse,
    ResourceUpdatedNotificationParam, ResultType, ServerConfig, ServerResult,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RunningService, ServiceError,
    SubscriptionContext,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};

use super::bridge_followers::Followers;
use super::cache_hints;
use crate::WORKSPACE_HEADER;

pub(crate) struct Bridge {
    daemon: RunningService<RoleClient, Relay>,
    url: String,
    /// Serializes following changes with their daemon calls, so a subscribe and an unsubscribe
    /// of one URI reach the daemon in the order the followers changed.
    gate: tokio::sync::Mutex<()>,
}

type Routes = HashMap<ProgressToken, (ProgressToken, Peer<RoleServer>)>;

/// The daemon leg's client: rmcp gives each call to the daemon its own progress token, so
/// progress is routed back by it to the stdio client's token and peer; resource updates go to
/// the followers of their URI.
#[derive(Clone, Default)]
struct Relay {
    routes: Arc<Mutex<Routes>>,
    followers: Arc<Mutex<Followers>>,
}

/// Removes a call's route when the call ends, however it ends.
struct Route(Relay, ProgressToken);

impl Drop for Route {
    fn drop(&mut self) {
        self.0.routes().remove(&self.1);
    }
}

impl Relay {
    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        // Single inserts and removes: a panic elsewhere cannot leave the map half-changed.
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn followers(&self) -> std::sync::MutexGuard<'_, Followers> {
        self.followers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn route(&self, daemon: ProgressToken, client: ProgressToken, peer: Peer<RoleServer>) -> Route {
        self.routes().insert(daemon.clone(), (client, peer));
        Route(self.clone(), daemon)
    }
}

impl ClientHandler for Relay {
    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let target = self.routes().get(&params.progress_token).cloned();
        if let Some((token, peer)) = target {
            params.progress_token = token;
            // The client gone: its call's answer fails too, and ends the route.
            let _ = peer.notify_progress(params).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let targets = self.followers().targets(&params.uri);
        for listen in targets.listens {
            let _ = listen.send(params.uri.clone());
        }
        if let Some(peer) = targets.peer {
            // The client gone: the bridge ends with it.
            let _ = peer.notify_resource_updated(params).await;
        }
    }
}

fn upstream_error(url: &str, e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(
            format!("the vk-observer daemon at {url} did not answer: {other}"),
            None,
        ),
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        let Some(info) = self.daemon.peer().peer_info() else {
            return ServerConfig::default();
        };
        let mut capabilities = info.capabilities.clone();
        // The bridge's daemon leg declares no tasks extension, so no call through it becomes a
        // task and it serves no tasks/*: it does not offer the extension (`mcp::tasks`).
        if let Some(ext) = capabilities.extensions.as_mut() {
            ext.remove(rmcp::model::TASKS_EXTENSION_ID);
            if ext.is_empty() {
                capabilities.extensions = None;
            }
        }
        let mut config = ServerConfig::new(capabilities);
        if let Some(i) = &info.server_info {
            config = config.with_server_info(i.clone());
        }
        if let Some(text) = &info.instructions {
            config = config.with_instructions(text.clone());
        }
        config
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The daemon leg speaks the 2025-11-25 protocol, whose results carry no `resultType`;
        // mark them complete so a 2026-07-28 client on stdio accepts them (rmcp drops the
        // field again for older clients).
        let mut tools = self
            .daemon
            .peer()
            .list_tools(request)
            .await
            .map_err(|e| upstream_error(&self.url, e))?;
        tools.result_type = Some(ResultType::COMPLETE);
        cache_hints::on_tools(&context, &mut tools);
        Ok(tools)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut templates = self
            .daemon
            .peer()
            .list_resource_templates(request)
            .await
            .map_err(|e| upstream_error(&self.url, e))?;
        templates.result_type = Some(ResultType::COMPLETE);
        cache_hints::on_templates(&context, &mut templates);
        Ok(templates)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let mut read = self
            .daemon
            .peer()
            .read_resource_once(request)
            .await
            .map_err(|e| upstream_error(&self.url, e))?;
        if let ReadResourceResponse::Complete(r) = &mut read {
            r.result_type = Some(ResultType::COMPLETE);
            cache_hints::on_read(&context, r);
        }
        Ok(read)
    }

    #[allow(deprecated)] // the 2025-11-25 way, still what some clients use
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _gate = self.gate.lock().await;
        let relay = self.daemon.service();
        let uri = request.uri.clone();
        if relay.followers().subscribe(&uri, context.peer.clone()) != Some(true) {
            return Ok(());
        }
        let r = self.daemon_subscribe(&uri).await;
        if r.is_err() {
            relay.followers().unsubscribe(&uri);
        }
        r
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _gate = self.gate.lock().await;
        if self.daemon.service().followers().unsubscribe(&request.uri) {
            self.daemon_unsubscribe(&request.uri).await;
        }
        Ok(())
    }

    /// `subscriptions/listen`: every resource URI asked for (the daemon checks that it names a
    /// cached resource when the listen starts; one it refuses just never updates).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let uris: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|u| super::resources::Resource::parse(u).is_ok())
            .cloned()
            .collect();
        Some(
            SubscriptionFilter::builder()
                .resource_subscriptions(uris)
                .build(),
        )
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), ErrorData> {
        let relay = self.daemon.service();
        let uris = ctx
            .accepted()
            .resource_subscriptions
            .iter()
            .flatten()
            .cloned()
            .collect();
        let (id, mut updates) = {
            let _gate = self.gate.lock().await;
            let (id, updates, firsts) = relay.followers().listen(uris);
            for uri in firsts {
                if self.daemon_subscribe(&uri).await.is_err()
                    && relay.followers().drop_from_listen(id, &uri)
                {
                    self.daemon_unsubscribe(&uri).await;
                }
            }
            (id, updates)
        };
        loop {
            tokio::select! {
                _ = ctx.cancelled() => break,
                uri = updates.recv() => {
                    let Some(uri) = uri else { break };
                    if ctx.sink().notify_resource_updated(uri).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _gate = self.gate.lock().await;
        let lasts = relay.followers().end_listen(id);
        for uri in lasts {
            self.daemon_unsubscribe(&uri).await;
        }
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let peer = self.daemon.peer();
        let call = ClientRequest::CallToolRequest(CallToolRequest::new(request));
        let handle = peer
            .send_request_with_option(call, PeerRequestOptions::no_options())
            .await
            .map_err(|e| upstream_error(&self.url, e))?;
        let id = handle.id.clone();
        let _route = context.meta.get_progress_token().map(|client| {
            let relay = self.daemon.service();
            relay.route(handle.progress_token.clone(), client, context.peer.clone())
        });
        // rmcp only flags a cancelled request (`ct`); the daemon must be told, or its wait
        // runs on to its timeout.
        let result = tokio::select! {
            r = handle.await_response() => r,
            _ = context.ct.cancelled() => {
                let reason = Some("cancelled by the stdio client".to_string());
                let _ = peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason)).await;
                return Err(ErrorData::internal_error("the request was cancelled", None));
            }
        };
        // The daemon leg speaks the 2025-11-25 protocol (see `list_tools`): mark results complete.
        match result.map_err(|e| upstream_error(&self.url, e))? {
            ServerResult::CallToolResult(mut r) => {
                r.result_type = Some(ResultType::COMPLETE);
                Ok(CallToolResponse::Complete(r))
            }
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
            _ => Err(upstream_error(&self.url, ServiceError::UnexpectedResponse)),
        }
    }
}

impl Bridge {
    #[allow(deprecated)] // the daemon leg speaks 2025-11-25
    async fn daemon_subscribe(&self, uri: &str) -> Result<(), ErrorData> {
        self.daemon
            .peer()
            .subscribe(SubscribeRequestParams::new(uri))
            .await
            .map_err(|e| upstream_error(&self.url, e))
    }

    /// Unsubscribe the daemon leg; a failure is only logged (the daemon ends the session's
    /// subscriptions with the session anyway).
    #[allow(deprecated)]
    async fn daemon_unsubscribe(&self, uri: &str) {
        let r = self
            .daemon
            .peer()
            .unsubscribe(UnsubscribeRequestParams::new(uri))
            .await;
        if let Err(e) = r {
            tracing::debug!(uri, error = %e, "the daemon leg's unsubscribe failed");
        }
    }
}

/// Connect to the daemon at `url` and serve stdio until the client closes it.
pub async fn run(
    url: &str,
    workspace: Option<PathBuf>,
    token: Option<String>,
) -> anyhow::Result<()> {
    let mut headers = HashMap::new();
    if let Some(dir) = workspace.and_then(|d| d.to_str().map(str::to_owned))
        && let Ok(v) = dir.parse()
    {
        headers.insert(WORKSPACE_HEADER.parse()?, v);
    }
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(headers);
    if let Some(t) = token.filter(|t| !t.trim().is_empty()) {
        config = config.auth_header(t);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    let daemon = Relay::default().serve(transport).await.with_context(|| {
        format!(
            "no vk-observer daemon answers at {url}; start one with `vk-observer serve` (or pass --daemon URL)"
        )
    })?;
    let bridge = Bridge {
        daemon,
        url: url.to_string(),
        gate: tokio::sync::Mutex::new(()),
    };
    let server = bridge
        .serve(rmcp::transport::stdio())
        .await
        .context("stdio handshake with the MCP client failed")?;
    server.waiting().await?;
    Ok(())
}
