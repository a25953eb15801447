//! `follow_up` (send, queue) on a VK 0.1.x: the same routes as the fork's, but VK 0.1.x wants
//! the executor with every prompt (`executor_config`: the session's own, else VK answers 409
//! "executor mismatch") and takes no idempotency key. A send that may have reached VK without
//! an answer is found again on retry (`Idempotency::run_recovering`): a coding agent of the
//! session with the same prompt, created since the first call began, as the cache shows it.
//! Cancelling the queued message is the same call on both dialects.

use serde_json::{Value, json};
use uuid::Uuid;

use super::attempts::{ActionDone, FollowUp, required_prompt};
use super::{Proxy, upstream_error};
use vk_observer_query::target::{self, SessionTarget};
use vk_observer_tool_error::ToolError;
use vk_observer_vk as vk;

/// How far VK's clock may be behind the daemon's when a first send is looked for.
const CLOCK_SLACK_MS: i64 = 5_000;

impl Proxy {
    /// The executor of the session (`executor_config`), from the cache.
    fn executor_config(&self, session_id: Uuid, f: &FollowUp) -> Result<Value, ToolError> {
        let reader = self.query.read();
        let session = target::session(&reader, SessionTarget::Session(session_id))?;
        let executor = vk::string_of(&session.value, "executor");
        Ok(json!({ "executor": executor, "variant": f.variant }))
    }

    pub(crate) async fn send_prompt_v01(
        &self,
        session_id: Uuid,
        attempt_id: Option<Uuid>,
        f: &FollowUp,
        request_id: Option<&str>,
    ) -> Result<ActionDone, ToolError> {
        let prompt = required_prompt(f)?;
        let body = json!({
            "prompt": prompt,
            "executor_config": self.executor_config(session_id, f)?,
            "retry_process_id": null,
            "force_when_dirty": null,
            "perform_git_reset": null,
        });
        let key_payload = json!({ "action": "send", "session_id": session_id, "body": {"prompt": prompt, "variant": f.variant} });
        let outcome = self
            .idem
            .run_recovering(
                "follow_up",
                request_id,
                &key_payload,
                |since_ms| async move { self.find_sent(session_id, &prompt, since_ms) },
                || async {
                    self.client
                        .follow_up(session_id, &body, None)
                        .await
                        .map_err(upstream_error)
                },
            )
            .await?;
        Ok(self.sent(attempt_id, outcome).await)
    }

    pub(crate) async fn queue_prompt_v01(
        &self,
        session_id: Uuid,
        f: &FollowUp,
        request_id: Option<&str>,
    ) -> Result<ActionDone, ToolError> {
        let message = required_prompt(f)?;
        let body = json!({
            "message": message,
            "executor_config": self.executor_config(session_id, f)?,
        });
        let key_payload = json!({ "action": "queue", "session_id": session_id, "body": {"message": message, "variant": f.variant} });
        // Queueing twice replaces the one queued message (VK holds one per session): a retry
        // is harmless, so the plain record suffices.
        let outcome = self
            .idem
            .run("follow_up", request_id, &key_payload, || async {
                self.client
                    .queue_message(session_id, &body, None)
                    .await
                    .map_err(upstream_error)
            })
            .await?;
        Ok(self.queued(outcome))
    }

    /// The coding agent a first send may have started (see the module doc).
    fn find_sent(&self, session_id: Uuid, prompt: &str, since_ms: i64) -> Option<Value> {
        let reader = self.query.read();
        let session = reader.session(session_id).ok()??;
        let attempt = vk::uuid_of(&session.value, "workspace_id")?;
        let processes = reader.processes_of_attempt(attempt).ok()?;
        processes
            .into_iter()
            .map(|p| p.value)
            .filter(|p| vk::uuid_of(p, "session_id") == Some(session_id))
            .filter(|p| vk::RunReason::CodingAgent.is(vk::run_reason(p)))
            .filter(|p| vk::prompt_of(p).as_deref() == Some(prompt))
            .filter(|p| {
                vk::ts_of(p, "created_at")
                    .is_some_and(|t| t.timestamp_millis() >= since_ms - CLOCK_SLACK_MS)
            })
            .min_by_key(|p| vk::ts_of(p, "created_at"))
    }
}
