//! Which attempt a client's workspace directory belongs to, remembered: a tokenless client
//! inside a workspace is limited to its own attempt on every call, reads included
//! (`mcp::access`), and finding the attempt (`Query::attempt_at`) scans the cached attempts.
//! A found attempt is kept and re-checked with one key read (it still exists and its folder
//! still holds the directory); a directory in no workspace is kept until the store's token
//! moves (a new attempt or folder comes with a change, and so with a new token).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use uuid::Uuid;

use super::Query;
use super::context::normalize;
use vk_observer_tool_error::ToolError;
use vk_observer_vk::string_of;

/// Most directories remembered; past it the memo starts over (clients are few).
const MAX_DIRS: usize = 1024;

#[derive(Debug, Clone, Copy)]
enum Known {
    Attempt(Uuid),
    /// In no workspace as of this store token.
    Outside(u64),
}

/// Directory → attempt, shared by every session of a daemon.
#[derive(Debug, Default)]
pub struct WorkspaceMemo {
    dirs: Mutex<HashMap<PathBuf, Known>>,
}

impl Query {
    /// `attempt_at(dir)`'s attempt, from the memo when it still holds.
    pub fn own_attempt_at(&self, dir: &Path) -> Result<Option<Uuid>, ToolError> {
        let known = self.lock_dirs().get(dir).copied();
        match known {
            Some(Known::Attempt(id)) if self.still_holds(id, dir)? => return Ok(Some(id)),
            Some(Known::Outside(t)) if t == self.store.current_token() => return Ok(None),
            _ => {}
        }
        let token = self.store.current_token();
        let found = self.attempt_at(dir)?.map(|(id, _)| id);
        let mut dirs = self.lock_dirs();
        if dirs.len() >= MAX_DIRS {
            dirs.clear();
        }
        dirs.insert(
            dir.to_path_buf(),
            found.map_or(Known::Outside(token), Known::Attempt),
        );
        Ok(found)
    }

    fn lock_dirs(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Known>> {
        self.workspaces
            .dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The attempt is still cached and its folder still holds `dir`.
    fn still_holds(&self, attempt: Uuid, dir: &Path) -> Result<bool, ToolError> {
        let Some(a) = self.read().attempt(attempt)? else {
            return Ok(false);
        };
        Ok(string_of(&a.value, "container_ref").is_some_and(|root| {
            !root.is_empty() && normalize(dir).starts_with(normalize(Path::new(&root)))
        }))
    }
}
