//! Who a mutation is for, carried to the one place every mutation passes (`idempotency`,
//! which writes the audit trail: `store::audit`). The MCP layer knows the caller and the
//! target ids; the proxy knows when VK was asked and what it answered. Rather than thread the
//! caller through every mutating function, the MCP layer runs the tool's handler inside
//! [`audited`], and `idempotency` reads it back with [`current`] (a task-local: the handler is
//! awaited in the same task, and a proxy call outside any — a unit test — is audited as
//! `unknown`).

use std::future::Future;

use serde_json::{Map, Value};

/// The caller and the target ids of the tool call being served.
#[derive(Debug, Clone, Default)]
pub struct AuditContext {
    /// The token's name, `mcp-token` or `loopback`.
    pub caller: String,
    pub targets: Map<String, Value>,
}

tokio::task_local! {
    static CONTEXT: AuditContext;
}

/// Runs `call` (a tool's handler) with `context` as its audit context.
pub async fn audited<F: Future>(context: AuditContext, call: F) -> F::Output {
    CONTEXT.scope(context, call).await
}

/// The audit context of the call being served, or `unknown`.
pub(crate) fn current() -> AuditContext {
    CONTEXT
        .try_with(Clone::clone)
        .unwrap_or_else(|_| AuditContext {
            caller: "unknown".into(),
            targets: Map::new(),
        })
}
