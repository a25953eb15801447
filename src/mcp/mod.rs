//! The MCP surface: an rmcp tool router over the query layer (thin adapters in `read_tools`),
//! served over Streamable HTTP at `/mcp` by the daemon (`service`) and over stdio by the
//! `vk-observer mcp` bridge (`bridge`). `get_context` is listed only to clients that run inside
//! an attempt workspace (they say where with the `x-vk-workspace` header, or the daemon itself
//! was started inside one).

pub mod activity_requests;
pub mod activity_tools;
pub mod approval_requests;
pub mod approval_tools;
pub mod args;
pub mod bridge;
mod bridge_followers;
pub mod control_requests;
pub mod control_tools;
pub mod delivery_requests;
pub mod delivery_tools;
pub mod descriptions;
pub mod file_lines_args;
pub mod guard;
pub mod park;
pub mod progress;
pub mod read_tools;
pub mod requests;
pub mod resources;
pub mod respond;
pub mod shaped;
pub mod subscriptions;
pub mod wait_tool;

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::handler::server::tool::ToolRouter;
use rmcp::model::{
    Implementation, ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool_handler};
use tokio_util::sync::CancellationToken;

use crate::query::Query;
use crate::telemetry::{self, label};

/// Header a client (the stdio bridge) uses to say which directory it runs in.
pub const WORKSPACE_HEADER: &str = "x-vk-workspace";

/// The tools whose answers come at a detail level (their input schemas take `detail` 0 | 1 | 2;
/// `tests/mcp_schema.rs` checks this list against them). Clients that want the full answers
/// (the CLI, the tests written before levels) ask these for `detail: 2`.
pub const DETAIL_TOOLS: [&str; 18] = [
    "tail_project_activity",
    "tail_task_activity",
    "create_task",
    "update_task",
    "start_task_attempt",
    "stop_attempt",
    "list_projects",
    "list_repos",
    "list_executors",
    "list_tasks",
    "get_task",
    "list_task_attempts",
    "get_attempt_status",
    "tail_attempt_logs",
    "get_attempt_changes",
    "tail_session_messages",
    "get_context",
    "wait_for_attempt_change",
];

pub const INSTRUCTIONS: &str = "vk-observer answers Vibe Kanban task tools from a local cache of VK's streams. \
Reads are cheap: batch get_attempt_status over many attempts, tail logs with after_entry_index, and pass the \
`token` of one answer as `since_token` to the next to get only what changed. Every answer carries `freshness` \
(upstream connected|reconnecting|down and the age of the last applied change). Errors are JSON \
{code, retryable, hint, details}; follow the hint.";

#[derive(Clone)]
pub struct VkTools {
    pub query: Query,
    /// Forwards mutations to VK; None in servers built without an upstream (schema tests).
    pub proxy: Option<crate::proxy::Proxy>,
    /// The directory the daemon was started in, when that is an attempt workspace.
    pub own_workspace: Option<PathBuf>,
    router: Arc<ToolRouter<VkTools>>,
    /// This session's resource subscriptions; None where no session can be notified
    /// (stateless mode, schema tests).
    subscriptions: Option<Arc<subscriptions::SessionSubscriptions>>,
}

/// The tool router, built once: in stateless mode a handler is made per request, and building
/// the router generates every tool's schemas.
fn shared_router() -> Arc<ToolRouter<VkTools>> {
    static ROUTER: std::sync::OnceLock<Arc<ToolRouter<VkTools>>> = std::sync::OnceLock::new();
    ROUTER
        .get_or_init(|| {
            let mut router = read_tools::router()
                + wait_tool::router()
                + control_tools::router()
                + delivery_tools::router()
                + activity_tools::router()
                + approval_tools::router();
            // The macro derives output schemas from the result types; only here can they be
            // shaped like the input schemas are (`args::input_schema`).
            for route in router.map.values_mut() {
                if let Some(out) = &route.attr.output_schema {
                    route.attr.output_schema = Some(args::output_schema(out));
                }
            }
            Arc::new(router)
        })
        .clone()
}

impl VkTools {
    pub fn new(
        query: Query,
        proxy: Option<crate::proxy::Proxy>,
        own_workspace: Option<PathBuf>,
    ) -> Self {
        VkTools {
            query,
            proxy,
            own_workspace,
            router: shared_router(),
            subscriptions: None,
        }
    }

    /// A handler whose session can subscribe to resources (`subscriptions`).
    pub fn with_subscriptions(mut self, shared: subscriptions::Subscribing) -> Self {
        self.subscriptions = Some(Arc::new(subscriptions::SessionSubscriptions::new(shared)));
        self
    }

    /// Tools, and resources; resource subscriptions only where a session can be notified.
    fn capabilities(&self) -> ServerCapabilities {
        let mut caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        if self.subscriptions.is_some()
            && let Some(r) = caps.resources.as_mut()
        {
            r.subscribe = Some(true);
        }
        caps
    }

    /// The workspace directory this request comes from: the client's header, else the daemon's.
    pub fn workspace_of(&self, ctx: &RequestContext<RoleServer>) -> Option<PathBuf> {
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get(WORKSPACE_HEADER))
            .and_then(|v| v.to_str().ok())
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .or_else(|| self.own_workspace.clone())
    }

    fn in_workspace(&self, ctx: &RequestContext<RoleServer>) -> bool {
        self.workspace_of(ctx)
            .and_then(|d| self.query.attempt_at(&d).ok().flatten())
            .is_some()
    }

    /// Every tool, `get_context` included (for schema tests and documentation).
    pub fn all_tools(&self) -> Vec<rmcp::model::Tool> {
        self.router.list_all()
    }
}

#[tool_handler(router = self.router)]
impl ServerHandler for VkTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(self.capabilities())
            .with_server_info(Implementation::new(
                "vk-observer",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS.to_string())
    }

    /// Every call is counted and timed per tool (`vk_observer_tool_calls_total`,
    /// `vk_observer_tool_call_seconds`), errors labelled by outcome.
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        let started = std::time::Instant::now();
        // Only known names become labels: arbitrary names must not grow the metric set.
        let tool = if self.router.has_route(&request.name) {
            request.name.to_string()
        } else {
            telemetry::UNKNOWN_TOOL.to_string()
        };
        let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        let result = self.router.call(tcc).await;
        let outcome = match &result {
            Ok(rmcp::model::CallToolResponse::Complete(r)) if r.is_error == Some(true) => {
                telemetry::ToolOutcome::ToolError
            }
            Ok(_) => telemetry::ToolOutcome::Ok,
            Err(_) => telemetry::ToolOutcome::ProtocolError,
        };
        metrics::counter!(telemetry::TOOL_CALLS, label::TOOL => tool.clone(), label::OUTCOME => outcome.as_str())
            .increment(1);
        metrics::histogram!(telemetry::TOOL_CALL_SECONDS, label::TOOL => tool)
            .record(started.elapsed().as_secs_f64());
        result
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let with_context = self.in_workspace(&context);
        let tools = self
            .router
            .list_all()
            .into_iter()
            .filter(|t| with_context || t.name != "get_context")
            .collect();
        Ok(ListToolsResult {
            tools,
            ..Default::default()
        })
    }

    /// The resource families (`resources::KINDS`); there is no fixed list of resources.
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let res = resources::Resource::parse(&request.uri)?;
        res.read(&self.query).map(ReadResourceResponse::from)
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        match &self.subscriptions {
            Some(s) => s.subscribe(&request.uri, &context.peer),
            None => Err(subscriptions::stateless_refusal()),
        }
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        match &self.subscriptions {
            Some(s) => s.unsubscribe(&request.uri),
            None => Err(subscriptions::stateless_refusal()),
        }
    }

    /// `subscriptions/listen` (2026-07-28) for resource updates, where a stream can carry them.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let s = self.subscriptions.as_ref()?;
        Some(s.listen_filter(requested))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        match &self.subscriptions {
            Some(s) => s.listen(context).await,
            None => Ok(()),
        }
    }
}

pub type McpService = StreamableHttpService<VkTools, LocalSessionManager>;

/// The `/mcp` service plus a handle on its sessions (for the session limit).
pub struct McpEndpoint {
    pub service: McpService,
    pub sessions: Arc<LocalSessionManager>,
    /// For the long-poll parking layer in front of the service (`park`).
    pub parking: park::Parking,
}

/// Browser origins always allowed: pages served from this machine.
const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
];

/// The Streamable HTTP service to nest at `/mcp`: Host and Origin validated (DNS-rebinding
/// guard; a foreign `Origin` gets 403), request bodies capped, stateless JSON mode on request.
pub fn service(
    query: Query,
    proxy: Option<crate::proxy::Proxy>,
    own_workspace: Option<PathBuf>,
    settings: &crate::config::McpSettings,
    cancel: CancellationToken,
) -> McpEndpoint {
    let origins: Vec<String> = LOOPBACK_ORIGINS
        .iter()
        .map(|o| o.to_string())
        .chain(settings.allowed_origins.iter().cloned())
        .collect();
    let hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|h| h.to_string())
        .chain(settings.allowed_hosts.iter().cloned())
        .collect();
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(cancel.clone())
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(settings.max_body_bytes);
    if settings.stateless {
        config = config
            .with_legacy_session_mode(false)
            .with_json_response(true);
    }
    let sessions = Arc::new(LocalSessionManager::default());
    let parking = park::Parking {
        query: query.clone(),
        shutdown: cancel.clone(),
        // Stateless mode answers JSON: no stream to carry progress (see `progress`).
        progress_every: (!settings.stateless).then_some(settings.progress_every),
        cancels: progress::Cancels::default(),
    };
    // Resource subscriptions need a session's stream; stateless JSON answers have none.
    let subscribing = (!settings.stateless).then(|| subscriptions::Subscribing {
        query: query.clone(),
        cap: settings.max_subscriptions_per_session,
        shutdown: cancel.clone(),
    });
    let service = StreamableHttpService::new(
        move || {
            let tools = VkTools::new(query.clone(), proxy.clone(), own_workspace.clone());
            Ok(match &subscribing {
                Some(s) => tools.with_subscriptions(s.clone()),
                None => tools,
            })
        },
        sessions.clone(),
        config,
    );
    McpEndpoint {
        service,
        sessions,
        parking,
    }
}
