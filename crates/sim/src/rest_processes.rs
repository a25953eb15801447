//! Execution-process REST: get one process and stop it (dev servers included). There is no
//! list route, as in VK: the process WebSocket snapshot is the listing.

use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::Value;
use uuid::Uuid;

use super::http::{AppState, not_found, ok};
use super::render;
use super::types::ProcessStatus;

pub(crate) async fn get(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    inner
        .world()
        .processes
        .get(&id)
        .map_or_else(not_found, |p| ok(render::process_json(p)))
}

pub(crate) async fn stop(State(inner): State<AppState>, Path(id): Path<Uuid>) -> Response {
    if !inner.world().processes.contains_key(&id) {
        return not_found();
    }
    inner.count(|c| c.stops += 1);
    // VK answers once the process ended: its grace before the kill (`stop_delay`).
    tokio::time::sleep(inner.cfg.stop_delay).await;
    inner.finish_process(id, ProcessStatus::Killed, None);
    ok(Value::Null)
}
