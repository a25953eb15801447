//! Walking the daemon's catalog (projects → tasks → latest attempts) and turning what a person
//! typed (a full attempt id, or the 8-character prefix the status table shows) into an id.

use serde_json::{Value, json};
use uuid::Uuid;

use super::client::DaemonClient;
use vk_observer_mcp::tools::{discovery, tasks};

/// A task with an attempt, as the status table lists it.
#[derive(Debug, Clone)]
pub(crate) struct TaskRow {
    pub project_id: String,
    pub project: String,
    pub task_id: String,
    pub title: String,
    /// The task's latest attempt.
    pub attempt_id: Uuid,
}

/// Projects (all, or the one asked for) as (id, name).
pub(crate) async fn projects(
    client: &DaemonClient,
    only: Option<Uuid>,
) -> anyhow::Result<Vec<(String, String)>> {
    let list = all_pages(client, discovery::LIST_PROJECTS, json!({}), "projects").await?;
    let mut out: Vec<(String, String)> = list
        .iter()
        .filter_map(|p| {
            Some((
                p["project_id"].as_str()?.to_string(),
                p["project_name"].as_str().unwrap_or_default().to_string(),
            ))
        })
        .collect();
    if let Some(p) = only {
        let id = p.to_string();
        out.retain(|(pid, _)| *pid == id);
        if out.is_empty() {
            anyhow::bail!("project {p} is not known to the daemon (see `vk-observer status`)");
        }
    }
    Ok(out)
}

/// Every task of the project (all pages), as `list_tasks` returns them.
pub(crate) async fn tasks_of(
    client: &DaemonClient,
    project_id: &str,
) -> anyhow::Result<Vec<Value>> {
    let args = json!({"project_id": project_id});
    all_pages(client, tasks::LIST_TASKS, args, "tasks").await
}

/// Every item of a paged list tool (`cursor` / `next_cursor`, largest pages), in its order.
async fn all_pages(
    client: &DaemonClient,
    tool: &str,
    mut args: Value,
    items: &str,
) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    args["limit"] = json!(200);
    loop {
        let page = client.call_retrying(tool, args.clone()).await?;
        if let Some(t) = page[items].as_array() {
            out.extend(t.iter().cloned());
        }
        match page["next_cursor"].as_str() {
            Some(c) if !c.is_empty() => args["cursor"] = json!(c),
            _ => return Ok(out),
        }
    }
}

/// Tasks that have an attempt, across the projects, with their latest attempt.
pub(crate) async fn task_rows(
    client: &DaemonClient,
    only: Option<Uuid>,
) -> anyhow::Result<Vec<TaskRow>> {
    let mut rows = Vec::new();
    for (project_id, project) in projects(client, only).await? {
        for t in tasks_of(client, &project_id).await? {
            let Some(attempt_id) = t["latest_attempt_id"]
                .as_str()
                .and_then(|a| a.parse::<Uuid>().ok())
            else {
                continue;
            };
            rows.push(TaskRow {
                project_id: project_id.clone(),
                project: project.clone(),
                task_id: t["task_id"].as_str().unwrap_or_default().to_string(),
                title: t["title"].as_str().unwrap_or_default().to_string(),
                attempt_id,
            });
        }
    }
    Ok(rows)
}

/// A full attempt id, or a unique prefix of one (at least 4 hex digits) among the tasks'
/// latest attempts, then among all their attempts.
pub(crate) async fn attempt_id(client: &DaemonClient, given: &str) -> anyhow::Result<Uuid> {
    let given = given.trim();
    if let Ok(id) = given.parse::<Uuid>() {
        return Ok(id);
    }
    let prefix = given.to_ascii_lowercase();
    if prefix.len() < 4 || !prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        anyhow::bail!(
            "{given:?} is not an attempt id: give the full UUID or at least its first 4 characters"
        );
    }
    let rows = task_rows(client, None).await?;
    let mut found: Vec<Uuid> = rows
        .iter()
        .map(|r| r.attempt_id)
        .filter(|a| a.to_string().starts_with(&prefix))
        .collect();
    if found.is_empty() {
        // Older attempts of the tasks: one listing per task.
        for (project_id, _) in projects(client, None).await? {
            for t in tasks_of(client, &project_id).await? {
                let Some(task) = t["task_id"].as_str() else {
                    continue;
                };
                let args = json!({"task_id": task});
                for a in all_pages(client, tasks::LIST_TASK_ATTEMPTS, args, "attempts").await? {
                    if let Some(id) = a["attempt_id"]
                        .as_str()
                        .and_then(|s| s.parse::<Uuid>().ok())
                        .filter(|id| id.to_string().starts_with(&prefix))
                    {
                        found.push(id);
                    }
                }
            }
        }
    }
    found.sort();
    found.dedup();
    match found.as_slice() {
        [one] => Ok(*one),
        [] => anyhow::bail!("no attempt id starts with {given:?}"),
        many => anyhow::bail!(
            "{given:?} matches {} attempts ({}); give more characters",
            many.len(),
            many.iter()
                .map(Uuid::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
