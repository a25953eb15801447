//! VK 0.1.x's REST calls (the workspace-first dialect): the reads its streams do not carry, and
//! the workspace mutations the proxy makes. Each
//! answers VK's envelope's `data` as it came; `workspace_model` in ingest maps it.

use serde_json::Value;
use uuid::Uuid;

use super::rest::{UpstreamError, VkClient};
use super::routes_v01 as routes;

impl VkClient {
    /// Every registered repository.
    pub async fn registered_repos(&self) -> Result<Vec<Value>, UpstreamError> {
        self.get(routes::REPOS).await
    }

    /// A workspace's repositories with their target branches.
    pub async fn workspace_repos(&self, workspace: Uuid) -> Result<Vec<Value>, UpstreamError> {
        self.get(&routes::workspace_repos(workspace)).await
    }

    /// A workspace's sessions.
    pub async fn sessions_of_workspace(
        &self,
        workspace: Uuid,
    ) -> Result<Vec<Value>, UpstreamError> {
        self.get(&routes::sessions_of_workspace(workspace)).await
    }

    /// Every workspace as the database holds it.
    pub async fn workspaces(&self) -> Result<Vec<Value>, UpstreamError> {
        self.get(routes::WORKSPACES).await
    }

    /// One workspace as the database holds it.
    pub async fn workspace(&self, workspace: Uuid) -> Result<Value, UpstreamError> {
        self.get(&routes::workspace(workspace)).await
    }

    /// One execution process as the database holds it.
    pub async fn process_v01(&self, process: Uuid) -> Result<Value, UpstreamError> {
        self.get(&routes::process(process)).await
    }
}

impl VkClient {
    /// `POST /api/workspaces/start` → `{workspace, execution_process}` (the chain's first
    /// process). VK 0.1.x takes no idempotency key: the caller guards retries.
    pub async fn start_workspace(&self, body: &Value) -> Result<Value, UpstreamError> {
        let path = routes::WORKSPACES_START;
        let rb = self.request(reqwest::Method::POST, path).json(body);
        self.send(rb, path).await
    }

    /// `PUT /api/workspaces/{id}` with `{name?, archived?, pinned?}` → the workspace.
    pub async fn update_workspace(
        &self,
        workspace: Uuid,
        body: &Value,
    ) -> Result<Value, UpstreamError> {
        let path = routes::workspace(workspace);
        let rb = self.request(reqwest::Method::PUT, &path).json(body);
        self.send(rb, &path).await
    }

    /// `DELETE /api/workspaces/{id}` (202, `data: null`; 409 while a process other than a dev
    /// server runs).
    pub async fn delete_workspace(&self, workspace: Uuid) -> Result<(), UpstreamError> {
        let path = routes::workspace(workspace);
        let rb = self.request(reqwest::Method::DELETE, &path);
        self.send_opt::<Value>(rb, &path).await.map(|_| ())
    }
}
