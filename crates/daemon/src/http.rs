//! The axum app on the listen address: `/healthz` (the process is up), `/readyz` (bootstrap done:
//! the cache reflects VK), `/metrics` (Prometheus text). The MCP endpoint is mounted here too,
//! and `/audit` (the audit trail, `store::audit`, behind the same token guard: `read` scope),
//! and the board (`board`: `GET /board`, `/` redirects there; its own login, same tokens).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use vk_observer_store::Store;
use vk_observer_telemetry::health::Health;

#[derive(Clone)]
pub(crate) struct AppState {
    pub store: Store,
    pub health: Arc<Health>,
    pub metrics: Option<PrometheusHandle>,
}

/// The whole app: MCP at `/mcp` (behind the token and session guard) plus the health and
/// metrics routes.
pub(crate) fn router(state: AppState, mcp: vk_observer_mcp::McpEndpoint) -> Router {
    // The board reads the endpoint's tokens, handler and settings before `/mcp` takes it.
    let board = crate::board::routes(crate::board::BoardState::of(&mcp));
    // The guard checks the token and session cap, then parks long-polls (`mcp::transport::park`).
    let guard =
        axum::middleware::from_fn_with_state(mcp.guard, vk_observer_mcp::transport::guard::guard);
    let mcp_routes = Router::new()
        .nest_service("/mcp", mcp.service)
        .route("/audit", get(audit).with_state(state.clone()))
        .layer(guard);
    Router::new()
        .merge(mcp_routes)
        .merge(board)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// `GET /audit?attempt_id=&task_id=&project_id=&caller=&tool=&since_ms=&limit=`: the newest
/// matching audit entries first (`limit` default 100, at most 1000); a project-limited token's
/// only those of its projects.
#[derive(serde::Deserialize)]
struct AuditQuery {
    attempt_id: Option<uuid::Uuid>,
    task_id: Option<uuid::Uuid>,
    project_id: Option<uuid::Uuid>,
    caller: Option<String>,
    tool: Option<String>,
    since_ms: Option<i64>,
    limit: Option<usize>,
}

async fn audit(
    State(s): State<AppState>,
    caller: Option<axum::Extension<vk_observer_mcp::access::Caller>>,
    axum::extract::Query(q): axum::extract::Query<AuditQuery>,
) -> axum::response::Response {
    let Some(axum::Extension(caller)) =
        caller.filter(|c| c.scopes.contains(vk_observer_config::access::Scope::Read))
    else {
        let body =
            serde_json::json!({"code": "forbidden", "hint": "the audit trail needs scope `read`"});
        return (StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    };
    // A project-limited token reads the entries of its projects only (docs/reliability.md).
    if let (Some(projects), Some(p)) = (&caller.projects, q.project_id)
        && !projects.contains(&p)
    {
        let body = serde_json::json!({"code": "forbidden", "hint": "project_id is not one of this token's projects", "details": {"limit": {"project_ids": projects}}});
        return (StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    }
    let filter = vk_observer_store::audit::AuditFilter {
        attempt: q.attempt_id,
        task: q.task_id,
        project: q.project_id,
        caller: q.caller,
        tool: q.tool,
        since_ms: q.since_ms,
        within: caller.projects.clone(),
    };
    match s
        .store
        .audit(&filter, q.limit.unwrap_or(100).clamp(1, 1000))
    {
        Ok(entries) => axum::Json(serde_json::json!({ "entries": entries })).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    axum::Json(serde_json::json!({
        "status": "ok",
        "upstream": s.health.state(),
        "dialect": s.health.dialect(),
        "token": s.store.token().to_string(),
    }))
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let ready = s.health.bootstrapped();
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        axum::Json(serde_json::json!({ "ready": ready, "upstream": s.health.state() })),
    )
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    metrics::gauge!(vk_observer_telemetry::STORE_TOKEN).set(s.store.current_token() as f64);
    metrics::gauge!(vk_observer_telemetry::STORE_DISK_BYTES).set(s.store.size_on_disk() as f64);
    let last = s.store.last_commit_ms();
    if last > 0 {
        let age = (chrono::Utc::now().timestamp_millis() - last).max(0) as f64 / 1000.0;
        metrics::gauge!(vk_observer_telemetry::LAST_COMMIT_AGE).set(age);
    }
    metrics::gauge!(vk_observer_telemetry::RESOURCE_SUBSCRIPTIONS).set(
        s.health
            .resource_subscriptions
            .load(std::sync::atomic::Ordering::Relaxed) as f64,
    );
    metrics::gauge!(vk_observer_telemetry::BOOTSTRAPPED).set(if s.health.bootstrapped() {
        1.0
    } else {
        0.0
    });
    match &s.metrics {
        Some(h) => (StatusCode::OK, h.render()),
        None => (
            StatusCode::NOT_FOUND,
            "metrics recorder not installed".into(),
        ),
    }
}

/// HTTP/2's connection preface: a client with prior knowledge opens with it (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the client opened with HTTP/2's preface, read with `peek` (nothing consumed). Its
/// first bytes decide as soon as they differ from the preface; a preface still partial after
/// half a second is served as HTTP/1.1 (which then refuses it).
async fn opens_http2(tcp: &tokio::net::TcpStream) -> bool {
    let mut first = [0u8; 24];
    for _ in 0..50 {
        match tcp.peek(&mut first).await {
            Ok(0) | Err(_) => return false,
            Ok(n) if first[..n] != H2_PREFACE[..n] => return false,
            Ok(n) if n == H2_PREFACE.len() => return true,
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
    false
}

/// How the listener speaks: HTTP/1.1, and HTTP/2 over cleartext for clients that open with its
/// preface (prior knowledge: no TLS here, hence no ALPN, and no `Upgrade: h2c`). Each accepted
/// socket is peeked and served by exactly one protocol's connection in a task of its own, so an
/// HTTP/1.1 connection costs what it did before HTTP/2 was served (hyper-util's auto connection
/// is sized for both). HTTP/2 carries up to `http2_max_streams` requests on one connection, so
/// a client parking many waits pays one connection's buffers instead of one per wait.
struct Protocols {
    http1: hyper::server::conn::http1::Builder,
    http2: hyper::server::conn::http2::Builder<hyper_util::rt::TokioExecutor>,
}

impl Protocols {
    fn new(http2_max_streams: u32) -> Protocols {
        let mut http2 =
            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
        http2.max_concurrent_streams(http2_max_streams);
        Protocols {
            http1: hyper::server::conn::http1::Builder::new(),
            http2,
        }
    }

    /// Serve one accepted socket until it closes, under `graceful`'s watch; `closing` ends a
    /// socket that has not sent its first bytes when the server stops.
    async fn serve(
        self: Arc<Self>,
        tcp: tokio::net::TcpStream,
        app: Router,
        graceful: hyper_util::server::graceful::Watcher,
        closing: tokio_util::sync::CancellationToken,
        alive: Arc<()>,
    ) {
        let h2 = tokio::select! {
            h2 = opens_http2(&tcp) => h2,
            _ = closing.cancelled() => return,
        };
        let io = hyper_util::rt::TokioIo::new(tcp);
        let service = hyper_util::service::TowerToHyperService::new(app);
        // Each protocol's connection in a task of its own: this future stays small.
        if h2 {
            let conn = graceful.watch(self.http2.serve_connection(io, service));
            tokio::spawn(async move {
                let _ = conn.await;
                drop(alive);
            });
        } else {
            let conn = graceful.watch(self.http1.serve_connection(io, service));
            tokio::spawn(async move {
                let _ = conn.await;
                drop(alive);
            });
        }
    }
}

/// The accept loop: one task per connection (HTTP/1.1, or HTTP/2 with many requests on it:
/// `Protocols`), TCP_NODELAY, graceful shutdown bounded by `drain`. Used instead of
/// `axum::serve`, which rebuilds the router per connection and has no stream limit setting.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    http2_max_streams: u32,
    shutdown: impl std::future::Future<Output = ()>,
    drain: std::time::Duration,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let protocols = Arc::new(Protocols::new(http2_max_streams));
    let closing = tokio_util::sync::CancellationToken::new();
    // One clone per connection task, dropped after the connection and its service: the store
    // they hold is released before `serve` returns (a restart reopens the same data dir).
    let live = Arc::new(());
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                // Out of file descriptors and the like: back off instead of spinning.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(protocols.clone().serve(
            tcp,
            app.clone(),
            graceful.watcher(),
            closing.clone(),
            live.clone(),
        ));
    }
    closing.cancel();
    drop(listener);
    let started = std::time::Instant::now();
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(?drain, "connections still open at shutdown; closing them");
    }
    while Arc::strong_count(&live) > 1 && started.elapsed() < drain {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}
