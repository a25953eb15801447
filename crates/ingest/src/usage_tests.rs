//! The usage reader against a recorded run of VK 0.1.44 with a stand-in Claude Code CLI
//! (`ws-raw-a-live.jsonl`, `ws-raw-fail-live.jsonl`: stdout chunks with an `init` line,
//! assistant lines and a `result` line carrying usage and cost), then against the cases a
//! real stream can hold: a line split at every byte, repeated message ids, mid-stream starts,
//! holes, re-sends and bad numbers.

use serde_json::value::RawValue;
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;

const A_LIVE: &str =
    include_str!("../../../tests/fixtures/vk-wire-bloop/samples/ws-raw-a-live.jsonl");
const FAIL_LIVE: &str =
    include_str!("../../../tests/fixtures/vk-wire-bloop/samples/ws-raw-fail-live.jsonl");

/// The raw entries a recorded log socket sent, as (index, entry).
fn recorded_entries(recording: &str) -> Vec<(u64, Box<RawValue>)> {
    let mut out = Vec::new();
    for line in recording.lines().filter(|l| !l.starts_with('#')) {
        let event: Value = serde_json::from_str(line).unwrap();
        let Some(raw) = event.get("raw").and_then(Value::as_str) else {
            continue;
        };
        let frame: Value = serde_json::from_str(raw).unwrap();
        for op in frame["JsonPatch"].as_array().into_iter().flatten() {
            let index = op["path"].as_str().unwrap()["/entries/".len()..]
                .parse()
                .unwrap();
            out.push((index, raw_value(&op["value"])));
        }
    }
    out
}

fn raw_value(v: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).unwrap()
}

fn stdout(text: &str) -> Box<RawValue> {
    raw_value(&json!({"type": "STDOUT", "content": text}))
}

/// The recorded run's `result` line, with its newline.
fn recorded_result_line() -> String {
    recorded_entries(A_LIVE)
        .iter()
        .filter_map(|(_, e)| stdout_of(e))
        .find(|t| t.contains("\"result\""))
        .expect("the recording has a result line")
}

fn read_all(entries: &[(u64, Box<RawValue>)]) -> Option<ProcessUsage> {
    let mut reading = Reading::new(None);
    for (i, e) in entries {
        reading.entry(Uuid::nil(), *i, e);
    }
    reading.run.current()
}

fn recorded_totals() -> ProcessUsage {
    ProcessUsage {
        input_tokens: 52,
        output_tokens: 50,
        cache_creation_input_tokens: 120,
        cache_read_input_tokens: 900,
        cost_usd: Some(0.001176),
        duration_ms: Some(12),
        num_turns: Some(2),
        models: vec!["fake-claude-1".into()],
        complete: true,
        messages: 0,
    }
}

#[test]
fn a_recorded_run_reads_its_result_totals_and_model() {
    assert_eq!(read_all(&recorded_entries(A_LIVE)), Some(recorded_totals()));
    let failed = read_all(&recorded_entries(FAIL_LIVE)).expect("a failed run has totals too");
    assert!(failed.complete);
    assert_eq!((failed.input_tokens, failed.output_tokens), (45, 25));
    assert_eq!(failed.cost_usd, Some(0.00078));
}

#[test]
fn a_result_line_split_at_every_byte_offset_reads_the_same() {
    let line = recorded_result_line();
    for cut in 1..line.len() {
        let entries = vec![
            (
                0,
                stdout(
                    "{\"type\": \"system\", \"subtype\": \"init\", \"model\": \"fake-claude-1\"}\n",
                ),
            ),
            (1, stdout(&line[..cut])),
            (2, stdout(&line[cut..])),
        ];
        assert_eq!(read_all(&entries), Some(recorded_totals()), "cut at {cut}");
    }
}

#[test]
fn a_line_split_over_three_chunks_and_crlf_endings_read() {
    let line = recorded_result_line().replace('\n', "\r\n");
    let (a, rest) = line.split_at(10);
    let (b, c) = rest.split_at(rest.len() / 2);
    let entries = vec![(0, stdout(a)), (1, stdout(b)), (2, stdout(c))];
    let usage = read_all(&entries).unwrap();
    assert!(usage.complete && usage.output_tokens == 50);
}

fn assistant(id: &str, output: u64) -> String {
    json!({"type": "assistant", "message": {"id": id, "model": "m-1",
           "usage": {"input_tokens": 1, "output_tokens": output}}})
    .to_string()
        + "\n"
}

#[test]
fn running_sums_count_each_message_id_once_with_its_last_usage() {
    let text = [assistant("a", 5), assistant("a", 7), assistant("b", 3)].concat();
    let usage = read_all(&[(0, stdout(&text))]).unwrap();
    assert!(!usage.complete);
    assert_eq!((usage.input_tokens, usage.output_tokens), (2, 10));
    assert_eq!(
        (usage.messages, usage.models.clone()),
        (2, vec!["m-1".to_string()])
    );
    assert_eq!(usage.cost_usd, None);
}

#[test]
fn the_result_replaces_the_running_sum() {
    let result = recorded_result_line();
    let text = [assistant("a", 5), result].concat();
    let usage = read_all(&[(0, stdout(&text))]).unwrap();
    assert!(usage.complete);
    assert_eq!(usage.output_tokens, 50);
}

#[test]
fn a_mid_stream_start_drops_the_partial_line_and_reads_the_rest() {
    let line = recorded_result_line();
    let first = assistant("a", 5);
    // Starting at index 7 (a restart): the tail of a line is not a line.
    let entries = vec![(7, stdout(&first[first.len() / 2..])), (8, stdout(&line))];
    assert_eq!(read_all(&entries).unwrap().output_tokens, 50);
    let mut lines = Lines::mid_stream();
    let mut got = Vec::new();
    lines.push("ial\nwhole\npart", |l| got.push(l.to_string()));
    lines.push("ly\n", |l| got.push(l.to_string()));
    assert_eq!(got, ["whole", "partly"]);
}

#[test]
fn re_sent_entries_are_skipped_and_a_hole_drops_the_partial_line() {
    let a = assistant("a", 5);
    let (head, _) = a.split_at(20);
    let entries = vec![
        (0, stdout(&a)),
        (0, stdout(&a)),
        (1, stdout(head)),
        // Index 2 never came: the rest of line 1 is lost with it.
        (3, stdout("tail of something\n")),
        (4, stdout(&assistant("b", 3))),
    ];
    let usage = read_all(&entries).unwrap();
    assert_eq!((usage.output_tokens, usage.messages), (8, 2));
}

#[test]
fn stderr_and_other_channels_are_not_stdout() {
    assert_eq!(
        stdout_of(&raw_value(&json!({"type": "STDERR", "content": "x\n"}))),
        None
    );
    assert_eq!(
        stdout_of(&raw_value(&json!({"STDOUT": "x\n"}))).as_deref(),
        Some("x\n")
    );
    assert_eq!(stdout_of(&raw_value(&json!([1, 2]))), None);
}

fn result_with(usage: Value, cost: Value) -> String {
    json!({"type": "result", "subtype": "success", "duration_ms": 10, "num_turns": 1,
           "total_cost_usd": cost, "usage": usage})
    .to_string()
}

#[test]
fn bad_numbers_leave_usage_absent_and_count_as_garbage() {
    let ok = json!({"input_tokens": 1, "output_tokens": 2});
    let cases = [
        result_with(json!({"input_tokens": -1, "output_tokens": 2}), json!(0.1)),
        result_with(
            json!({"input_tokens": "12", "output_tokens": 2}),
            json!(0.1),
        ),
        result_with(json!({"input_tokens": 1.5, "output_tokens": 2}), json!(0.1)),
        result_with(json!({"input_tokens": 2_000_000_000_000u64}), json!(0.1)),
        result_with(ok.clone(), json!(2e6)),
        result_with(ok.clone(), json!(-0.5)),
        result_with(ok.clone(), json!("0.1")),
        result_with(json!([1, 2]), json!(0.1)),
    ];
    for line in cases {
        let mut run = RunUsage::default();
        assert!(run.read_line(&line).is_err(), "{line}");
        assert_eq!(run.current(), None, "{line}");
    }
    let mut run = RunUsage::default();
    assert!(run.read_line(&result_with(ok, json!(0.25))).is_ok());
    assert_eq!(run.current().unwrap().cost_usd, Some(0.25));
}

#[test]
fn a_truncated_or_non_json_result_line_leaves_usage_absent() {
    let line = recorded_result_line();
    let truncated = format!("{}{}", &line[..line.len() / 2], assistant("x", 1));
    let mut run = RunUsage::default();
    assert!(run.read_line(truncated.trim_end()).is_err());
    assert_eq!(run.current(), None);
    // A spoiled run reports nothing more, whatever follows.
    run.read_line(assistant("y", 4).trim_end()).unwrap();
    assert_eq!(run.current(), None);
    let mut quiet = RunUsage::default();
    assert!(
        quiet
            .read_line("not json at all, the CLI's chatter")
            .is_ok()
    );
    assert!(
        quiet
            .read_line("{\"type\": \"result\", \"usage\": ")
            .is_err()
    );
    assert_eq!(quiet.current(), None);
}

#[test]
fn a_result_without_usage_reports_nothing() {
    let mut run = RunUsage::default();
    run.read_line(r#"{"type":"result","subtype":"success","num_turns":1}"#)
        .unwrap();
    assert_eq!(run.current(), None);
}

#[test]
fn an_over_long_line_is_dropped_and_the_next_one_reads() {
    let mut lines = Lines::default();
    let mut got = Vec::new();
    let big = "x".repeat(LINE_CAP / 2 + 1);
    assert_eq!(lines.push(&big, |l| got.push(l.len())), 0);
    assert_eq!(lines.push(&big, |l| got.push(l.len())), 1);
    assert_eq!(
        lines.push("still the long one\nshort\n", |l| got.push(l.len())),
        0
    );
    assert_eq!(got, [5]);
}

#[test]
fn a_tap_reads_only_coding_agents_primes_from_the_store_and_reports_changes_once() {
    use vk_observer_store::{Retention, StoreOwner};
    let mut owner = StoreOwner::open_temporary(Retention::default()).unwrap();
    let mut writer = owner.take_writer().unwrap();
    let store = owner.store();
    let (attempt, agent, script) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
    let process = |id: Uuid, reason: &str| DomainEvent::ProcessUpserted {
        attempt_id: attempt,
        process: json!({"id": id, "run_reason": reason, "status": "running"}),
    };
    let a = assistant("a", 5);
    let (head, tail) = a.split_at(25);
    writer
        .apply(vec![
            process(agent, "codingagent"),
            process(script, "setupscript"),
            DomainEvent::LogEntriesPut {
                attempt_id: attempt,
                process_id: agent,
                channel: Channel::Raw,
                entries: vec![(0, stdout(head))],
            },
        ])
        .unwrap();
    let reader = store.read();
    let mut off = UsageTap::for_channel(Channel::Raw);
    assert!(
        off.observe(&reader, attempt, script, &[(0, stdout(&a))])
            .is_none()
    );
    assert!(matches!(off, UsageTap::Off));
    // Started at index 1 (a restart): the stored head of the line is read first.
    let mut tap = UsageTap::for_channel(Channel::Raw);
    let Some(DomainEvent::ProcessUsage { usage, .. }) =
        tap.observe(&reader, attempt, agent, &[(1, stdout(tail))])
    else {
        panic!("the line's two halves make one message");
    };
    assert_eq!(usage.output_tokens, 5);
    // Nothing new, nothing to write.
    assert!(
        tap.observe(&reader, attempt, agent, &[(2, stdout("\n"))])
            .is_none()
    );
    let line = recorded_result_line();
    assert!(
        tap.observe(&reader, attempt, agent, &[(3, stdout(&line))])
            .is_some()
    );
    let mut normalized = UsageTap::for_channel(Channel::Normalized);
    assert!(
        normalized
            .observe(&reader, attempt, agent, &[(0, stdout(&line))])
            .is_none()
    );
}
