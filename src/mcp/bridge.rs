//! `vk-observer mcp`: an MCP server on stdio for clients that spawn their servers, forwarding
//! every request to the running daemon's Streamable HTTP endpoint. It holds no state and no
//! store (sled allows one process per data dir); it tells the daemon its working directory so
//! `get_context` works for agents running inside an attempt workspace.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ResultType,
    ServerConfig,
};
use rmcp::service::{RequestContext, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};

use super::WORKSPACE_HEADER;

pub struct Bridge {
    daemon: RunningService<RoleClient, ()>,
    url: String,
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
        let mut config = ServerConfig::new(info.capabilities.clone());
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

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let response = self
            .daemon
            .peer()
            .call_tool_once(request)
            .await
            .map_err(|e| upstream_error(&self.url, e))?;
        Ok(match response {
            CallToolResponse::Complete(mut r) => {
                r.result_type = Some(ResultType::COMPLETE);
                CallToolResponse::Complete(r)
            }
            other => other,
        })
    }
}

/// Connect to the daemon at `url` and serve stdio until the client closes it.
pub async fn run(
    url: &str,
    workspace: Option<PathBuf>,
    token: Option<String>,
) -> anyhow::Result<()> {
    let mut headers = HashMap::new();
    if let Some(dir) = workspace.and_then(|d| d.to_str().map(str::to_owned)) {
        if let Ok(v) = dir.parse() {
            headers.insert(WORKSPACE_HEADER.parse()?, v);
        }
    }
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(headers);
    if let Some(t) = token.filter(|t| !t.trim().is_empty()) {
        config = config.auth_header(t);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    let daemon = ().serve(transport).await.with_context(|| {
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
