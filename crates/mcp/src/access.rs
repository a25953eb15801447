//! Who is calling and what it may do (issue 26; threat model in docs/reliability.md).
//!
//! The HTTP guard (`transport::guard`) turns a request's bearer token into a [`Caller`] — the
//! `[mcp] token` (every scope), a token of the tokens file (`config::access`, re-read from
//! [`TokenBook`] when the file changes), or the tokenless loopback caller when no token is in
//! use at all — and puts it in the request's extensions, where every handler finds it (rmcp
//! hands the request's `http::request::Parts` to handlers). `VkTools` then makes it a
//! [`Grant`]: a tokenless caller whose client runs inside an attempt workspace (the
//! `x-vk-workspace` header of the stdio bridge, or the daemon's own directory) gets only `read`
//! and `write`, limited to its own attempt. [`Grant::check`] runs before a tool's handler, so a
//! refused call never reaches VK, and `tools/list` shows only what the grant allows.
//!
//! Limits hold for reads too: every id a read names must be placed (`query::owner`) inside
//! the grant's projects, or be the caller's own attempt (its task; its project only for the
//! task list and repositories). Listings that name no target are filtered instead: the handler
//! asks [`visible_projects`] / [`only_task`] for the grant of the call it serves ([`reading`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::tools;
use vk_observer_config::access::{
    CONFIG_TOKEN_CALLER, LOOPBACK_CALLER, Scope, Scopes, TokenFile, TokenRecord, same,
};
use vk_observer_query::Query;
use vk_observer_query::owner::{Owner, ReadTarget};
use vk_observer_tool_error::{ErrorCode, ToolError};

/// The authenticated identity of a request, as the guard found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    /// The token's name, `mcp-token`, or `loopback` (no token).
    pub name: String,
    pub scopes: Scopes,
    /// The projects it may act on; None for every project.
    pub projects: Option<Vec<Uuid>>,
    /// Whether it presented a token (a tokenless caller inside a workspace is narrowed).
    pub presented_token: bool,
}

impl Caller {
    /// No token in use anywhere: today's behaviour, every scope.
    pub(crate) fn loopback() -> Caller {
        Caller {
            name: LOOPBACK_CALLER.into(),
            scopes: Scopes::all(),
            projects: None,
            presented_token: false,
        }
    }

    fn config_token() -> Caller {
        Caller {
            name: CONFIG_TOKEN_CALLER.into(),
            scopes: Scopes::all(),
            projects: None,
            presented_token: true,
        }
    }

    fn from_record(t: &TokenRecord) -> Caller {
        let projects: Vec<Uuid> = t
            .projects
            .iter()
            .filter_map(|p| Uuid::parse_str(p).ok())
            .collect();
        Caller {
            name: t.name.clone(),
            scopes: t.scope_set(),
            // A record naming only unparsable projects may touch none, not all.
            projects: (!t.projects.is_empty()).then_some(projects),
            presented_token: true,
        }
    }
}

/// Why a request was not let in. Deliberately one answer for every failure: the 401 says
/// nothing of which part of a token was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unauthorized;

/// The configured token and the tokens file, re-read when the file changes (its size, time or
/// inode: `token create|revoke` replaces it by rename).
pub struct TokenBook {
    config_token: Option<String>,
    path: Option<PathBuf>,
    loaded: Mutex<(Option<Stamp>, Arc<TokenFile>)>,
}

type Stamp = (SystemTime, u64, u64);

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((m.modified().ok()?, m.len(), ino))
}

impl TokenBook {
    pub(crate) fn new(config_token: Option<String>, path: Option<PathBuf>) -> TokenBook {
        TokenBook {
            config_token: config_token.filter(|t| !t.trim().is_empty()),
            path,
            loaded: Mutex::new((None, Arc::new(TokenFile::default()))),
        }
    }

    /// The tokens file as it is now. A file that does not parse keeps the last good one (it is
    /// only ever replaced whole, so that is a person's hand edit), with a warning.
    fn tokens(&self) -> Arc<TokenFile> {
        let Some(path) = &self.path else {
            return Arc::new(TokenFile::default());
        };
        let now = stamp(path);
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.0 != now {
            match TokenFile::load(path) {
                Ok(file) => *loaded = (now, Arc::new(file)),
                Err(e) => tracing::warn!("keeping the previous tokens: {e:#}"),
            }
        }
        loaded.1.clone()
    }

    /// Whether any token is in use (`[mcp] token` or the tokens file): then every request
    /// needs one, the board's included (its login form).
    pub fn in_use(&self) -> bool {
        self.in_use_with(&self.tokens())
    }

    /// `in_use` for the tokens file as `tokens` read it.
    fn in_use_with(&self, file: &TokenFile) -> bool {
        self.config_token.is_some() || !file.tokens.is_empty()
    }

    /// The caller a request's `Authorization` header makes, or `Unauthorized`. With no token
    /// in use at all every request is the loopback caller, header or not, as before tokens had
    /// scopes (a non-loopback listen address needs `[mcp] token`: `McpSettings::check_exposure`).
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, Unauthorized> {
        // The file is looked at once per request (a `stat`; read again only when it changed).
        let file = self.tokens();
        if !self.in_use_with(&file) {
            return Ok(Caller::loopback());
        }
        let secret = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or(Unauthorized)?;
        if let Some(t) = &self.config_token
            && same(secret.as_bytes(), t.as_bytes())
        {
            return Ok(Caller::config_token());
        }
        file.find(secret)
            .map(Caller::from_record)
            .ok_or(Unauthorized)
    }
}

/// Which targets a grant's mutations may name.
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    Everything,
    Projects(Vec<Uuid>),
    /// The attempt of the workspace the client runs in.
    OwnAttempt(Uuid),
}

/// What one request may do: its caller's scopes, narrowed inside a workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub caller: String,
    pub scopes: Scopes,
    pub limit: Limit,
}

impl Grant {
    /// `caller` (None: a server not behind the guard, e.g. in-process tests: every scope)
    /// running in the workspace of `own_attempt`, if any.
    pub(crate) fn new(caller: Option<&Caller>, own_attempt: Option<Uuid>) -> Grant {
        let caller = caller.cloned().unwrap_or_else(Caller::loopback);
        match (caller.presented_token, own_attempt) {
            (false, Some(attempt)) => Grant {
                caller: caller.name,
                scopes: Scopes::of(&[Scope::Read, Scope::Write]),
                limit: Limit::OwnAttempt(attempt),
            },
            _ => Grant {
                caller: caller.name,
                scopes: caller.scopes,
                limit: caller
                    .projects
                    .map(Limit::Projects)
                    .unwrap_or(Limit::Everything),
            },
        }
    }

    /// The grant of a caller that presents its token from outside any attempt workspace (the
    /// board's: a browser has no workspace).
    pub fn of_caller(caller: &Caller) -> Grant {
        Grant::new(Some(caller), None)
    }

    /// Whether `tool` is listed to this grant (unknown tools are the router's to refuse).
    pub(crate) fn lists(&self, tool: &str) -> bool {
        tools::scope_of(tool).is_none_or(|s| self.scopes.contains(s))
    }

    /// `forbidden` unless this grant may call `tool` with `args`: its scope first, then, for a
    /// mutation of a limited grant, the owner of the target it names.
    pub fn check(
        &self,
        tool: &str,
        args: Option<&Map<String, Value>>,
        query: &Query,
    ) -> Result<(), ToolError> {
        let Some(scope) = tools::scope_of(tool) else {
            return Ok(());
        };
        if !self.scopes.contains(scope) {
            return Err(self.missing_scope(tool, scope));
        }
        if self.limit == Limit::Everything {
            return Ok(());
        }
        if scope == Scope::Read {
            return self.check_read(tool, args, query);
        }
        let empty = Map::new();
        let owner = query.owner_of(args.unwrap_or(&empty))?;
        if owner.is_some_and(|o| self.may_touch(o)) {
            return Ok(());
        }
        Err(self.outside_limit(tool))
    }

    /// `forbidden` unless every id the read `tool` names lies within this grant's limit; the
    /// refusal names each id that does not (a batch is refused whole, never silently cut).
    pub fn check_read(
        &self,
        tool: &str,
        args: Option<&Map<String, Value>>,
        query: &Query,
    ) -> Result<(), ToolError> {
        if self.limit == Limit::Everything {
            return Ok(());
        }
        let empty = Map::new();
        let targets = query.read_targets(args.unwrap_or(&empty))?;
        if targets.is_empty() {
            return Ok(());
        }
        let own = match &self.limit {
            Limit::OwnAttempt(a) => query.owner_of_attempt(*a)?,
            _ => None,
        };
        let refused: Vec<Value> = targets
            .iter()
            .filter(|t| !self.may_read(tool, t, own))
            .map(|t| json!({"field": t.field, "id": t.id}))
            .collect();
        if refused.is_empty() {
            return Ok(());
        }
        let mut e = self.outside_limit(tool);
        e.hint = self.read_hint(tool, refused.len());
        if let Some(d) = e.details.as_object_mut() {
            d.insert("scope".into(), Scope::Read.as_str().into());
            d.insert("refused".into(), refused.into());
        }
        Err(e)
    }

    /// Whether a read may name `target`: inside the grant's projects; or, inside a workspace,
    /// its own attempt, its own task, and its own project for the listings in
    /// [`OWN_PROJECT_READS`]. Not cached: not shown to be its own, refused.
    fn may_read(&self, tool: &str, target: &ReadTarget, own: Option<Owner>) -> bool {
        let Some(owner) = target.owner else {
            return false;
        };
        match &self.limit {
            Limit::Everything => true,
            Limit::Projects(projects) => projects.contains(&owner.project),
            Limit::OwnAttempt(_) => own.is_some_and(|own| match (owner.attempt, owner.task) {
                (Some(attempt), _) => own.attempt == Some(attempt),
                (None, Some(task)) => own.task == Some(task),
                (None, None) => owner.project == own.project && OWN_PROJECT_READS.contains(&tool),
            }),
        }
    }

    fn read_hint(&self, tool: &str, refused: usize) -> String {
        match &self.limit {
            Limit::OwnAttempt(a) => format!(
                "{tool} may read only this workspace's own attempt {a} (its task; in its project only list_tasks and list_repos) from inside it without a token. Do not retry: pass your own attempt_id or task_id (get_context), or ask the orchestrator."
            ),
            _ => format!(
                "{tool} names {refused} id(s) (details.refused) outside the projects this caller's token may read, or not in the cache. Do not retry as is: name only targets of your projects (list_projects shows them), or ask for a token for that project."
            ),
        }
    }

    fn may_touch(&self, owner: Owner) -> bool {
        match &self.limit {
            Limit::Everything => true,
            Limit::Projects(projects) => projects.contains(&owner.project),
            Limit::OwnAttempt(attempt) => owner.attempt == Some(*attempt),
        }
    }

    /// A scope this grant lacks: the hint names it, and who can grant it.
    pub(crate) fn missing_scope(&self, tool: &str, scope: Scope) -> ToolError {
        let why = match self.limit {
            Limit::OwnAttempt(_) => {
                "a client inside an attempt workspace without a token gets read and write on its own attempt only; approvals and delivery are for the orchestrator or a person"
            }
            _ => "this caller's token does not carry it",
        };
        ToolError::new(
            ErrorCode::Forbidden,
            false,
            format!("{tool} needs scope `{scope}` ({why}). Do not retry: ask the operator for a token with `{scope}` (vk-observer token create --scopes ...), or leave this step to the orchestrator."),
        )
        .with_details(json!({"tool": tool, "scope": scope.as_str(), "caller": self.caller, "scopes": self.scopes.names()}))
    }

    fn outside_limit(&self, tool: &str) -> ToolError {
        let (hint, limit) = match &self.limit {
            Limit::OwnAttempt(a) => (
                format!(
                    "{tool} may act only on this workspace's own attempt {a} from inside it (without a token). Pass your own attempt_id (get_context), or ask the orchestrator."
                ),
                json!({"attempt_id": a}),
            ),
            _ => (
                format!(
                    "{tool}'s target is not in a project this caller's token may touch (or not in the cache). Use a target of your projects, or a token for this project."
                ),
                json!({"project_ids": match &self.limit { Limit::Projects(p) => p.clone(), _ => vec![] }}),
            ),
        };
        ToolError::new(ErrorCode::Forbidden, false, hint).with_details(json!({
            "tool": tool,
            "scope": tools::scope_of(tool).map(Scope::as_str),
            "caller": self.caller,
            "limit": limit,
        }))
    }
}

/// The project-level reads a client inside a workspace may make of its own project: the task
/// list (filtered to its own task) and the repositories. Project activity, approvals and waits
/// over the project would show the other attempts.
const OWN_PROJECT_READS: [&str; 2] = ["list_tasks", "list_repos"];

tokio::task_local! {
    static READING: Grant;
}

/// Runs a read's handler with `grant` as the grant of the call it serves.
pub(crate) async fn reading<F: std::future::Future>(grant: Grant, call: F) -> F::Output {
    READING.scope(grant, call).await
}

/// The grant of the call being served (every scope outside [`reading`], e.g. the CLI).
fn current_limit() -> Limit {
    READING
        .try_with(|g| g.limit.clone())
        .unwrap_or(Limit::Everything)
}

/// The projects the caller of the read being served may see; None for every project.
pub(crate) fn visible_projects(query: &Query) -> Result<Option<Vec<Uuid>>, ToolError> {
    Ok(match current_limit() {
        Limit::Everything => None,
        Limit::Projects(p) => Some(p),
        Limit::OwnAttempt(a) => Some(
            query
                .owner_of_attempt(a)?
                .map(|o| o.project)
                .into_iter()
                .collect(),
        ),
    })
}

/// The one task a listing of the caller may show (its own, inside a workspace); None for all.
/// A caller whose own attempt the cache cannot place sees no task (the nil id matches none).
pub(crate) fn only_task(query: &Query) -> Result<Option<Uuid>, ToolError> {
    Ok(match current_limit() {
        Limit::OwnAttempt(a) => Some(
            query
                .owner_of_attempt(a)?
                .and_then(|o| o.task)
                .unwrap_or(Uuid::nil()),
        ),
        _ => None,
    })
}

/// The id arguments an audit entry keeps.
const AUDITED_IDS: [&str; 7] = [
    "project_id",
    "task_id",
    "attempt_id",
    "session_id",
    "execution_process_id",
    "approval_id",
    "repo_id",
];

/// The audit context of a mutation (`proxy::audit`): who, and the ids it names, with the
/// project and attempt they belong to where the cache knows them.
pub(crate) fn audit_context(
    grant: &Grant,
    args: Option<&Map<String, Value>>,
    query: &Query,
) -> vk_observer_proxy::audit::AuditContext {
    let empty = Map::new();
    let args = args.unwrap_or(&empty);
    let mut targets: Map<String, Value> = AUDITED_IDS
        .iter()
        .filter_map(|f| Some((f.to_string(), args.get(*f)?.as_str()?.into())))
        .collect();
    if let Ok(Some(owner)) = query.owner_of(args) {
        targets
            .entry("project_id")
            .or_insert(owner.project.to_string().into());
        if let Some(t) = owner.task {
            targets.entry("task_id").or_insert(t.to_string().into());
        }
        if let Some(a) = owner.attempt {
            targets.entry("attempt_id").or_insert(a.to_string().into());
        }
    }
    vk_observer_proxy::audit::AuditContext {
        caller: grant.caller.clone(),
        targets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokenless_client_inside_a_workspace_gets_read_and_write_only() {
        let own = Uuid::from_u128(7);
        let g = Grant::new(None, Some(own));
        assert!(g.lists("get_attempt_status") && g.lists("follow_up"));
        assert!(!g.lists("respond_approval") && !g.lists("merge_attempt"));
        assert_eq!(g.limit, Limit::OwnAttempt(own));
        let full = Grant::new(Some(&Caller::config_token()), Some(own));
        assert!(full.lists("merge_attempt"), "a token grants more");
    }

    #[test]
    fn every_token_failure_is_the_same_answer() {
        let dir = std::env::temp_dir().join(format!("vko-book-{}", Uuid::new_v4()));
        let path = dir.join("tokens.toml");
        let mut file = TokenFile::default();
        let secret = file
            .create("agent", Scopes::of(&[Scope::Read]), vec![])
            .unwrap();
        file.create("orchestrator", Scopes::all(), vec![]).unwrap();
        file.save(&path).unwrap();
        let book = TokenBook::new(None, Some(path.clone()));
        let bearer = format!("Bearer {secret}");
        assert_eq!(book.authenticate(Some(&bearer)).unwrap().name, "agent");
        for wrong in [
            None,
            Some("Bearer vko_nope"),
            Some("Basic x"),
            Some("Bearer "),
        ] {
            assert_eq!(book.authenticate(wrong), Err(Unauthorized));
        }
        file.revoke("agent");
        file.save(&path).unwrap();
        assert_eq!(
            book.authenticate(Some(&bearer)),
            Err(Unauthorized),
            "revoked"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
