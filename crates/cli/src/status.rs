//! `vk-observer status [ATTEMPT]`: without an id, a table of the tasks' latest attempts across
//! projects (one batched `get_attempt_status` per 100 attempts) with a freshness footer (and,
//! on a fleet node, one line per host with its state and lag); with
//! an id, that attempt's status and its last log lines.

use std::collections::HashMap;

use chrono::Utc;
use serde_json::{Value, json};
use uuid::Uuid;

use super::client::{CallError, DaemonClient};
use super::render::{
    entry_line, freshness_line, host_lines, relative, short_id, table, term_width, truncate,
};
use super::resolve;
use vk_observer_mcp::tools::{discovery, observe, tasks};

/// Attempt ids per `get_attempt_status` call (the tool's maximum).
const BATCH: usize = 100;
/// Log lines shown with one attempt.
const LOG_LINES: u32 = 10;

pub struct StatusOptions {
    pub daemon: String,
    pub token: Option<String>,
    pub attempt: Option<String>,
    pub project: Option<Uuid>,
    pub json: bool,
}

/// Print the status; the process exit code.
pub async fn run(opts: StatusOptions) -> anyhow::Result<i32> {
    let client = DaemonClient::connect(&opts.daemon, opts.token.as_deref()).await?;
    let r = match &opts.attempt {
        Some(a) => one(&client, a, opts.json).await,
        None => all(&client, opts.project, opts.json).await,
    };
    client.close().await;
    r.map(|()| 0)
}

/// What the batched `get_attempt_status` calls answered for the table's attempts.
struct Statuses {
    by_id: HashMap<String, Value>,
    not_found: Vec<Value>,
    token: Option<String>,
    freshness: Value,
}

async fn all(client: &DaemonClient, project: Option<Uuid>, as_json: bool) -> anyhow::Result<()> {
    let rows = resolve::task_rows(client, project).await?;
    let st = fetch_statuses(client, &rows).await?;
    let mut listed: Vec<(&resolve::TaskRow, &Value)> = rows
        .iter()
        .filter_map(|r| Some((r, st.by_id.get(&r.attempt_id.to_string())?)))
        .collect();
    // Most recent activity first; attempts without any at the end.
    listed.sort_by(|(_, a), (_, b)| {
        let key = |v: &Value| v["last_activity_at"].as_str().map(str::to_string);
        key(b).cmp(&key(a))
    });
    if as_json {
        return print_all_json(&listed, &st);
    }
    print_table(&listed);
    if !st.not_found.is_empty() {
        outln!(
            "({} attempts listed by their tasks are not cached yet)",
            st.not_found.len()
        );
    }
    outln!("{}", freshness_line(&st.freshness, st.token.as_deref()));
    for line in host_lines(&st.freshness) {
        outln!("{line}");
    }
    Ok(())
}

/// Statuses of every row's attempt, `BATCH` per call.
async fn fetch_statuses(
    client: &DaemonClient,
    rows: &[resolve::TaskRow],
) -> anyhow::Result<Statuses> {
    let mut by_id: HashMap<String, Value> = HashMap::new();
    let mut not_found: Vec<Value> = Vec::new();
    let mut last_page: Option<Value> = None;
    let ids: Vec<String> = rows.iter().map(|r| r.attempt_id.to_string()).collect();
    for chunk in ids.chunks(BATCH) {
        let page = client
            .call_retrying(observe::GET_ATTEMPT_STATUS, json!({ "attempt_ids": chunk }))
            .await?;
        for a in page["attempts"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            if let Some(id) = a["attempt_id"].as_str() {
                by_id.insert(id.to_string(), a.clone());
            }
        }
        if let Some(nf) = page["not_found"].as_array() {
            not_found.extend(nf.iter().cloned());
        }
        last_page = Some(page);
    }
    // Nothing to ask about: still report how current the cache is.
    let last_page = match last_page {
        Some(p) => p,
        None => {
            client
                .call_retrying(discovery::LIST_PROJECTS, json!({}))
                .await?
        }
    };
    Ok(Statuses {
        by_id,
        not_found,
        token: last_page["token"].as_str().map(str::to_string),
        freshness: last_page["freshness"].clone(),
    })
}

fn print_all_json(listed: &[(&resolve::TaskRow, &Value)], st: &Statuses) -> anyhow::Result<()> {
    let attempts: Vec<Value> = listed
        .iter()
        .map(|(r, s)| {
            json!({
                "project_id": r.project_id,
                "project": r.project,
                "task_id": r.task_id,
                "task_title": r.title,
                "status": s,
            })
        })
        .collect();
    let out = json!({
        "attempts": attempts,
        "not_found": st.not_found,
        "token": st.token,
        "freshness": st.freshness,
    });
    outln!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn print_table(listed: &[(&resolve::TaskRow, &Value)]) {
    if listed.is_empty() {
        return outln!("no attempts yet");
    }
    let now = Utc::now();
    let table_rows: Vec<Vec<String>> = listed
        .iter()
        .map(|(r, s)| {
            vec![
                truncate(&r.project, 20),
                truncate(&r.title, 40),
                short_id(&r.attempt_id.to_string()),
                s["state"].as_str().unwrap_or("?").to_string(),
                relative(s["last_activity_at"].as_str(), now),
                truncate(s["failure_summary"].as_str().unwrap_or(""), 40),
            ]
        })
        .collect();
    let text = table(
        &[
            "PROJECT",
            "TASK",
            "ATTEMPT",
            "STATE",
            "LAST ACTIVITY",
            "FAILURE",
        ],
        &table_rows,
    );
    let width = term_width();
    for line in text.lines() {
        outln!("{}", truncate(line, width));
    }
}

async fn one(client: &DaemonClient, given: &str, as_json: bool) -> anyhow::Result<()> {
    let id = resolve::attempt_id(client, given).await?;
    let (page, status) = fetch_one(client, id).await?;
    let logs = client
        .call_retrying(
            observe::TAIL_ATTEMPT_LOGS,
            json!({ "attempt_id": id, "limit": LOG_LINES }),
        )
        .await?;
    if as_json {
        let out = json!({ "status": page, "logs": logs });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let task = match status["task_id"].as_str() {
        Some(t) => client
            .call(tasks::GET_TASK, json!({ "task_id": t }))
            .await
            .ok()
            .map(|v| v["task"].clone()),
        None => None,
    };
    let width = term_width();
    print_fields(id, &status, task.as_ref(), width);
    print_log(&logs, width);
    outln!(
        "{}",
        freshness_line(&page["freshness"], page["token"].as_str())
    );
    Ok(())
}

/// The status page of one attempt and the attempt's status in it.
async fn fetch_one(client: &DaemonClient, id: Uuid) -> anyhow::Result<(Value, Value)> {
    let missing = || {
        anyhow::anyhow!(
            "attempt {id} is not in the daemon's cache (never created, deleted, or not ingested yet)"
        )
    };
    let page = match client
        .call_retrying(observe::GET_ATTEMPT_STATUS, json!({ "attempt_id": id }))
        .await
    {
        Ok(p) => p,
        Err(CallError::Tool { envelope, .. }) if envelope["code"] == "not_found" => {
            return Err(missing());
        }
        Err(e) => return Err(e.into()),
    };
    // A single call answers the status fields at the top level (seed 002).
    let status = Some(page.clone())
        .filter(|p| p["attempt_id"].is_string())
        .ok_or_else(missing)?;
    Ok((page, status))
}

/// One `name  value` line per known fact of the attempt.
fn print_fields(id: Uuid, status: &Value, task: Option<&Value>, width: usize) {
    let now = Utc::now();
    let field =
        |name: &str, value: String| outln!("{}", truncate(&format!("{name:<14} {value}"), width));
    field("attempt", id.to_string());
    if let Some(t) = task {
        field(
            "task",
            format!(
                "{} ({})",
                t["title"].as_str().unwrap_or_default(),
                t["task_id"].as_str().unwrap_or_default()
            ),
        );
    } else if let Some(t) = status["task_id"].as_str() {
        field("task", t.to_string());
    }
    if let Some(b) = status["workspace_branch"].as_str() {
        field("branch", b.to_string());
    }
    let mut outcome = status["result"]["outcome"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(code) = status["result"]["last_error_code"].as_str() {
        outcome = format!("{outcome}: {code}");
    }
    field(
        "state",
        format!("{} ({outcome})", status["state"].as_str().unwrap_or("?")),
    );
    let last = status["last_activity_at"].as_str();
    field(
        "last activity",
        match last {
            Some(t) => format!("{} ({t})", relative(Some(t), now)),
            None => "-".into(),
        },
    );
    if let Some(f) = status["failure_summary"].as_str() {
        field("failure", f.to_string());
    }
    if let Some(p) = process_line(&status["latest_process"]) {
        field("process", p);
    }
    if status["dev_server_running"].as_bool() == Some(true) {
        field("dev server", "running".into());
    }
    let r = &status["result"];
    if let Some(tool) = r["next_tool"].as_str() {
        let action = r["recommended_next_action"].as_str().unwrap_or("wait");
        field(
            "next",
            format!(
                "{action} ({tool}): {}",
                r["summary"].as_str().unwrap_or_default()
            ),
        );
    }
    if let Some(e) = r["last_error"].as_str() {
        field("last error", e.to_string());
    }
}

/// `<run reason> <short id> <status>[, exit N][, started …]` of the latest process, if any.
fn process_line(p: &Value) -> Option<String> {
    if !p.is_object() {
        return None;
    }
    let mut s = format!(
        "{} {} {}",
        p["run_reason"].as_str().unwrap_or("?"),
        short_id(p["execution_process_id"].as_str().unwrap_or_default()),
        p["status"].as_str().unwrap_or("?")
    );
    if let Some(c) = p["exit_code"].as_i64() {
        s.push_str(&format!(", exit {c}"));
    }
    if let Some(t) = p["started_at"].as_str() {
        s.push_str(&format!(", started {}", relative(Some(t), Utc::now())));
    }
    Some(s)
}

/// The log's header line and its last entries.
fn print_log(logs: &Value, width: usize) {
    let entries = logs["entries"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    match logs["execution_process_id"].as_str() {
        None => outln!("log            (no process yet)"),
        Some(pid) => {
            let total = logs["latest_entry_index"]
                .as_u64()
                .map(|i| i + 1)
                .unwrap_or(0);
            let header = format!(
                "log            {} {} ({}), last {} of {total} entries:",
                logs["run_reason"].as_str().unwrap_or("?"),
                short_id(pid),
                logs["process_status"].as_str().unwrap_or("?"),
                entries.len()
            );
            outln!("{}", truncate(&header, width));
        }
    }
    for e in entries {
        let index = e["entry_index"].as_u64().unwrap_or(0);
        outln!("{}", entry_line(index, &e["entry"], false, width));
    }
}
