//! Discovery reads: `list_projects`, `list_repos`, `list_executors`, from the cached projects,
//! project repositories and the trimmed `/api/info` facts. Projects and repositories page
//! through `query::paging` (name order, opaque cursors). A repository's current branch is not
//! cached (VK's streams do not carry it): `proxy::repos` fills those fields in from VK.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::detail::Rules;
use super::paging::{self, ListId, PageArgs, by_name_key};
use super::{Freshness, Query, View};
use vk_observer_store::events::HOST_FIELD;
use vk_observer_tool_error::{ErrorCode, ToolError};
use vk_observer_vk::{string_of, ts_string};

/// A VK project.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ProjectInfo {
    /// Project id (UUID); pass it to list_tasks, list_repos and create_task.
    pub project_id: Uuid,
    /// Project name (the same as get_context's `project_name`).
    pub project_name: String,
    /// Deprecated alias of `project_name` (kept until 0.3.0).
    pub name: String,
    /// Number of repositories in the project.
    pub repo_count: usize,
    /// Fleet node only: the host that owns it (`[fleet] host`); absent on a single host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Fleet node only: every host that lists this project, sorted (one project may live on
    /// several; then create_task needs `host`); absent on a single host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

/// Answer of `list_projects`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ProjectList {
    /// This page of projects, sorted by name (project_id ascending on ties).
    pub projects: Vec<ProjectInfo>,
    /// Pass as `cursor` to get the next page; null when this is the last page.
    pub next_cursor: Option<String>,
    /// True when more projects follow this page (then `next_cursor` is set).
    pub has_more: bool,
    /// Number of projects on this page.
    #[schemars(schema_with = "paging::count_schema")]
    pub count: usize,
    /// Number of projects in the whole list (all pages).
    #[schemars(schema_with = "paging::count_schema")]
    pub total: usize,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// A repository of a project.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct RepoInfo {
    /// Repository id (UUID); use it in start_task_attempt `repos[].repo_id`.
    pub repo_id: Uuid,
    /// Folder name inside an attempt workspace; changed paths are prefixed with it (the same as
    /// get_context's and get_attempt_branch_status's `repo_name`).
    pub repo_name: String,
    /// Deprecated alias of `repo_name` (kept until 0.3.0).
    pub name: String,
    /// Name shown in the UI.
    pub display_name: Option<String>,
    /// Path of the repository on the VK host.
    pub path: Option<String>,
    /// When it was added (RFC 3339).
    pub created_at: Option<String>,
    /// The branch checked out in the repository's own checkout on the VK host (VK's
    /// `is_current`, read live from VK, at most `branches.max_age_ms` old); start_task_attempt
    /// uses it when a repo's `target_branch` is omitted. VK has no "default branch": this is
    /// the current one. Absent when HEAD is detached (`head_detached`) or VK could not be asked
    /// (`branches_unavailable`).
    pub current_branch: Option<String>,
    /// True when VK answered but no branch is checked out (detached HEAD): give target_branch
    /// explicitly for this repo.
    pub head_detached: bool,
}

/// Answer of `list_repos`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct RepoList {
    /// The project (UUID).
    pub project_id: Uuid,
    /// This page of repositories, sorted by name (repo_id ascending on ties).
    pub repos: Vec<RepoInfo>,
    /// Pass as `cursor` to get the next page; null when this is the last page.
    pub next_cursor: Option<String>,
    /// True when more repositories follow this page (then `next_cursor` is set).
    pub has_more: bool,
    /// Number of repositories on this page.
    #[schemars(schema_with = "paging::count_schema")]
    pub count: usize,
    /// Number of repositories of the project (all pages).
    #[schemars(schema_with = "paging::count_schema")]
    pub total: usize,
    /// When VK was asked for this page's `current_branch` values (they are not in VK's event
    /// streams, so they are read live and kept a few seconds); null when it could not be.
    pub branches: Option<BranchesRead>,
    /// Why `current_branch` is missing on this page: VK could not be asked (the rest of the
    /// list is from the cache as usual). Absent when every repo was read.
    pub branches_unavailable: Option<BranchesUnavailable>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// When the repositories' branches were read from VK.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct BranchesRead {
    /// When VK answered the oldest of this page's branch reads (RFC 3339).
    pub as_of: String,
    /// How old a kept branch read may be before VK is asked again (milliseconds).
    pub max_age_ms: u64,
}

/// Why branches are missing from a `list_repos` page.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct BranchesUnavailable {
    /// The error code of the failed read (e.g. `upstream_unavailable`, `not_configured`).
    pub code: String,
    /// What to do: retry later, or pass target_branch explicitly.
    pub hint: String,
    /// The repositories without a `current_branch` because of it.
    pub repo_ids: Vec<Uuid>,
}

/// A coding-agent executor VK can run.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ExecutorInfo {
    /// Stable identifier (e.g. `CLAUDE_CODE`); pass it unchanged as start_task_attempt `executor`.
    pub executor: String,
    /// Configured variants (e.g. `DEFAULT`, `PLAN`), sorted; may be empty.
    pub variants: Vec<String>,
    /// Variant VK uses when none is given: the configured default profile's variant for the
    /// default executor, else `DEFAULT` when that variant exists; null otherwise.
    pub default_variant: Option<String>,
    /// True if the executor can be given MCP servers (it has an MCP configuration file).
    pub supports_mcp: bool,
    /// True for every executor: VK queues a follow-up per session and sends it when the
    /// running process ends, whatever the agent (follow_up `action: queue`).
    pub supports_follow_up_queue: bool,
    /// False: this daemon offers no pull-request action (push_attempt, then open the PR on
    /// the forge); not an executor's property in VK.
    pub supports_pr: bool,
    /// False: a dev server is a project's script VK starts from its own UI, not an executor's;
    /// this daemon starts none (get_attempt_status reports `dev_server_running`).
    pub supports_dev_server: bool,
    /// True if this is VK's configured default executor.
    pub is_default: bool,
    /// VK capability flags for the executor (e.g. `SESSION_FORK`).
    pub capabilities: Vec<String>,
    /// Fleet node only: the host whose VK offers it (each host's executors are listed apart;
    /// start_task_attempt runs on the task's host); absent on a single host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// Answer of `list_executors`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ExecutorList {
    /// Executors sorted by identifier (then host, on a fleet node).
    pub executors: Vec<ExecutorInfo>,
    /// Store token at the time of this read (opaque).
    pub token: String,
    /// How current the cache is. Detail 0 leaves it out while the cache is current.
    pub freshness: Freshness,
}

/// Whether VK can give the executor MCP servers. VK's API carries no such fact (`/api/info`
/// has executors, profiles and capability flags; no route exposes MCP configuration), so this
/// is VK's source rule: every coding agent's `default_mcp_config_path` is some path except the
/// fake test agent's (executors-core `StandardCodingAgentExecutor`, checked at VK HEAD).
fn supports_mcp(executor: &str) -> bool {
    executor != "FAKE_AGENT"
}

/// `list_executors`' `capabilities_filter`: an executor is listed only if it has every one of
/// these (`supports_mcp`, or a VK capability flag such as `SESSION_FORK`).
#[derive(Debug, Default)]
pub struct ExecutorFilter {
    needs: Vec<String>,
}

impl ExecutorFilter {
    pub fn parse(items: Vec<String>) -> Result<Self, ToolError> {
        let needs: Vec<String> = items.iter().map(|s| s.trim().to_string()).collect();
        if needs.iter().any(String::is_empty) {
            return Err(ToolError::invalid_field(
                "capabilities_filter",
                "capabilities_filter entries must be non-empty: `supports_mcp`, `supports_follow_up_queue`, `supports_pr`, `supports_dev_server` or a VK capability flag such as `SESSION_FORK`.",
            ));
        }
        Ok(ExecutorFilter { needs })
    }

    fn admits(&self, e: &ExecutorInfo) -> bool {
        self.needs
            .iter()
            .all(|n| match n.to_ascii_lowercase().as_str() {
                "supports_mcp" => e.supports_mcp,
                "supports_follow_up_queue" => e.supports_follow_up_queue,
                "supports_pr" => e.supports_pr,
                "supports_dev_server" => e.supports_dev_server,
                _ => e.capabilities.iter().any(|c| c.eq_ignore_ascii_case(n)),
            })
    }
}

impl Query {
    /// `list_projects` of a caller limited to `within` (None: every project), filtered before
    /// paging so counts, totals and cursors are those of what it may see.
    pub fn list_projects_within(
        &self,
        args: &PageArgs,
        within: Option<&[Uuid]>,
    ) -> Result<ProjectList, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        let list = ListId {
            tool: "list_projects",
            field: "cursor",
            scope: None,
        };
        let mut all = reader.projects()?;
        if let Some(within) = within {
            all.retain(|p| within.contains(&p.id));
        }
        let page = paging::page(list, all, args, |p| {
            by_name_key(&string_of(&p.value, "name").unwrap_or_default(), p.id)
        })?;
        // Repository counts only for the page: a scan per project, paid for what is shown.
        let mut projects = Vec::with_capacity(page.items.len());
        for p in page.items {
            projects.push(ProjectInfo {
                project_id: p.id,
                project_name: string_of(&p.value, "name").unwrap_or_default(),
                name: string_of(&p.value, "name").unwrap_or_default(),
                repo_count: reader.repos_of_project(p.id)?.len(),
                host: string_of(&p.value, HOST_FIELD),
                hosts: super::hosts::listing_hosts(Some(&p.value)),
            });
        }
        Ok(ProjectList {
            count: projects.len(),
            projects,
            next_cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
            token,
            freshness,
        })
    }

    pub fn list_repos(&self, project: Uuid, args: &PageArgs) -> Result<RepoList, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        super::target::project(&reader, project)?;
        let list = ListId {
            tool: "list_repos",
            field: "cursor",
            scope: Some(project),
        };
        let page = paging::page(list, reader.repos_of_project(project)?, args, |r| {
            by_name_key(&string_of(&r.value, "name").unwrap_or_default(), r.id)
        })?;
        let repos: Vec<RepoInfo> = page
            .items
            .into_iter()
            .map(|r| RepoInfo {
                repo_id: r.id,
                repo_name: string_of(&r.value, "name").unwrap_or_default(),
                name: string_of(&r.value, "name").unwrap_or_default(),
                display_name: string_of(&r.value, "display_name"),
                path: string_of(&r.value, "path"),
                created_at: ts_string(&r.value, "created_at"),
                current_branch: None,
                head_detached: false,
            })
            .collect();
        Ok(RepoList {
            project_id: project,
            count: repos.len(),
            repos,
            next_cursor: page.next_cursor,
            has_more: page.has_more,
            total: page.total,
            branches: None,
            branches_unavailable: None,
            token,
            freshness,
        })
    }

    pub fn list_executors(&self, filter: &ExecutorFilter) -> Result<ExecutorList, ToolError> {
        let View {
            token,
            reader,
            freshness,
            ..
        } = self.view();
        // A host daemon's own VK, or on a fleet node every host's (each entry names its host).
        let infos: Vec<(Option<String>, Value)> = match reader.server_info()? {
            Some(info) => vec![(None, info)],
            None => reader
                .host_server_infos()?
                .into_iter()
                .map(|(host, info)| (Some(host), info))
                .collect(),
        };
        if infos.is_empty() {
            return Err(ToolError::new(
                ErrorCode::NotReady,
                true,
                "The daemon has not loaded VK's executor list yet (VK unreachable since start). Retry in a few seconds.",
            ));
        }
        let mut executors: Vec<ExecutorInfo> = infos
            .iter()
            .flat_map(|(host, info)| executors_of(info, host.as_deref()))
            .collect();
        executors.retain(|e| filter.admits(e));
        executors.sort_by(|a, b| (&a.executor, &a.host).cmp(&(&b.executor, &b.host)));
        Ok(ExecutorList {
            executors,
            token,
            freshness,
        })
    }
}

/// The executors one VK's `/api/info` facts list (`host`: the fleet host they are of).
fn executors_of(info: &Value, host: Option<&str>) -> Vec<ExecutorInfo> {
    let default_profile = info.get("executor_profile").cloned().unwrap_or_default();
    let default_executor = default_profile.get("executor").and_then(Value::as_str);
    let Some(map) = info.get("executors").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut executors = Vec::with_capacity(map.len());
    for (name, variants) in map {
        let mut vs: Vec<String> = variants
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        vs.sort();
        let is_default = default_executor == Some(name.as_str());
        let configured = is_default
            .then(|| default_profile.get("variant")?.as_str().map(str::to_owned))
            .flatten();
        let default_variant = configured.or_else(|| {
            vs.iter()
                .any(|v| v == "DEFAULT")
                .then(|| "DEFAULT".to_string())
        });
        let capabilities =
            vk_observer_vk::strings(info.get("capabilities").and_then(|c| c.get(name)));
        executors.push(ExecutorInfo {
            executor: name.clone(),
            variants: vs,
            default_variant,
            supports_mcp: supports_mcp(name),
            supports_follow_up_queue: true,
            supports_pr: false,
            supports_dev_server: false,
            is_default,
            capabilities,
            host: host.map(str::to_owned),
        });
    }
    executors
}

/// What each detail level shows of `list_projects` (`query::detail`): the list even when
/// empty; repository counts from 1.
pub const PROJECT_LIST_RULES: Rules = Rules {
    finish: None,
    kept: &["projects"],
    standard: &[],
    verbatim: &[],
    nested: &[(
        "projects",
        &Rules {
            finish: None,
            kept: &[],
            standard: &["repo_count"],
            verbatim: &[],
            nested: &[],
        },
    )],
};

/// What each detail level shows of `list_repos`: ids, folder names and current branches at 0;
/// when the branches were read from 1.
pub const REPO_LIST_RULES: Rules = Rules {
    finish: None,
    kept: &["repos"],
    standard: &["branches"],
    verbatim: &[],
    nested: &[(
        "repos",
        &Rules {
            finish: None,
            kept: &[],
            standard: &["display_name", "path", "created_at"],
            verbatim: &[],
            nested: &[],
        },
    )],
};

/// What each detail level shows of `list_executors`: seed 002's list at 0 (name, variants,
/// MCP support, the default variant or null); seed 003's other flags and VK's capability
/// flags from 1.
pub const EXECUTOR_LIST_RULES: Rules = Rules {
    finish: None,
    kept: &["executors"],
    standard: &[],
    verbatim: &[],
    nested: &[(
        "executors",
        &Rules {
            finish: None,
            kept: &["executor", "variants", "supports_mcp", "default_variant"],
            standard: &[
                "capabilities",
                "supports_follow_up_queue",
                "supports_pr",
                "supports_dev_server",
            ],
            verbatim: &[],
            nested: &[],
        },
    )],
};
