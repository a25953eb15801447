//! Typed REST client for VK: the snapshots and targeted refetches ingest needs, log history v2
//! pages, and the generic request path the proxy uses for mutations. Unwraps VK's envelope and
//! maps its error shapes (404 empty body, 422 text/plain, envelope with `message`).

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::routes;
use super::wire::{ConfigStatus, Envelope, HistoryPage};
use vk_observer_telemetry::catchup_metrics::{self as catchup, FetchKind};
use vk_observer_vk::Channel;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("VK is unreachable at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("VK answered 404 for {path}")]
    NotFound { path: String },
    #[error("VK answered {status} for {path}: {message}")]
    Status {
        status: u16,
        path: String,
        message: String,
    },
    #[error("VK sent a response the daemon cannot read for {path}: {reason}")]
    Decode { path: String, reason: String },
}

impl UpstreamError {
    /// Worth retrying later (VK down, timeouts, 5xx, 409 in-progress).
    pub fn is_retryable(&self) -> bool {
        match self {
            UpstreamError::Unreachable { .. } => true,
            UpstreamError::Status { status, .. } => *status >= 500 || *status == 409,
            _ => false,
        }
    }
}

#[derive(Clone)]
pub struct VkClient {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
    /// The dialect the server speaks, as ingest last found it (shared by every clone: the
    /// proxy picks its routes by it). 0 = not known, 1 = the fork's, 2 = VK 0.1.x's.
    dialect: std::sync::Arc<std::sync::atomic::AtomicU8>,
}

impl VkClient {
    /// `base` like `http://127.0.0.1:3000` (no trailing slash needed).
    pub fn new(base: &str, token: Option<String>) -> Result<Self, UpstreamError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| UpstreamError::Unreachable {
                url: base.into(),
                reason: e.to_string(),
            })?;
        Ok(VkClient {
            base: base.trim_end_matches('/').to_string(),
            http,
            token,
            dialect: Default::default(),
        })
    }

    /// The dialect ingest follows this server in (`None`: not known yet, or neither).
    pub fn dialect(&self) -> Option<super::dialect::Dialect> {
        use super::dialect::Dialect;
        match self.dialect.load(std::sync::atomic::Ordering::Acquire) {
            1 => Some(Dialect::Fork),
            2 => Some(Dialect::Workspaces),
            _ => None,
        }
    }

    /// Records the dialect ingest follows (every clone of this client sees it).
    pub fn set_dialect(&self, dialect: Option<super::dialect::Dialect>) {
        use super::dialect::Dialect;
        let code = match dialect {
            None => 0,
            Some(Dialect::Fork) => 1,
            Some(Dialect::Workspaces) => 2,
        };
        self.dialect
            .store(code, std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// `ws://…` URL for a path (http → ws, https → wss).
    pub(crate) fn ws_url(&self, path_and_query: &str) -> String {
        let base = if let Some(rest) = self.base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = self.base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            self.base.clone()
        };
        format!("{base}{path_and_query}")
    }

    /// The port of the base URL (explicit, or the scheme's default).
    pub(crate) fn base_port(&self) -> Option<u16> {
        reqwest::Url::parse(&self.base)
            .ok()?
            .port_or_known_default()
    }

    pub(crate) fn url(&self, path_and_query: &str) -> String {
        format!("{}{}", self.base, path_and_query)
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut rb = self.http.request(method, self.url(path));
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        rb
    }

    /// Send a request and unwrap VK's envelope into `data`.
    pub(crate) async fn send<T: DeserializeOwned>(
        &self,
        rb: reqwest::RequestBuilder,
        path: &str,
    ) -> Result<T, UpstreamError> {
        self.send_opt(rb, path)
            .await?
            .ok_or_else(|| UpstreamError::Decode {
                path: path.into(),
                reason: "envelope without data".into(),
            })
    }

    /// Like [`send`](Self::send) for routes whose success carries `data: null` (stop, delete).
    pub(crate) async fn send_opt<T: DeserializeOwned>(
        &self,
        rb: reqwest::RequestBuilder,
        path: &str,
    ) -> Result<Option<T>, UpstreamError> {
        self.send_counted(rb, path, FetchKind::Rest).await
    }

    /// [`send_opt`](Self::send_opt), its fetch and decode time counted under `kind`
    /// (`telemetry::catchup_metrics`).
    async fn send_counted<T: DeserializeOwned>(
        &self,
        rb: reqwest::RequestBuilder,
        path: &str,
        kind: FetchKind,
    ) -> Result<Option<T>, UpstreamError> {
        let started = Instant::now();
        let resp = rb
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| UpstreamError::Unreachable {
                url: self.url(path),
                reason: e.to_string(),
            })?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| UpstreamError::Unreachable {
            url: self.url(path),
            reason: e.to_string(),
        })?;
        if status == StatusCode::NOT_FOUND && body.is_empty() {
            return Err(UpstreamError::NotFound { path: path.into() });
        }
        let fetched = Instant::now();
        let decoded: Result<Envelope<T>, _> = serde_json::from_slice(&body);
        catchup::upstream_request(kind, fetched - started, fetched.elapsed());
        match decoded {
            Ok(env) if status.is_success() && env.success => Ok(env.data),
            Ok(env) => Err(UpstreamError::Status {
                status: status.as_u16(),
                path: path.into(),
                message: env.message.unwrap_or_default(),
            }),
            Err(e) if status.is_success() => Err(UpstreamError::Decode {
                path: path.into(),
                reason: e.to_string(),
            }),
            Err(_) => Err(UpstreamError::Status {
                status: status.as_u16(),
                path: path.into(),
                message: String::from_utf8_lossy(&body).chars().take(500).collect(),
            }),
        }
    }

    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, UpstreamError> {
        self.send(self.request(Method::GET, path), path).await
    }

    pub async fn project_repos(&self, project: Uuid) -> Result<Vec<Value>, UpstreamError> {
        self.get(&routes::project_repositories(project)).await
    }

    /// VK's `GitBranch` list of a repository (`name`, `is_current`, `is_remote`,
    /// `last_commit_date`); read live, VK's event streams do not carry it.
    pub async fn repo_branches(&self, repo: Uuid) -> Result<Vec<Value>, UpstreamError> {
        self.get(&routes::repo_branches(repo)).await
    }

    pub async fn attempts_of_task(&self, task: Uuid) -> Result<Vec<Value>, UpstreamError> {
        self.get(&routes::attempts_of_task(task)).await
    }

    pub async fn sessions_of_attempt(&self, attempt: Uuid) -> Result<Vec<Value>, UpstreamError> {
        self.get(&routes::sessions_of_attempt(attempt)).await
    }

    /// The attempt's repositories, each with its `target_branch`.
    pub async fn attempt_repos(&self, attempt: Uuid) -> Result<Vec<Value>, UpstreamError> {
        self.get(&routes::attempt_repos(attempt)).await
    }

    /// VK's change summary with the guard bypassed, so the file list is cached for `force` reads.
    pub async fn changes(&self, attempt: Uuid) -> Result<Value, UpstreamError> {
        self.get(&routes::changes(attempt)).await
    }

    pub async fn config_status(&self) -> Result<ConfigStatus, UpstreamError> {
        self.get(routes::CONFIG_STATUS).await
    }

    pub async fn info(&self) -> Result<Value, UpstreamError> {
        self.get(routes::INFO).await
    }

    /// The parts of `/api/info` the daemon keeps: executors and their variants, capabilities,
    /// the configured default profile and the diff guard preset. VK's config also holds
    /// credentials (e.g. a GitHub token), so nothing else of it is stored.
    pub async fn server_facts(&self) -> Result<Value, UpstreamError> {
        let info = self.info().await?;
        let config = info.get("config");
        Ok(serde_json::json!({
            "executors": info.get("executors").cloned().unwrap_or_default(),
            "capabilities": info.get("capabilities").cloned().unwrap_or_default(),
            "executor_profile": config.and_then(|c| c.get("executor_profile")).cloned(),
            "diff_preview_guard": config.and_then(|c| c.get("diff_preview_guard")).cloned(),
        }))
    }

    /// One page of log history v2: the latest `limit` entries below `cursor` (exclusive).
    pub async fn log_history(
        &self,
        pid: Uuid,
        channel: Channel,
        limit: u32,
        cursor: Option<u64>,
    ) -> Result<HistoryPage, UpstreamError> {
        let path = routes::log_history(pid, channel, limit, cursor);
        self.send_counted(self.request(Method::GET, &path), &path, FetchKind::History)
            .await?
            .ok_or_else(|| UpstreamError::Decode {
                path: path.clone(),
                reason: "envelope without data".into(),
            })
    }
}
