//! Logs, changes, transcripts and workspace context through a real MCP client against the
//! daemon fed by the simulator (the rest of the read tools are in tests/mcp_read.rs), and the
//! token rules of tail_attempt_logs across in-place replacements and process switches.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use support::world::*;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_changes_transcripts_and_context_answer_from_the_cache() {
    let Served {
        sim: _sim,
        dir: _dir,
        daemon,
        w,
        truth,
        mcp,
    } = serve_world().await;
    // tail_attempt_logs: default tail, older pages, incremental tail, raw channel.
    let agent = truth.attempt_status[&w.ok_attempt].clone();
    let _ = agent;
    let processes: Vec<(Uuid, Value)> = truth
        .processes
        .iter()
        .filter(|(pid, _)| sim_attempt_of(&truth, **pid) == Some(w.ok_attempt))
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    let follow_agent = processes
        .iter()
        .filter(|(_, p)| p["run_reason"] == "codingagent")
        .max_by_key(|(_, p)| instant(&p["created_at"]))
        .unwrap()
        .0;
    let full = &truth.normalized_logs[&follow_agent];
    let tail = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "limit": 5}),
        )
        .await
        .ok();
    assert_eq!(
        id(&tail["execution_process_id"]),
        follow_agent,
        "latest coding agent, not the cleanup script"
    );
    let got: Vec<Value> = tail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["entry"].clone())
        .collect();
    assert_eq!(got, full[full.len() - 5..].to_vec());
    assert_eq!(tail["latest_entry_index"], full.len() - 1);
    assert_eq!(tail["has_more"], true);
    assert_eq!(tail["log_complete"], true);
    let mut walked: Vec<Value> = got.clone();
    let mut cursor = tail["next_cursor"].clone();
    while !cursor.is_null() {
        let page = mcp
            .call(
                "tail_attempt_logs",
                json!({"attempt_id": w.ok_attempt, "limit": 4, "cursor": cursor}),
            )
            .await
            .ok();
        let mut older: Vec<Value> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["entry"].clone())
            .collect();
        older.extend(walked);
        walked = older;
        cursor = page["next_cursor"].clone();
    }
    assert_eq!(
        &walked, full,
        "older pages walk back to entry 0 without gaps"
    );
    let newer = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "after_entry_index": full.len() - 3}),
        )
        .await
        .ok();
    assert_eq!(newer["entries"].as_array().unwrap().len(), 2);
    assert_eq!(newer["has_more"], false);
    assert_eq!(
        mcp.call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "cursor": 3, "after_entry_index": 1})
        )
        .await
        .classed(),
        "invalid_argument/mixed_pagination"
    );
    let raw = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "channel": "raw", "limit": 500}),
        )
        .await
        .ok();
    let raw_got: Vec<Value> = raw["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["entry"].clone())
        .collect();
    assert_eq!(raw_got, truth.raw_logs[&follow_agent]);
    let empty = mcp
        .call("tail_attempt_logs", json!({"attempt_id": w.bare_attempt}))
        .await
        .ok();
    assert_eq!(empty["entries"], json!([]));
    assert_eq!(empty["has_more"], false);
    assert!(empty["execution_process_id"].is_null());
    let first_agent = processes
        .iter()
        .filter(|(_, p)| p["run_reason"] == "codingagent")
        .min_by_key(|(_, p)| instant(&p["created_at"]))
        .unwrap()
        .0;
    let pinned = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "execution_process_id": first_agent, "limit": 500}),
        )
        .await
        .ok();
    assert_eq!(
        pinned["entries"].as_array().unwrap().len(),
        truth.normalized_logs[&first_agent].len()
    );
    let dev = processes
        .iter()
        .find(|(_, p)| p["run_reason"] == "devserver")
        .unwrap()
        .0;
    assert_eq!(
        mcp.call(
            "tail_attempt_logs",
            json!({"attempt_id": w.ok_attempt, "execution_process_id": dev})
        )
        .await
        .code(),
        "invalid_argument"
    );

    // get_attempt_changes: summary, repo-prefixed files, guard block and force.
    let ch = mcp
        .call("get_attempt_changes", json!({"attempt_id": w.ok_attempt}))
        .await
        .ok();
    let vk = &truth.changes[&w.ok_attempt];
    assert_eq!(ch["blocked"], false);
    assert_eq!(ch["summary"]["file_count"], vk["summary"]["fileCount"]);
    assert_eq!(ch["summary"]["added"], vk["summary"]["added"]);
    assert_eq!(ch["files"], vk["files"]);
    assert!(
        ch["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().starts_with("docs/"))
    );
    let huge = mcp
        .call("get_attempt_changes", json!({"attempt_id": w.huge_attempt}))
        .await
        .ok();
    assert_eq!(huge["blocked"], true);
    assert_eq!(huge["blocked_reason"], "threshold_exceeded");
    assert_eq!(huge["files"], json!([]));
    assert_eq!(huge["summary"]["file_count"], 600);
    assert_eq!(huge["guard"]["preset"], "BALANCED");
    let forced = mcp
        .call(
            "get_attempt_changes",
            json!({"attempt_id": w.huge_attempt, "force": true}),
        )
        .await
        .ok();
    assert_eq!(forced["blocked"], false);
    assert_eq!(forced["forced"], true);
    assert_eq!(forced["files"].as_array().unwrap().len(), 600);
    let nothing = mcp
        .call("get_attempt_changes", json!({"attempt_id": w.bare_attempt}))
        .await
        .ok();
    assert_eq!(nothing["summary"]["file_count"], 0);
    assert_eq!(nothing["files"], json!([]));

    // tail_session_messages: one turn per coding-agent run of the latest session.
    let tr = mcp
        .call("tail_session_messages", json!({"attempt_id": w.ok_attempt}))
        .await
        .ok();
    assert_eq!(id(&tr["session_id"]), w.ok_session);
    let turns = tr["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[1]["prompt"], "now add a second line");
    assert_eq!(turns[0]["summary"], "Done. I made the changes.");
    assert_eq!(id(&turns[1]["execution_process_id"]), follow_agent);
    let older = mcp
        .call(
            "tail_session_messages",
            json!({"session_id": w.ok_session, "limit": 1}),
        )
        .await
        .ok();
    assert_eq!(older["turns"].as_array().unwrap().len(), 1);
    assert_eq!(older["next_cursor"], 1);
    let first = mcp
        .call(
            "tail_session_messages",
            json!({"session_id": w.ok_session, "cursor": 1}),
        )
        .await
        .ok();
    assert_eq!(first["turns"][0]["turn_index"], 0);
    assert_eq!(first["has_more"], false);

    // by: "message": the conversation message by message, compact, paged older by cursor.
    let walk = |limit: u64| {
        let mcp = &mcp;
        let session = w.ok_session;
        async move {
            let mut walked: Vec<Value> = Vec::new();
            let mut cursor: Option<u64> = None;
            loop {
                let mut args = json!({"session_id": session, "by": "message", "limit": limit});
                if let Some(c) = cursor {
                    args["cursor"] = json!(c);
                }
                let page = mcp.call_as_is("tail_session_messages", args).await.ok();
                assert!(page.get("turns").is_none(), "{page}");
                let got = page["messages"].as_array().unwrap().clone();
                assert!(!got.is_empty() && got.len() as u64 <= limit, "{page}");
                walked.splice(0..0, got);
                if page["has_more"] != true {
                    assert!(page.get("next_cursor").is_none(), "{page}");
                    return walked;
                }
                cursor = Some(page["next_cursor"].as_u64().unwrap());
            }
        }
    };
    let msgs = walk(100).await;
    assert_eq!(msgs[0]["kind"], "prompt");
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[0]["turn_index"], 0);
    assert!(
        msgs.iter()
            .any(|m| m["text"] == "Done. I made the changes.")
    );
    assert!(
        msgs.iter()
            .any(|m| m["kind"] == "tool_use" && m["tool"]["command"].is_string())
    );
    let second_prompt = msgs
        .iter()
        .position(|m| m["kind"] == "prompt" && m["turn_index"] == 1)
        .expect("the follow-up's prompt");
    assert_eq!(msgs[second_prompt]["text"], "now add a second line");
    // Seed 003's names {role, content, at, type} beside the deprecated kind/text/timestamp.
    for m in &msgs {
        assert_eq!(m["type"], m["kind"], "{m}");
        assert_eq!(m.get("content"), m.get("text"), "{m}");
        assert!(
            m.get("at").is_none() && m.get("timestamp").is_none(),
            "detail 0: {m}"
        );
    }
    assert_eq!(msgs[second_prompt]["content"], "now add a second line");
    let timed = mcp
        .call(
            "tail_session_messages",
            json!({"session_id": w.ok_session, "by": "message", "limit": 100, "detail": 1}),
        )
        .await
        .ok();
    // VK's normalized entries carry `timestamp: null` (recordings), so `at` is mostly absent;
    // when VK gives one, both names carry it.
    let timed = timed["messages"].as_array().unwrap();
    assert!(!timed.is_empty());
    for m in timed {
        assert_eq!(m.get("at"), m.get("timestamp"), "{m}");
    }
    let cursors: Vec<u64> = msgs.iter().map(|m| m["cursor"].as_u64().unwrap()).collect();
    assert!(
        cursors.windows(2).all(|w| w[0] < w[1]),
        "ordered: {cursors:?}"
    );
    // Smaller pages visit the same messages, each once, in the same order.
    let walked: Vec<u64> = walk(7)
        .await
        .iter()
        .map(|m| m["cursor"].as_u64().unwrap())
        .collect();
    assert_eq!(
        walked, cursors,
        "the walk visits every message once, in order"
    );
    let no_session = mcp
        .call(
            "tail_session_messages",
            json!({"attempt_id": w.bare_attempt}),
        )
        .await
        .err();
    assert_eq!(no_session["code"], "no_session_yet");
    assert!(
        no_session["hint"]
            .as_str()
            .unwrap()
            .contains("get_attempt_status")
    );
    assert_eq!(
        mcp.call(
            "tail_session_messages",
            json!({"attempt_id": w.ok_attempt, "session_id": w.ok_session})
        )
        .await
        .classed(),
        "invalid_argument/ambiguous_target"
    );

    // Bad input never reaches the query layer: envelope, not a protocol error.
    let bad = mcp
        .call("get_task", json!({"task_id": "not-a-uuid"}))
        .await
        .err();
    assert_eq!(bad["code"], "invalid_argument");
    assert_eq!(
        mcp.call("get_task", json!({"taskId": w.ok_task}))
            .await
            .code(),
        "invalid_argument"
    );

    // get_context is refused outside a workspace ...
    assert_eq!(
        mcp.call("get_context", json!({})).await.code(),
        "no_workspace_context"
    );
    // ... and listed and answered for a client inside one.
    let root = truth.attempts[&w.ok_attempt]["container_ref"]
        .as_str()
        .unwrap()
        .to_string();
    let inside = Mcp::connect_with(
        daemon.addr,
        HashMap::from([("x-vk-workspace".to_string(), format!("{root}/demo/src"))]),
    )
    .await;
    assert!(
        inside
            .tool_names()
            .await
            .contains(&"get_context".to_string())
    );
    let ctx = inside.call("get_context", json!({})).await.ok();
    assert_eq!(id(&ctx["attempt_id"]), w.ok_attempt);
    assert_eq!(id(&ctx["task_id"]), w.ok_task);
    assert_eq!(id(&ctx["project_id"]), w.project);
    assert_eq!(ctx["project_name"], "Demo");
    assert_eq!(ctx["task_title"], "Add a greeting file");
    let repo_names: BTreeMap<String, Value> = ctx["workspace_repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["repo_name"].as_str().unwrap().to_string(),
                r["target_branch"].clone(),
            )
        })
        .collect();
    assert_eq!(repo_names.keys().collect::<Vec<_>>(), ["demo", "docs"]);
    assert!(repo_names.values().all(|b| b == "main"));

    daemon.shutdown().await;
}

fn note(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}})
}

/// Poll the tail until `pred` holds (the cache catches up within milliseconds to seconds).
async fn tail_until(mcp: &Mcp, args: Value, pred: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        // Before ingest saw the attempt the answer is `not_found`; keep polling.
        if let support::mcp::Reply::Ok(r) = mcp.call("tail_attempt_logs", args.clone()).await
            && pred(&r)
        {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("cache never reached the expected log state for {args}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_tokens_bring_replacements_and_the_end_of_the_previous_process() {
    use vk_observer_sim::{Channel, ProcessStatus, RunReason};
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Tokens", &["demo"]);
    let task = sim.add_task(project, "Token reader", None);
    let ids = sim.create_attempt(task, "CLAUDE_CODE");
    let p1 = sim.start_process(ids.session_id, RunReason::CodingAgent);
    for i in 0..4 {
        sim.append_log(p1, Channel::Normalized, note(&format!("m{i}")));
    }
    let mcp = Mcp::connect(daemon.addr).await;
    let a = json!({"attempt_id": ids.attempt_id});
    let page1 = tail_until(&mcp, a.clone(), |r| r["latest_entry_index"] == 3).await;
    assert_eq!(id(&page1["execution_process_id"]), p1);
    let t1 = page1["token"].clone();

    // Entry 1 is rewritten in place and two more arrive.
    sim.replace_log(p1, Channel::Normalized, 1, note("m1 (edited)"));
    sim.append_log(p1, Channel::Normalized, note("m4"));
    sim.append_log(p1, Channel::Normalized, note("m5"));
    let args = json!({"attempt_id": ids.attempt_id, "after_entry_index": 3, "since_token": t1});
    let page2 = tail_until(&mcp, args.clone(), |r| {
        r["entries"].as_array().unwrap().len() == 2 && r["replaced"].as_array().unwrap().len() == 1
    })
    .await;
    assert_eq!(page2["entries"][0]["entry"], note("m4"));
    assert_eq!(page2["replaced"][0]["entry_index"], 1);
    assert_eq!(page2["replaced"][0]["entry"], note("m1 (edited)"));
    assert_eq!(page2["process_changed"], false);
    // A page's token is read before its data (ARCHITECTURE: a change landing in between is
    // reported again, never missed), so page2's token can predate m4/m5, which would then come
    // again as entries "after" it. A second read, once they are committed, gives a token past them.
    let t2 = tail_until(&mcp, args, |_| true).await["token"].clone();

    // The process writes its last entry and ends; a follow-up starts a new process.
    sim.append_log(p1, Channel::Normalized, note("m6 (last words)"));
    sim.finish_process(p1, ProcessStatus::Completed, Some(0));
    let p2 = sim.start_process(ids.session_id, RunReason::CodingAgent);
    sim.append_log(p2, Channel::Normalized, note("f0"));
    sim.append_log(p2, Channel::Normalized, note("f1"));
    let args = json!({"attempt_id": ids.attempt_id, "after_entry_index": 5, "since_token": t2});
    let page3 = tail_until(&mcp, args, |r| {
        r["execution_process_id"] == json!(p2.to_string())
            && r["entries"].as_array().unwrap().len() == 2
    })
    .await;
    assert_eq!(
        page3["process_changed"], true,
        "after_entry_index 5 belonged to the old process"
    );
    assert_eq!(page3["entries"][0]["entry"], note("f0"));
    let earlier = page3["earlier_process_entries"].as_array().unwrap();
    assert_eq!(earlier.len(), 1, "{earlier:?}");
    assert_eq!(id(&earlier[0]["execution_process_id"]), p1);
    assert_eq!(earlier[0]["entry"], note("m6 (last words)"));

    // Same token again: nothing new means an empty page, no replays.
    let t3 = page3["token"].clone();
    let quiet = mcp
        .call(
            "tail_attempt_logs",
            json!({"attempt_id": ids.attempt_id, "after_entry_index": 1, "since_token": t3}),
        )
        .await
        .ok();
    assert_eq!(quiet["entries"], json!([]));
    assert_eq!(quiet["replaced"], json!([]));
    assert_eq!(quiet["earlier_process_entries"], json!([]));
    let st = mcp
        .call("get_attempt_status", json!({"attempt_id": ids.attempt_id}))
        .await
        .ok();
    assert_eq!(st["state"], "running");
    assert_eq!(id(&st["latest_execution_process_id"]), p2);
    daemon.shutdown().await;
}
