//! The simulator's sequencing against the recordings: SSE ids and the recorded pattern of one
//! attempt, WS seqs equal to the SSE ids of the same change, resume (after_seq, Last-Event-ID,
//! past the watermark), restart, and log WS replay, history paging and its cap behave as
//! recorded from a real VK. Shapes of every response and frame are in `sim_wire.rs`.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::sim_common::*;
use uuid::Uuid;
use vk_observer_sim::{AttemptScript, Channel, ProcessStatus, RunReason, Sim, SimConfig};

fn sse_kind(d: &Value) -> char {
    if d["hasExecutionProcess"] == true {
        'P'
    } else {
        'T'
    }
}

#[tokio::test]
async fn sequencing_resume_and_restart() {
    let sim = start().await;
    let (p, repo) = project_with_repo(&sim).await;
    let mut live = sse(&sim, "", None).await;
    let mut tasks_ws = ws(&sim, &format!("/api/tasks/stream/ws?project_id={p}")).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (task, attempt) = create_task_and_attempt(&sim, p, &repo, "Add a greeting file").await;
    let aid = attempt["data"]["id"].as_str().unwrap_or("").to_string();
    let tid = task["data"]["id"].as_str().unwrap_or("").to_string();
    let mut procs = ws(
        &sim,
        &format!("/api/execution-processes/stream/ws?workspace_id={aid}"),
    )
    .await;
    wait_attempt_done(&sim, &aid).await;
    let evs = drain(&mut live, 300).await;
    let ids: Vec<u64> = evs
        .iter()
        .map(|e| e.id.as_deref().and_then(|i| i.parse().ok()).unwrap_or(0))
        .collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "ids 1, 2, 3 …"
    );
    let datas: Vec<Value> = evs
        .iter()
        .map(|e| serde_json::from_str(e.data.as_deref().unwrap_or("")).unwrap_or_default())
        .collect();
    let pattern: String = datas.iter().map(sse_kind).collect();
    // The recorded attempt A (sse_live.txt ids 1–17): task, 3 attempt hints, (process, task) × 6, task.
    assert_eq!(pattern, "TTTTPTPTPTPTPTPTT");
    assert!(
        datas
            .iter()
            .filter(|d| sse_kind(d) == 'T')
            .all(|d| d["taskIds"] == json!([tid]))
    );

    let task_frames = text_json(&drain(&mut tasks_ws, 200).await);
    assert_eq!(task_frames[0]["seq"], 0);
    assert!(task_frames[0].get("invalidate").is_none());
    let ws_seqs: Vec<u64> = task_frames[1..]
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .collect();
    let t_ids: Vec<u64> = ids
        .iter()
        .zip(&datas)
        .filter(|(_, d)| sse_kind(d) == 'T')
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(ws_seqs, t_ids, "tasks WS seq = SSE id of the same change");
    assert_eq!(task_frames[1]["JsonPatch"][0]["op"], "add");
    for f in &task_frames[1..] {
        assert_eq!(f["invalidate"]["taskIds"], json!([tid]));
    }
    let proc_frames = text_json(&drain(&mut procs, 200).await);
    let p_ids: Vec<u64> = ids
        .iter()
        .zip(&datas)
        .filter(|(_, d)| sse_kind(d) == 'P')
        .map(|(i, _)| *i)
        .collect();
    for f in &proc_frames[1..] {
        assert!(p_ids.contains(&f["seq"].as_u64().unwrap_or(0)));
        assert_eq!(f["invalidate"]["hasExecutionProcess"], true);
    }
    let last = *ids.last().unwrap_or(&0);

    // Resume: after_seq, Last-Event-ID, after_seq=0, past watermark, no param.
    let mut r = sse(&sim, "?after_seq=5", None).await;
    let replay = drain(&mut r, 200).await;
    assert_eq!(
        replay
            .iter()
            .map(|e| (e.id.clone(), e.data.clone()))
            .collect::<Vec<_>>(),
        evs[5..]
            .iter()
            .map(|e| (e.id.clone(), e.data.clone()))
            .collect::<Vec<_>>()
    );
    let mut r = sse(&sim, "", Some(last - 1)).await;
    assert_eq!(drain(&mut r, 200).await.len(), 1);
    let mut r = sse(&sim, "?after_seq=0", None).await;
    assert_eq!(drain(&mut r, 200).await.len(), ids.len());
    let mut r = sse(&sim, "?after_seq=1045", None).await;
    let ev = next(&mut r, 1000).await.expect("invalidate_all");
    assert_eq!(ev.event.as_deref(), Some("invalidate_all"));
    assert_eq!(ev.id, Some(last.to_string()));
    let d: Value = serde_json::from_str(ev.data.as_deref().unwrap_or("")).unwrap_or_default();
    assert_eq!(
        d,
        json!({"reason": "resume_unavailable", "requested_after_seq": 1045, "min_seq": 1, "watermark": last, "evicted": false})
    );
    let mut quiet = sse(&sim, "", None).await;
    let mut resumed_ws = ws(
        &sim,
        &format!("/api/tasks/stream/ws?project_id={p}&after_seq={}", last - 2),
    )
    .await;
    let mut beyond = ws(
        &sim,
        &format!("/api/tasks/stream/ws?project_id={p}&after_seq=1045"),
    )
    .await;
    let resumed: Vec<u64> = text_json(&drain(&mut resumed_ws, 200).await)
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .collect();
    assert_eq!(
        resumed,
        t_ids
            .iter()
            .copied()
            .filter(|s| *s > last - 2)
            .collect::<Vec<_>>(),
        "no snapshot"
    );
    assert!(
        drain(&mut beyond, 200).await.is_empty(),
        "past watermark: no frame at all"
    );
    assert!(next(&mut quiet, 200).await.is_none(), "no param: no replay");
    sim.update_task(
        Uuid::parse_str(&tid).unwrap_or_default(),
        Some("Renamed"),
        None,
        None,
    );
    assert_eq!(
        next(&mut quiet, 1000).await.and_then(|e| e.id),
        Some((last + 1).to_string())
    );

    // Restart: ids restart, watermark 0, loaded_at changes.
    let before = get(&sim, "/api/config/status").await["data"]["loaded_at_unix_ms"].clone();
    tokio::time::sleep(Duration::from_millis(5)).await;
    sim.restart();
    assert!(
        drain(&mut quiet, 200).await.is_empty(),
        "dropped by the restart"
    );
    let mut r = sse(&sim, "?after_seq=44", None).await;
    let ev = next(&mut r, 1000).await.expect("invalidate_all");
    assert_eq!(
        (ev.event.as_deref(), ev.id.as_deref()),
        (Some("invalidate_all"), Some("0"))
    );
    let d: Value = serde_json::from_str(ev.data.as_deref().unwrap_or("")).unwrap_or_default();
    assert_eq!(
        (d["min_seq"].clone(), d["watermark"].clone()),
        (Value::Null, json!(0))
    );
    let after = get(&sim, "/api/config/status").await["data"]["loaded_at_unix_ms"].clone();
    assert_ne!(before, after);
    let mut fresh = sse(&sim, "", None).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    sim.add_task(p, "after restart", None);
    assert_eq!(
        next(&mut fresh, 1000).await.and_then(|e| e.id),
        Some("1".to_string())
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn log_ws_history_paging_and_cap() {
    let sim = Sim::start(SimConfig {
        step_delay: Duration::from_millis(5),
        history_max_entries: 4,
        ..SimConfig::default()
    })
    .await
    .expect("sim");
    let p = sim.add_project("Demo", &["demo"]);
    let t = sim.add_task(p, "Paging", None);
    let ids = sim.create_attempt(t, "CLAUDE_CODE");
    let pid = sim.start_process(ids.session_id, RunReason::CodingAgent);
    let mut live = ws(
        &sim,
        &format!("/api/execution-processes/{pid}/normalized-logs/v2/ws"),
    )
    .await;
    for i in 0..7 {
        let e = json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null, "entry_type": {"type": "system_message"}, "content": format!("e{i}")}});
        assert_eq!(sim.append_log(pid, Channel::Normalized, e), i);
    }
    sim.replace_log(pid, Channel::Normalized, 5, json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null, "entry_type": {"type": "system_message"}, "content": "e5'"}}));
    sim.finish_process(pid, ProcessStatus::Completed, Some(0));
    let items = drain(&mut live, 300).await;
    assert!(matches!(items.last(), Some(WsItem::Closed(None))));
    let mut rebuilt: BTreeMap<u64, Value> = BTreeMap::new();
    for f in text_json(&items) {
        if let Some(i) = f["entry_index"].as_u64() {
            rebuilt.insert(i, f["entry"].clone());
        }
    }
    let truth = sim.truth().normalized_logs[&pid].clone();
    assert_eq!(rebuilt.values().cloned().collect::<Vec<_>>(), truth);
    // History keeps the last 4 (cap): pages of 2 walk 5..6 then 3..4, truncated.
    let a = get(
        &sim,
        &format!("/api/execution-processes/{pid}/normalized-logs/v2?limit=2"),
    )
    .await["data"]
        .clone();
    assert_eq!(
        (
            a["next_cursor"].clone(),
            a["has_more"].clone(),
            a["history_truncated"].clone()
        ),
        (json!(5), json!(true), json!(true))
    );
    assert_eq!(a["entries"][0]["entry"], truth[5]);
    let b = get(
        &sim,
        &format!("/api/execution-processes/{pid}/normalized-logs/v2?limit=2&cursor=5"),
    )
    .await["data"]
        .clone();
    assert_eq!(
        (b["next_cursor"].clone(), b["has_more"].clone()),
        (json!(3), json!(false))
    );
    let mut gone = ws(
        &sim,
        &format!("/api/execution-processes/{pid}/raw-logs/v2/ws"),
    )
    .await;
    assert!(matches!(
        next(&mut gone, 1000).await,
        Some(WsItem::Closed(Some(4404)))
    ));
    let script = AttemptScript {
        normalized_entries: 3,
        raw_entries: 2,
        ..AttemptScript::default()
    };
    let ids2 = sim.run_attempt_script(t, script.clone()).await;
    let fu = sim.follow_up_script(ids2.session_id, "again", script).await;
    assert_eq!(
        sim.truth().processes[&fu]["executor_action"]["typ"]["type"],
        "CodingAgentFollowUpRequest"
    );
    sim.shutdown().await;
}
