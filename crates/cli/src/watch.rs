//! `vk-observer watch ATTEMPT`: follow an attempt's normalized log live. An initial tail, then
//! the long-poll loop every MCP client can use: `wait_for_attempt_change(attempt_ids=[id],
//! since_token)` → `tail_attempt_logs(after_entry_index=last, since_token=previous page token)`.
//! Entries rewritten in place come back in `replaced` and are printed again marked `[edited]`;
//! when a follow-up starts another process the page says `process_changed` and the end of the
//! earlier process comes in `earlier_process_entries`. A status line on stderr shows the state
//! and the entries seen; the command ends (exit 0, printing the final state) once the attempt is
//! completed or failed, its log is complete and nothing more comes for `linger`.
//! A tool call the agent is blocked on (`pending_approvals` of the status) is printed once as a
//! `⏸ approval` line naming the tool, its command and the approval id, the status line says
//! `waiting for approval` until it is answered, and its answer is printed when it goes away.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use super::client::{CallError, DaemonClient};
use super::render::{entry_line, short_id, term_width, truncate};
use super::resolve;
use vk_observer_mcp::tools::observe;

/// Entries shown when the watch starts.
const INITIAL_TAIL: u32 = 20;
/// Entries asked for per incremental page.
const PAGE: u32 = 200;
/// Long-poll length while the attempt runs (below the daemon's 50 s cap).
const WAIT_MS: u64 = 25_000;
/// At most this many older entries are fetched when a process has to be read from its start.
const BACKFILL_CAP: usize = 5_000;

pub struct WatchOptions {
    pub daemon: String,
    pub token: Option<String>,
    pub attempt: String,
    /// After the attempt ends, how long to wait for another process (cleanup, follow-up).
    pub linger: Duration,
}

/// Follow the attempt; the process exit code (0: it ended; 130: interrupted).
pub async fn run(opts: WatchOptions) -> anyhow::Result<i32> {
    let client = DaemonClient::connect(&opts.daemon, opts.token.as_deref()).await?;
    let id = match resolve::attempt_id(&client, &opts.attempt).await {
        Ok(id) => id,
        Err(e) => {
            client.close().await;
            return Err(e);
        }
    };
    let mut out = Output::new(id);
    let result = tokio::select! {
        r = follow(&client, id, opts.linger, &mut out) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    out.clear();
    client.close().await;
    match result {
        Some(Ok(final_state)) => {
            outln!("final state: {final_state}");
            Ok(0)
        }
        Some(Err(e)) => Err(e),
        None => {
            eprintln!("vk-observer watch: interrupted ({} entries seen)", out.seen);
            Ok(130)
        }
    }
}

/// Where the log lines (stdout) and the status line (stderr) go.
struct Output {
    attempt: String,
    tty: bool,
    width: usize,
    state: String,
    process: String,
    upstream: String,
    /// The daemon has not finished its first full load from VK (a large catch-up).
    catching_up: bool,
    seen: u64,
    drawn: bool,
    last_reported: String,
    /// Approval ids the agent was blocked on at the last status (printed when they appeared).
    approvals: Vec<String>,
}

impl Output {
    fn new(id: Uuid) -> Output {
        Output {
            attempt: short_id(&id.to_string()),
            tty: std::io::stderr().is_terminal(),
            width: term_width(),
            state: "?".into(),
            process: String::new(),
            upstream: String::new(),
            catching_up: false,
            seen: 0,
            drawn: false,
            last_reported: String::new(),
            approvals: Vec::new(),
        }
    }

    fn status_line(&self) -> String {
        let mut s = format!("attempt {} · {}", self.attempt, self.state);
        if !self.process.is_empty() {
            s.push_str(&format!(" · {}", self.process));
        }
        if !self.approvals.is_empty() {
            s.push_str(" · waiting for approval");
        }
        s.push_str(&format!(" · {} entries seen", self.seen));
        if !self.upstream.is_empty() && self.upstream != "connected" {
            s.push_str(&format!(" · upstream {}", self.upstream));
        }
        if self.catching_up {
            s.push_str(" · daemon still catching up with VK");
        }
        s
    }

    /// Redraw the status line (a terminal), or print it when the state changed (a pipe).
    fn draw(&mut self) {
        let line = self.status_line();
        let mut err = std::io::stderr().lock();
        if self.tty {
            if self.drawn && line == self.last_reported {
                return;
            }
            let _ = write!(
                err,
                "\r\x1b[2K{}",
                truncate(&line, self.width.saturating_sub(1))
            );
            self.drawn = true;
            self.last_reported = line;
        } else {
            let key = format!("{} {} {}", self.state, self.process, self.approvals.len());
            if key != self.last_reported {
                let _ = writeln!(err, "{line}");
                self.last_reported = key;
            }
        }
        let _ = err.flush();
    }

    fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }

    fn print(&mut self, line: &str) {
        self.clear();
        outln!("{line}");
    }

    fn entry(&mut self, e: &Value, edited: bool) {
        let line = entry_line(
            e["entry_index"].as_u64().unwrap_or(0),
            &e["entry"],
            edited,
            self.width,
        );
        if !edited {
            self.seen += 1;
        }
        self.print(&line);
    }

    fn header(&mut self, page: &Value) {
        let pid = page["execution_process_id"].as_str().unwrap_or_default();
        let line = format!(
            "── {} {} ({}) ──",
            page["run_reason"].as_str().unwrap_or("process"),
            short_id(pid),
            page["process_status"].as_str().unwrap_or("?")
        );
        self.print(&line);
    }

    fn status(&mut self, s: &Value) {
        if let Some(st) = s["state"].as_str() {
            self.state = st.to_string();
        }
        let p = &s["latest_process"];
        if let Some(r) = p["run_reason"].as_str() {
            self.process = format!("{r} {}", p["status"].as_str().unwrap_or_default());
        }
        self.track_approvals(s);
    }

    /// Print approvals that appeared and those answered since the last status.
    fn track_approvals(&mut self, s: &Value) {
        let pending = s["pending_approvals"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let ids: Vec<String> = pending
            .iter()
            .filter_map(|a| a["approval_id"].as_str().map(str::to_string))
            .collect();
        for gone in self.approvals.clone().iter().filter(|id| !ids.contains(id)) {
            self.print(&format!("      ▶ approval {} answered", short_id(gone)));
        }
        for a in pending {
            let id = a["approval_id"].as_str().unwrap_or_default();
            if !self.approvals.iter().any(|x| x == id) {
                let line = approval_line(a, self.width);
                self.print(&line);
            }
        }
        self.approvals = ids;
    }

    fn page(&mut self, page: &Value) {
        self.freshness(&page["freshness"]);
    }

    fn freshness(&mut self, f: &Value) {
        if let Some(u) = f["upstream"].as_str() {
            self.upstream = u.to_string();
        }
        if let Some(b) = f["bootstrapped"].as_bool() {
            self.catching_up = !b;
        }
    }
}

fn is_terminal(state: &str) -> bool {
    matches!(state, "completed" | "failed")
}

fn final_text(status: &Value) -> String {
    let state = status["state"].as_str().unwrap_or("?");
    match status["failure_summary"].as_str() {
        Some(f) => format!("{state} ({f})"),
        None => state.to_string(),
    }
}

/// Everything the watch tracks between pages.
struct Cursor {
    /// The process whose log is followed.
    pid: Option<String>,
    /// Highest entry index printed for it.
    last: Option<u64>,
    /// Token of the last log page (the next `since_token`).
    token: Option<String>,
    /// The last `after_entry_index` page said newer entries exist.
    more: bool,
    /// The followed log is complete (its process ended and all of it is cached).
    complete: bool,
}

async fn follow(
    client: &DaemonClient,
    id: Uuid,
    linger: Duration,
    out: &mut Output,
) -> anyhow::Result<String> {
    // The status shown is as of the wait token: waiting from it (rather than from the later log
    // page's token) never misses a state change that landed between the two reads.
    let (mut status, mut wait_token) = first_status(client, id).await?;
    out.status(&status);
    let mut cur = initial_tail(client, id, out).await?;
    out.draw();

    // Polls after the attempt ended while its log is not yet marked complete.
    let mut settle_polls = 0u32;
    loop {
        let ended = is_terminal(status["state"].as_str().unwrap_or("?"));
        if !cur.more {
            let timeout_ms = match (ended, cur.complete) {
                (true, true) => linger.as_millis().clamp(1, 50_000) as u64,
                (true, false) => 1_000,
                _ => WAIT_MS,
            };
            let w = wait_change(client, id, wait_token.as_deref(), timeout_ms).await?;
            if let Some(t) = w["token"].as_str() {
                wait_token = Some(t.to_string());
            }
            if let Some(s) = status_in(&w, id) {
                status = s.clone();
                out.status(&status);
            }
            out.freshness(&w["freshness"]);
            out.draw();
            if w["changed"].as_bool() != Some(true) {
                match (ended, cur.complete) {
                    (true, true) => return Ok(final_text(&status)),
                    (true, false) => {
                        settle_polls += 1;
                        // The log never got marked complete (e.g. VK lost its end): stop anyway.
                        if settle_polls > 10 {
                            return Ok(final_text(&status));
                        }
                    }
                    _ => continue,
                }
            }
        }
        read_logs(client, id, &mut cur, out).await?;
        out.draw();
    }
}

/// The attempt's status and the token it is as of.
async fn first_status(client: &DaemonClient, id: Uuid) -> anyhow::Result<(Value, Option<String>)> {
    match client
        .call_retrying(observe::GET_ATTEMPT_STATUS, json!({ "attempt_id": id }))
        .await
    {
        // A single call answers the status fields at the top level (seed 002).
        Ok(p) => {
            let token = p["token"].as_str().map(str::to_string);
            Ok((p, token))
        }
        Err(e) if e.code() == "not_found" => {
            anyhow::bail!(
                "attempt {id} is not in the daemon's cache (never created, deleted, or not ingested yet)"
            )
        }
        Err(e) => Err(e.into()),
    }
}

/// Print the last `INITIAL_TAIL` entries of the latest process; the cursor after them.
async fn initial_tail(client: &DaemonClient, id: Uuid, out: &mut Output) -> anyhow::Result<Cursor> {
    let first = client
        .call_retrying(
            observe::TAIL_ATTEMPT_LOGS,
            json!({ "attempt_id": id, "limit": INITIAL_TAIL }),
        )
        .await?;
    out.page(&first);
    let mut cur = Cursor {
        pid: first["execution_process_id"].as_str().map(str::to_string),
        last: None,
        token: first["token"].as_str().map(str::to_string),
        more: false,
        complete: first["log_complete"].as_bool().unwrap_or(false),
    };
    if cur.pid.is_none() {
        return Ok(cur);
    }
    out.header(&first);
    let entries = first["entries"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let total = first["latest_entry_index"]
        .as_u64()
        .map(|i| i + 1)
        .unwrap_or(0);
    let hidden = total.saturating_sub(entries.len() as u64);
    if hidden > 0 {
        out.print(&format!("      … {hidden} earlier entries not shown"));
    }
    for e in entries {
        out.entry(e, false);
        cur.last = e["entry_index"].as_u64().max(cur.last);
    }
    Ok(cur)
}

/// One long poll on the attempt; fails when the attempt was deleted.
async fn wait_change(
    client: &DaemonClient,
    id: Uuid,
    since: Option<&str>,
    timeout_ms: u64,
) -> anyhow::Result<Value> {
    let mut args = json!({ "attempt_ids": [id], "timeout_ms": timeout_ms });
    if let Some(t) = since {
        args["since_token"] = json!(t);
    }
    let w = client
        .call_retrying(observe::WAIT_FOR_ATTEMPT_CHANGE, args)
        .await?;
    if w["removed"]
        .as_array()
        .is_some_and(|r| r.iter().any(|x| x.as_str() == Some(&id.to_string())))
    {
        anyhow::bail!("attempt {id} was deleted");
    }
    Ok(w)
}

/// The attempt's status in a wait answer, when it changed.
fn status_in(w: &Value, id: Uuid) -> Option<&Value> {
    w["attempts"].as_array().and_then(|a| {
        a.iter()
            .find(|s| s["attempt_id"].as_str() == Some(&id.to_string()))
    })
}

/// Read what is new in the log since the cursor and print it.
async fn read_logs(
    client: &DaemonClient,
    id: Uuid,
    cur: &mut Cursor,
    out: &mut Output,
) -> anyhow::Result<()> {
    let mut args = json!({ "attempt_id": id, "limit": PAGE });
    if let Some(t) = &cur.token {
        args["since_token"] = json!(t);
    }
    let after_mode = cur.last.is_some();
    if let Some(l) = cur.last {
        args["after_entry_index"] = json!(l);
    }
    let page = client
        .call_retrying(observe::TAIL_ATTEMPT_LOGS, args)
        .await?;
    out.page(&page);
    let page_pid = page["execution_process_id"].as_str().map(str::to_string);
    if page["token_reset"].as_bool() == Some(true) {
        out.print("      … the daemon's cache was rebuilt; continuing from its newest entries");
        cur.pid = page_pid;
        cur.last = page["latest_entry_index"].as_u64();
        cur.token = page["token"].as_str().map(str::to_string);
        cur.more = false;
        cur.complete = page["log_complete"].as_bool().unwrap_or(false);
        return Ok(());
    }
    print_earlier_process(&page, cur, out);
    let switched = page_pid.is_some() && page_pid != cur.pid;
    if switched {
        out.header(&page);
        cur.last = None;
    }
    let (entries, has_more) = page_entries(client, id, &page, switched, after_mode, out).await?;
    cur.pid = page_pid;
    if !switched {
        for e in page["replaced"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            out.entry(e, true);
        }
    }
    for e in &entries {
        let idx = e["entry_index"].as_u64();
        if cur.last.is_some() && idx <= cur.last {
            continue;
        }
        out.entry(e, false);
        cur.last = idx.max(cur.last);
    }
    cur.more = after_mode && has_more;
    cur.complete = page["log_complete"].as_bool().unwrap_or(false);
    cur.token = page["token"].as_str().map(str::to_string);
    Ok(())
}

/// The end of the earlier process (a follow-up switched processes after our last page).
fn print_earlier_process(page: &Value, cur: &Cursor, out: &mut Output) {
    let mut shown_pid: Option<String> = cur.pid.clone();
    for e in page["earlier_process_entries"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let epid = e["execution_process_id"].as_str().map(str::to_string);
        if epid == cur.pid {
            if e["entry_index"].as_u64() <= cur.last && cur.last.is_some() {
                continue; // printed already
            }
        } else if epid != shown_pid {
            out.print(&format!(
                "── earlier process {} ──",
                short_id(epid.as_deref().unwrap_or_default())
            ));
        }
        shown_pid = epid;
        out.entry(e, false);
    }
}

/// The page's entries, completed from the process's start where the page alone would leave a
/// gap; and whether newer entries remain.
async fn page_entries(
    client: &DaemonClient,
    id: Uuid,
    page: &Value,
    switched: bool,
    after_mode: bool,
    out: &mut Output,
) -> anyhow::Result<(Vec<Value>, bool)> {
    let pid = page["execution_process_id"].as_str();
    let mut entries: Vec<Value> = page["entries"].as_array().cloned().unwrap_or_default();
    let has_more = page["has_more"].as_bool().unwrap_or(false);
    let from_start = page["process_changed"].as_bool() == Some(true);
    if switched && after_mode && !from_start {
        // Our index belonged to the old process: read the new one from its start.
        let (all, _) = from_beginning(client, id, pid, None).await?;
        return Ok((all, false));
    }
    if !after_mode && has_more {
        // A tail page of a process not printed in full yet: fill in its older entries.
        let (older, cut) = from_beginning(client, id, pid, page["next_cursor"].as_u64()).await?;
        if cut > 0 {
            out.print(&format!("      … {cut} earlier entries not shown"));
        }
        entries.splice(0..0, older);
        return Ok((entries, false));
    }
    Ok((entries, has_more))
}

/// Entries of a process from its start (oldest first): pages older history below `before`
/// (or from the newest when None), at most [`BACKFILL_CAP`] entries; also how many were left out.
async fn from_beginning(
    client: &DaemonClient,
    id: Uuid,
    pid: Option<&str>,
    before: Option<u64>,
) -> Result<(Vec<Value>, u64), CallError> {
    let mut chunks: Vec<Vec<Value>> = Vec::new();
    let mut cursor = before;
    let mut got = 0usize;
    let mut first = before.is_none();
    loop {
        if !first && cursor.is_none() {
            break;
        }
        let mut args = json!({ "attempt_id": id, "limit": 500 });
        if let Some(p) = pid {
            args["execution_process_id"] = json!(p);
        }
        if let Some(c) = cursor {
            args["cursor"] = json!(c);
        }
        first = false;
        let page = client
            .call_retrying(observe::TAIL_ATTEMPT_LOGS, args)
            .await?;
        let entries = page["entries"].as_array().cloned().unwrap_or_default();
        got += entries.len();
        chunks.push(entries);
        cursor = if page["has_more"].as_bool() == Some(true) {
            page["next_cursor"].as_u64()
        } else {
            None
        };
        if got >= BACKFILL_CAP {
            break;
        }
    }
    let cut = cursor.unwrap_or(0);
    let all = chunks.into_iter().rev().flatten().collect();
    Ok((all, cut))
}

/// A pending approval: what the agent wants to run and how to answer.
fn approval_line(a: &Value, width: usize) -> String {
    let line = format!(
        "      ⏸ approval {} · {} `{}` · answer with respond_approval (approval_id {}), times out {}",
        short_id(a["approval_id"].as_str().unwrap_or_default()),
        a["tool_name"].as_str().unwrap_or("tool"),
        a["summary"].as_str().unwrap_or_default(),
        a["approval_id"].as_str().unwrap_or_default(),
        a["timeout_at"].as_str().unwrap_or("?"),
    );
    truncate(&line, width.max(80) * 2)
}
