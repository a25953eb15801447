//! The renumbering rule (design-notes §25) against VK 0.1.44's recorded log sockets, then
//! against generated runs shaped the way VK's normalizers shape them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{Renumberer, VkOp, Write};

macro_rules! recording {
    ($name:literal) => {
        include_str!(concat!(
            "../../../tests/fixtures/vk-wire-bloop/samples/",
            $name
        ))
    };
}

/// The frames of a recording: line 1 is a `# {…}` header, then one event per line.
fn frames(recording: &str) -> Vec<Value> {
    let mut lines = recording.lines();
    assert!(lines.next().is_some_and(|h| h.starts_with("# {")));
    lines
        .map(|line| serde_json::from_str::<Value>(line).expect("event"))
        .filter(|event| event["kind"] == "text")
        .map(|event| serde_json::from_str(event["raw"].as_str().expect("raw")).expect("frame"))
        .collect()
}

fn ops(frames: &[Value]) -> Vec<VkOp> {
    frames.iter().flat_map(VkOp::of_frame).collect()
}

/// VK's own view of one connection: its final entries, in VK's order.
fn vk_final(frames: &[Value]) -> Vec<Value> {
    let mut entries = BTreeMap::new();
    for op in ops(frames) {
        match op {
            VkOp::Add { index, value } | VkOp::Replace { index, value } => {
                entries.insert(index, value);
            }
            VkOp::Remove { index } => {
                entries.remove(&index);
            }
        }
    }
    entries.into_values().collect()
}

/// The daemon's log as its clients see it, each write checked as it comes: appends at the
/// next index only (gapless), replaces of served indices only.
#[derive(Clone, Debug, Default)]
struct Log {
    entries: Vec<Value>,
    appended: usize,
}

impl Log {
    fn write(&mut self, write: Write) -> usize {
        match write {
            Write::Append { index, entry } => {
                assert_eq!(index as usize, self.entries.len(), "append leaves no gap");
                self.entries.push(entry);
                self.appended += 1;
                index as usize
            }
            Write::Replace { index, entry } => {
                assert!(
                    (index as usize) < self.entries.len(),
                    "replace of a served index"
                );
                self.entries[index as usize] = entry;
                index as usize
            }
        }
    }

    fn feed(&mut self, r: &mut Renumberer, frames: &[Value]) {
        for frame in frames {
            for w in r.apply_frame(frame) {
                self.write(w);
            }
        }
        assert_eq!(r.len() as usize, self.entries.len());
    }
}

/// What a served entry is, coarsely: its kind (and a tool call's tool), or a raw chunk's type.
fn kind(entry: &Value) -> String {
    let t = &entry["content"]["entry_type"];
    match t["type"].as_str() {
        Some(k) => format!("{k}:{}", t["tool_name"].as_str().unwrap_or("")),
        None => entry["type"].to_string(),
    }
}

/// The live recording through one connection, then the second recording through a second one
/// (after a daemon restart if `restart`: the renumberer is rebuilt from the stored entries).
fn live_then(live: &str, second: &str, restart: bool) -> (Vec<Value>, Log) {
    let mut r = Renumberer::new([]);
    let mut log = Log::default();
    log.feed(&mut r, &frames(live));
    let served = log.entries.clone();
    assert_eq!(
        served,
        vk_final(&frames(live)),
        "a first connection keeps VK's order"
    );
    if restart {
        r = Renumberer::new(served.clone());
    } else {
        r.connect();
    }
    log.appended = 0;
    log.feed(&mut r, &frames(second));
    (served, log)
}

/// A replay after completion: VK's entries come at other indices (`from[i]` is the replay's
/// index of the daemon's entry `i`); the daemon's log keeps its numbering and takes the
/// replay's content, appends nothing, and every served index keeps its kind.
fn check_replay(live: &str, replay: &str, from: &[usize]) {
    let want = vk_final(&frames(replay));
    for restart in [false, true] {
        let (served, log) = live_then(live, replay, restart);
        assert_eq!(
            log.appended, 0,
            "nothing new in the replay (restart {restart})"
        );
        let got: Vec<_> = from.iter().map(|&v| want[v].clone()).collect();
        assert_eq!(log.entries, got, "restart {restart}");
        for (old, new) in served.iter().zip(&log.entries) {
            assert_eq!(kind(old), kind(new));
        }
        let distinct: BTreeSet<String> = log.entries.iter().map(Value::to_string).collect();
        assert_eq!(distinct.len(), log.entries.len(), "no entry twice");
    }
}

#[test]
fn recorded_normalized_replays_keep_the_daemons_numbering() {
    // The stderr entry was VK's 0 live and is last in the replays.
    let a = recording!("ws-normalized-a-live.jsonl");
    check_replay(
        a,
        recording!("ws-normalized-a-replay.jsonl"),
        &[5, 0, 1, 2, 3, 4],
    );
    check_replay(
        a,
        recording!("ws-normalized-a-after-restart.jsonl"),
        &[5, 0, 1, 2, 3, 4],
    );
    let fail = recording!("ws-normalized-fail-live.jsonl");
    check_replay(
        fail,
        recording!("ws-normalized-fail-replay.jsonl"),
        &[2, 0, 1],
    );
    // Live, VK overwrote the stderr entry after a pause (its last live content is not a prefix
    // of the replay's, only inside it), and the Bash call went created → success.
    let stopped = recording!("ws-normalized-stopped-live.jsonl");
    let replay = recording!("ws-normalized-stopped-replay.jsonl");
    check_replay(stopped, replay, &[4, 0, 1, 2, 3]);
}

#[test]
fn recorded_raw_replays_are_the_live_sequence() {
    for (live, replay) in [
        (
            recording!("ws-raw-a-live.jsonl"),
            recording!("ws-raw-a-replay.jsonl"),
        ),
        (
            recording!("ws-raw-a-live.jsonl"),
            recording!("ws-raw-a-after-restart.jsonl"),
        ),
        (
            recording!("ws-raw-fail-live.jsonl"),
            recording!("ws-raw-fail-replay.jsonl"),
        ),
        (
            recording!("ws-raw-stopped-live.jsonl"),
            recording!("ws-raw-stopped-replay.jsonl"),
        ),
    ] {
        assert_eq!(
            ops(&frames(live)),
            ops(&frames(replay)),
            "same ops, order, chunks"
        );
        let n = vk_final(&frames(live)).len();
        check_replay(live, replay, &(0..n).collect::<Vec<_>>());
    }
}

const LIVE: [&str; 7] = [
    recording!("ws-normalized-a-live.jsonl"),
    recording!("ws-normalized-fail-live.jsonl"),
    recording!("ws-normalized-followup-live.jsonl"),
    recording!("ws-normalized-approval-approve.jsonl"),
    recording!("ws-normalized-approval-deny.jsonl"),
    recording!("ws-normalized-approval-pending.jsonl"),
    recording!("ws-normalized-stopped-live.jsonl"),
];

/// A reconnect while the process runs: VK 0.1.44 re-sends its in-memory history (the same
/// patches at the same indices, intermediate states included). Matched entries pass through
/// their older states again and end as served; nothing is appended.
#[test]
fn recorded_history_replays_append_nothing() {
    for live in LIVE {
        let (served, log) = live_then(live, live, false);
        assert_eq!(log.appended, 0);
        assert_eq!(log.entries, served);
    }
}

/// The same after a daemon restart holds where VK's stderr entry only grew.
#[test]
fn recorded_history_replays_after_a_daemon_restart() {
    for live in &LIVE[..5] {
        let (served, log) = live_then(live, live, true);
        assert_eq!((log.appended, &log.entries), (0, &served));
    }
}

/// The rule's stated limit, pinned: VK overwrote the stderr entry after a pause, the daemon
/// restarted and kept only its last content, and the history replay's first stderr text is
/// related to nothing served, so the entry comes a second time (same final content).
#[test]
fn overwritten_stderr_after_a_daemon_restart_comes_twice() {
    for live in &LIVE[5..] {
        let (served, log) = live_then(live, live, true);
        assert_eq!(log.appended, 1);
        assert_eq!(log.entries[..served.len()], served[..]);
        assert_eq!(log.entries[served.len()], served[0]);
        assert_eq!(kind(&served[0]), "error_message:");
    }
}

fn entry(entry_type: Value, content: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null, "entry_type": entry_type,
        "content": content, "metadata": null}})
}

fn stderr(content: &str) -> Value {
    entry(
        json!({"type": "error_message", "error_type": {"type": "other"}}),
        content,
    )
}

fn text(kind: &str, content: &str) -> Value {
    entry(json!({ "type": kind }), content)
}

fn bash(command: &str, status: &str) -> Value {
    let result = (status != "created").then(|| {
        json!({"exit_status": {"type": "exit_code",
        "code": i32::from(status == "failed")}, "output": "out"})
    });
    entry(
        json!({"type": "tool_use", "tool_name": "Bash", "action_type": {"action": "command_run",
            "command": command, "result": result, "category": "read"}, "status": {"status": status}}),
        command,
    )
}

fn add(index: usize, value: Value) -> VkOp {
    VkOp::Add { index, value }
}

fn feed(r: &mut Renumberer, log: &mut Log, ops: impl IntoIterator<Item = VkOp>) -> Vec<usize> {
    let writes: Vec<_> = ops.into_iter().filter_map(|op| r.apply(op)).collect();
    writes.into_iter().map(|w| log.write(w)).collect()
}

#[test]
fn ops_are_read_from_entries_paths_only() {
    let frame = json!({"JsonPatch": [
        {"op": "add", "path": "/entries/3", "value": 1},
        {"op": "replace", "path": "/entries/0", "value": 2},
        {"op": "remove", "path": "/entries/7"},
        {"op": "add", "path": "/entries/x", "value": 3},
        {"op": "add", "path": "/other/1", "value": 4},
        {"op": "add", "path": "/entries/1"},
        {"op": "move", "path": "/entries/1", "from": "/entries/2"}]});
    assert_eq!(
        VkOp::of_frame(&frame),
        vec![
            add(3, json!(1)),
            VkOp::Replace {
                index: 0,
                value: json!(2)
            },
            VkOp::Remove { index: 7 },
        ]
    );
    assert!(VkOp::of_frame(&json!({"finished": true})).is_empty());
}

/// `add` at a mapped index is a replace, `replace` at an unmapped one an add; a `remove`
/// writes nothing and lets the entry be matched again.
#[test]
fn ops_are_upserts_and_removes_keep_the_entry() {
    let (mut r, mut log) = (Renumberer::new([]), Log::default());
    feed(
        &mut r,
        &mut log,
        [VkOp::Replace {
            index: 4,
            value: text("thinking", "hm"),
        }],
    );
    feed(&mut r, &mut log, [add(4, text("thinking", "hmm"))]);
    assert_eq!(log.entries, [text("thinking", "hmm")]);
    assert_eq!(r.apply(VkOp::Remove { index: 4 }), None);
    assert_eq!(
        r.apply(add(9, text("thinking", "hmm"))),
        None,
        "matched again, unchanged"
    );
    assert_eq!(
        r.apply(VkOp::Remove { index: 2 }),
        None,
        "unknown index: nothing"
    );
    assert_eq!(log.entries.len(), 1);
}

/// Identical tool calls are matched in order, whatever statuses the replay carries.
#[test]
fn identical_tool_calls_are_matched_in_order() {
    for restart in [false, true] {
        let (mut r, mut log) = (Renumberer::new([]), Log::default());
        feed(
            &mut r,
            &mut log,
            [add(0, bash("ls", "success")), add(1, bash("ls", "created"))],
        );
        if restart {
            r = Renumberer::new(log.entries.clone());
        } else {
            r.connect();
        }
        let replay = [
            add(0, stderr("e\n")),
            add(1, bash("ls", "failed")),
            add(2, bash("ls", "success")),
        ];
        assert_eq!(feed(&mut r, &mut log, replay), [2, 0, 1]);
        assert_eq!(
            log.entries[..2],
            [bash("ls", "failed"), bash("ls", "success")]
        );
    }
}

/// A VK whose stderr processor starts a new entry after a pause (a fork that fixed 0.1.44's
/// overwrite): the replay's single stderr entry takes the first segment's index, the second
/// segment is kept as served.
#[test]
fn stderr_split_live_and_whole_in_the_replay() {
    let (mut r, mut log) = (Renumberer::new([]), Log::default());
    feed(
        &mut r,
        &mut log,
        [
            add(0, stderr("a\n")),
            add(1, text("assistant_message", "hi")),
            add(2, stderr("b\n")),
        ],
    );
    r.connect();
    let replay = [
        add(0, text("assistant_message", "hi")),
        add(1, stderr("a\nb\n")),
    ];
    assert_eq!(feed(&mut r, &mut log, replay), [0]);
    assert_eq!(
        log.entries,
        [
            stderr("a\nb\n"),
            text("assistant_message", "hi"),
            stderr("b\n")
        ]
    );
}

/// VK keeps 100 MB of history per running process and drops its front beyond: a reconnect's
/// history can then start at a `replace` carrying an intermediate state. A stderr entry that
/// VK overwrote twice is still recognised by a text it showed earlier (held in memory).
#[test]
fn a_history_cut_at_its_front_matches_an_earlier_content() {
    let (mut r, mut log) = (Renumberer::new([]), Log::default());
    let live = ["a\n", "a\nb\n", "c\n", "d\n"].map(|t| add(0, stderr(t)));
    feed(&mut r, &mut log, live);
    r.connect();
    let history = [
        VkOp::Replace {
            index: 0,
            value: stderr("c\n"),
        },
        add(0, stderr("d\n")),
    ];
    assert_eq!(feed(&mut r, &mut log, history), [0, 0]);
    assert_eq!(log.entries, [stderr("d\n")]);
}

/// A text whose served content has no relation to the new one is a new entry: the rule
/// appends rather than overwrite a served entry's meaning.
#[test]
fn unrelated_text_is_appended_not_merged() {
    let (mut r, mut log) = (Renumberer::new([]), Log::default());
    feed(
        &mut r,
        &mut log,
        [
            add(0, stderr("boot\n")),
            add(1, text("assistant_message", "Done.")),
        ],
    );
    r.connect();
    let replay = [
        add(0, stderr("API error: x")),
        add(1, text("assistant_message", "Start")),
        add(2, stderr("boot\n")),
    ];
    assert_eq!(feed(&mut r, &mut log, replay), [2, 3]);
    assert_eq!(log.entries.len(), 4);
}

// Generated runs. A run is a list of steps, turned into VK 0.1.44's live patches and its
// replay after completion the way its normalizers make them: stdout-side entries keep their
// order, the one stderr entry floats; texts stream by `replace`; tool calls change status;
// stderr is coalesced into one entry, overwritten after a pause (the chunk that ends the pause
// is lost live, kept in the replay). Every op carries the entry it belongs to (`model`), which
// the renumberer never sees: the checks compare the daemon's numbering with it.

#[path = "renumber_props.rs"]
mod props;
