//! `respond_approval`: approve or deny a tool call the agent is blocked on, through VK's
//! `POST /api/approvals/{id}/respond`, then wait until the cache shows the entry answered
//! (read-your-writes).
//!
//! The approval's execution process comes from the cache (the approvals index), as VK requires
//! it in the body. VK's respond is idempotent: a second answer gets 200 with the *recorded*
//! status and changes nothing, so "already answered" and "timed out" are decided from the cache
//! before VK is asked, and a reply naming another status than the one asked (answered elsewhere
//! in between, or timed out just before) becomes the same errors rather than a false success.
//! With `request_id` a retry replays the first answer (`replayed: true`) instead of erroring on
//! an approval it answered itself.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Proxy, upstream_error};
use vk_observer_query::Freshness;
use vk_observer_query::status::AttemptStatus;
use vk_observer_store::approvals::{ApprovalRecord, ApprovalState};
use vk_observer_tool_error::{ErrorCode, ToolError};
use vk_observer_upstream::UpstreamError;
use vk_observer_upstream::refusal::ApprovalRefusal;

/// The decision to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    /// Deny, with the reason the agent will read (VK sends "Denied by user" without one).
    Deny(Option<String>),
}

impl Decision {
    /// VK's `ApprovalStatus` for it.
    fn vk_status(&self) -> Value {
        match self {
            Decision::Approve => json!({"status": "approved"}),
            Decision::Deny(Some(r)) => json!({"status": "denied", "reason": r}),
            Decision::Deny(None) => json!({"status": "denied"}),
        }
    }
    fn state(&self) -> ApprovalState {
        match self {
            Decision::Approve => ApprovalState::Approved,
            Decision::Deny(_) => ApprovalState::Denied,
        }
    }
}

/// Answer of `respond_approval`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ApprovalAnswered {
    /// The approval answered (UUID string).
    pub approval_id: String,
    /// Attempt (UUID) whose agent asked.
    pub attempt_id: Uuid,
    /// Execution process (UUID) whose tool call asked.
    pub execution_process_id: Uuid,
    /// The tool that asked (e.g. `Bash`).
    pub tool_name: String,
    /// Its command, path, query or url, clipped.
    pub summary: String,
    /// What VK recorded: `approved` or `denied`.
    pub status: String,
    /// The denial reason VK recorded; null for an approval or a denial without one.
    pub reason: Option<String>,
    /// True when this is the stored answer of an earlier call with the same request_id (VK was
    /// not asked again).
    pub replayed: bool,
    /// The attempt's status once the answer is in the cache (the agent runs on: no longer
    /// waiting for this approval unless `pending_ingest`).
    pub attempt_status: Option<AttemptStatus>,
    /// Store token at which the answer is visible (opaque); pass it to wait_for_attempt_change.
    pub token: String,
    /// True when the cache still showed the approval pending 5 s after VK's answer.
    pub pending_ingest: bool,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

impl Proxy {
    pub async fn respond_approval(
        &self,
        approval_id: &str,
        decision: Decision,
        request_id: Option<&str>,
    ) -> Result<ApprovalAnswered, ToolError> {
        let id = Uuid::parse_str(approval_id.trim()).map_err(|_| {
            ToolError::invalid_field(
                "approval_id",
                "approval_id must be the UUID string from get_attempt_status pending_approvals or list_approvals.",
            )
        })?;
        let rec = self
            .query
            .read()
            .approval(id)?
            .ok_or_else(|| unknown_approval(id))?;
        let asked = decision.vk_status();
        let payload = json!({"approval_id": id, "decision": asked});
        let outcome = self
            .idem
            .run("respond_approval", request_id, &payload, || async {
                answerable(&rec)?;
                let body =
                    json!({"execution_process_id": rec.execution_process_id, "status": asked});
                let reply = self
                    .client
                    .respond_approval(&id.to_string(), &body)
                    .await
                    .map_err(|e| respond_error(e, id))?;
                check_reply(&rec, &decision, &reply)?;
                Ok(reply)
            })
            .await?;
        self.nudge(None, Some(rec.attempt_id));
        let settled = self
            .settle(|r| {
                r.approval(id)
                    .ok()
                    .flatten()
                    .is_some_and(|a| a.state != ApprovalState::Pending)
            })
            .await;
        let reply = outcome.result;
        Ok(ApprovalAnswered {
            approval_id: rec.approval_id.clone(),
            attempt_id: rec.attempt_id,
            execution_process_id: rec.execution_process_id,
            tool_name: rec.tool_name.clone(),
            summary: rec.summary.clone(),
            status: text(&reply, "status").unwrap_or_else(|| decision.state().as_str().into()),
            reason: text(&reply, "reason"),
            replayed: outcome.replayed,
            attempt_status: self.status_of(rec.attempt_id)?,
            token: settled.token,
            pending_ingest: settled.pending_ingest,
            freshness: self.query.freshness(),
        })
    }
}

fn text(v: &Value, field: &str) -> Option<String> {
    v.get(field).and_then(Value::as_str).map(str::to_string)
}

/// Refuse what the cache already shows answered (VK would only echo the recorded status).
fn answerable(rec: &ApprovalRecord) -> Result<(), ToolError> {
    match rec.state {
        ApprovalState::Pending => Ok(()),
        ApprovalState::TimedOut => Err(timed_out(rec)),
        answered => Err(already_answered(rec, answered.as_str(), rec.reason.clone())),
    }
}

/// VK echoes the recorded status: another one than asked means it was answered before us.
fn check_reply(rec: &ApprovalRecord, decision: &Decision, reply: &Value) -> Result<(), ToolError> {
    let word = text(reply, "status").unwrap_or_default();
    if word == decision.state().as_str() {
        return Ok(());
    }
    match word.as_str() {
        "timed_out" => Err(timed_out(rec)),
        "approved" | "denied" => Err(already_answered(rec, &word, text(reply, "reason"))),
        _ => Err(ToolError::new(
            ErrorCode::UpstreamError,
            true,
            "VK answered the approval with a status the daemon does not know; re-read list_approvals.",
        )
        .with_details(json!({"vk_reply": reply}))),
    }
}

fn unknown_approval(id: Uuid) -> ToolError {
    ToolError::new(
        ErrorCode::UnknownApproval,
        false,
        "No approval with this id in the cache. Take approval_id from get_attempt_status pending_approvals or list_approvals (attempt_ids or project_id); an attempt id or execution process id is not an approval id.",
    )
    .with_details(json!({"approval_id": id}))
}

fn already_answered(rec: &ApprovalRecord, status: &str, reason: Option<String>) -> ToolError {
    ToolError::new(
        ErrorCode::ApprovalAlreadyAnswered,
        false,
        format!(
            "This approval was already answered ({status}); VK keeps the first answer. Nothing to do: call get_attempt_status or wait_for_attempt_change to follow the agent."
        ),
    )
    .with_details(json!({"approval_id": rec.approval_id, "status": status, "reason": reason,
                         "attempt_id": rec.attempt_id}))
}

fn timed_out(rec: &ApprovalRecord) -> ToolError {
    ToolError::new(
        ErrorCode::ApprovalTimedOut,
        false,
        "VK stopped waiting for this approval (timeout_at passed) and denied the tool; the agent went on without it. If the tool is still needed, ask for it again with follow_up.",
    )
    .with_details(json!({"approval_id": rec.approval_id, "timeout_at": rec.timeout_at,
                         "attempt_id": rec.attempt_id}))
}

/// VK has no such approval for that process (its DB lost it, or the cache holds one of another
/// VK: `ApprovalRefusal::NoSuchApproval`); other failures as usual.
fn respond_error(e: UpstreamError, id: Uuid) -> ToolError {
    match (ApprovalRefusal::of(&e), &e) {
        (Some(ApprovalRefusal::NoSuchApproval), UpstreamError::Status { message, .. }) => {
            ToolError::new(
                ErrorCode::ApprovalRejected,
                false,
                "VK refused the answer: it holds no such approval for this execution process (VK restarted or lost it). Re-read list_approvals; an approval whose agent_waiting is false no longer blocks anything.",
            )
            .with_details(json!({"approval_id": id, "vk_message": message}))
        }
        _ => upstream_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> ApprovalRecord {
        ApprovalRecord {
            approval_id: Uuid::from_u128(1).to_string(),
            attempt_id: Uuid::from_u128(2),
            execution_process_id: Uuid::from_u128(3),
            entry_index: 4,
            tool_name: "Bash".into(),
            summary: "make".into(),
            state: ApprovalState::Pending,
            reason: None,
            requested_at: None,
            timeout_at: Some("2026-11-24T02:00:00Z".into()),
            token: 0,
        }
    }

    fn code(r: Result<(), ToolError>) -> &'static str {
        r.err().map_or("ok", |e| e.code.as_str())
    }

    #[test]
    fn a_reply_naming_another_status_is_an_earlier_answer() {
        let rec = pending();
        let approve = Decision::Approve;
        let deny = Decision::Deny(Some("no".into()));
        assert_eq!(
            code(check_reply(&rec, &approve, &json!({"status": "approved"}))),
            "ok"
        );
        assert_eq!(
            code(check_reply(
                &rec,
                &deny,
                &json!({"status": "denied", "reason": "x"})
            )),
            "ok"
        );
        let earlier = check_reply(&rec, &approve, &json!({"status": "denied", "reason": "x"}));
        let e = earlier.unwrap_err();
        assert_eq!(e.code, "approval_already_answered");
        assert_eq!(e.details["status"], "denied");
        assert_eq!(e.details["reason"], "x");
        assert_eq!(
            code(check_reply(&rec, &deny, &json!({"status": "timed_out"}))),
            "approval_timed_out"
        );
        assert_eq!(
            code(check_reply(&rec, &deny, &json!({"status": "pending"}))),
            "upstream_error"
        );
    }

    #[test]
    fn the_cache_decides_what_is_no_longer_answerable() {
        let mut rec = pending();
        assert_eq!(code(answerable(&rec)), "ok");
        rec.state = ApprovalState::TimedOut;
        assert_eq!(code(answerable(&rec)), "approval_timed_out");
        rec.state = ApprovalState::Approved;
        let e = answerable(&rec).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.details["status"].as_str()),
            ("approval_already_answered", Some("approved"))
        );
    }
}
