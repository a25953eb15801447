//! Applying a process's reported token usage (`DomainEvent::ProcessUsage`, `store::usage`):
//! stored under the process when it moves the row forward, moving the attempt's token (a
//! status shows it, and a memoized status is valid for one attempt token only).

use super::super::keys::{self, table};
use super::super::usage::ProcessUsage;
use super::{Pending, R};
use uuid::Uuid;

impl Pending<'_, '_> {
    pub(super) fn process_usage(
        &mut self,
        attempt: Uuid,
        process: Uuid,
        usage: &ProcessUsage,
    ) -> R {
        let key = keys::id_key(table::PROCESS_USAGE, process);
        let stored = self
            .stored_value(&key)?
            .and_then(|v| serde_json::from_value::<ProcessUsage>(v).ok());
        if stored.is_some_and(|s| !usage.supersedes(&s)) {
            return Ok(());
        }
        let value = serde_json::to_value(usage).map_err(super::super::StoreError::Encode)?;
        if self.upsert(&key, &value)? {
            self.attempts.insert(attempt);
            self.note(format!("usage:{process}"));
        }
        Ok(())
    }
}
