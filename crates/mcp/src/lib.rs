//! The MCP surface: the server handler `VkTools` (`server`) over the tool families (`tools`,
//! one file per family: parse → `query`/`proxy` → answer), served over Streamable HTTP at
//! `/mcp` by the daemon and over stdio by the `vk-observer mcp` bridge (`transport`).

pub mod access;
pub(crate) mod forward;
pub(crate) mod server;
pub(crate) mod tasks;
pub mod tools;
pub mod transport;

pub use forward::{FleetRole, Forward};
pub use server::{INSTRUCTIONS, VkTools, WORKSPACE_HEADER};
pub use tools::{detail_tools, takes_detail};
pub use transport::http::{McpEndpoint, McpService, service};
