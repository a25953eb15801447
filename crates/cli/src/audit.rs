//! `vk-observer audit`: the running daemon's audit trail (`GET /audit` beside its `/mcp`,
//! behind the same bearer token), newest first, filtered by attempt, token name or tool — one
//! line per mutation: when, who, what, on which ids, the outcome and VK's time.

use serde_json::Value;

/// What `audit` asks for.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// The daemon's MCP endpoint (`…/mcp`); the audit is at `…/audit` beside it.
    pub daemon: String,
    pub token: Option<String>,
    pub attempt: Option<uuid::Uuid>,
    /// A token's name, `mcp-token` or `loopback`.
    pub caller: Option<String>,
    pub tool: Option<String>,
    pub limit: usize,
    pub json: bool,
}

fn audit_url(daemon: &str) -> String {
    let base = daemon.trim_end_matches('/');
    let base = base.strip_suffix("/mcp").unwrap_or(base);
    format!("{base}/audit")
}

pub async fn run(opts: AuditOptions) -> anyhow::Result<i32> {
    let mut query: Vec<(&str, String)> = vec![("limit", opts.limit.to_string())];
    if let Some(a) = opts.attempt {
        query.push(("attempt_id", a.to_string()));
    }
    if let Some(c) = &opts.caller {
        query.push(("caller", c.clone()));
    }
    if let Some(t) = &opts.tool {
        query.push(("tool", t.clone()));
    }
    let mut url = reqwest::Url::parse(&audit_url(&opts.daemon))?;
    for (k, v) in &query {
        url.query_pairs_mut().append_pair(k, v);
    }
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = opts.token.as_deref().filter(|t| !t.trim().is_empty()) {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("the daemon at {} did not answer: {e}", opts.daemon))?;
    let status = resp.status();
    if status.as_u16() == 401 {
        anyhow::bail!("the daemon wants a bearer token: pass --token or set VK_OBSERVER_MCP_TOKEN");
    }
    let body: Value = resp.json().await?;
    anyhow::ensure!(status.is_success(), "the daemon answered {status}: {body}");
    if opts.json {
        outln!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(0);
    }
    let entries = body["entries"].as_array().cloned().unwrap_or_default();
    if entries.is_empty() {
        outln!("no audited mutations match");
        return Ok(0);
    }
    outln!(
        "{:<24} {:<16} {:<24} {:<16} {:>7}  TARGETS",
        "WHEN",
        "CALLER",
        "TOOL",
        "OUTCOME",
        "VK MS"
    );
    for e in entries {
        outln!("{}", line(&e));
    }
    Ok(0)
}

fn line(e: &Value) -> String {
    let when = e["at_ms"]
        .as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default();
    let outcome = match (e["outcome"].as_str(), e["code"].as_str()) {
        (Some("failed"), Some(code)) => format!("failed:{code}"),
        (Some(o), _) => o.to_string(),
        _ => "?".into(),
    };
    let vk_ms = e["vk_ms"]
        .as_u64()
        .map(|m| m.to_string())
        .unwrap_or("-".into());
    let mut targets: Vec<String> = e["targets"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some(format!("{}={}", k.trim_end_matches("_id"), v.as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    if let Some(r) = e["request_id"].as_str() {
        targets.push(format!("request_id={r}"));
    }
    format!(
        "{when:<24} {:<16} {:<24} {outcome:<16} {vk_ms:>7}  {}",
        e["caller"].as_str().unwrap_or("?"),
        e["tool"].as_str().unwrap_or("?"),
        targets.join(" ")
    )
}
