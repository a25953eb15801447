//! Session REST: list by workspace, get, messages (coding-agent turns, tail-first pages),
//! follow-up (idempotent; returns the new running process) and the one-slot message queue.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::core::lock;
use super::http::{AppState, fail, not_found, ok};
use super::types::AttemptScript;
use super::util::now_ts;
use super::{idempotency, render, script};

#[derive(Deserialize)]
pub(crate) struct SessionsQuery {
    workspace_id: Uuid,
}

#[derive(Deserialize)]
pub(crate) struct MessagesQuery {
    limit: Option<usize>,
    cursor: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FollowUp {
    prompt: String,
    variant: Option<String>,
    retry_process_id: Option<Uuid>,
    force_when_dirty: Option<bool>,
    perform_git_reset: Option<bool>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct QueueBody {
    message: String,
    variant: Option<String>,
}

pub(crate) async fn list(
    State(inner): State<AppState>,
    Query(q): Query<SessionsQuery>,
) -> Response {
    let w = inner.world();
    ok(w.sessions_of(q.workspace_id)
        .into_iter()
        .filter_map(|s| render::session_json(&w, s))
        .collect::<Vec<_>>())
}

pub(crate) async fn get(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    render::session_json(&inner.world(), id).map_or_else(not_found, ok)
}

pub(crate) async fn messages(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    Query(q): Query<MessagesQuery>,
) -> Response {
    let w = inner.world();
    if !w.sessions.contains_key(&id) {
        return not_found();
    }
    let limit = q.limit.unwrap_or(20).clamp(1, 200);
    let mut turns: Vec<_> = w
        .turns
        .iter()
        .filter(|t| t.session_id == id && q.cursor.is_none_or(|c| t.row < c))
        .collect();
    let has_more = turns.len() > limit;
    turns.drain(..turns.len().saturating_sub(limit));
    let entries: Vec<Value> = turns
        .iter()
        .map(|t| {
            json!({"entry_index": t.row, "turn_id": t.turn_id, "prompt": t.prompt,
                   "summary": t.summary, "created_at": t.created_at, "updated_at": t.updated_at})
        })
        .collect();
    ok(
        json!({"entries": entries, "next_cursor": turns.first().map(|t| t.row),
              "has_more": has_more}),
    )
}

pub(crate) async fn follow_up(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    headers: HeaderMap,
    Json(body): Json<FollowUp>,
) -> Response {
    if !inner.world().sessions.contains_key(&id) {
        return not_found();
    }
    let payload = serde_json::to_value(&body).unwrap_or(Value::Null);
    let key = idempotency::key(&headers);
    let inner2 = inner.clone();
    idempotency::run(&inner, "follow_up", key, &payload, || async move {
        let s = AttemptScript::default();
        let started =
            script::start_follow_up(&inner2, id, &body.prompt, body.variant.as_deref(), &s);
        let Some((ws, pid)) = started else {
            return Err(fail(StatusCode::BAD_REQUEST, "Session has no task"));
        };
        inner2.count(|c| c.follow_ups += 1);
        let process = inner2.world().processes.get(&pid).map(render::process_json);
        let prompt = body.prompt.clone();
        tokio::spawn(script::drive_agent_chain(
            inner2.clone(),
            ws,
            id,
            pid,
            prompt,
            s,
        ));
        Ok(process.unwrap_or(Value::Null))
    })
    .await
}

pub(crate) async fn queue_get(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let w = inner.world();
    if !w.sessions.contains_key(&id) {
        return not_found();
    }
    match w.queue.get(&id) {
        Some((msg, _)) => ok(json!({"status": "queued", "message": msg})),
        None => ok(json!({"status": "empty"})),
    }
}

/// One queued message per session; an idempotent retry returns the stored message unchanged.
pub(crate) async fn queue_post(
    State(inner): State<AppState>,
    Path(id): Path<Uuid>,
    headers: HeaderMap,
    Json(body): Json<QueueBody>,
) -> Response {
    let key = idempotency::key(&headers);
    let hash = serde_json::to_string(&body).unwrap_or_default();
    let mut w = inner.world();
    if !w.sessions.contains_key(&id) {
        return not_found();
    }
    if let (Some(k), Some((msg, Some((old_k, old_h))))) = (&key, w.queue.get(&id))
        && k == old_k
    {
        if *old_h != hash {
            return fail(StatusCode::CONFLICT, "Idempotency key conflict");
        }
        return ok(json!({"status": "queued", "message": msg}));
    }
    let msg = json!({"session_id": id,
                     "data": {"message": body.message, "variant": body.variant},
                     "queued_at": now_ts()});
    w.queue.insert(id, (msg.clone(), key.map(|k| (k, hash))));
    drop(w);
    lock(&inner.counters).queue_posts += 1;
    ok(json!({"status": "queued", "message": msg}))
}

pub(crate) async fn queue_delete(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    let mut w = inner.world();
    if !w.sessions.contains_key(&id) {
        return not_found();
    }
    w.queue.remove(&id);
    ok(json!({"status": "empty"}))
}
