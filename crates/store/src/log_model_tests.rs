//! The log reads over chunks against a plain model: for any sequence of appends, replacements
//! (same and different JSON), holes, entry caps, history lost, process removals and reopens,
//! every log read of `StoreReader` answers what a `BTreeMap<index, (token, json)>` per log says,
//! with the store's entry compression on and off.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::Value;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::events::{Channel, DomainEvent};
use super::{Retention, StoreOwner, StoreSettings};

const ATTEMPT: Uuid = Uuid::from_u128(0x6200);
const PROCESSES: [Uuid; 2] = [Uuid::from_u128(0x7201), Uuid::from_u128(0x7202)];
const CHANNELS: [Channel; 2] = [Channel::Normalized, Channel::Raw];

#[derive(Debug, Clone)]
enum Op {
    /// One batch of 1–3 events, each into one log: (index, variant) with variant 0..3 a distinct
    /// content and 3 the content of variant 0 spelled with other spacing (the same JSON).
    Puts(Vec<(usize, usize, Vec<(u64, u8)>)>),
    /// VK lost this log's entries below `oldest`.
    Lost(usize, usize, u64),
    /// The process is removed (with its logs).
    Remove(usize),
    /// Close the store and open it again.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let put = (
        0..2usize,
        0..2usize,
        prop::collection::vec((0u64..150, 0u8..4), 1..40),
    );
    prop_oneof![
        8 => prop::collection::vec(put, 1..4).prop_map(Op::Puts),
        1 => (0..2usize, 0..2usize, 0u64..160).prop_map(|(p, c, o)| Op::Lost(p, c, o)),
        1 => (0..2usize).prop_map(Op::Remove),
        1 => Just(Op::Reopen),
    ]
}

/// The JSON of entry `index` in `variant`.
fn entry(index: u64, variant: u8) -> String {
    let v = variant % 3;
    if variant == 3 {
        return format!(
            r#"{{ "type": "NORMALIZED_ENTRY", "content": {{ "entry_type": {{ "type": "assistant_message" }}, "content": "entry {index} said 0" }} }}"#
        );
    }
    format!(
        r#"{{"type":"NORMALIZED_ENTRY","content":{{"entry_type":{{"type":"assistant_message"}},"content":"entry {index} said {v}"}}}}"#
    )
}

/// One log as the model keeps it.
#[derive(Default, Clone, Debug)]
struct ModelLog {
    entries: BTreeMap<u64, (u64, String)>,
    /// Replacements: (token, index) → the tool call was kept.
    replaced: BTreeMap<(u64, u64), bool>,
    lost: bool,
}

impl ModelLog {
    /// Apply one batch's entries at `token`; whether anything changed.
    fn put(&mut self, ch: Channel, token: u64, batch: &[(u64, u8)], cap: u64) -> bool {
        let mut changed = false;
        let mut max = self.entries.keys().next_back().copied();
        for &(i, variant) in batch {
            let json = entry(i, variant);
            let is_new = max.is_none_or(|m| i > m);
            if is_new {
                max = Some(i);
            } else if let Some((_, old)) = self.entries.get(&i) {
                let (a, b): (Value, Value) = (
                    serde_json::from_str(old).unwrap(),
                    serde_json::from_str(&json).unwrap(),
                );
                if a == b {
                    continue;
                }
                let kept = ch == Channel::Normalized
                    && vk_observer_vk::entry::same_tool_call(old.as_bytes(), json.as_bytes());
                self.replaced.insert((token, i), kept);
            }
            self.entries.insert(i, (token, json));
            changed = true;
        }
        if changed && cap > 0 && max.is_some_and(|m| m >= cap) {
            let floor = max.unwrap() + 1 - cap;
            self.entries = self.entries.split_off(&floor);
        }
        changed
    }

    /// VK lost entries below `oldest`; whether that newly marks the log.
    fn lose(&mut self, oldest: u64) -> bool {
        if self.lost || self.entries.range(..oldest).count() as u64 >= oldest {
            return false;
        }
        self.lost = true;
        true
    }

    fn replaced_since(&self, since: u64) -> Vec<(u64, bool)> {
        let mut out = BTreeMap::new();
        for (&(t, i), &kept) in &self.replaced {
            if t > since {
                out.entry(i).and_modify(|k| *k &= kept).or_insert(kept);
            }
        }
        out.into_iter().collect()
    }
}

fn open(dir: &std::path::Path, compression: bool, cap: u64) -> StoreOwner {
    let settings = StoreSettings {
        compression,
        page_compression: false,
    };
    let retention = Retention {
        max_entries_per_process: cap,
        ..Retention::default()
    };
    StoreOwner::open_with(dir, retention, settings).expect("store opens")
}

type Seen = Vec<(u64, u64, String)>;

fn seen(entries: Vec<super::reader::StoredEntry>) -> Seen {
    entries
        .into_iter()
        .map(|e| (e.index, e.token, e.entry.get().to_string()))
        .collect()
}

fn want<'a>(it: impl Iterator<Item = (&'a u64, &'a (u64, String))>) -> Seen {
    it.map(|(&i, (t, j))| (i, *t, j.clone())).collect()
}

/// Every log read of one log against the model.
fn assert_log(owner: &StoreOwner, p: Uuid, ch: Channel, m: &ModelLog) -> Result<(), TestCaseError> {
    let r = owner.store().read();
    let e = &m.entries;
    let bounds = e
        .keys()
        .next()
        .map(|&f| (f, *e.keys().next_back().unwrap()));
    prop_assert_eq!(r.log_bounds(p, ch).unwrap(), bounds);
    prop_assert_eq!(r.log_count(p, ch), e.len());
    prop_assert_eq!(r.log_history_lost(p, ch).unwrap(), m.lost);
    let top = bounds.map_or(0, |b| b.1) + 3;
    for i in 0..top {
        let got = r
            .log_entry(p, ch, i)
            .unwrap()
            .map(|s| (s.index, s.token, s.entry.get().to_string()));
        prop_assert_eq!(
            got,
            e.get(&i).map(|(t, j)| (i, *t, j.clone())),
            "log_entry {}",
            i
        );
        let below = r.highest_log_index_below(p, ch, i).unwrap();
        prop_assert_eq!(
            below,
            e.range(..i).next_back().map(|(&k, _)| k),
            "below {}",
            i
        );
    }
    for (from, to, limit) in [
        (0, u64::MAX, usize::MAX),
        (0, top, 7),
        (5, 40, 100),
        (31, 33, 5),
        (33, 200, 1),
        (64, 64, 3),
    ] {
        let got = seen(r.log_range(p, ch, from, to, limit).unwrap());
        let range = if from < to {
            e.range(from..to).take(limit).collect::<Vec<_>>()
        } else {
            Vec::new()
        };
        prop_assert_eq!(
            got,
            want(range.into_iter()),
            "log_range {} {} {}",
            from,
            to,
            limit
        );
    }
    for (before, limit) in [
        (None, 50),
        (None, 1),
        (Some(0), 5),
        (Some(33), 40),
        (Some(70), 3),
        (Some(top), usize::MAX),
    ] {
        let got = seen(r.log_tail(p, ch, before, limit).unwrap());
        let upto: Vec<_> = e.range(..before.unwrap_or(u64::MAX)).collect();
        let tail = upto[upto.len().saturating_sub(limit)..].iter().copied();
        prop_assert_eq!(got, want(tail), "log_tail {:?} {}", before, limit);
    }
    for since in [0, 3, 10] {
        prop_assert_eq!(
            r.replaced_since(p, ch, since).unwrap(),
            m.replaced_since(since)
        );
    }
    Ok(())
}

fn run(ops: Vec<Op>, compression: bool, cap: u64) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = open(dir.path(), compression, cap);
    let mut writer = owner.take_writer().unwrap();
    let mut model: BTreeMap<(usize, usize), ModelLog> = BTreeMap::new();
    for op in ops {
        let (events, expect): (Vec<DomainEvent>, bool) = match &op {
            Op::Puts(puts) => {
                let next = owner.store().current_token() + 1;
                let mut changed = false;
                let mut events = Vec::new();
                for (p, c, batch) in puts {
                    let log = model.entry((*p, *c)).or_default();
                    changed |= log.put(CHANNELS[*c], next, batch, cap);
                    let entries = batch
                        .iter()
                        .map(|&(i, v)| (i, RawValue::from_string(entry(i, v)).unwrap()))
                        .collect();
                    events.push(DomainEvent::LogEntriesPut {
                        attempt_id: ATTEMPT,
                        process_id: PROCESSES[*p],
                        channel: CHANNELS[*c],
                        entries,
                    });
                }
                (events, changed)
            }
            Op::Lost(p, c, oldest) => {
                let changed = model.entry((*p, *c)).or_default().lose(*oldest);
                let ev = DomainEvent::LogHistoryLost {
                    attempt_id: ATTEMPT,
                    process_id: PROCESSES[*p],
                    channel: CHANNELS[*c],
                    oldest_available: *oldest,
                };
                (vec![ev], changed)
            }
            Op::Remove(p) => {
                let had =
                    (0..2).any(|c| model.get(&(*p, c)).is_some_and(|l| !l.entries.is_empty()));
                model.retain(|(mp, _), _| mp != p);
                let ev = DomainEvent::ProcessRemoved {
                    attempt_id: ATTEMPT,
                    process_id: PROCESSES[*p],
                };
                (vec![ev], had)
            }
            Op::Reopen => {
                drop(writer);
                drop(owner);
                owner = open(dir.path(), compression, cap);
                writer = owner.take_writer().unwrap();
                (Vec::new(), false)
            }
        };
        if !events.is_empty() {
            let applied = writer.apply(events).unwrap();
            if matches!(op, Op::Puts(..) | Op::Lost(..)) {
                prop_assert_eq!(applied.token.is_some(), expect, "{:?}", op);
            } else if expect {
                prop_assert!(applied.token.is_some());
            }
        }
        for (pi, &p) in PROCESSES.iter().enumerate() {
            for (ci, &ch) in CHANNELS.iter().enumerate() {
                let log = model.get(&(pi, ci)).cloned().unwrap_or_default();
                assert_log(&owner, p, ch, &log)?;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn every_log_read_answers_what_the_model_says(
        ops in prop::collection::vec(op(), 1..24),
        compression in any::<bool>(),
        cap in prop_oneof![3 => Just(0u64), 1 => 1u64..60],
    ) {
        run(ops, compression, cap)?;
    }
}

/// Both settings on one long fixed sequence (chunk boundaries, a cap that cuts a chunk, holes).
#[test]
fn a_fixed_sequence_reads_the_same_with_and_without_compression() {
    let fill = |from: u64, to: u64, v: u8| (from..to).map(|i| (i, v)).collect::<Vec<_>>();
    let ops = vec![
        Op::Puts(vec![(0, 0, fill(0, 40, 0))]),
        Op::Puts(vec![(
            0,
            0,
            vec![(70, 1), (35, 1), (35, 3), (5, 3), (50, 2)],
        )]),
        Op::Lost(0, 0, 60),
        Op::Reopen,
        Op::Puts(vec![(0, 0, fill(60, 100, 2)), (0, 0, fill(90, 110, 1))]),
        Op::Puts(vec![
            (1, 1, fill(10, 20, 1)),
            (0, 0, vec![(111, 0)]),
            (1, 1, vec![(21, 0)]),
        ]),
        Op::Remove(1),
        Op::Reopen,
        Op::Puts(vec![(0, 0, vec![(112, 0)])]),
    ];
    for compression in [false, true] {
        run(ops.clone(), compression, 0).unwrap();
        run(ops.clone(), compression, 45).unwrap();
    }
}
