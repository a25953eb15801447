//! Bounded artifacts (seed 003 §12) through a real MCP client against the simulator's `/file`
//! and `/patch` routes: 20,000-byte defaults for `get_attempt_file` and `get_attempt_patch`,
//! the caller's patch `guard` (`too_many_files` before VK is asked, `threshold_exceeded` on the
//! whole patch's size), `encoding: base64` and `lossy`, and `patch_text` beside the deprecated
//! `patch`.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::SimFile;

const PATCH_ROUTE: &str = "POST /api/task-attempts/{id}/patch";

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

fn patch_calls(sim: &vk_observer_sim::Sim) -> u64 {
    sim.counters()
        .by_route
        .get(PATCH_ROUTE)
        .copied()
        .unwrap_or(0)
}

async fn call(mcp: &Mcp, tool: &str, attempt: Uuid, extra: Value) -> Value {
    let mut args = json!({ "attempt_id": attempt });
    for (k, v) in extra.as_object().unwrap() {
        args[k] = v.clone();
    }
    mcp.call(tool, args).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_are_bounded_guarded_and_encoded() {
    let sim = support::sim().await;
    let project = sim.add_project("Bounds", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let task = sim.add_task(project, "Artifacts", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "bounds world").await;
    // 50,000 bytes of 10-byte lines: over both defaults, as a file and as a patch.
    let big: String = (0..5_000).map(|i| format!("{i:09}\n")).collect();
    assert_eq!(big.len(), 50_000);
    sim.set_changes(
        ids.attempt_id,
        vec![
            file("big.txt", big.clone()),
            file("small.txt", "one\ntwo\n".into()),
            file("accent.txt", "aé\u{0}\n".into()),
        ],
    );
    let mcp = Mcp::connect(daemon.addr).await;
    let a = ids.attempt_id;

    // Defaults: 20,000 bytes, cut with truncated: true.
    let f = call(&mcp, "get_attempt_file", a, json!({"path": "demo/big.txt"})).await;
    assert_eq!(f["bytes"], 20_000, "{}", f["bytes"]);
    assert_eq!(f["truncated"], true);
    assert_eq!(f["encoding"], "utf8");
    assert_eq!(f["lossy"], false);
    assert_eq!(f["content"].as_str().unwrap(), &big[..20_000]);
    let p = call(
        &mcp,
        "get_attempt_patch",
        a,
        json!({"paths": ["demo/big.txt"]}),
    )
    .await;
    assert_eq!(p["truncated"], true, "{}", p["bytes"]);
    assert_eq!(p["bytes"], 20_000);
    let text = p["patch_text"].as_str().unwrap();
    assert_eq!(text.len(), 20_000);
    assert!(text.starts_with("--- a/demo/big.txt\n+++ b/demo/big.txt\n"));
    assert_eq!(
        p["patch"], p["patch_text"],
        "the deprecated name carries the same text"
    );
    // Asked for more, more comes back.
    let whole = call(
        &mcp,
        "get_attempt_patch",
        a,
        json!({"paths": ["demo/big.txt"], "max_bytes": 200_000}),
    )
    .await;
    assert_eq!(whole["truncated"], false);
    let whole_len = whole["bytes"].as_u64().unwrap();
    assert!(whole_len > 50_000, "{whole_len}");

    // The guard: too many paths is refused before VK is asked.
    let before = patch_calls(&sim);
    let many = call(
        &mcp,
        "get_attempt_patch",
        a,
        json!({"paths": ["demo/big.txt", "demo/small.txt"], "guard": {"max_files": 1}}),
    )
    .await;
    assert_eq!(many["blocked"], true);
    assert_eq!(many["blocked_reason"], "too_many_files");
    assert!(
        many["hint"].as_str().unwrap().contains("max_files"),
        "{many}"
    );
    assert!(many["patch_text"].is_null() && many["patch"].is_null());
    assert_eq!(patch_calls(&sim), before, "VK was not asked");
    // The whole patch over max_total_bytes: withheld, whatever max_bytes would return.
    let over = call(
        &mcp,
        "get_attempt_patch",
        a,
        json!({"paths": ["demo/big.txt"], "max_bytes": 100, "guard": {"max_total_bytes": 30_000}}),
    )
    .await;
    assert_eq!(over["blocked"], true, "{over}");
    assert_eq!(over["blocked_reason"], "threshold_exceeded");
    assert!(
        over["hint"].as_str().unwrap().contains("fewer paths"),
        "{over}"
    );
    assert!(over["patch_text"].is_null());
    assert_eq!(over["bytes"], 0);
    // Exactly at the limit passes, and max_bytes still cuts what is returned.
    let at = call(
        &mcp,
        "get_attempt_patch",
        a,
        json!({"paths": ["demo/big.txt"], "max_bytes": 100,
               "guard": {"max_total_bytes": whole_len, "max_files": 1}}),
    )
    .await;
    assert_eq!(at["blocked"], false, "{at}");
    assert_eq!(at["bytes"], 100);
    assert_eq!(at["truncated"], true);
    assert_eq!(
        at["patch_text"].as_str().unwrap(),
        &whole["patch_text"].as_str().unwrap()[..100]
    );
    let small = call(
        &mcp,
        "get_attempt_patch",
        a,
        json!({"paths": ["demo/small.txt"], "guard": {"max_total_bytes": 1_000}}),
    )
    .await;
    assert_eq!(small["blocked"], false);
    assert_eq!(small["truncated"], false);
    assert!(small["patch_text"].as_str().unwrap().contains("+two\n"));

    // base64: the text's UTF-8 bytes ("aé\0\n" = 61 c3 a9 00 0a).
    let b = call(
        &mcp,
        "get_attempt_file",
        a,
        json!({"path": "demo/accent.txt", "encoding": "base64"}),
    )
    .await;
    assert_eq!(b["encoding"], "base64");
    assert_eq!(b["content"], "YcOpAAo=");
    assert_eq!(b["lossy"], false);
    assert_eq!(b["bytes"], 5);
    // A slice cut inside `é`: VK replaced the half character, and the answer says so.
    let cut = call(
        &mcp,
        "get_attempt_file",
        a,
        json!({"path": "demo/accent.txt", "max_bytes": 2, "encoding": "base64"}),
    )
    .await;
    assert_eq!(cut["lossy"], true, "{cut}");
    assert_eq!(cut["content"], "Ye+/vQ==", "a + U+FFFD");
    assert!(cut["hint"].as_str().unwrap().contains("U+FFFD"), "{cut}");
    // Seed 003's spelling `utf-8` is the default encoding.
    let spelled = call(
        &mcp,
        "get_attempt_file",
        a,
        json!({"path": "demo/small.txt", "encoding": "utf-8"}),
    )
    .await;
    assert_eq!(spelled["encoding"], "utf8");
    assert_eq!(spelled["content"], "one\ntwo\n");
    // Line mode encodes too.
    let line = call(
        &mcp,
        "get_attempt_file",
        a,
        json!({"path": "demo/small.txt", "start_line": 2, "encoding": "base64"}),
    )
    .await;
    assert_eq!(line["content"], "dHdvCg==", "\"two\\n\"");
    assert_eq!(line["end_line"], 2);
    daemon.shutdown().await;
}
