//! A small MCP client to the running daemon (rmcp over Streamable HTTP): one session, tool calls
//! answered with their `structuredContent`, errors split into the tool's envelope and transport
//! failures.

use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

/// How long connecting (the MCP initialize handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed tool call.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The tool answered with its error envelope `{code, retryable, hint, details}`.
    Tool { tool: String, envelope: Value },
    /// The daemon did not answer (gone, restarted, refused).
    Transport { tool: String, message: String },
}

impl CallError {
    /// The envelope's `code` (empty for transport failures).
    pub(crate) fn code(&self) -> &str {
        match self {
            CallError::Tool { envelope, .. } => envelope["code"].as_str().unwrap_or_default(),
            CallError::Transport { .. } => "",
        }
    }

    pub(crate) fn retryable(&self) -> bool {
        match self {
            CallError::Tool { envelope, .. } => envelope["retryable"].as_bool().unwrap_or(false),
            CallError::Transport { .. } => false,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Tool { tool, envelope } => {
                let code = envelope["code"].as_str().unwrap_or("error");
                let hint = envelope["hint"].as_str().unwrap_or_default();
                write!(f, "{tool}: {code}: {hint}")
            }
            CallError::Transport { tool, message } => write!(f, "{tool}: {message}"),
        }
    }
}

impl std::error::Error for CallError {}

/// Why a TCP connection to the URL's host and port fails (e.g. `Connection refused (os error
/// 111)`), when it does: reqwest's and rmcp's messages stop at "error sending request".
pub(crate) async fn tcp_cause(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    let host = u.host_str()?.trim_matches(['[', ']']).to_string();
    let port = u.port_or_known_default()?;
    match tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no TCP answer from {host}:{port} within 3s")),
    }
}

/// One MCP session with the daemon.
pub(crate) struct DaemonClient {
    service: RunningService<RoleClient, ()>,
    url: String,
}

impl DaemonClient {
    /// Connect to the daemon's MCP endpoint (`http://127.0.0.1:8765/mcp`), sending `token` as
    /// the bearer token when given.
    pub(crate) async fn connect(url: &str, token: Option<&str>) -> anyhow::Result<DaemonClient> {
        let mut cfg = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(t) = token.filter(|t| !t.trim().is_empty()) {
            cfg = cfg.auth_header(t.to_string());
        }
        let transport = StreamableHttpClientTransport::from_config(cfg);
        let service = match tokio::time::timeout(CONNECT_TIMEOUT, ().serve(transport)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let text = format!("{e:#}");
                let lower = text.to_lowercase();
                if text.contains("401")
                    || lower.contains("unauthorized")
                    || lower.contains("auth required")
                {
                    let what = if token.is_some() {
                        "refused the bearer token given"
                    } else {
                        "wants a bearer token"
                    };
                    anyhow::bail!(
                        "the daemon at {url} {what}: pass its token with --token or \
                         VK_OBSERVER_MCP_TOKEN"
                    );
                }
                let reason = match tcp_cause(url).await {
                    Some(c) => c,
                    None => super::render::truncate(&text, 300),
                };
                anyhow::bail!(
                    "no vk-observer daemon answers at {url} ({reason}); start one with \
                     `vk-observer serve` (or pass --daemon URL)"
                );
            }
            Err(_) => anyhow::bail!(
                "the vk-observer daemon at {url} did not answer within {}s",
                CONNECT_TIMEOUT.as_secs()
            ),
        };
        Ok(DaemonClient {
            service,
            url: url.to_string(),
        })
    }

    /// The daemon's `serverInfo`: (name, version).
    pub(crate) fn server_info(&self) -> Option<(String, String)> {
        let info = self.service.peer().peer_info()?;
        let s = info.server_info.as_ref()?;
        Some((s.name.clone(), s.version.clone()))
    }

    /// Call a tool; its structured answer, or the error. Read tools are asked for detail 2
    /// (every field, VK's entries verbatim) unless the call names a level: the terminal
    /// commands render whole answers for people, not an agent's context.
    pub(crate) async fn call(&self, tool: &str, args: Value) -> Result<Value, CallError> {
        let mut map = match args {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        if vk_observer_mcp::takes_detail(tool) && !map.contains_key("detail") {
            map.insert("detail".into(), Value::from(2));
        }
        let r = self
            .service
            .peer()
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(map))
            .await
            .map_err(|e| CallError::Transport {
                tool: tool.to_string(),
                message: format!("the daemon at {} did not answer: {e}", self.url),
            })?;
        let text = r
            .content
            .iter()
            .find_map(|c| c.as_text().map(|t| t.text.clone()))
            .unwrap_or_default();
        if r.is_error == Some(true) {
            let envelope = serde_json::from_str(&text).unwrap_or_else(
                |_| serde_json::json!({"code": "error", "retryable": false, "hint": text, "details": {}}),
            );
            return Err(CallError::Tool {
                tool: tool.to_string(),
                envelope,
            });
        }
        match r.structured_content {
            Some(v) => Ok(v),
            None => serde_json::from_str(&text).map_err(|e| CallError::Transport {
                tool: tool.to_string(),
                message: format!("unreadable answer ({e})"),
            }),
        }
    }

    /// Like [`call`](Self::call), retrying errors the envelope marks `retryable` (a few times,
    /// a second apart).
    pub(crate) async fn call_retrying(&self, tool: &str, args: Value) -> Result<Value, CallError> {
        let mut tries = 0;
        loop {
            match self.call(tool, args.clone()).await {
                Err(e) if e.retryable() && tries < 5 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                r => return r,
            }
        }
    }

    /// End the session (the daemon frees it at once instead of on its idle timeout).
    pub(crate) async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.service.cancel()).await;
    }
}
