//! vk-observer: observes Vibe Kanban (VK) through its streams, keeps an event-sourced cache in
//! sled and serves MCP task tools from that cache. See ARCHITECTURE.md for the code map.
//! Each layer is its own crate under crates/ (the compiler keeps the layer rules); this crate
//! re-exports them under their module names, so `vk_observer::store::...` paths stay as they were.

pub use vk_observer_cli::cli;
pub use vk_observer_config::config;
pub use vk_observer_daemon::daemon;
pub use vk_observer_daemon::fleet_node;
pub use vk_observer_daemon::http;
pub use vk_observer_fleet::fleet;
pub use vk_observer_ingest::ingest;
pub use vk_observer_mcp::mcp;
pub use vk_observer_proxy::proxy;
pub use vk_observer_query::query;
pub use vk_observer_query::tool_error;
pub use vk_observer_store::store;
pub use vk_observer_telemetry::health;
pub use vk_observer_telemetry::telemetry;
pub use vk_observer_upstream::upstream;
pub use vk_observer_vk::vk;

#[cfg(feature = "sim")]
pub mod sim {
    //! The VK simulator (crate `vk-observer-sim`, feature `sim`) and the demo `vk-observer demo` plays
    //! (here: it runs a daemon, which the simulator crate cannot name).
    pub use vk_observer_sim::sim::*;
    pub mod demo;
}
