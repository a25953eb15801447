//! VK 0.1.x's delivery routes of a workspace (the workspace-first dialect; an attempt id is a
//! workspace id there): `git/status`, the git actions, and the two stops. Recorded on BloopAI VK
//! v0.1.44 (tests/fixtures/vk-wire-bloop/samples/, ROUTES.md rows 28–41 and 60–61 of the
//! recording). `git.rs` sends its calls here when the client follows a 0.1.x, and the proxy
//! calls the stops; nothing is decided here.
//!
//! What 0.1.x says differently from the fork, and how it is read:
//! - `git/status` answers the fork's `RepoBranchStatus` list field for field (0.1.x lacks none
//!   of its fields) plus `is_target_remote`; the entries pass on as they came.
//! - The bodies are the fork's: `{repo_id}`, and for a rebase `{repo_id, old_base_branch,
//!   new_base_branch}` (null = the workspace's target branch).
//! - HTTP status does not tell success: a rebase stopped on conflicts, a second rebase and a
//!   rejected push answer 200 with `success:false` and a typed `error_data` (a `GitAnswer`); a
//!   rebase onto a missing branch answers 200 with a `message` only; the rest are 404/409/500
//!   envelopes with a message (a merge whose target moved: 409 "Cannot merge: base branch …").
//!   [`refusal_of`] recognizes those texts as the fork's [`GitRefusal`] kinds.
//! - Not enveloped: an unknown workspace or process is 404 with an EMPTY body
//!   (`UpstreamError::NotFound`); an unknown `GET` is the web app's page (200 text/html) and an
//!   unknown `POST` a 405 without a body: both become a `Status` that says this VK has no such
//!   route, never a decode error that would suggest the change may have happened.
//! - The stops write `killed` at once, then block until the process group is gone (about 9 s
//!   for an agent, 4 s for a script): they get the client's usual 30 s, as the fork's do.

use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

use super::git::{GitAnswer, action_body};
use super::refusal::GitRefusal;
use super::rest::{UpstreamError, VkClient};
use super::routes_v01 as routes;
use super::wire::Envelope;
use vk_observer_vk::GitAction;

/// A git action may run git for a while (a rebase, a push to a slow remote); the fork's
/// `git_action` allows the same.
const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// Reads and stops: the bound every other REST call of the client has (a stop takes ~9 s).
const TIMEOUT: Duration = Duration::from_secs(30);

/// VK 0.1.x's 409 when a git action finds a rebase stopped in the worktree (its
/// `GitServiceError::RebaseInProgress` through `ApiError`; the rebase route says it with
/// `error_data` instead).
const REBASE_IN_PROGRESS_TEXT: &str = "A rebase is already in progress";

impl VkClient {
    /// `GET /api/workspaces/{id}/git/status`: one entry per repo, as the fork's branch status.
    pub(crate) async fn git_status_v01(
        &self,
        workspace: Uuid,
    ) -> Result<Vec<Value>, UpstreamError> {
        let path = routes::git_status(workspace);
        let (status, env) = self.exchange(Method::GET, &path, None, TIMEOUT).await?;
        if !(status.is_success() && env.success) {
            return Err(refused(status, env, path));
        }
        match env.data {
            Some(Value::Array(repos)) => Ok(repos),
            other => Err(UpstreamError::Decode {
                path,
                reason: format!("expected a list of repo statuses, got {}", kind_of(&other)),
            }),
        }
    }

    /// One git action on one repo of a workspace (`POST /api/workspaces/{id}/git/…`).
    pub(crate) async fn git_action_v01(
        &self,
        workspace: Uuid,
        repo_id: Uuid,
        action: &GitAction,
    ) -> Result<GitAnswer, UpstreamError> {
        let path = routes::git_action(workspace, action);
        let body = action_body(action, repo_id);
        let (status, env) = self
            .exchange(Method::POST, &path, Some(&body), GIT_TIMEOUT)
            .await?;
        answer_of(status, env, path)
    }

    /// `POST /api/workspaces/{id}/execution/stop`: VK 0.1.x's attempt stop. It stops every
    /// running process of the workspace but dev servers, and returns once they are gone. It has
    /// no force variant: a process VK lost the handle of (after a VK restart) stays `running`.
    pub async fn stop_workspace(&self, workspace: Uuid) -> Result<(), UpstreamError> {
        self.post_done(routes::execution_stop(workspace)).await
    }

    /// `POST /api/execution-processes/{id}/stop` on a 0.1.x (the fork's path; read here so an
    /// odd answer is named as 0.1.x's answers are). Returns once the process is gone.
    pub async fn stop_process_v01(&self, process: Uuid) -> Result<(), UpstreamError> {
        self.post_done(routes::process_stop(process)).await
    }

    /// A bodiless `POST` whose success is `success:true` with `data: null`.
    async fn post_done(&self, path: String) -> Result<(), UpstreamError> {
        let (status, env) = self.exchange(Method::POST, &path, None, TIMEOUT).await?;
        if status.is_success() && env.success {
            return Ok(());
        }
        Err(refused(status, env, path))
    }

    /// One request to a 0.1.x: its status and envelope, or the error its answer is.
    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(StatusCode, Envelope<Value>), UpstreamError> {
        let mut rb = self.request(method, path).timeout(timeout);
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let unreachable = |e: reqwest::Error| UpstreamError::Unreachable {
            url: self.url(path),
            reason: e.to_string(),
        };
        let resp = rb.send().await.map_err(unreachable)?;
        let status = resp.status();
        let html = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/html"));
        let bytes = resp.bytes().await.map_err(unreachable)?;
        envelope_of(status, html, &bytes, path)
    }
}

/// A 0.1.x answer read: VK's envelope, or what its absence means.
fn envelope_of(
    status: StatusCode,
    html: bool,
    body: &[u8],
    path: &str,
) -> Result<(StatusCode, Envelope<Value>), UpstreamError> {
    let fail = |message: String| UpstreamError::Status {
        status: status.as_u16(),
        path: path.into(),
        message,
    };
    if status == StatusCode::NOT_FOUND && body.is_empty() {
        return Err(UpstreamError::NotFound { path: path.into() });
    }
    if html {
        return Err(fail(
            "a web page, not VK's API: this VK has no such route (is it the VK 0.1.x the daemon took it for?)".into(),
        ));
    }
    if body.is_empty() {
        let why = if status == StatusCode::METHOD_NOT_ALLOWED {
            ": this VK has no such route for this method"
        } else {
            ""
        };
        return Err(fail(format!("an empty body{why}")));
    }
    match serde_json::from_slice::<Envelope<Value>>(body) {
        Ok(env) => Ok((status, env)),
        Err(e) if status.is_success() => Err(UpstreamError::Decode {
            path: path.into(),
            reason: e.to_string(),
        }),
        // axum's own refusals (bad id, bad JSON, missing fields): text/plain.
        Err(_) => Err(fail(
            String::from_utf8_lossy(body).chars().take(500).collect(),
        )),
    }
}

/// What a git action's answer was: done, a typed refusal, or an error carrying VK's message.
fn answer_of(
    status: StatusCode,
    env: Envelope<Value>,
    path: String,
) -> Result<GitAnswer, UpstreamError> {
    if status.is_success() && env.success {
        return Ok(GitAnswer::Done);
    }
    let text = |key: &str| {
        env.error_data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match text("type").as_deref() {
        Some("merge_conflicts") => Ok(GitAnswer::MergeConflicts {
            message: text("message").unwrap_or_default(),
            op: text("op"),
        }),
        Some("rebase_in_progress") => Ok(GitAnswer::RebaseInProgress),
        Some("force_push_required") => Ok(GitAnswer::ForcePushRequired),
        _ if status == StatusCode::CONFLICT
            && env
                .message
                .as_deref()
                .is_some_and(|m| m.contains(REBASE_IN_PROGRESS_TEXT)) =>
        {
            Ok(GitAnswer::RebaseInProgress)
        }
        _ => Err(refused(status, env, path)),
    }
}

/// A refusal as a `Status` error: VK's message, else the `error_data` kind it named.
fn refused(status: StatusCode, env: Envelope<Value>, path: String) -> UpstreamError {
    let kind = env
        .error_data
        .as_ref()
        .and_then(|d| d.get("type"))
        .and_then(Value::as_str)
        .map(|t| format!("VK refused: {t}"));
    UpstreamError::Status {
        status: status.as_u16(),
        path,
        message: env.message.or(kind).unwrap_or_default(),
    }
}

fn kind_of(v: &Option<Value>) -> &'static str {
    match v {
        None | Some(Value::Null) => "nothing",
        Some(Value::Object(_)) => "an object",
        Some(_) => "a value that is no list",
    }
}

/// VK 0.1.x's message-only refusals of a git action as the fork's kinds, from a `Status`
/// error of `git_action` (texts of VK v0.1.44's `ApiError` and git service); `None` for any
/// other error. A 409 not named here is no idempotency conflict: 0.1.x takes no key.
pub fn refusal_of(e: &UpstreamError) -> Option<GitRefusal> {
    let UpstreamError::Status {
        status, message, ..
    } = e
    else {
        return None;
    };
    let m = message.as_str();
    match *status {
        409 if m.contains("Cannot merge: base branch") => Some(GitRefusal::BranchesDiverged),
        _ if m.contains("has uncommitted changes") => Some(GitRefusal::UncommittedChanges),
        _ if m.contains("nothing to commit") => Some(GitRefusal::NothingToCommit),
        // A rebase onto a missing branch: 200 with a message only.
        200 | 400 if m.contains("does not exist in the repository") => {
            Some(GitRefusal::UnknownBranch)
        }
        404 if m.starts_with("Branch '") && m.contains("not found") => {
            Some(GitRefusal::UnknownBranch)
        }
        404 if m.contains("Repository not found") => Some(GitRefusal::RepoNotFound),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded exchange (tests/fixtures/vk-wire-bloop/samples/`name`): status, whether it
    /// was a web page, and the body as sent.
    fn recorded(name: &str) -> (StatusCode, bool, Vec<u8>) {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/vk-wire-bloop/samples/"
        );
        let text = std::fs::read_to_string(format!("{dir}{name}")).unwrap();
        let r: Value = serde_json::from_str(&text).unwrap();
        let status = StatusCode::from_u16(r["status"].as_u64().unwrap() as u16).unwrap();
        let html = r["content_type"]
            .as_str()
            .is_some_and(|t| t.starts_with("text/html"));
        let body = match r.get("response") {
            Some(v) => serde_json::to_vec(v).unwrap(),
            None => r["response_text"].as_str().unwrap().as_bytes().to_vec(),
        };
        (status, html, body)
    }

    fn answer(name: &str) -> Result<GitAnswer, UpstreamError> {
        let (status, html, body) = recorded(name);
        let (status, env) = envelope_of(status, html, &body, "/p")?;
        answer_of(status, env, "/p".into())
    }

    #[test]
    fn recorded_git_answers_are_read_as_the_forks() {
        assert_eq!(
            answer("rest-git-rebase-clean.json").unwrap(),
            GitAnswer::Done
        );
        assert_eq!(answer("rest-git-merge.json").unwrap(), GitAnswer::Done);
        assert_eq!(answer("rest-git-push-force.json").unwrap(), GitAnswer::Done);
        let GitAnswer::MergeConflicts { message, op } =
            answer("rest-git-rebase-conflict.json").unwrap()
        else {
            panic!("a rebase stopped on conflicts");
        };
        assert!(message.contains("shared.txt"), "{message}");
        assert_eq!(op.as_deref(), Some("rebase"));
        assert_eq!(
            answer("rest-git-rebase-again-in-progress.json").unwrap(),
            GitAnswer::RebaseInProgress
        );
        assert_eq!(
            answer("rest-git-push-rejected.json").unwrap(),
            GitAnswer::ForcePushRequired
        );
        for diverged in [
            "rest-git-merge-diverged.json",
            "rest-git-merge-during-conflict.json",
        ] {
            let e = answer(diverged).unwrap_err();
            assert!(
                matches!(e, UpstreamError::Status { status: 409, .. }),
                "{e}"
            );
            assert_eq!(refusal_of(&e), Some(GitRefusal::BranchesDiverged), "{e}");
        }
    }

    #[test]
    fn answers_without_an_envelope_are_named() {
        let e = answer("rest-err-workspace-unknown.json").unwrap_err();
        assert!(matches!(e, UpstreamError::NotFound { .. }), "{e}");
        let e = answer("rest-err-unknown-nested-route.json").unwrap_err();
        assert!(
            matches!(&e, UpstreamError::Status { status: 200, message, .. } if message.contains("no such route")),
            "{e}"
        );
        let e = answer("rest-err-unknown-api-route-post.json").unwrap_err();
        assert!(
            matches!(&e, UpstreamError::Status { status: 405, message, .. } if message.contains("no such route")),
            "{e}"
        );
        let plain = envelope_of(
            StatusCode::UNPROCESSABLE_ENTITY,
            false,
            b"missing field",
            "/p",
        );
        assert!(matches!(
            plain,
            Err(UpstreamError::Status { status: 422, .. })
        ));
        let garbage = envelope_of(StatusCode::OK, false, b"{\"x\":1", "/p");
        assert!(matches!(garbage, Err(UpstreamError::Decode { .. })));
    }

    /// VK v0.1.44's texts (its `ApiError` mapping and git service).
    #[test]
    fn message_only_refusals_are_the_forks_kinds() {
        let status = |status: u16, message: &str| UpstreamError::Status {
            status,
            path: "/p".into(),
            message: message.into(),
        };
        use GitRefusal::*;
        let cases = [
            (
                409,
                "Branch 'vk/ab12-x' has uncommitted changes (a.txt). Commit or revert them before retrying.",
                Some(UncommittedChanges),
            ),
            (
                200,
                "Branch 'nope' does not exist in the repository",
                Some(UnknownBranch),
            ),
            (
                404,
                "Branch 'nope' not found. Try changing the target branch.",
                Some(UnknownBranch),
            ),
            (404, "Repository not found.", Some(RepoNotFound)),
            (
                500,
                "Git operation failed: Invalid repository: CLI merge failed: nothing to commit, working tree clean",
                Some(NothingToCommit),
            ),
            (
                500,
                "Cannot merge: base branch 'main' is 1 commits ahead",
                None,
            ),
            (409, "Conflict: Request in progress", None),
            (
                400,
                "Cannot merge directly into a remote branch. Please create a pull request instead.",
                None,
            ),
        ];
        for (code, message, want) in cases {
            assert_eq!(refusal_of(&status(code, message)), want, "{message}");
        }
        assert_eq!(
            refusal_of(&UpstreamError::NotFound { path: "/p".into() }),
            None
        );
    }

    #[test]
    fn a_rebase_in_progress_said_by_a_409_is_the_typed_answer() {
        let body = br#"{"success":false,"data":null,"error_data":null,"message":"A rebase is already in progress. Resolve conflicts or abort the rebase, then retry."}"#;
        let (status, env) = envelope_of(StatusCode::CONFLICT, false, body, "/p").unwrap();
        assert_eq!(
            answer_of(status, env, "/p".into()).unwrap(),
            GitAnswer::RebaseInProgress
        );
        let typed = br#"{"success":false,"data":null,"error_data":{"type":"no_pr_attached"},"message":null}"#;
        let (status, env) = envelope_of(StatusCode::OK, false, typed, "/p").unwrap();
        let e = answer_of(status, env, "/p".into()).unwrap_err();
        assert!(e.to_string().contains("no_pr_attached"), "{e}");
    }

    #[test]
    fn routes_are_those_recorded() {
        let ws = Uuid::nil();
        let at = |a: GitAction| routes::git_action(ws, &a);
        let rebase = GitAction::Rebase {
            old_base_branch: None,
            new_base_branch: None,
        };
        assert_eq!(at(rebase), format!("/api/workspaces/{ws}/git/rebase"));
        assert_eq!(
            at(GitAction::AbortConflicts),
            format!("/api/workspaces/{ws}/git/conflicts/abort")
        );
        assert_eq!(
            at(GitAction::Merge),
            format!("/api/workspaces/{ws}/git/merge")
        );
        assert_eq!(
            at(GitAction::Push { force: false }),
            format!("/api/workspaces/{ws}/git/push")
        );
        assert_eq!(
            at(GitAction::Push { force: true }),
            format!("/api/workspaces/{ws}/git/push/force")
        );
        assert_eq!(
            routes::git_status(ws),
            format!("/api/workspaces/{ws}/git/status")
        );
        assert_eq!(
            routes::execution_stop(ws),
            format!("/api/workspaces/{ws}/execution/stop")
        );
        assert_eq!(
            routes::process_stop(ws),
            format!("/api/execution-processes/{ws}/stop")
        );
    }
}
