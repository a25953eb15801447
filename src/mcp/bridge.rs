//! `vk-observer mcp`: an MCP server on stdio for clients that spawn their servers, forwarding
//! every request to the running daemon's Streamable HTTP endpoint. It holds no state and no
//! store (sled allows one process per data dir); it tells the daemon its working directory so
//! `get_context` works for agents running inside an attempt workspace. A tool call's progress
//! notifications (the daemon's keep-alives of a long wait, `mcp::progress`) are relayed to the
//! stdio client under its own token, and a call the client cancels is cancelled at the daemon.
//! Resource templates and reads are forwarded too, and so are `resources/subscribe` and
//! `unsubscribe`: the daemon leg's session holds the subscriptions and its
//! `notifications/resources/updated` are relayed to the stdio client. `subscriptions/listen`
//! (protocol 2026-07-28) is not offered here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam,
    ClientRequest, ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse,
    ResourceUpdatedNotificationParam, ResultType, ServerConfig, ServerResult,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};

use super::WORKSPACE_HEADER;

pub struct Bridge {
    daemon: RunningService<RoleClient, Relay>,
    url: String,
}

type Routes = HashMap<ProgressToken, (ProgressToken, Peer<RoleServer>)>;

/// The daemon leg's client: rmcp gives each call to the daemon its own progress token, so
/// progress is routed back by it to the stdio client's token and peer; resource updates go to
/// the stdio peer that subscribed (one stdio client per bridge).
#[derive(Clone, Default)]
struct Relay {
    routes: Arc<Mutex<Routes>>,
    updates: Arc<Mutex<Option<Peer<RoleServer>>>>,
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

    fn updates(&self) -> std::sync::MutexGuard<'_, Option<Peer<RoleServer>>> {
        self.updates.lock().unwrap_or_else(|e| e.into_inner())
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
        let peer = self.updates().clone();
        if let Some(peer) = peer {
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
        let capabilities = info.capabilities.clone();
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
        _context: RequestContext<RoleServer>,
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
        Ok(tools)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut templates = self
            .daemon
            .peer()
            .list_resource_templates(request)
            .await
            .map_err(|e| upstream_error(&self.url, e))?;
        templates.result_type = Some(ResultType::COMPLETE);
        Ok(templates)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let mut read = self
            .daemon
            .peer()
            .read_resource_once(request)
            .await
            .map_err(|e| upstream_error(&self.url, e))?;
        if let ReadResourceResponse::Complete(r) = &mut read {
            r.result_type = Some(ResultType::COMPLETE);
        }
        Ok(read)
    }

    #[allow(deprecated)] // the 2025-11-25 way; listen is not offered through the bridge
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.daemon.service().updates() = Some(context.peer.clone());
        self.daemon
            .peer()
            .subscribe(request)
            .await
            .map_err(|e| upstream_error(&self.url, e))
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.daemon
            .peer()
            .unsubscribe(request)
            .await
            .map_err(|e| upstream_error(&self.url, e))
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
    };
    let server = bridge
        .serve(rmcp::transport::stdio())
        .await
        .context("stdio handshake with the MCP client failed")?;
    server.waiting().await?;
    Ok(())
}
