//! Which dialect of VK's API a server speaks (DESIGN.md, "Two dialects of VK"): the fork's
//! (local projects and tasks, sequenced SSE) or BloopAI VK 0.1.x's workspace-first one.
//!
//! Told from what each dialect answers, never from a route's mere presence: on 0.1.x every
//! unknown `GET /api/…` answers 200 with the web app's HTML, and one fork serves a board of its
//! own at `/api/projects`. Two probes, which must agree:
//! - `GET /api/info`: 0.1.x names its `version` in `data`; the fork's has no `version`.
//! - `GET /api/tasks`: the fork answers it itself (JSON, or a plain-text 400 without
//!   `project_id`); 0.1.x has no such route and answers the web app's HTML.
//!
//! VK's port file, when it is the one that names this server, is a third witness (a bare number:
//! the fork; JSON with `main_port`: 0.1.x); it is reported, and a disagreement is named.

use reqwest::Method;
use reqwest::header::CONTENT_TYPE;
use serde_json::Value;

use super::discovery::{self, PortFileShape};
use super::rest::{UpstreamError, VkClient};

/// The two dialects the daemon knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The fork the specification was written against (StrayDragon/vibe-kanban).
    Fork,
    /// BloopAI VK 0.1.x from 0.1.15, and the forks that keep its API.
    Workspaces,
}

impl Dialect {
    /// The setting's and `/healthz`'s spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Fork => "fork",
            Dialect::Workspaces => "workspaces",
        }
    }

    /// What a person reads in `doctor` and in the daemon's log.
    pub fn describe(self) -> &'static str {
        match self {
            Dialect::Fork => "the fork's dialect (local projects and tasks)",
            Dialect::Workspaces => "the workspace-first dialect of VK 0.1.x",
        }
    }
}

/// What the probes found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// `None`: the server speaks neither dialect (or the probes disagree): see `evidence`.
    pub dialect: Option<Dialect>,
    /// The version `/api/info` names (0.1.x only).
    pub version: Option<String>,
    /// What told, in words: each probe's answer, and the port file's shape when it names this
    /// server.
    pub evidence: String,
}

/// One probe's answer: the dialect it points to, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Witness {
    Says(Dialect, String),
    Neither(String),
}

/// Asks VK which dialect it speaks. Err only when VK cannot be asked (unreachable, a 401/403, a
/// 5xx): the caller retries; any answer VK gives is a `Detection`.
pub async fn detect(client: &VkClient) -> Result<Detection, UpstreamError> {
    let (info_status, info_type, info_body) = probe(client, "/api/info").await?;
    let (info, version) = read_info(info_status, &info_type, &info_body);
    let (tasks_status, tasks_type, _) = probe(client, "/api/tasks").await?;
    let tasks = read_tasks(tasks_status, &tasks_type);
    let port_file = discovery::port_file()
        .filter(|p| client.base_port() == Some(p.port))
        .map(|p| p.shape);
    Ok(decide(info, tasks, version, port_file))
}

/// The combination of the witnesses: both probes must point to one dialect.
fn decide(
    info: Witness,
    tasks: Witness,
    version: Option<String>,
    port_file: Option<PortFileShape>,
) -> Detection {
    let said = |w: &Witness| match w {
        Witness::Says(_, why) | Witness::Neither(why) => why.clone(),
    };
    let mut evidence = format!("/api/info {}; /api/tasks {}", said(&info), said(&tasks));
    let dialect = match (&info, &tasks) {
        (Witness::Says(a, _), Witness::Says(b, _)) if a == b => Some(*a),
        _ => None,
    };
    if let Some(shape) = port_file {
        let (named, text) = match shape {
            PortFileShape::Bare => (Dialect::Fork, "a bare port"),
            PortFileShape::Json => (Dialect::Workspaces, "JSON with main_port"),
        };
        evidence.push_str(&format!("; VK's port file holds {text}"));
        if dialect.is_some_and(|d| d != named) {
            evidence.push_str(" (which the answers contradict)");
        }
    }
    Detection {
        dialect,
        version,
        evidence,
    }
}

/// GET `path`: its status, content type and body. Unreachable, 401/403 and 5xx are errors.
async fn probe(client: &VkClient, path: &str) -> Result<(u16, String, String), UpstreamError> {
    let resp = client
        .request(Method::GET, path)
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| UpstreamError::Unreachable {
            url: client.url(path),
            reason: e.to_string(),
        })?;
    let status = resp.status().as_u16();
    let kind = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let body = resp.text().await.unwrap_or_default();
    if matches!(status, 401 | 403) || status >= 500 {
        return Err(UpstreamError::Status {
            status,
            path: path.into(),
            message: body.chars().take(200).collect(),
        });
    }
    Ok((status, kind, body))
}

/// `/api/info`: VK's envelope with `data`; `data.version` is 0.1.x's.
fn read_info(status: u16, kind: &str, body: &str) -> (Witness, Option<String>) {
    if kind.starts_with("text/html") {
        return (Witness::Neither("answers a web page".into()), None);
    }
    let data = serde_json::from_str::<Value>(body)
        .ok()
        .filter(|v| v.get("success").is_some())
        .and_then(|v| v.get("data").cloned());
    match data {
        Some(Value::Object(d)) => match d.get("version").and_then(Value::as_str) {
            Some(v) => (
                Witness::Says(Dialect::Workspaces, format!("names version {v}")),
                Some(v.to_string()),
            ),
            None => (
                Witness::Says(Dialect::Fork, "answers VK's info without a version".into()),
                None,
            ),
        },
        _ => (
            Witness::Neither(format!("answers {status} without VK's envelope")),
            None,
        ),
    }
}

/// `/api/tasks`: the fork's own route; 0.1.x answers the web app instead.
fn read_tasks(status: u16, kind: &str) -> Witness {
    if kind.starts_with("text/html") {
        if status == 200 {
            Witness::Says(
                Dialect::Workspaces,
                "answers the web app (no such route)".into(),
            )
        } else {
            Witness::Neither(format!("answers {status} with a web page"))
        }
    } else if kind.starts_with("application/json") || kind.starts_with("text/plain") {
        Witness::Says(Dialect::Fork, format!("is a route of its own ({status})"))
    } else {
        Witness::Neither(format!("answers {status} as {kind:?}"))
    }
}

#[cfg(test)]
#[path = "dialect_tests.rs"]
mod tests;
