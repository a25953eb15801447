//! `get_attempt_file` line ranges at the file's edges, through the MCP router against the
//! simulator's `/file` route (VK serves bytes only; the daemon finds the lines): first and last
//! line, past the end, an empty file, no trailing newline, CRLF, a range over the byte cap, a
//! file larger than one 512 KiB read cut inside a multi-byte character, and the mixed-mode
//! mistakes.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::SimFile;

fn file(path: &str, content: String) -> SimFile {
    SimFile {
        repo: "demo".into(),
        path: path.into(),
        change: "added".into(),
        additions: content.lines().count() as u64,
        deletions: 0,
        content,
    }
}

async fn lines(mcp: &Mcp, attempt: Uuid, path: &str, extra: Value) -> Value {
    let mut args = json!({"attempt_id": attempt, "path": format!("demo/{path}")});
    for (k, v) in extra.as_object().unwrap() {
        args[k] = v.clone();
    }
    mcp.call("get_attempt_file", args).await.ok()
}

fn pick(v: &Value) -> (Value, Value, Value, Value, Value) {
    (
        v["content"].clone(),
        v["end_line"].clone(),
        v["next_line"].clone(),
        v["total_lines"].clone(),
        v["truncated"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn line_ranges_at_the_edges_of_a_file() {
    let sim = support::sim().await;
    let project = sim.add_project("Lines", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let task = sim.add_task(project, "Files", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "lines world").await;
    // The files exist in the workspace from here on (the /file route reads them; the cached
    // change summary is not involved).
    // A long file: 20,000 lines "line N é\n" (~230 KiB), and one over 512 KiB whose slices cut
    // inside `é`.
    let long: String = (1..=20_000).map(|i| format!("line {i} é\n")).collect();
    let big: String = (1..=60_000).map(|i| format!("{i:05} ééé\n")).collect();
    // 13-byte lines: the first 512 KiB read ends inside the last `é` of a line.
    assert!(big.len() > 512 * 1024 && (512 * 1024) % 13 == 11);
    sim.set_changes(
        ids.attempt_id,
        vec![
            file("three.txt", "one\ntwo\nthree\n".into()),
            file("empty.txt", String::new()),
            file("open.txt", "a\nb".into()),
            file("crlf.txt", "a\r\nb\r\nc\r\n".into()),
            file("long.txt", long.clone()),
            file("big.txt", big.clone()),
        ],
    );
    let mcp = Mcp::connect(daemon.addr).await;
    let a = ids.attempt_id;

    let first = lines(
        &mcp,
        a,
        "three.txt",
        json!({"start_line": 1, "end_line": 1}),
    )
    .await;
    assert_eq!(
        pick(&first),
        (json!("one\n"), json!(1), json!(2), json!(3), json!(true))
    );
    assert_eq!(
        (&first["start"], &first["bytes"], &first["start_line"]),
        (&json!(0), &json!(4), &json!(1))
    );
    let last = lines(
        &mcp,
        a,
        "three.txt",
        json!({"start_line": 3, "end_line": 3}),
    )
    .await;
    assert_eq!(
        pick(&last),
        (
            json!("three\n"),
            json!(3),
            json!(null),
            json!(3),
            json!(false)
        )
    );
    assert_eq!(last["start"], 8);
    let only_end = lines(&mcp, a, "three.txt", json!({"end_line": 2})).await;
    assert_eq!(
        only_end["content"], "one\ntwo\n",
        "end_line alone starts at line 1"
    );
    let past = lines(
        &mcp,
        a,
        "three.txt",
        json!({"start_line": 9, "end_line": 12}),
    )
    .await;
    assert_eq!(
        pick(&past),
        (json!(""), json!(null), json!(null), json!(3), json!(false))
    );
    assert_eq!(
        (&past["blocked"], &past["start"]),
        (&json!(false), &json!(14))
    );

    let empty = lines(&mcp, a, "empty.txt", json!({"start_line": 1})).await;
    assert_eq!(
        pick(&empty),
        (json!(""), json!(null), json!(null), json!(0), json!(false))
    );
    let open = lines(&mcp, a, "open.txt", json!({"start_line": 2, "end_line": 5})).await;
    assert_eq!(
        pick(&open),
        (json!("b"), json!(2), json!(null), json!(2), json!(false))
    );
    let crlf = lines(&mcp, a, "crlf.txt", json!({"start_line": 2, "end_line": 3})).await;
    assert_eq!(
        pick(&crlf),
        (
            json!("b\r\nc\r\n"),
            json!(3),
            json!(null),
            json!(3),
            json!(false)
        )
    );

    // A range over the byte cap: whole lines up to max_bytes, and where to go on.
    let capped = lines(
        &mcp,
        a,
        "long.txt",
        json!({"start_line": 10, "end_line": 5000, "max_bytes": 1000}),
    )
    .await;
    let text = capped["content"].as_str().unwrap();
    assert!(text.len() <= 1000 && text.starts_with("line 10 é\n") && text.ends_with('\n'));
    let got = text.lines().count() as u64;
    assert_eq!(capped["end_line"], json!(9 + got));
    assert_eq!(capped["next_line"], json!(10 + got));
    assert_eq!(
        (&capped["truncated"], &capped["total_lines"]),
        (&json!(true), &json!(20_000))
    );
    let expected: String = long
        .split_inclusive('\n')
        .skip(9)
        .take(got as usize)
        .collect();
    assert_eq!(text, expected);
    let on = lines(
        &mcp,
        a,
        "long.txt",
        json!({"start_line": capped["next_line"], "end_line": 10 + got}),
    )
    .await;
    assert_eq!(on["content"], format!("line {} é\n", 10 + got));
    // Default cap (64 KiB) with no end_line; the last line of the long file.
    let tail = lines(&mcp, a, "long.txt", json!({"start_line": 20_000})).await;
    assert_eq!(
        pick(&tail),
        (
            json!("line 20000 é\n"),
            json!(20000),
            json!(null),
            json!(20000),
            json!(false)
        )
    );

    // Beyond the first 512 KiB read, the offsets still match the file byte for byte.
    let deep = lines(
        &mcp,
        a,
        "big.txt",
        json!({"start_line": 50_000, "end_line": 50_001}),
    )
    .await;
    assert_eq!(deep["content"], "50000 ééé\n50001 ééé\n");
    let offset = big.find("50000 ééé\n").unwrap() as u64;
    assert_eq!(
        (&deep["start"], &deep["total_lines"]),
        (&json!(offset), &json!(60_000))
    );
    let by_bytes = mcp
        .call(
            "get_attempt_file",
            json!({"attempt_id": a, "path": "demo/big.txt", "start": offset, "max_bytes": 26}),
        )
        .await
        .ok();
    assert_eq!(
        by_bytes["content"], deep["content"],
        "line mode's start is a byte offset"
    );
    assert_eq!(
        by_bytes["end_line"],
        Value::Null,
        "byte mode has no line fields"
    );

    // One line longer than max_bytes: its beginning, cut at a character boundary, and a hint.
    let clipped = lines(&mcp, a, "big.txt", json!({"start_line": 1, "max_bytes": 7})).await;
    assert_eq!(
        (
            &clipped["content"],
            &clipped["end_line"],
            &clipped["next_line"]
        ),
        (&json!("00001 "), &Value::Null, &Value::Null)
    );
    assert!(
        clipped["hint"].as_str().unwrap().contains("start = 6"),
        "{clipped}"
    );

    daemon.shutdown().await;
    sim.shutdown().await;
}
