//! How MCP reaches the daemon and the daemon reaches back: the HTTP service at `/mcp` (`http`),
//! the guard in front of it (`guard`: bearer token, session cap), long-polls held before rmcp
//! (`park`) with keep-alive progress as SSE (`progress`), resources and their subscriptions
//! (`resources`, `subscriptions`), the caching hints on listings and reads (`cache_hints`), and the stdio bridge to a running daemon (`bridge`, its
//! resource followers in `bridge_followers`).

pub mod bridge;
mod bridge_followers;
pub mod cache_hints;
pub mod guard;
pub(crate) mod http;
pub(crate) mod park;
pub(crate) mod progress;
pub(crate) mod resources;
pub(crate) mod subscriptions;
