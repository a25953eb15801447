//! The VK client side: REST, SSE and WebSocket access plus the serde types of VK's frames.
//! Nothing here decides anything; ingest drives it.

pub mod approvals;
pub mod discovery;
pub mod git;
pub mod mutations;
pub mod rest;
pub mod sse;
pub mod wire;
pub mod ws;

pub use rest::{UpstreamError, VkClient};
