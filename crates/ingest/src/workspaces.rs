//! Following a VK of the workspace-first dialect (VK 0.1.x: BloopAI 0.1.15–0.1.44 and the forks
//! that keep its API; docs/vk-contract.md §12). Its streams feed the same domain events as the
//! fork's, in the fork's shapes (`workspace_model`), so nothing above ingest learns which
//! dialect fed the cache.
//!
//! - `streams`: the workspaces stream and each session's process stream (snapshot, `Ready`,
//!   changes);
//! - `reads`: the REST reads the streams lack (a workspace's repos and sessions, the
//!   registered repos, one process as the database holds it);
//! - `logs`: one process log (v1 sockets, renumbered into the daemon's own numbering);
//! - `board`: the one task that holds what was learned and decides; `sync` what it writes,
//!   `plans` which followers run; `space` one workspace's state and rows; `tasks` the tasks
//!   shown (a workspace's own, or one the daemon keeps, and which workspaces are its attempts).

mod board;
mod logs;
mod plans;
mod reads;
mod space;
mod streams;
mod sync;
mod tasks;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::{Context, Signal};

/// Follows a VK 0.1.x until `cancel`; `signals` are the proxy's (`Signal::DraftTask`, …).
pub(crate) fn follow(ctx: Context, signals: UnboundedReceiver<Signal>, cancel: CancellationToken) {
    tokio::spawn(board::run(ctx, signals, cancel));
}
