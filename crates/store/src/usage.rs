//! Token usage and cost per execution process, as a coding agent's raw stdout reported it
//! (`ingest::usage` reads Claude Code's stream-json; `DomainEvent::ProcessUsage` carries it).
//! One row per process (table `PROCESS_USAGE`), token-stamped like entities, removed with its
//! process. Sums over sessions, attempts, tasks and projects are made at read time
//! (`query::usage`).
//!
//! Which report wins (`supersedes`): the run's totals (its `result` line) are final, so a
//! running sum never replaces them; among running sums, one that counted fewer assistant
//! messages (a follower that started mid-stream after a restart) never replaces one that
//! counted more. So a row only ever moves forward, whatever order reports arrive in.

use uuid::Uuid;

use super::StoreError;
use super::codec::decode;
use super::keys::{self, table};
use super::reader::StoreReader;

/// What one process reported. Token counts are whole numbers the CLI sent; `cost_usd`,
/// `duration_ms` and `num_turns` come only with the run's `result` line.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProcessUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_turns: Option<u64>,
    /// Models the run named (its `init` line, its assistant messages), sorted, each once.
    #[serde(default)]
    pub models: Vec<String>,
    /// True once the run's `result` line was read: the numbers are the run's own totals.
    #[serde(default)]
    pub complete: bool,
    /// Distinct assistant messages summed (a running sum's measure of how far it got).
    #[serde(default)]
    pub messages: u64,
}

impl ProcessUsage {
    /// Whether `self`, arriving, may replace `stored`: see the module doc.
    pub fn supersedes(&self, stored: &ProcessUsage) -> bool {
        match (stored.complete, self.complete) {
            (true, false) => false,
            (false, false) => self.messages >= stored.messages,
            _ => true,
        }
    }
}

impl StoreReader {
    /// The usage a process reported; None when it reported none (not a coding agent, an
    /// executor that writes no usage, or nothing read yet).
    pub fn process_usage(&self, process: Uuid) -> Result<Option<ProcessUsage>, StoreError> {
        let key = keys::id_key(table::PROCESS_USAGE, process);
        let Some(raw) = self.tree().get(key)? else {
            return Ok(None);
        };
        Ok(decode(&raw).and_then(|(_, json)| serde_json::from_slice(&json).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::DomainEvent;
    use crate::{Retention, StoreOwner};
    use serde_json::json;

    fn running(messages: u64, output: u64) -> ProcessUsage {
        ProcessUsage {
            output_tokens: output,
            messages,
            ..ProcessUsage::default()
        }
    }

    #[test]
    fn totals_are_final_and_running_sums_only_grow() {
        let done = ProcessUsage {
            complete: true,
            cost_usd: Some(0.5),
            ..running(3, 90)
        };
        assert!(done.supersedes(&running(9, 900)));
        assert!(!running(9, 900).supersedes(&done));
        assert!(running(3, 30).supersedes(&running(2, 40)));
        assert!(!running(1, 99).supersedes(&running(2, 40)));
    }

    #[test]
    fn a_row_moves_the_attempt_token_goes_with_its_process_and_never_moves_back() {
        let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
        let mut writer = owner.take_writer().unwrap();
        let store = owner.store();
        let (attempt, process) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let put = |usage: ProcessUsage| DomainEvent::ProcessUsage {
            attempt_id: attempt,
            process_id: process,
            usage,
        };
        let proc_row = json!({"id": process, "run_reason": "codingagent", "status": "running"});
        writer
            .apply(vec![DomainEvent::ProcessUpserted {
                attempt_id: attempt,
                process: proc_row,
            }])
            .unwrap();
        let before = store.read().attempt_token(attempt).unwrap();
        let first = writer.apply(vec![put(running(2, 40))]).unwrap();
        assert!(first.token.is_some());
        assert!(store.read().attempt_token(attempt).unwrap() > before);
        // A sum of fewer messages (a follower that started mid-stream) changes nothing.
        assert!(
            writer
                .apply(vec![put(running(1, 10))])
                .unwrap()
                .token
                .is_none()
        );
        let got = store.read().process_usage(process).unwrap().unwrap();
        assert_eq!(got.output_tokens, 40);
        writer
            .apply(vec![DomainEvent::ProcessesSnapshot {
                attempt_id: attempt,
                processes: vec![],
            }])
            .unwrap();
        assert_eq!(store.read().process_usage(process).unwrap(), None);
    }
}
