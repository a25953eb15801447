//! End to end on VK 0.1.x's dialect: the daemon against the simulator's second dialect on real
//! sockets finds the dialect itself and mirrors every workspace as a task with its attempt,
//! sessions, processes and logs; across a daemon restart and a VK restart nothing is served
//! twice or lost.

mod support;

use std::time::Duration;

use support::workspaces;
use vk_observer_sim::{AgentOutcome, AttemptScript};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspaces_are_mirrored_as_tasks_with_their_logs() {
    let sim = workspaces::sim().await;
    let project = sim.add_project("Demo", &["alpha", "beta"]);
    let dir = tempfile::tempdir().unwrap();
    // One attempt ends before the daemon starts: its logs are read as replays.
    let early = sim.add_task(project, "Before the daemon", Some("first"));
    sim.run_attempt_script(
        early,
        AttemptScript {
            normalized_entries: 12,
            raw_entries: 8,
            ..AttemptScript::default()
        },
    )
    .await;
    let daemon = workspaces::daemon(&sim, dir.path()).await;
    let t1 = sim.add_task(project, "Add a greeting file", Some("Please write it."));
    let ok = sim
        .run_attempt_script(
            t1,
            AttemptScript {
                normalized_entries: 30,
                raw_entries: 20,
                replacements: 4,
                ..AttemptScript::default()
            },
        )
        .await;
    let t2 = sim.add_task(project, "Task that should FAIL", None);
    sim.run_attempt_script(
        t2,
        AttemptScript {
            agent: AgentOutcome::Fail,
            ..AttemptScript::default()
        },
    )
    .await;
    sim.follow_up_script(
        ok.session_id,
        "now a second line",
        AttemptScript {
            normalized_entries: 6,
            ..AttemptScript::default()
        },
    )
    .await;
    workspaces::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "after scripted attempts",
    )
    .await;
    assert_eq!(daemon.health.dialect().dialect, "workspaces");
    assert!(daemon.health.bootstrapped());
    let r = daemon.store.read();
    let projects = r.projects().unwrap();
    assert_eq!(
        projects.len(),
        3,
        "alpha alone, beta alone, alpha + beta: {projects:?}"
    );
    let task = r
        .task(ok.attempt_id)
        .unwrap()
        .expect("the workspace's task");
    assert_eq!(task.value["status"], "inreview", "its agent ran and ended");
    let description = task.value["description"].as_str().unwrap_or_default();
    assert!(
        description.ends_with("Please write it."),
        "its first prompt: {description}"
    );
    drop(r);

    // A daemon restart, then a VK restart: nothing twice, nothing lost.
    daemon.shutdown().await;
    let daemon = support::daemon_reopen(&sim, dir.path()).await;
    workspaces::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "after a daemon restart",
    )
    .await;
    sim.restart();
    let t3 = sim.add_task(project, "After the VK restart", Some("third"));
    sim.run_attempt_script(
        t3,
        AttemptScript {
            normalized_entries: 5,
            ..AttemptScript::default()
        },
    )
    .await;
    workspaces::converge(
        &daemon.store,
        &sim,
        Duration::from_secs(30),
        "after a VK restart",
    )
    .await;
    daemon.shutdown().await;
}
