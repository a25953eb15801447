//! The VK client side: REST, SSE and WebSocket access, every route (`routes`), the serde types
//! of VK's frames, and the recognition of VK's refusal texts (`refusal`). What VK says is known
//! here, once; nothing here decides anything: ingest drives it, proxy maps its answers.

pub(crate) mod approvals;
pub mod dialect;
pub mod discovery;
pub mod git;
pub mod git_v01;
pub(crate) mod mutations;
pub mod refusal;
pub mod rest;
mod rest_v01;
pub mod routes;
pub mod routes_v01;
pub mod sse;
pub mod wire;
pub mod ws;

pub use rest::{UpstreamError, VkClient};
