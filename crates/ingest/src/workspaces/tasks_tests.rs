//! The tasks of a VK 0.1.x board: own tasks, daemon-kept ones, links and their status.

use super::*;
use crate::workspaces::space::Details;

fn at(n: u32) -> String {
    format!("2026-11-28T10:{n:02}:00Z")
}

fn space(id: u128, created: u32, running: bool) -> (Uuid, Space) {
    let id = Uuid::from_u128(id);
    let mut s = Space::new(
        json!({"id": id, "name": format!("w{id}"), "is_running": running,
        "created_at": at(created), "updated_at": at(created)}),
    );
    s.details = Some(Details {
        repos: vec![json!({"id": Uuid::from_u128(100), "name": "alpha"})],
        sessions: vec![],
    });
    (id, s)
}

#[test]
fn a_workspace_stands_as_its_own_task_until_one_links_it() {
    let (a, sa) = space(1, 1, false);
    let (b, sb) = space(2, 2, true);
    let spaces: HashMap<Uuid, Space> = [(a, sa), (b, sb)].into();
    let mut links = Links::default();
    let views = task_views(&spaces, &links);
    assert_eq!(views.len(), 2);
    assert_eq!(views[&a].attempts, vec![a]);

    links.link(a, b);
    let views = task_views(&spaces, &links);
    assert_eq!(views.len(), 1, "b is an attempt of a's task now");
    assert_eq!(views[&a].attempts, vec![a, b]);
    assert_eq!(views[&a].json["status"], "inprogress", "b runs");
    assert_eq!(views[&a].json["updated_at"], at(2));
}

#[test]
fn a_daemon_kept_task_has_the_workspaces_linked_to_it() {
    let (a, sa) = space(1, 5, false);
    let spaces: HashMap<Uuid, Space> = [(a, sa)].into();
    let kept = Uuid::from_u128(9);
    let mut links = Links::default();
    links.kept.insert(
        kept,
        json!({"id": kept, "project_id": Uuid::from_u128(7),
        "title": "t", "status": "todo", "daemon_kept": true, "updated_at": at(0)}),
    );
    let views = task_views(&spaces, &links);
    assert_eq!(views[&kept].attempts, Vec::<Uuid>::new());
    assert_eq!(views[&kept].json["status"], "todo");

    links.link(kept, a);
    assert_eq!(links.kept[&kept]["linked_workspaces"], json!([a]));
    links.link(kept, a);
    assert_eq!(
        links.kept[&kept]["linked_workspaces"],
        json!([a]),
        "linked once"
    );
    let views = task_views(&spaces, &links);
    assert_eq!(views.len(), 1);
    assert_eq!(views[&kept].attempts, vec![a]);
    assert_eq!(views[&kept].json["status"], "todo", "nothing ran in a yet");
    assert_eq!(views[&kept].json["updated_at"], at(5));
}

#[test]
fn a_workspace_whose_task_is_gone_stands_alone_again() {
    let (a, sa) = space(1, 1, false);
    let spaces: HashMap<Uuid, Space> = [(a, sa)].into();
    let mut links = Links::default();
    links.link(Uuid::from_u128(42), a);
    let views = task_views(&spaces, &links);
    assert_eq!(views.keys().copied().collect::<Vec<_>>(), vec![a]);
}
