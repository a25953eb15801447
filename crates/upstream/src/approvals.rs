//! VK's approval answer route, `POST /api/approvals/{id}/respond` (docs/vk-contract.md,
//! "Approvals"). Unlike every other route the fork answers the bare `ApprovalStatus`
//! (`{"status":"approved"}`, `{"status":"denied","reason":…}`), not VK's envelope; VK 0.1.x
//! wraps it in the envelope (both are read). Errors are envelopes (500 "Failed to respond to
//! approval"), 422 text for a malformed body, or (0.1.x) a 500 with an empty body.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::rest::{UpstreamError, VkClient};
use super::routes;
use super::wire::Envelope;

impl VkClient {
    /// Answer approval `approval_id` with VK's `ApprovalResponse` body
    /// (`{"execution_process_id":…,"status":{"status":"approved"}}`); returns the status VK
    /// recorded, which is the earlier answer when the approval was already answered.
    pub async fn respond_approval(
        &self,
        approval_id: &str,
        body: &Value,
    ) -> Result<Value, UpstreamError> {
        let path = routes::approval_respond(approval_id);
        let resp = self
            .request(Method::POST, &path)
            .json(body)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| UpstreamError::Unreachable {
                url: self.url(&path),
                reason: e.to_string(),
            })?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| UpstreamError::Unreachable {
            url: self.url(&path),
            reason: e.to_string(),
        })?;
        if status.is_success() {
            let answer: Value =
                serde_json::from_slice(&bytes).map_err(|e| UpstreamError::Decode {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            // VK 0.1.x wraps the status in its envelope (rec-0.1:
            // rest-approval-respond-approve.json); the fork answers it bare.
            return Ok(match answer.get("success") {
                Some(_) => answer.get("data").cloned().unwrap_or(Value::Null),
                None => answer,
            });
        }
        let message = serde_json::from_slice::<Envelope<Value>>(&bytes)
            .ok()
            .and_then(|env| env.message)
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(500).collect());
        Err(UpstreamError::Status {
            status: status.as_u16(),
            path,
            message,
        })
    }
}
