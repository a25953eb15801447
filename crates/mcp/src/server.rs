//! The MCP server handler `VkTools`: tools from the families' router (`tools`), resources
//! (`transport::resources`, subscriptions in `transport::subscriptions`), every call counted
//! and timed, and checked first against the caller's grant (`access`: scopes, project and
//! own-attempt limits; `tools/list` shows only what it allows). `get_context` is listed only to
//! clients that run inside an attempt workspace (they say where with the `x-vk-workspace`
//! header, or the daemon itself was started inside one).

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::handler::server::tool::{ToolCallContext, ToolRouter};
use rmcp::model::{
    CancelTaskParams, GetTaskParams, GetTaskResult, Implementation, ListResourceTemplatesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool_handler};

use super::access::{Caller, Grant};
use super::tools;
use super::transport::{cache_hints, resources, subscriptions};
use vk_observer_query::Query;
use vk_observer_telemetry::{self as telemetry, label};
use vk_observer_tool_error::ToolError;

/// Header a client (the stdio bridge) uses to say which directory it runs in.
pub const WORKSPACE_HEADER: &str = "x-vk-workspace";

pub const INSTRUCTIONS: &str = "vk-observer answers Vibe Kanban task tools from a local cache of VK's streams. \
Reads are cheap: batch get_attempt_status over many attempts, tail logs with after_entry_index, and pass the \
`token` of one answer as `since_token` to the next to get only what changed. Every answer carries `freshness` \
(upstream connected|reconnecting|down and the age of the last applied change). Errors are JSON \
{code, retryable, hint, details}; follow the hint.";

#[derive(Clone)]
pub struct VkTools {
    pub query: Query,
    /// Forwards mutations to VK; None in servers built without an upstream (schema tests).
    pub proxy: Option<vk_observer_proxy::Proxy>,
    /// The directory the daemon was started in, when that is an attempt workspace.
    pub own_workspace: Option<PathBuf>,
    /// Where this server stands in a fleet: a fleet node forwards mutations (`forward`).
    pub fleet: super::forward::FleetRole,
    router: Arc<ToolRouter<VkTools>>,
    /// This session's resource subscriptions; None where no session can be notified
    /// (stateless mode, schema tests).
    subscriptions: Option<Arc<subscriptions::SessionSubscriptions>>,
}

impl VkTools {
    pub fn new(
        query: Query,
        proxy: Option<vk_observer_proxy::Proxy>,
        own_workspace: Option<PathBuf>,
    ) -> Self {
        VkTools {
            query,
            proxy,
            own_workspace,
            fleet: Default::default(),
            router: tools::router(),
            subscriptions: None,
        }
    }

    /// A handler of a fleet host or node (`forward`).
    pub fn with_fleet(mut self, fleet: super::forward::FleetRole) -> Self {
        self.fleet = fleet;
        self
    }

    /// Run a mutating call a fleet node forwarded (`fleet::rpc`): its grant was checked there,
    /// so it runs with every scope, audited as `fleet:<caller>`, through the tool's handler.
    pub async fn call_forwarded(
        &self,
        tool: &str,
        args: rmcp::model::JsonObject,
        caller: &str,
    ) -> rmcp::model::CallToolResult {
        let mut grant = Grant::new(None, None);
        grant.caller = format!("fleet:{caller}");
        let audit = super::access::audit_context(&grant, Some(&args), &self.query);
        let run = tools::mutations::run(self, tool, args);
        match vk_observer_proxy::audit::audited(audit, run).await {
            Some(result) => result,
            None => tools::answer::error_result(&ToolError::invalid_argument(format!(
                "{tool} is not a mutating tool: a fleet node forwards only mutations to a host."
            ))),
        }
    }

    /// Run the mutating `tool` for `caller` outside an MCP session (the daemon's board): the
    /// same steps as a tool call over `/mcp` — the caller's grant checked first (scope, then a
    /// limited grant's target), then the tool's own handler inside its audit context, or on a
    /// fleet node the owning host's (`forward`) — counted under the tool's name.
    pub async fn call_as(
        &self,
        caller: &Caller,
        tool: &str,
        args: rmcp::model::JsonObject,
    ) -> rmcp::model::CallToolResult {
        let started = std::time::Instant::now();
        let grant = Grant::new(Some(caller), None);
        let mutates = tools::scope_of(tool).is_some_and(|s| s != tools::Scope::Read);
        let result = if !mutates {
            tools::answer::error_result(&ToolError::invalid_argument(format!(
                "{tool} is not a mutating tool: only mutations run outside an MCP session."
            )))
        } else if let Err(refused) = grant.check(tool, Some(&args), &self.query) {
            tools::answer::error_result(&refused)
        } else if let super::forward::FleetRole::Node(forward) = &self.fleet {
            super::forward::forwarded(forward.as_ref(), &self.query, tool, args, &grant.caller)
                .await
        } else {
            let audit = super::access::audit_context(&grant, Some(&args), &self.query);
            let run = tools::mutations::run(self, tool, args);
            vk_observer_proxy::audit::audited(audit, run)
                .await
                .unwrap_or_else(|| {
                    tools::answer::error_result(&ToolError::invalid_argument(format!(
                        "{tool} is not a mutating tool."
                    )))
                })
        };
        let answered = Ok(rmcp::model::CallToolResponse::Complete(result.clone()));
        let _ = self.counted(tool.to_string(), started, answered);
        result
    }

    /// A handler whose session can subscribe to resources (`subscriptions`).
    pub(crate) fn with_subscriptions(mut self, shared: subscriptions::Subscribing) -> Self {
        self.subscriptions = Some(Arc::new(subscriptions::SessionSubscriptions::new(shared)));
        self
    }

    /// Tools, and resources; resource subscriptions only where a session can be notified; the
    /// tasks extension where runs can be started (an upstream to start them: `tasks`).
    fn capabilities(&self) -> ServerCapabilities {
        let builder = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources();
        let mut caps = if self.proxy.is_some() {
            builder.enable_tasks().build()
        } else {
            builder.build()
        };
        if self.subscriptions.is_some()
            && let Some(r) = caps.resources.as_mut()
        {
            r.subscribe = Some(true);
        }
        caps
    }

    /// The workspace directory this request comes from: the client's header, else the daemon's.
    pub(crate) fn workspace_of(&self, ctx: &RequestContext<RoleServer>) -> Option<PathBuf> {
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get(WORKSPACE_HEADER))
            .and_then(|v| v.to_str().ok())
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .or_else(|| self.own_workspace.clone())
    }

    /// The attempt whose workspace this request comes from, if any.
    fn own_attempt(&self, ctx: &RequestContext<RoleServer>) -> Option<uuid::Uuid> {
        // Remembered per directory (`query::workspaces`): this runs before every call.
        self.workspace_of(ctx)
            .and_then(|d| self.query.own_attempt_at(&d).ok().flatten())
    }

    /// What this request may do: the guard's caller (`access`), narrowed when it presented no
    /// token and runs inside an attempt workspace.
    pub(crate) fn grant_of(&self, ctx: &RequestContext<RoleServer>) -> Grant {
        let caller = Self::caller_of(ctx);
        let own = match caller {
            Some(c) if c.presented_token => None,
            _ => self.own_attempt(ctx),
        };
        Grant::new(caller, own)
    }

    fn caller_of(ctx: &RequestContext<RoleServer>) -> Option<&Caller> {
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
    }

    /// Resources are reads: refused without `read`, and for a limited caller unless the
    /// resource's attempt or project is within its limit (as the tool reading it would be).
    fn may_read(&self, ctx: &RequestContext<RoleServer>, uri: &str) -> Result<(), ErrorData> {
        let grant = self.grant_of(ctx);
        let refused = if grant.scopes.contains(tools::Scope::Read) {
            let Ok(res) = resources::Resource::parse(uri) else {
                return Ok(()); // the caller answers an unknown URI as it always did
            };
            // A task is read as its attempt is.
            let wake = res.wake().resolved(&self.query).unwrap_or(res.wake());
            let (field, tool, id) = match wake {
                resources::Wake::Attempt(a) => ("attempt_id", "resources (attempt)", a),
                resources::Wake::Project(p) => ("project_id", "resources (project activity)", p),
                resources::Wake::Task(t) => ("attempt_id", "resources (task)", t),
            };
            let mut args = serde_json::Map::new();
            args.insert(field.into(), id.to_string().into());
            match grant.check_read(tool, Some(&args), &self.query) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            }
        } else {
            grant.missing_scope("resources", tools::Scope::Read)
        };
        Err(ErrorData::invalid_request(
            refused.hint.clone(),
            Some(serde_json::to_value(&refused).unwrap_or_default()),
        ))
    }

    /// Every tool, `get_context` included (for schema tests and documentation).
    pub fn all_tools(&self) -> Vec<rmcp::model::Tool> {
        self.router.list_all()
    }

    /// The upstream client of the mutating tools, or `not_configured` without one.
    pub fn proxy(&self) -> Result<&vk_observer_proxy::Proxy, ToolError> {
        self.proxy.as_ref().ok_or_else(|| {
            ToolError::new(
                vk_observer_tool_error::ErrorCode::NotConfigured,
                false,
                "This server has no VK connection for mutations.",
            )
        })
    }

    /// A tool call's metrics (calls by outcome, duration), then its result unchanged.
    fn counted(
        &self,
        tool: String,
        started: std::time::Instant,
        result: Result<rmcp::model::CallToolResponse, ErrorData>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
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
        let grant = self.grant_of(&context);
        let result = match grant.check(&request.name, request.arguments.as_ref(), &self.query) {
            Err(refused) => Ok(rmcp::model::CallToolResponse::Complete(
                tools::answer::error_result(&refused),
            )),
            Ok(()) => {
                // Mutations run inside their audit context (`proxy::audit`); reads need none.
                let mutates =
                    tools::scope_of(&request.name).is_some_and(|s| s != tools::Scope::Read);
                let audit = mutates.then(|| {
                    super::access::audit_context(&grant, request.arguments.as_ref(), &self.query)
                });
                // A new fleet node answers no read before its first catch-up.
                if audit.is_none()
                    && let Err(e) = self.query.first_catch_up()
                {
                    let refused = tools::answer::error_result(&e);
                    return self.counted(
                        tool,
                        started,
                        Ok(rmcp::model::CallToolResponse::Complete(refused)),
                    );
                }
                let as_task = super::tasks::wanted(&request, &context);
                let name = request.name.to_string();
                let answered = match (audit, &self.fleet) {
                    // A fleet node: the owning host runs it and audits it (`forward`); a
                    // forwarded answer is never a task handle here (the fleet declares no
                    // tasks extension: it has no VK of its own).
                    (Some(_), super::forward::FleetRole::Node(forward)) => {
                        let args = request.arguments.clone().unwrap_or_default();
                        let answer = super::forward::forwarded(
                            forward.as_ref(),
                            &self.query,
                            &request.name,
                            args,
                            &grant.caller,
                        );
                        return self.counted(
                            tool,
                            started,
                            Ok(rmcp::model::CallToolResponse::Complete(answer.await)),
                        );
                    }
                    (Some(audit), _) => {
                        let tcc = ToolCallContext::new(self, request, context);
                        vk_observer_proxy::audit::audited(audit, self.router.call(tcc)).await
                    }
                    // A limited caller's listings are filtered by the grant (`access::reading`).
                    (None, _) => {
                        let tcc = ToolCallContext::new(self, request, context);
                        super::access::reading(grant, self.router.call(tcc)).await
                    }
                };
                match answered {
                    Ok(rmcp::model::CallToolResponse::Complete(r)) if as_task => {
                        self.into_task(&name, r).await
                    }
                    other => other,
                }
            }
        };
        self.counted(tool, started, result)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let with_context = self.own_attempt(&context).is_some();
        let grant = self.grant_of(&context);
        let tools = self
            .router
            .list_all()
            .into_iter()
            .filter(|t| with_context || t.name != tools::context::GET_CONTEXT)
            .filter(|t| grant.lists(&t.name))
            .collect();
        let mut result = ListToolsResult {
            tools,
            ..Default::default()
        };
        cache_hints::on_tools(&context, &mut result);
        Ok(result)
    }

    /// The resource families (`resources::KINDS`); there is no fixed list of resources.
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut result = ListResourceTemplatesResult::with_all_items(resources::templates());
        cache_hints::on_templates(&context, &mut result);
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.may_read(&context, &request.uri)?;
        let mut read = resources::Resource::parse(&request.uri)?.read(&self.query)?;
        cache_hints::on_read(&context, &mut read);
        Ok(ReadResourceResponse::from(read))
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.may_read(&context, &request.uri)?;
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

    /// `tasks/get` (the tasks extension; rmcp refuses it to clients that did not declare it).
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.task_get(&request.task_id, &context).await
    }

    /// `tasks/update`: answers to the run's approvals.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_update(&request.task_id, &request.input_responses, &context)
            .await
    }

    /// `tasks/cancel`: stops the run.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_cancel(&request.task_id, &context).await
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
        let ctx = context.request_context();
        let uris = context.accepted().resource_subscriptions.iter().flatten();
        // Names no resource: still needs `read`.
        self.may_read(ctx, "")?;
        for uri in uris {
            self.may_read(ctx, uri)?;
        }
        match &self.subscriptions {
            Some(s) => s.listen(context).await,
            None => Ok(()),
        }
    }
}
