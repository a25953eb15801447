//! vk-observer: observes Vibe Kanban (VK) through its streams, keeps an event-sourced cache in
//! sled and serves MCP task tools from that cache. See ARCHITECTURE.md for the code map.

#[cfg(feature = "sim")]
pub mod sim;

pub mod cli;
pub mod config;
pub mod daemon;
pub mod health;
pub mod http;
pub mod ingest;
pub mod mcp;
pub mod proxy;
pub mod query;
pub mod store;
pub mod telemetry;
pub mod tool_error;
pub mod upstream;
pub mod vk;
