//! One `/mcp` endpoint, both protocol eras, through rmcp's client: a 2025-11-25 client
//! (`initialize`, a session) and a 2026-07-28 client (`server/discover`, per-request metadata,
//! no session) list and call the same tools; only the 2026-07-28 client gets caching hints
//! (`ttlMs`/`cacheScope`: listings reusable for a while, resource reads of live data never).
//! A 2026-07-28 client loses an in-flight request when its stream breaks: a wait dropped
//! mid-way and re-issued with the same `since_token` misses nothing that happened meanwhile,
//! in both of its forms (attempt_ids; project_id with include_activity).

mod support;

use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{CacheScope, ProtocolVersion, ReadResourceRequestParams};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::{Value, json};
use support::mcp::Mcp;
use vk_observer_daemon::Daemon;
use vk_observer_mcp::transport::cache_hints::LISTING_TTL_MS;
use vk_observer_sim::{Channel, RunReason};

fn note(text: &str) -> Value {
    json!({"type": "NORMALIZED_ENTRY", "content": {"timestamp": null,
        "entry_type": {"type": "assistant_message"}, "content": text}})
}

async fn connect(
    daemon: &Daemon,
    lifecycle: ClientLifecycleMode,
) -> RunningService<RoleClient, ()> {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(format!(
        "http://{}/mcp",
        daemon.addr
    ));
    ().serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("MCP client connects")
}

fn legacy() -> ClientLifecycleMode {
    ClientLifecycleMode::Initialize
}

fn modern() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

fn negotiated(c: &RunningService<RoleClient, ()>) -> String {
    c.peer()
        .peer_info()
        .expect("the server answered")
        .protocol_version
        .as_str()
        .to_string()
}

/// A token after which the attempt stayed unchanged for a while.
async fn quiet_token(mcp: &Mcp, attempt: uuid::Uuid) -> Value {
    for _ in 0..50 {
        let t = mcp
            .call("get_attempt_status", json!({"attempt_ids": [attempt]}))
            .await
            .ok()["token"]
            .clone();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let r = mcp
            .call(
                "get_attempt_status",
                json!({"attempt_ids": [attempt], "since_token": t}),
            )
            .await
            .ok();
        if r["attempts"].as_array().unwrap().is_empty() {
            return t;
        }
    }
    panic!("the attempt never went quiet");
}

async fn until_running(mcp: &Mcp, attempt: uuid::Uuid) {
    for _ in 0..200 {
        if let support::mcp::Reply::Ok(r) = mcp
            .call("get_attempt_status", json!({"attempt_id": attempt}))
            .await
            && r["state"] == "running"
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the attempt never reached running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_eras_on_one_endpoint_and_cache_hints_only_for_the_new_one() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Eras", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "E", None), "CLAUDE_CODE");
    sim.start_process(a.session_id, RunReason::CodingAgent);
    let old = Mcp {
        client: connect(&daemon, legacy()).await,
    };
    let new = Mcp {
        client: connect(&daemon, modern()).await,
    };
    assert_eq!(negotiated(&old.client), "2025-11-25");
    assert_eq!(negotiated(&new.client), "2026-07-28");
    until_running(&new, a.attempt_id).await;
    assert_eq!(old.tool_names().await, new.tool_names().await);
    let status = json!({"attempt_id": a.attempt_id});
    let (o, n) = (
        old.call("get_attempt_status", status.clone()).await.ok(),
        new.call("get_attempt_status", status).await.ok(),
    );
    assert_eq!(o["attempt_id"], n["attempt_id"]);

    let uri = format!("vk-observer://attempts/{}", a.attempt_id);
    for (c, hinted) in [(&old.client, false), (&new.client, true)] {
        let era = negotiated(c);
        let tools = c.peer().list_tools(None).await.unwrap();
        let templates = c.peer().list_resource_templates(None).await.unwrap();
        let read = c
            .peer()
            .read_resource(ReadResourceRequestParams::new(uri.clone()))
            .await
            .unwrap();
        if hinted {
            // rmcp's client keeps hinted listings and serves a hit with the time it has left
            // (`tool_names` above listed the tools already).
            let left = tools.ttl_ms.expect("tools/list carries ttlMs");
            assert!(
                (LISTING_TTL_MS - 60_000..=LISTING_TTL_MS).contains(&left),
                "{era}: tools/list ttlMs {left}"
            );
            assert_eq!(tools.cache_scope, Some(CacheScope::Private), "{era}");
            assert_eq!(templates.ttl_ms, Some(LISTING_TTL_MS), "{era}");
            assert_eq!(templates.cache_scope, Some(CacheScope::Public), "{era}");
            assert_eq!(read.ttl_ms, Some(0), "{era}: live data is not cacheable");
            assert_eq!(read.cache_scope, Some(CacheScope::Private), "{era}");
        } else {
            assert_eq!((tools.ttl_ms, tools.cache_scope), (None, None), "{era}");
            assert_eq!((templates.ttl_ms, templates.cache_scope), (None, None));
            assert_eq!((read.ttl_ms, read.cache_scope), (None, None), "{era}");
        }
    }
    daemon.shutdown().await;
}

/// A wait whose stream breaks (the client's request is dropped while parked) is re-issued with
/// the same `since_token` after a change landed in between: the change is reported at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_dropped_mid_way_and_reissued_with_its_token_misses_nothing() {
    let sim = support::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = support::daemon(&sim, dir.path()).await;
    let project = sim.add_project("Reissue", &["demo"]);
    let a = sim.create_attempt(sim.add_task(project, "W", None), "CLAUDE_CODE");
    let pid = sim.start_process(a.session_id, RunReason::CodingAgent);
    let mcp = Mcp {
        client: connect(&daemon, modern()).await,
    };
    until_running(&mcp, a.attempt_id).await;
    let hub = daemon.store.hub();
    let forms = [
        json!({"attempt_ids": [a.attempt_id]}),
        json!({"project_id": project, "include_activity": true}),
    ];
    for (i, form) in forms.into_iter().enumerate() {
        let token = quiet_token(&mcp, a.attempt_id).await;
        let mut args = form.clone();
        args["since_token"] = token.clone();
        args["timeout_ms"] = json!(30000);
        // The wait parks; then its stream breaks (the client that sent it goes away).
        let dropped = {
            let c = Mcp {
                client: connect(&daemon, modern()).await,
            };
            let args = args.clone();
            tokio::spawn(async move { c.call("wait_for_attempt_change", args).await })
        };
        let start = std::time::Instant::now();
        while hub.channel_count() == 0 && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(hub.channel_count() > 0, "form {i}: the wait parked");
        dropped.abort();
        assert!(dropped.await.unwrap_err().is_cancelled());
        // What happens while nobody waits...
        let text = format!("while the stream was down {i}");
        sim.append_log(pid, Channel::Normalized, note(&text));
        let title = format!("created while the stream was down {i}");
        let task = sim.add_task(project, &title, None);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // ...is what the re-issued wait (same since_token) answers at once.
        let again = mcp.call("wait_for_attempt_change", args).await.ok();
        assert_eq!(again["changed"], true, "form {i}: {again}");
        assert!(
            again["waited_ms"].as_u64().unwrap() < 1000,
            "form {i}: answered at once: {again}"
        );
        let changed: Vec<&str> = again["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["attempt_id"].as_str())
            .collect();
        assert!(
            changed.contains(&a.attempt_id.to_string().as_str()),
            "form {i}: {again}"
        );
        assert_ne!(again["token"], token, "form {i}: a newer token");
        if i == 1 {
            let items = again["activity"]["items"].to_string();
            let task = task.to_string();
            assert!(
                items.contains(&task),
                "form {i}: the new task's activity: {again}"
            );
        }
        // The change itself is there to read from the old token on.
        let logs = mcp
            .call("tail_attempt_logs", json!({"attempt_id": a.attempt_id}))
            .await
            .ok();
        assert!(logs.to_string().contains(&text), "form {i}: {logs}");
    }
    daemon.shutdown().await;
}
