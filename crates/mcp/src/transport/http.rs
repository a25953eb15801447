//! The Streamable HTTP service nested at `/mcp`: Host and Origin validated (DNS-rebinding
//! guard), request bodies capped, stateless JSON mode on request; one `VkTools` per session,
//! with resource subscriptions where a session can be notified, and the parking layer's
//! state (`park`) for the guard in front of it.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::guard::GuardState;
use super::{park, progress, subscriptions};
use crate::VkTools;
use crate::access::TokenBook;
use vk_observer_query::Query;

pub type McpService = StreamableHttpService<VkTools, LocalSessionManager>;

/// The `/mcp` service plus the state of the guard in front of it (`guard`: the token, the
/// session cap over its sessions, then long-poll parking).
pub struct McpEndpoint {
    pub service: McpService,
    pub guard: GuardState,
    /// A handler outside any session (no subscriptions), for the daemon's other HTTP routes
    /// that run tools in-process (the board's approve and stop: `VkTools::call_as`).
    pub handler: VkTools,
}

/// Browser origins always allowed: pages served from this machine.
const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
];

/// The Streamable HTTP service to nest at `/mcp`: Host and Origin validated (DNS-rebinding
/// guard; a foreign `Origin` gets 403), request bodies capped, stateless JSON mode on request.
pub fn service(
    query: Query,
    proxy: Option<vk_observer_proxy::Proxy>,
    own_workspace: Option<PathBuf>,
    settings: vk_observer_config::McpSettings,
    fleet: crate::FleetRole,
    cancel: CancellationToken,
) -> McpEndpoint {
    let origins: Vec<String> = LOOPBACK_ORIGINS
        .iter()
        .map(|o| o.to_string())
        .chain(settings.allowed_origins.iter().cloned())
        .collect();
    let hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|h| h.to_string())
        .chain(settings.allowed_hosts.iter().cloned())
        .collect();
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(cancel.clone())
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(settings.max_body_bytes);
    if settings.stateless {
        config = config
            .with_legacy_session_mode(false)
            .with_json_response(true);
    }
    let sessions = Arc::new(LocalSessionManager::default());
    let handler =
        VkTools::new(query.clone(), proxy.clone(), own_workspace.clone()).with_fleet(fleet.clone());
    let parking = park::Parking {
        query: query.clone(),
        shutdown: cancel.clone(),
        // Stateless mode answers JSON: no stream to carry progress (see `progress`).
        progress_every: settings.progress_interval(),
        cancels: progress::Cancels::default(),
    };
    // Resource subscriptions need a session's stream; stateless JSON answers have none.
    let subscribing = (!settings.stateless).then(|| subscriptions::Subscribing {
        query: query.clone(),
        cap: settings.max_subscriptions_per_session,
        shutdown: cancel.clone(),
    });
    let service = StreamableHttpService::new(
        move || {
            let tools = VkTools::new(query.clone(), proxy.clone(), own_workspace.clone())
                .with_fleet(fleet.clone());
            Ok(match &subscribing {
                Some(s) => tools.with_subscriptions(s.clone()),
                None => tools,
            })
        },
        sessions.clone(),
        config,
    );
    McpEndpoint {
        service,
        handler,
        guard: GuardState {
            tokens: Arc::new(TokenBook::new(
                settings.token.clone(),
                settings.tokens_file.clone(),
            )),
            settings: Arc::new(settings),
            sessions,
            parking,
        },
    }
}
