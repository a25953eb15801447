//! `vk-observer-daemon`: vk-observer's `daemon`, `http` as its own crate, so the compiler keeps
//! ARCHITECTURE.md's layer rules: this crate can name only the crates its Cargo.toml lists, all
//! on lower floors. The code is in the module(s) below; the lower layers keep their usual names
//! (`crate::store::...`) through the private aliases at the end.

pub mod daemon;
pub mod fleet_node;
pub mod fleet_rpc;
pub mod http;

// Lower layers under their usual names: `crate::<layer>::...` paths keep working.
#[allow(unused_imports)]
use vk_observer_config::config;
use vk_observer_fleet::fleet;
#[allow(unused_imports)]
use vk_observer_ingest::ingest;
#[allow(unused_imports)]
use vk_observer_mcp::mcp;
#[allow(unused_imports)]
use vk_observer_proxy::proxy;
#[allow(unused_imports)]
use vk_observer_query::query;
use vk_observer_query::tool_error;
#[allow(unused_imports)]
use vk_observer_store::store;
#[allow(unused_imports)]
use vk_observer_telemetry::health;
#[allow(unused_imports)]
use vk_observer_telemetry::telemetry;
#[allow(unused_imports)]
use vk_observer_upstream::upstream;
