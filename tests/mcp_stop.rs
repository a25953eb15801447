//! `stop_attempt` through a real MCP client against the simulator: stopping one execution
//! process (a dev server, which the attempt stop leaves alone, and an agent), the answer's
//! `stopped` processes with their final cached status and `vk_ms`, and the target rules
//! (exactly one of attempt_id / execution_process_id; no force on a process stop).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::Mcp;
use uuid::Uuid;
use vk_observer_sim::RunReason;

fn route_calls(sim: &vk_observer_sim::Sim, route: &str) -> u64 {
    sim.counters().by_route.get(route).copied().unwrap_or(0)
}

fn stopped_ids(v: &Value) -> Vec<String> {
    v["stopped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["execution_process_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_by_attempt_spares_the_dev_server_and_stop_by_process_stops_it() {
    let sim = support::sim().await;
    let project = sim.add_project("Stops", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let a = sim.create_attempt(
        sim.add_task(project, "Agent and server", None),
        "CLAUDE_CODE",
    );
    let dev = sim.start_process(a.session_id, RunReason::DevServer);
    let agent = sim.start_process(a.session_id, RunReason::CodingAgent);
    let b = sim.create_attempt(sim.add_task(project, "Agent only", None), "CLAUDE_CODE");
    let lone = sim.start_process(b.session_id, RunReason::CodingAgent);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "stop world").await;
    let mcp = Mcp::connect(daemon.addr).await;

    // The attempt stop: the agent ends, the dev server keeps running (as in VK).
    let st = mcp
        .call("stop_attempt", json!({"attempt_id": a.attempt_id}))
        .await
        .ok();
    assert_eq!(st["was_running"], true);
    assert_eq!(stopped_ids(&st), vec![agent.to_string()], "{st}");
    assert_eq!(st["stopped"][0]["run_reason"], "codingagent");
    assert_eq!(st["stopped"][0]["status"], "killed");
    assert!(st["vk_ms"].is_u64(), "{st}");
    assert_eq!(st["execution_process_id"], Value::Null);
    assert_eq!(st["status"]["dev_server_running"], true);
    assert_eq!(sim.truth().processes[&dev]["status"], "running");

    // The process stop reaches the dev server.
    let before = route_calls(&sim, "POST /api/execution-processes/{id}/stop");
    let st = mcp
        .call("stop_attempt", json!({"execution_process_id": dev}))
        .await
        .ok();
    assert_eq!(st["attempt_id"], json!(a.attempt_id.to_string()));
    assert_eq!(st["execution_process_id"], json!(dev.to_string()));
    assert_eq!(stopped_ids(&st), vec![dev.to_string()]);
    assert_eq!(st["stopped"][0]["run_reason"], "devserver");
    assert_eq!(st["stopped"][0]["status"], "killed");
    assert_eq!(st["stopped"][0]["exit_code"], Value::Null);
    assert_eq!(st["pending_ingest"], false);
    assert_eq!(st["status"]["dev_server_running"], false);
    assert_eq!(sim.truth().processes[&dev]["status"], "killed");
    assert_eq!(
        route_calls(&sim, "POST /api/execution-processes/{id}/stop"),
        before + 1
    );

    // An agent by process id, with a request_id: the attempt is no longer running.
    let keyed = json!({"execution_process_id": lone, "request_id": "stop-lone-1"});
    let st = mcp.call("stop_attempt", keyed.clone()).await.ok();
    assert_eq!(stopped_ids(&st), vec![lone.to_string()]);
    assert_eq!(st["stopped"][0]["run_reason"], "codingagent");
    assert_eq!(st["status"]["state"], "failed");
    assert_eq!(st["status"]["result"]["outcome"], "cancelled");
    assert_eq!(st["status"]["result"]["state"], "killed");
    assert_eq!(st["status"]["result"]["last_error_code"], "stopped");
    assert_eq!(st["replayed"], false);
    // Its replay answers the same stop (what was stopped, how long VK took) without VK.
    let calls = route_calls(&sim, "POST /api/execution-processes/{id}/stop");
    let replay = mcp.call("stop_attempt", keyed).await.ok();
    assert_eq!(replay["replayed"], true);
    assert_eq!(stopped_ids(&replay), vec![lone.to_string()]);
    assert_eq!(replay["vk_ms"], st["vk_ms"]);
    assert_eq!(replay["was_running"], true);
    assert_eq!(
        route_calls(&sim, "POST /api/execution-processes/{id}/stop"),
        calls
    );
    let conflict = mcp
        .call(
            "stop_attempt",
            json!({"attempt_id": a.attempt_id, "request_id": "stop-lone-1"}),
        )
        .await
        .err();
    assert_eq!(conflict["code"], "idempotency_conflict");

    // Stopping it again: nothing running, VK not called.
    let calls = route_calls(&sim, "POST /api/execution-processes/{id}/stop");
    let again = mcp
        .call("stop_attempt", json!({"execution_process_id": lone}))
        .await
        .ok();
    assert_eq!(again["was_running"], false);
    assert_eq!(again["stopped"], json!([]));
    assert_eq!(again["vk_ms"], Value::Null);
    assert_eq!(
        route_calls(&sim, "POST /api/execution-processes/{id}/stop"),
        calls
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_targets_are_exactly_one_and_force_is_for_attempts_only() {
    let sim = support::sim().await;
    let project = sim.add_project("Targets", &["demo"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let a = sim.create_attempt(sim.add_task(project, "Busy", None), "CLAUDE_CODE");
    let pid = sim.start_process(a.session_id, RunReason::CodingAgent);
    support::converge(&daemon.store, &sim, Duration::from_secs(20), "targets").await;
    let mcp = Mcp::connect(daemon.addr).await;
    let token = daemon.store.current_token();

    let both = mcp
        .call(
            "stop_attempt",
            json!({"attempt_id": a.attempt_id, "execution_process_id": pid}),
        )
        .await
        .err();
    assert_eq!(both["code"], "invalid_argument");
    assert_eq!(both["details"]["reason"], "ambiguous_target");
    assert_eq!(
        both["details"]["fields"],
        json!(["attempt_id", "execution_process_id"])
    );
    let neither = mcp.call("stop_attempt", json!({"force": true})).await.err();
    assert_eq!(neither["code"], "invalid_argument");
    assert_eq!(neither["details"]["reason"], "ambiguous_target");
    let forced = mcp
        .call(
            "stop_attempt",
            json!({"execution_process_id": pid, "force": true}),
        )
        .await
        .err();
    assert_eq!(forced["code"], "invalid_argument");
    assert_eq!(forced["details"]["field"], "force");
    let ghost = mcp
        .call(
            "stop_attempt",
            json!({"execution_process_id": Uuid::new_v4()}),
        )
        .await
        .err();
    assert_eq!(ghost["code"], "not_found");
    assert_eq!(ghost["details"]["kind"], "execution_process");
    assert_eq!(sim.counters().stops, 0, "no refused call reached VK");
    assert_eq!(daemon.store.current_token(), token);
    assert_eq!(sim.truth().processes[&pid]["status"], "running");

    // force on an attempt stop goes to VK's force path.
    let st = mcp
        .call(
            "stop_attempt",
            json!({"attempt_id": a.attempt_id, "force": true}),
        )
        .await
        .ok();
    assert_eq!(stopped_ids(&st), vec![pid.to_string()]);
    assert_eq!(sim.counters().stops, 1);
    daemon.shutdown().await;
}
