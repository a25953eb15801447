//! VK's mutating and artifact routes (docs/vk-contract.md §6.4–6.5, §9): task create/update/
//! delete, attempt start and stop, session follow-up and queue, file and patch reads. Creating
//! calls pass the caller's idempotency key through as VK's `Idempotency-Key` header.

use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

use super::rest::{UpstreamError, VkClient};
use super::routes;

fn with_key(rb: reqwest::RequestBuilder, key: Option<&str>) -> reqwest::RequestBuilder {
    match key {
        Some(k) if !k.trim().is_empty() => rb.header("Idempotency-Key", k.trim()),
        _ => rb,
    }
}

impl VkClient {
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> Result<Value, UpstreamError> {
        let mut rb = with_key(self.request(method, path), key);
        if let Some(b) = body {
            rb = rb.json(b);
        }
        Ok(self
            .send_opt::<Value>(rb, path)
            .await?
            .unwrap_or(Value::Null))
    }

    /// `POST /api/tasks` → the created Task.
    pub async fn create_task(
        &self,
        body: &Value,
        key: Option<&str>,
    ) -> Result<Value, UpstreamError> {
        self.call(Method::POST, routes::TASKS, Some(body), key)
            .await
    }

    /// `PUT /api/tasks/{id}` → the updated Task.
    pub async fn update_task(&self, task: Uuid, body: &Value) -> Result<Value, UpstreamError> {
        self.call(Method::PUT, &routes::task(task), Some(body), None)
            .await
    }

    /// `DELETE /api/tasks/{id}` (202, `data: null`).
    pub async fn delete_task(&self, task: Uuid) -> Result<(), UpstreamError> {
        self.call(Method::DELETE, &routes::task(task), None, None)
            .await
            .map(|_| ())
    }

    /// `POST /api/task-attempts` → the created Workspace.
    pub async fn create_attempt(
        &self,
        body: &Value,
        key: Option<&str>,
    ) -> Result<Value, UpstreamError> {
        self.call(Method::POST, routes::TASK_ATTEMPTS, Some(body), key)
            .await
    }

    /// `POST /api/task-attempts/{id}/stop?force=` (returns once the processes are stopped).
    pub async fn stop_attempt(&self, attempt: Uuid, force: bool) -> Result<(), UpstreamError> {
        let path = routes::stop_attempt(attempt, force);
        self.call(Method::POST, &path, None, None).await.map(|_| ())
    }

    /// `POST /api/execution-processes/{id}/stop` (one process, dev servers included; VK has no
    /// force variant of it). Returns once the process is stopped; VK answers `data: null`.
    pub async fn stop_process(&self, process: Uuid) -> Result<(), UpstreamError> {
        let path = routes::stop_process(process);
        self.call(Method::POST, &path, None, None).await.map(|_| ())
    }

    /// `POST /api/sessions/{id}/follow-up` → the new ExecutionProcess.
    pub async fn follow_up(
        &self,
        session: Uuid,
        body: &Value,
        key: Option<&str>,
    ) -> Result<Value, UpstreamError> {
        self.call(Method::POST, &routes::follow_up(session), Some(body), key)
            .await
    }

    /// `POST /api/sessions/{id}/queue` → `{status, message}`.
    pub async fn queue_message(
        &self,
        session: Uuid,
        body: &Value,
        key: Option<&str>,
    ) -> Result<Value, UpstreamError> {
        self.call(Method::POST, &routes::queue(session), Some(body), key)
            .await
    }

    /// `DELETE /api/sessions/{id}/queue` → `{status: "empty"}`.
    pub async fn cancel_queued(&self, session: Uuid) -> Result<Value, UpstreamError> {
        self.call(Method::DELETE, &routes::queue(session), None, None)
            .await
    }

    /// `GET /api/task-attempts/{id}/file?path=&start=&max_bytes=`.
    pub async fn attempt_file(
        &self,
        attempt: Uuid,
        path: &str,
        start: u64,
        max_bytes: u64,
    ) -> Result<Value, UpstreamError> {
        let route = routes::attempt_file(attempt);
        let mut u = reqwest::Url::parse("http://query.invalid/").expect("static URL parses");
        u.query_pairs_mut()
            .append_pair("path", path)
            .append_pair("start", &start.to_string())
            .append_pair("max_bytes", &max_bytes.to_string());
        let path_and_query = format!("{route}?{}", u.query().unwrap_or_default());
        let rb = self.request(Method::GET, &path_and_query);
        Ok(self
            .send_opt::<Value>(rb, &route)
            .await?
            .unwrap_or(Value::Null))
    }

    /// `POST /api/task-attempts/{id}/patch` with `{paths, force, max_bytes}`.
    pub async fn attempt_patch(&self, attempt: Uuid, body: &Value) -> Result<Value, UpstreamError> {
        self.call(
            Method::POST,
            &routes::attempt_patch(attempt),
            Some(body),
            None,
        )
        .await
    }
}
