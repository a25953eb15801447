//! The second dialect: BloopAI VK 0.1.44's workspace-first wire over the same simulated world
//! (`SimConfig::dialect = SimDialect::Workspaces`; the recordings in
//! `tests/fixtures/vk-wire-bloop/`, docs/vk-contract.md §12). An attempt is a workspace (same
//! id, named after its task), projects and tasks are not on the wire (a project's repos are the
//! registered repos), sessions and processes keep their ids. Only the routes, frames and JSON
//! shapes differ from the fork's; every mutation goes through the world as for the fork.

mod approvals;
mod events;
mod git;
mod logs;
mod render;
mod rest;
mod router;
mod runs;
mod sse;
mod streams;

pub(crate) use events::{Wire, dispatch, restart};
pub(crate) use router::build as router;

/// The truth's log entries as this dialect's log sockets send them.
pub(crate) fn wire_logs(t: &mut crate::types::Truth) {
    for logs in t
        .normalized_logs
        .values_mut()
        .chain(t.raw_logs.values_mut())
    {
        for e in logs.iter_mut() {
            *e = render::log_entry(e);
        }
    }
}
