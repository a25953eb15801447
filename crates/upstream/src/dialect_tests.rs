//! The dialect's witnesses read from recorded answers of both VKs (`tests/fixtures/vk-wire/`:
//! the fork; `tests/fixtures/vk-wire-bloop/`: BloopAI VK v0.1.44).

use serde_json::Value;

use super::*;

const FORK_INFO: &str = include_str!("../../../tests/fixtures/vk-wire/samples/rest_info.json");
const BLOOP_INFO: &str =
    include_str!("../../../tests/fixtures/vk-wire-bloop/samples/rest-info.json");
const BLOOP_TASKS: &str =
    include_str!("../../../tests/fixtures/vk-wire-bloop/samples/rest-err-legacy-tasks.json");

/// A recorded exchange's response body as VK sent it (JSON re-serialized, or the text).
fn body_of(recording: &str) -> String {
    let r: Value = serde_json::from_str(recording).unwrap();
    match r.get("response_text") {
        Some(Value::String(t)) => t.clone(),
        _ => r["response"].to_string(),
    }
}

fn content_type_of(recording: &str) -> String {
    let r: Value = serde_json::from_str(recording).unwrap();
    r["content_type"]
        .as_str()
        .unwrap_or("application/json")
        .to_string()
}

#[test]
fn the_recorded_fork_is_the_fork_and_the_recorded_0_1_44_is_workspace_first() {
    let (info, version) = read_info(200, "application/json", &body_of(FORK_INFO));
    let tasks = read_tasks(400, "text/plain; charset=utf-8");
    let fork = decide(info, tasks, version, Some(PortFileShape::Bare));
    assert_eq!(fork.dialect, Some(Dialect::Fork), "{}", fork.evidence);
    assert_eq!(fork.version, None);

    let (info, version) = read_info(200, &content_type_of(BLOOP_INFO), &body_of(BLOOP_INFO));
    let tasks = read_tasks(200, &content_type_of(BLOOP_TASKS));
    let bloop = decide(info, tasks, version, Some(PortFileShape::Json));
    assert_eq!(
        bloop.dialect,
        Some(Dialect::Workspaces),
        "{}",
        bloop.evidence
    );
    assert_eq!(bloop.version.as_deref(), Some("0.1.44"));
    assert!(
        bloop.evidence.contains("names version 0.1.44"),
        "{}",
        bloop.evidence
    );
    assert!(!bloop.evidence.contains("contradict"), "{}", bloop.evidence);
}

#[test]
fn probes_that_disagree_or_a_server_that_is_no_vk_name_neither() {
    // 0.1.x's info beside a route of the fork's: a mixed server is named, not guessed.
    let (info, version) = read_info(200, "application/json", &body_of(BLOOP_INFO));
    let mixed = decide(info, read_tasks(200, "application/json"), version, None);
    assert_eq!(mixed.dialect, None);
    assert!(
        mixed.evidence.contains("/api/tasks is a route of its own"),
        "{}",
        mixed.evidence
    );

    // Something else on the port: a web page for everything.
    let (info, version) = read_info(200, "text/html", "<html>vk</html>\n");
    let page = decide(info, read_tasks(200, "text/html"), version, None);
    assert_eq!(page.dialect, None);
    assert!(
        page.evidence.starts_with("/api/info answers a web page"),
        "{}",
        page.evidence
    );

    // JSON that is not VK's envelope, and a 404 page.
    let (info, _) = read_info(200, "application/json", "{\"hello\": 1}");
    assert!(matches!(info, Witness::Neither(_)));
    assert!(matches!(read_tasks(404, "text/html"), Witness::Neither(_)));
    assert!(matches!(
        read_tasks(200, "application/octet-stream"),
        Witness::Neither(_)
    ));
}

#[test]
fn a_port_file_that_contradicts_the_answers_is_reported_not_obeyed() {
    let (info, version) = read_info(200, "application/json", &body_of(FORK_INFO));
    let d = decide(
        info,
        read_tasks(400, "text/plain"),
        version,
        Some(PortFileShape::Json),
    );
    assert_eq!(d.dialect, Some(Dialect::Fork));
    assert!(
        d.evidence
            .ends_with("JSON with main_port (which the answers contradict)"),
        "{}",
        d.evidence
    );
}
