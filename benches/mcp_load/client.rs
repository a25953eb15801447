//! The stateless-JSON MCP HTTP client (reqwest, or a bare hyper HTTP/1.1 connection).

use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use serde_json::{Value, json};

pub(crate) const PROTOCOL: &str = "2025-11-25";

/// A stateless-JSON MCP client: one POST per `tools/call`.
#[derive(Clone)]
pub(crate) struct Mcp {
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
    /// A bare HTTP/1.1 keep-alive connection used instead of `http` when set (see `bare`).
    pub(crate) bare: Option<std::sync::Arc<tokio::sync::Mutex<BareConn>>>,
}

pub(crate) type BareConn =
    hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// One `tools/call` body. The load phases measure the full answers (detail 2), as every figure
/// before detail levels did; a call that names a level (phase `bytes`) keeps it. The REST-proxy
/// baseline ignores the field.
pub(crate) fn call_body(tool: &str, args: &Value) -> String {
    let mut args = args.clone();
    if let Some(m) = args.as_object_mut() {
        m.entry("detail").or_insert(json!(2));
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
    .to_string()
}

impl Mcp {
    pub(crate) fn new(url: &str) -> Mcp {
        Mcp::with_client(url, reqwest::Client::new())
    }

    pub(crate) fn with_client(url: &str, http: reqwest::Client) -> Mcp {
        Mcp {
            http,
            url: url.to_string(),
            bare: None,
        }
    }

    /// A client on one bare hyper HTTP/1.1 keep-alive connection (like one wrk connection):
    /// no pool, no redirects, no per-request client bookkeeping, so sub-millisecond server
    /// times are not buried under the client's own. Call from the runtime that will use it.
    pub(crate) async fn bare(url: &str) -> anyhow::Result<Mcp> {
        let authority = url
            .strip_prefix("http://")
            .and_then(|u| u.split('/').next())
            .ok_or_else(|| anyhow!("not an http:// url: {url}"))?;
        let tcp = tokio::net::TcpStream::connect(authority).await?;
        tcp.set_nodelay(true)?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut mcp = Mcp::new(url);
        mcp.bare = Some(std::sync::Arc::new(tokio::sync::Mutex::new(send)));
        Ok(mcp)
    }

    pub(crate) async fn bare_post(
        conn: &tokio::sync::Mutex<BareConn>,
        url: &str,
        body: String,
    ) -> anyhow::Result<bytes::Bytes> {
        use http_body_util::BodyExt;
        let authority = url
            .strip_prefix("http://")
            .and_then(|u| u.split('/').next())
            .unwrap_or("");
        let path = url
            .find(authority)
            .map(|i| &url[i + authority.len()..])
            .unwrap_or("/");
        let req = hyper::Request::post(path)
            .header("host", authority)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
        let mut send = conn.lock().await;
        send.ready().await?;
        let r = send.send_request(req).await?;
        let status = r.status();
        let bytes = r.into_body().collect().await?.to_bytes();
        ensure!(
            status.is_success(),
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        Ok(bytes)
    }

    /// POST one JSON-RPC body; the answer's bytes.
    pub(crate) async fn raw(&self, body: String) -> anyhow::Result<bytes::Bytes> {
        if let Some(conn) = &self.bare {
            return Self::bare_post(conn, &self.url, body).await;
        }
        let r = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .body(body)
            .send()
            .await?;
        let status = r.status();
        let bytes = r.bytes().await?;
        ensure!(
            status.is_success(),
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        Ok(bytes)
    }

    /// The tool's structured result; an error for JSON-RPC errors and `isError` answers.
    pub(crate) fn parse(bytes: &[u8]) -> anyhow::Result<Value> {
        let v: Value = serde_json::from_slice(bytes)
            .with_context(|| format!("not JSON: {}", String::from_utf8_lossy(bytes)))?;
        if let Some(e) = v.get("error") {
            bail!("JSON-RPC error: {e}");
        }
        let r = v.get("result").ok_or_else(|| anyhow!("no result: {v}"))?;
        if r.get("isError") == Some(&Value::Bool(true)) {
            bail!("tool error: {}", r["content"][0]["text"]);
        }
        if let Some(s) = r.get("structuredContent") {
            return Ok(s.clone());
        }
        let text = r["content"][0]["text"]
            .as_str()
            .ok_or_else(|| anyhow!("no content: {r}"))?;
        Ok(serde_json::from_str(text)?)
    }

    pub(crate) async fn call(&self, tool: &str, args: &Value) -> anyhow::Result<Value> {
        Self::parse(&self.raw(call_body(tool, args)).await?)
    }

    /// Time from sending to the last byte of the answer; parsed afterwards.
    pub(crate) async fn timed(
        &self,
        tool: &str,
        args: &Value,
    ) -> anyhow::Result<(Duration, Value)> {
        let body = call_body(tool, args);
        let t = Instant::now();
        let bytes = self.raw(body).await?;
        let d = t.elapsed();
        Ok((d, Self::parse(&bytes)?))
    }
}
