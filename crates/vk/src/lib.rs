//! VK's vocabulary, at the bottom floor: the names and rules of Vibe Kanban's objects that every
//! layer shares. Upstream parses with it, ingest decides with it, store keys and indexes with
//! it, query answers with it; it imports from none of them, so a rule about VK's objects (which
//! process is "relevant", what "latest" means, which run reason is a dev server) is written once
//! here and cannot drift between the layers that apply it.
//!
//! - [`fields`]: lenient field access over VK's JSON (ids, strings, timestamps).
//! - [`process`]: run reasons, process statuses, [`ProcessFacts`].
//! - [`select`]: VK's selection rules (latest attempt/session, the status and log process).
//! - [`channel`]: the two logs of a process.
//! - [`entry`]: whether a rewrite of a log entry kept its tool call.
//! - [`end`]: what VK's logs say about why a process ended (start failures, setup required).
//! - [`git`]: the git actions VK offers on an attempt repo.

pub(crate) mod channel;
pub mod end;
pub mod entry;
pub mod fields;
pub(crate) mod git;
pub(crate) mod process;
pub(crate) mod select;

pub use channel::Channel;
pub use fields::{
    executor_of_process, object_id, prompt_of, rfc3339, str_of, string_of, strings, ts_of,
    ts_string, uuid_of,
};
pub use git::GitAction;
pub use process::{
    ProcessFacts, ProcessStatus, RELEVANT_REASONS, RunReason, is_dropped, is_relevant,
    is_relevant_reason, run_reason, status,
};
pub use select::{
    KeyedProcessRow, KeyedRow, VkObject, VkProcess, agent_runs_of_session, latest, log_process,
    newest_first, relevant_oldest_first, status_process,
};
