//! A real MCP client (rmcp's, over Streamable HTTP) for the integration tests.
#![allow(dead_code)]

use std::collections::HashMap;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use vk_observer_mcp::takes_detail;

pub struct Mcp {
    pub client: RunningService<RoleClient, ()>,
}

/// What a tool call returned.
#[derive(Debug)]
pub enum Reply {
    Ok(Value),
    /// The error envelope `{code, retryable, hint, details}`.
    Err(Value),
}

impl Reply {
    pub fn ok(self) -> Value {
        match self {
            Reply::Ok(v) => v,
            Reply::Err(e) => panic!("expected success, got error {e}"),
        }
    }
    pub fn err(self) -> Value {
        match self {
            Reply::Err(e) => e,
            Reply::Ok(v) => panic!("expected an error, got {v}"),
        }
    }
    pub fn code(self) -> String {
        self.err()["code"].as_str().unwrap_or_default().to_string()
    }
    /// The error's code, then `/` and its `details.reason` when it has one
    /// (`invalid_argument/ambiguous_target`).
    pub fn classed(self) -> String {
        let e = self.err();
        let code = e["code"].as_str().unwrap_or_default();
        match e["details"]["reason"].as_str() {
            Some(r) => format!("{code}/{r}"),
            None => code.to_string(),
        }
    }
}

impl Mcp {
    pub async fn connect(addr: std::net::SocketAddr) -> Mcp {
        Self::connect_with(addr, HashMap::new()).await
    }

    pub async fn connect_with(addr: std::net::SocketAddr, headers: HashMap<String, String>) -> Mcp {
        let headers = headers
            .into_iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
            .collect();
        let cfg = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .custom_headers(headers);
        let client =
            ().serve(StreamableHttpClientTransport::from_config(cfg))
                .await
                .expect("MCP client connects");
        Mcp { client }
    }

    /// A client that sends `Authorization: Bearer <token>` (a scoped token, issue 26).
    pub async fn connect_with_token(addr: std::net::SocketAddr, token: &str) -> Mcp {
        let cfg = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(token.to_string());
        let client =
            ().serve(StreamableHttpClientTransport::from_config(cfg))
                .await
                .expect("MCP client connects with its token");
        Mcp { client }
    }

    pub async fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .client
            .peer()
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        names
    }

    /// Call a tool. The tests written before detail levels check the full answers, so a tool
    /// that takes `detail` is asked for level 2 (VK's objects verbatim, the answers as they
    /// were) unless the test names a level; `call_as_is` sends the arguments unchanged.
    pub async fn call(&self, name: &str, args: Value) -> Reply {
        let Value::Object(mut map) = args else {
            panic!("arguments must be an object")
        };
        if takes_detail(name) && !map.contains_key("detail") {
            map.insert("detail".into(), Value::from(2));
        }
        self.call_as_is(name, Value::Object(map)).await
    }

    /// Call a tool with exactly these arguments (the default detail level applies).
    pub async fn call_as_is(&self, name: &str, args: Value) -> Reply {
        let Value::Object(map) = args else {
            panic!("arguments must be an object")
        };
        // Detail 0 (asked for, or the default: `detail` absent or null) leaves `freshness` out
        // while the cache is current.
        let level0 = takes_detail(name)
            && map
                .get("detail")
                .and_then(Value::as_u64)
                .is_none_or(|d| d == 0);
        let r = self
            .client
            .peer()
            .call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(map))
            .await
            .unwrap_or_else(|e| panic!("{name}: protocol error {e}"));
        let text = r
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default();
        if r.is_error == Some(true) {
            let env: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{name}: error is not the JSON envelope: {text}"));
            for k in ["code", "retryable", "hint", "details"] {
                assert!(env.get(k).is_some(), "{name}: envelope lacks {k}: {env}");
            }
            return Reply::Err(env);
        }
        let v = r
            .structured_content
            .clone()
            .unwrap_or_else(|| serde_json::from_str(&text).unwrap());
        assert!(
            level0 || v.get("freshness").is_some(),
            "{name}: no freshness in {v}"
        );
        Reply::Ok(v)
    }
}
