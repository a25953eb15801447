//! Compact log entries through a real MCP client against the simulator-fed daemon: every
//! entry kind at detail 0 and 1, a pending approval, clipping and reading a clipped entry whole,
//! raw lines, replacements (a tool call that only got its outcome is sent as the outcome alone
//! at detail 0; one whose call changed is sent whole), and level 2 as VK's entries verbatim.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;

fn has(v: &Value, k: &str) -> bool {
    v.get(k).is_some()
}

/// A normalized entry as VK writes it.
fn entry(kind: Value, content: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null, "entry_type": kind,
           "content": content}})
}

fn bash(status: Value, result: Value) -> Value {
    entry(
        json!({"type": "tool_use", "tool_name": "Bash", "status": status,
               "action_type": {"action": "command_run", "command": "rm -rf build", "result": result}}),
        "rm -rf build",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_log_entries_follow_the_work() {
    use vk_observer_sim::{Channel, RunReason};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Compact", &["demo"]);
    let task = sim.add_task(project, "Compact reader", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let p = sim.start_process(ids.session_id, RunReason::CodingAgent);
    let long = "y".repeat(1_200);
    let pending = json!({"status": "pending_approval", "approval_id": "appr-7",
                         "requested_at": "2026-11-22T10:00:00Z", "timeout_at": "2026-11-22T10:10:00Z"});
    for e in [
        entry(json!({"type": "user_message"}), "Clean the build."),
        entry(json!({"type": "thinking"}), "Deleting build/ is safe."),
        bash(pending, Value::Null),
        entry(json!({"type": "assistant_message"}), &long),
    ] {
        sim.append_log(p, Channel::Normalized, e);
    }
    sim.append_log(
        p,
        Channel::Raw,
        json!({"type": "STDOUT", "content": "cleaning\n"}),
    );
    let mcp = Mcp::connect(daemon.addr).await;
    let args = json!({"attempt_id": ids.attempt_id});
    let page = until(&mcp, args.clone(), |r| r["latest_entry_index"] == 3).await;
    let got = page["entries"].as_array().unwrap();
    assert_eq!(
        got[0],
        json!({"entry_index": 0, "kind": "user_message", "text": "Clean the build."})
    );
    assert_eq!(got[1]["kind"], "thinking");
    assert_eq!(
        got[2],
        json!({"entry_index": 2, "kind": "tool_use", "tool": {"name": "Bash", "action": "command_run",
               "command": "rm -rf build", "status": "pending_approval", "approval_id": "appr-7",
               "approval_timeout_at": "2026-11-22T10:10:00Z"}})
    );
    assert_eq!(got[3]["text"].as_str().unwrap().len(), 500);
    assert_eq!(got[3]["clipped"], true);
    // The clipped entry read whole, as the schema says: after_entry_index i − 1, limit 1, detail 2.
    let whole = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": ids.attempt_id, "after_entry_index": 2, "limit": 1, "detail": 2}),
        )
        .await
        .ok();
    assert_eq!(whole["entries"][0]["entry"]["content"]["content"], long);
    let standard = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": ids.attempt_id, "detail": 1}),
        )
        .await
        .ok();
    assert_eq!(standard["entries"][3]["text"], long);
    assert!(!has(&standard["entries"][3], "clipped") && has(&standard, "run_reason"));
    // The process id at every level (seed 003: a changed id resets the client's highest index);
    // its run reason from 1.
    assert!(has(&page, "execution_process_id") && !has(&page, "run_reason"));
    let raw = until(
        &mcp,
        json!({"attempt_id": ids.attempt_id, "channel": "raw"}),
        |r| r["entries"].as_array().is_some_and(|a| a.len() == 1),
    )
    .await;
    assert_eq!(
        raw["entries"][0],
        json!({"entry_index": 0, "kind": "stdout", "text": "cleaning\n"})
    );

    // The approval is answered: the entry is replaced in place and shows up in `replaced`.
    // A page's token may predate the entries it shows (it is read first, by design): take the
    // token of a read made once they are all committed.
    let t = mcp.call("tail_attempt_logs", args.clone()).await.ok()["token"].clone();
    sim.replace_log(
        p,
        Channel::Normalized,
        2,
        bash(
            json!({"status": "success"}),
            json!({"exit_status": {"type": "exit_code", "code": 0}, "output": "removed"}),
        ),
    );
    sim.append_log(
        p,
        Channel::Normalized,
        entry(json!({"type": "assistant_message"}), "Done."),
    );
    let next = until(
        &mcp,
        json!({"attempt_id": ids.attempt_id, "after_entry_index": 3, "since_token": t}),
        // The rewrite and the new entry may land in different commits: wait for both.
        |r| {
            r["replaced"].as_array().is_some_and(|a| a.len() == 1)
                && r["entries"].as_array().is_some_and(|a| a.len() == 1)
        },
    )
    .await;
    assert_eq!(
        next["entries"],
        json!([{"entry_index": 4, "kind": "assistant_message", "text": "Done."}])
    );
    // The call kept its command: at level 0 the replacement carries the outcome alone (the
    // client holds the call at index 2); at level 1 it is whole.
    assert_eq!(
        next["replaced"][0],
        json!({"entry_index": 2, "kind": "tool_use", "tool": {"name": "Bash", "status": "success",
               "exit_code": 0}})
    );
    let whole = until(
        &mcp,
        json!({"attempt_id": ids.attempt_id, "after_entry_index": 3, "since_token": t,
               "detail": 1}),
        |r| r["replaced"].as_array().is_some_and(|a| a.len() == 1),
    )
    .await;
    assert_eq!(
        whole["replaced"][0]["tool"],
        json!({"name": "Bash", "action": "command_run", "command": "rm -rf build",
               "status": "success", "exit_code": 0, "output": "removed"})
    );
    // A rewrite that changes the call itself (an ACP tool-call update can) is sent whole.
    let t2 = next["token"].clone();
    let mut changed = bash(json!({"status": "failed"}), json!(null));
    changed["content"]["entry_type"]["action_type"]["command"] = json!("rm -rf build dist");
    changed["content"]["content"] = json!("rm -rf build dist");
    sim.replace_log(p, Channel::Normalized, 2, changed);
    let rewritten = until(
        &mcp,
        json!({"attempt_id": ids.attempt_id, "after_entry_index": 4, "since_token": t2}),
        |r| r["replaced"][0]["tool"]["status"] == "failed",
    )
    .await;
    assert_eq!(
        rewritten["replaced"][0],
        json!({"entry_index": 2, "kind": "tool_use", "tool": {"name": "Bash",
               "action": "command_run", "command": "rm -rf build dist", "status": "failed"}})
    );
    // Level 2 is VK's entries verbatim, index for index.
    let verbatim = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": ids.attempt_id, "detail": 2}),
        )
        .await
        .ok();
    let compact = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": ids.attempt_id, "detail": 0}),
        )
        .await
        .ok();
    let idx = |v: &Value| -> Vec<Value> {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["entry_index"].clone())
            .collect()
    };
    assert_eq!(idx(&verbatim), idx(&compact));
    for (v, c) in verbatim["entries"]
        .as_array()
        .unwrap()
        .iter()
        .zip(compact["entries"].as_array().unwrap())
    {
        assert_eq!(c["kind"], v["entry"]["content"]["entry_type"]["type"]);
        assert!(!has(c, "entry"));
    }
}

/// Tail until `done` holds (the cache follows VK asynchronously).
async fn until(mcp: &Mcp, args: Value, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut a = args.clone();
        if !has(&a, "detail") {
            a["detail"] = json!(0);
        }
        // Until the cache has the attempt, the tool answers `not_found`.
        let r = match mcp.call("tail_attempt_logs", a).await {
            support::mcp::Reply::Ok(r) if done(&r) => return r,
            support::mcp::Reply::Ok(r) | support::mcp::Reply::Err(r) => r,
        };
        assert!(
            std::time::Instant::now() < deadline,
            "log never reached the state: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
