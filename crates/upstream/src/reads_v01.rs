//! VK 0.1.x's REST reads (the workspace-first dialect): what its streams do not carry. Each
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

    /// One workspace as the database holds it.
    pub async fn workspace(&self, workspace: Uuid) -> Result<Value, UpstreamError> {
        self.get(&routes::workspace(workspace)).await
    }

    /// One execution process as the database holds it.
    pub async fn process_v01(&self, process: Uuid) -> Result<Value, UpstreamError> {
        self.get(&routes::process(process)).await
    }
}
