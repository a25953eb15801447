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

    across_restarts(&sim, daemon, dir.path(), project).await;
}

/// A daemon restart, then a VK restart: nothing twice, nothing lost.
async fn across_restarts(
    sim: &vk_observer_sim::Sim,
    daemon: vk_observer_daemon::Daemon,
    dir: &std::path::Path,
    project: uuid::Uuid,
) {
    daemon.shutdown().await;
    let daemon = support::daemon_reopen(sim, dir).await;
    workspaces::converge(
        &daemon.store,
        sim,
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
        sim,
        Duration::from_secs(30),
        "after a VK restart",
    )
    .await;
    daemon.shutdown().await;
}

/// Wire fact 1 of the 0.1.44 recording: VK's process deltas can be stale (the update hook read
/// the row before the write committed), so a session stream may never show a process ended.
/// The daemon reads each process that still says it runs from REST once VK's workspace flag
/// says nothing runs, and converges to the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_running_deltas_are_corrected_from_vk_rest() {
    deltas_vk_got_wrong(vk_observer_sim::Faults {
        stale_process_deltas: true,
        ..vk_observer_sim::Faults::default()
    })
    .await;
}

/// The other half of wire fact 1: a process of which the session stream sends nothing (its
/// `add` lost). Once VK's flag says nothing runs, each session is read from a fresh snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_whose_deltas_were_lost_come_with_a_fresh_snapshot() {
    deltas_vk_got_wrong(vk_observer_sim::Faults {
        lost_process_deltas: true,
        ..vk_observer_sim::Faults::default()
    })
    .await;
}

async fn deltas_vk_got_wrong(faults: vk_observer_sim::Faults) {
    let sim = workspaces::sim().await;
    sim.set_faults(faults);
    let project = sim.add_project("Stale", &["alpha"]);
    let dir = tempfile::tempdir().unwrap();
    let daemon = workspaces::daemon(&sim, dir.path()).await;
    let mut ended = Vec::new();
    for (i, agent) in [AgentOutcome::Succeed, AgentOutcome::Fail]
        .into_iter()
        .enumerate()
    {
        let task = sim.add_task(project, &format!("stale {i}"), None);
        let script = AttemptScript {
            agent,
            ..AttemptScript::default()
        };
        ended.push(sim.run_attempt_script(task, script).await.attempt_id);
    }
    workspaces::converge(&daemon.store, &sim, Duration::from_secs(30), "stale deltas").await;
    let r = daemon.store.read();
    for a in ended {
        let task = r.task(a).unwrap().expect("its task");
        assert_eq!(task.value["status"], "inreview", "{}", task.value);
    }
    daemon.shutdown().await;
}
