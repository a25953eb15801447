//! vk-observer: observes Vibe Kanban (VK) through its streams, keeps an event-sourced cache in
//! sled and serves MCP task tools from that cache. The layers are the crates under `crates/`
//! (ARCHITECTURE.md), each named by its own crate name (`vk_observer_store::…`); this library
//! holds only the demo, which runs a daemon beside the VK simulator and so sits above both.

#[cfg(feature = "sim")]
pub mod demo;
