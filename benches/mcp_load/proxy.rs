//! The REST-proxy baseline: an MCP server answering get_attempt_status the way VK's own MCP
//! server does, one REST call into VK per attempt (`GET /api/task-attempts/{id}/status`).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

#[derive(Clone)]
pub struct RestProxy {
    pub http: reqwest::Client,
    pub base: String,
}

impl RestProxy {
    async fn status(&self, id: &str) -> Result<Value, String> {
        let r = self
            .http
            .get(format!("{}/api/task-attempts/{id}/status", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        Ok(v.get("data").cloned().unwrap_or(Value::Null))
    }
}

impl ServerHandler for RestProxy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {
            "attempt_id": {"type": "string"},
            "attempt_ids": {"type": "array", "items": {"type": "string"}}}});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult {
            tools: vec![Tool::new(
                "get_attempt_status",
                "Attempt status via VK's REST API",
                schema,
            )],
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let ids: Vec<String> = match (args.get("attempt_id"), args.get("attempt_ids")) {
            (Some(Value::String(id)), _) => vec![id.clone()],
            (_, Some(Value::Array(ids))) => ids
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => return Err(ErrorData::invalid_params("attempt_id(s) required", None)),
        };
        let mut attempts = Vec::with_capacity(ids.len());
        for id in &ids {
            attempts.push(
                self.status(id)
                    .await
                    .map_err(|e| ErrorData::internal_error(e, None))?,
            );
        }
        Ok(CallToolResult::structured(json!({ "attempts": attempts })).into())
    }
}

/// Serve it stateless with JSON answers (the daemon's fastest mode) on 127.0.0.1.
pub async fn serve(base: String) -> anyhow::Result<std::net::SocketAddr> {
    let proxy = RestProxy {
        http: reqwest::Client::new(),
        base,
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let svc = StreamableHttpService::new(
        move || Ok(proxy.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", svc);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}
