//! Read handle over the projection tree: cheap to clone, lock-free, used by ingest (to know what
//! is cached) and by the query layer. It never writes.

use serde_json::Value;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::StoreError;
use super::codec::decode;
use super::events::Channel;
use super::keys::{self, meta, table};
use vk_observer_vk::{self as vk, ProcessStatus, VkObject, VkProcess, uuid_of};

/// An entity as stored: VK's JSON plus the token of the batch that last changed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub id: Uuid,
    pub token: u64,
    pub value: Value,
}

/// A cached row answers VK's selection rules straight from its JSON.
impl VkObject for Stored {
    fn id(&self) -> Uuid {
        self.id
    }
    fn created_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        vk::ts_of(&self.value, "created_at")
    }
}

impl VkProcess for Stored {
    fn run_reason(&self) -> &str {
        vk::run_reason(&self.value)
    }
    fn is_dropped(&self) -> bool {
        vk::is_dropped(&self.value)
    }
    fn session_id(&self) -> Option<Uuid> {
        uuid_of(&self.value, "session_id")
    }
}

/// One stored log entry.
#[derive(Debug, Clone)]
pub struct StoredEntry {
    pub index: u64,
    pub token: u64,
    pub entry: Box<RawValue>,
}

#[derive(Clone)]
pub struct StoreReader {
    tree: sled::Tree,
}

type R<T> = Result<T, StoreError>;

impl StoreReader {
    pub(crate) fn new(tree: sled::Tree) -> Self {
        StoreReader { tree }
    }

    /// The snapshot's tree, for the store's own read modules (`feed`, `approvals`).
    pub(super) fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn entity(&self, key: &[u8], id: Uuid) -> R<Option<Stored>> {
        Ok(self.tree.get(key)?.and_then(|v| {
            let (token, json) = decode(&v)?;
            Some(Stored {
                id,
                token,
                value: serde_json::from_slice(&json).ok()?,
            })
        }))
    }

    /// All entities of `table` whose ids are listed in index `idx` under `parent`.
    fn children(&self, idx: u8, parent: Uuid, table: u8) -> R<Vec<Stored>> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(keys::id_key(idx, parent)) {
            let (k, _) = item?;
            if let Some(id) = keys::uuid_at(&k, 17)
                && let Some(s) = self.entity(&keys::id_key(table, id), id)?
            {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// Like `children`, decoding each entity straight into `T` (only the fields it names), which
    /// is several times cheaper than building a full `Value` for hot paths.
    fn typed_children<T: serde::de::DeserializeOwned>(
        &self,
        idx: u8,
        parent: Uuid,
        table: u8,
    ) -> R<Vec<(Uuid, T)>> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(keys::id_key(idx, parent)) {
            let (k, _) = item?;
            let Some(id) = keys::uuid_at(&k, 17) else {
                continue;
            };
            if let Some(v) = self.tree.get(keys::id_key(table, id))?
                && let Some((_, json)) = decode(&v)
                && let Ok(t) = serde_json::from_slice(&json)
            {
                out.push((id, t));
            }
        }
        Ok(out)
    }

    /// The attempt's processes decoded into `T`.
    pub fn processes_of_attempt_as<T: serde::de::DeserializeOwned>(
        &self,
        attempt: Uuid,
    ) -> R<Vec<(Uuid, T)>> {
        self.typed_children(table::IDX_ATTEMPT_PROCESSES, attempt, table::PROCESSES)
    }

    /// The attempt's sessions decoded into `T`.
    pub fn sessions_of_attempt_as<T: serde::de::DeserializeOwned>(
        &self,
        attempt: Uuid,
    ) -> R<Vec<(Uuid, T)>> {
        self.typed_children(table::IDX_ATTEMPT_SESSIONS, attempt, table::SESSIONS)
    }

    /// One entity decoded into `T`.
    pub fn attempt_as<T: serde::de::DeserializeOwned>(&self, id: Uuid) -> R<Option<T>> {
        Ok(self
            .tree
            .get(keys::id_key(table::ATTEMPTS, id))?
            .and_then(|v| decode(&v).and_then(|(_, j)| serde_json::from_slice(&j).ok())))
    }

    fn all(&self, table: u8) -> R<Vec<Stored>> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix([table]) {
            let (k, v) = item?;
            let Some(id) = keys::uuid_at(&k, 1) else {
                continue;
            };
            if let Some((token, json)) = decode(&v)
                && let Ok(value) = serde_json::from_slice(&json)
            {
                out.push(Stored { id, token, value });
            }
        }
        Ok(out)
    }

    pub fn projects(&self) -> R<Vec<Stored>> {
        self.all(table::PROJECTS)
    }

    pub fn project(&self, id: Uuid) -> R<Option<Stored>> {
        self.entity(&keys::id_key(table::PROJECTS, id), id)
    }

    pub fn repos_of_project(&self, project: Uuid) -> R<Vec<Stored>> {
        self.pairs(table::REPOS, project)
    }

    /// Entities stored under `table ‖ parent ‖ id`.
    fn pairs(&self, table: u8, parent: Uuid) -> R<Vec<Stored>> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(keys::id_key(table, parent)) {
            let (k, v) = item?;
            let Some(id) = keys::uuid_at(&k, 17) else {
                continue;
            };
            if let Some((token, json)) = decode(&v)
                && let Ok(value) = serde_json::from_slice(&json)
            {
                out.push(Stored { id, token, value });
            }
        }
        Ok(out)
    }

    pub fn task(&self, id: Uuid) -> R<Option<Stored>> {
        self.entity(&keys::id_key(table::TASKS, id), id)
    }

    pub fn tasks(&self) -> R<Vec<Stored>> {
        self.all(table::TASKS)
    }

    pub fn tasks_of_project(&self, project: Uuid) -> R<Vec<Stored>> {
        self.children(table::IDX_PROJECT_TASKS, project, table::TASKS)
    }

    pub fn attempt(&self, id: Uuid) -> R<Option<Stored>> {
        self.entity(&keys::id_key(table::ATTEMPTS, id), id)
    }

    pub fn attempts(&self) -> R<Vec<Stored>> {
        self.all(table::ATTEMPTS)
    }

    pub fn attempts_of_task(&self, task: Uuid) -> R<Vec<Stored>> {
        self.children(table::IDX_TASK_ATTEMPTS, task, table::ATTEMPTS)
    }

    pub fn session(&self, id: Uuid) -> R<Option<Stored>> {
        self.entity(&keys::id_key(table::SESSIONS, id), id)
    }

    pub fn sessions(&self) -> R<Vec<Stored>> {
        self.all(table::SESSIONS)
    }

    pub fn sessions_of_attempt(&self, attempt: Uuid) -> R<Vec<Stored>> {
        self.children(table::IDX_ATTEMPT_SESSIONS, attempt, table::SESSIONS)
    }

    pub fn process(&self, id: Uuid) -> R<Option<Stored>> {
        self.entity(&keys::id_key(table::PROCESSES, id), id)
    }

    pub fn processes(&self) -> R<Vec<Stored>> {
        self.all(table::PROCESSES)
    }

    pub fn processes_of_attempt(&self, attempt: Uuid) -> R<Vec<Stored>> {
        self.children(table::IDX_ATTEMPT_PROCESSES, attempt, table::PROCESSES)
    }

    pub fn attempt_of_process(&self, process: Uuid) -> R<Option<Uuid>> {
        Ok(self
            .tree
            .get(keys::id_key(table::PROCESS_ATTEMPT, process))?
            .and_then(|v| Uuid::from_slice(&v).ok()))
    }

    /// The repositories of an attempt (with `target_branch`), as VK lists them.
    pub fn attempt_repos(&self, attempt: Uuid) -> R<Vec<Stored>> {
        self.pairs(table::ATTEMPT_REPOS, attempt)
    }

    /// The trimmed `/api/info` facts (executors, capabilities, guard preset), once fetched.
    /// A fleet node's per-host `/api/info` facts, by host name (sorted); empty elsewhere.
    pub fn host_server_infos(&self) -> R<Vec<(String, Value)>> {
        let mut out = Vec::new();
        for item in self.tree.scan_prefix(keys::HOST_SERVER_INFO_PREFIX) {
            let (k, v) = item?;
            let host = String::from_utf8_lossy(&k[keys::HOST_SERVER_INFO_PREFIX.len()..]);
            if let Some(info) = decode(&v).and_then(|(_, j)| serde_json::from_slice(&j).ok()) {
                out.push((host.into_owned(), info));
            }
        }
        Ok(out)
    }

    /// The `/api/info` facts that apply to a target of `host` (a fleet answer's `host`): that
    /// host's on a fleet node, this daemon's own otherwise.
    pub fn server_info_for(&self, host: Option<&str>) -> R<Option<Value>> {
        if let Some(host) = host
            && let Some(v) = self.tree.get(keys::host_server_info_key(host))?
        {
            return Ok(decode(&v).and_then(|(_, j)| serde_json::from_slice(&j).ok()));
        }
        self.server_info()
    }

    pub fn server_info(&self) -> R<Option<Value>> {
        Ok(self
            .tree
            .get(keys::SERVER_INFO_KEY)?
            .and_then(|v| decode(&v).and_then(|(_, j)| serde_json::from_slice(&j).ok())))
    }

    pub fn changes(&self, attempt: Uuid) -> R<Option<Stored>> {
        self.entity(&keys::id_key(table::CHANGES, attempt), attempt)
    }

    /// VK's branch status of an attempt as last read (a JSON list, one entry per repo) and
    /// when VK answered it (unix ms); None until first read.
    pub fn branch_status(&self, attempt: Uuid) -> R<Option<(Stored, i64)>> {
        let Some(status) = self.entity(&keys::id_key(table::BRANCH_STATUS, attempt), attempt)?
        else {
            return Ok(None);
        };
        let read_at = self
            .tree
            .get(keys::id_key(table::BRANCH_STATUS_READ, attempt))?
            .and_then(|v| v.as_ref().try_into().ok().map(i64::from_be_bytes))
            .unwrap_or(0);
        Ok(Some((status, read_at)))
    }

    /// The token of the last batch that touched the attempt or anything under it (0 = never).
    pub fn attempt_token(&self, attempt: Uuid) -> R<u64> {
        Ok(self
            .tree
            .get(keys::id_key(table::ATTEMPT_TOKENS, attempt))?
            .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(0))
    }

    /// Entries replaced in place by batches with token > `since`, by index, each with whether
    /// every one of those replacements kept the tool call (`keys::replaced_value`): then only
    /// the call's outcome changed since `since`.
    pub fn replaced_since(&self, process: Uuid, ch: Channel, since: u64) -> R<Vec<(u64, bool)>> {
        let prefix = keys::replaced_prefix(ch, process);
        let start = keys::replaced_key(ch, process, since.saturating_add(1), 0);
        let mut out = std::collections::BTreeMap::new();
        for item in self.tree.range(start..) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            if let Some(i) = keys::trailing_u64(&k) {
                let kept = keys::replaced_kept_call(&v);
                out.entry(i).and_modify(|all| *all &= kept).or_insert(kept);
            }
        }
        Ok(out.into_iter().collect())
    }

    /// True when VK lost entries of this log the cache never stored (`LogHistoryLost`).
    pub fn log_history_lost(&self, process: Uuid, ch: Channel) -> R<bool> {
        Ok(self
            .tree
            .contains_key(keys::history_lost_key(ch, process))?)
    }

    /// True once the process ended and its whole log was stored.
    pub fn logs_complete(&self, process: Uuid, ch: Channel) -> R<bool> {
        Ok(self.tree.contains_key(keys::complete_key(ch, process))?)
    }

    pub fn upstream_seq(&self) -> R<Option<u64>> {
        Ok(self
            .tree
            .get(keys::meta_key(meta::SSE_SEQ))?
            .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes)))
    }

    pub fn upstream_incarnation(&self) -> R<Option<String>> {
        Ok(self
            .tree
            .get(keys::meta_key(meta::VK_INCARNATION))?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Attempts eligible for retention: no running process and nothing newer than `cutoff`.
    /// Returns (task, attempt) pairs.
    pub(crate) fn expired_attempts(
        &self,
        cutoff: chrono::DateTime<chrono::Utc>,
    ) -> R<Vec<(Uuid, Uuid)>> {
        let mut out = Vec::new();
        for a in self.attempts()? {
            let Some(task) = uuid_of(&a.value, "task_id") else {
                continue;
            };
            let mut newest = vk::ts_of(&a.value, "updated_at");
            let mut running = false;
            for p in self.processes_of_attempt(a.id)? {
                running |= ProcessStatus::Running.is(vk::status(&p.value));
                newest = newest.max(vk::ts_of(&p.value, "updated_at"));
            }
            if !running && newest.is_some_and(|t| t < cutoff) {
                out.push((task, a.id));
            }
        }
        Ok(out)
    }
}
