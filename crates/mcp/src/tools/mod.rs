//! The tools, one file (or folder) per family of the README: `discovery`, `tasks`, `attempts`,
//! `observe`, `activity`, `artifacts`, `delivery`, `approvals`, `context`, `usage`. A family file holds
//! its tools' names, handlers (parse → `query`/`proxy` → `answer`), argument structs and
//! descriptions, and registers them as a [`Family`]; [`FAMILIES`] is the one list of families,
//! and everything else about the tools (the router, which tools take `detail`, the names the
//! CLI calls) is derived from it.
//!
//! Shared by every family: `args` (the argument extractor and portable schemas), `answer` (the
//! one way a handler answers, detail shaping, output schemas), `paging` (page sizes, batch
//! bounds).

pub mod activity;
pub(crate) mod answer;
pub mod approvals;
pub(crate) mod args;
pub mod artifacts;
pub mod attempts;
pub mod context;
pub(crate) mod delivery;
pub mod discovery;
pub(crate) mod mutations;
pub mod observe;
pub mod paging;
pub mod tasks;
pub(crate) mod usage;

use std::sync::{Arc, OnceLock};

use rmcp::handler::server::tool::ToolRouter;
use serde_json::Value;

use super::VkTools;

pub use vk_observer_config::access::Scope;

/// What a family registers: its name (the README's), its tools' names each with the scope a
/// caller needs for it (`mcp::access`: this is the one table of them), and its router (the
/// handlers and their schemas, made by rmcp's `#[tool_router]`).
pub(crate) struct Family {
    #[allow(dead_code, reason = "kept for Debug output")]
    pub name: &'static str,
    pub tools: &'static [(&'static str, Scope)],
    pub router: fn() -> ToolRouter<VkTools>,
}

/// Every family, in the README's order.
pub(crate) const FAMILIES: [Family; 10] = [
    discovery::FAMILY,
    tasks::FAMILY,
    attempts::FAMILY,
    observe::FAMILY,
    activity::FAMILY,
    artifacts::FAMILY,
    delivery::FAMILY,
    approvals::FAMILY,
    context::FAMILY,
    usage::FAMILY,
];

/// The tool router, built once from [`FAMILIES`]: in stateless mode a handler is made per
/// request, and building the router generates every tool's schemas.
pub(crate) fn router() -> Arc<ToolRouter<VkTools>> {
    static ROUTER: OnceLock<Arc<ToolRouter<VkTools>>> = OnceLock::new();
    ROUTER
        .get_or_init(|| {
            let mut router = FAMILIES
                .iter()
                .fold(ToolRouter::new(), |all, family| all + (family.router)());
            // Output schemas come from the result types; only here can they be shaped like the
            // input schemas are (`args::input_schema`).
            for route in router.map.values_mut() {
                if let Some(out) = &route.attr.output_schema {
                    route.attr.output_schema = Some(args::output_schema(out));
                }
            }
            Arc::new(router)
        })
        .clone()
}

/// The scope a caller needs for `tool`; None for a name no family registers.
pub fn scope_of(tool: &str) -> Option<Scope> {
    FAMILIES
        .iter()
        .flat_map(|f| f.tools)
        .find(|(name, _)| *name == tool)
        .map(|(_, scope)| *scope)
}

/// Every tool's name, in the families' order.
pub fn names() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().flat_map(|f| f.tools).map(|(name, _)| *name)
}

/// Whether `tool` answers at a detail level: its input schema takes `detail` (0 | 1 | 2).
/// Clients that want the full answers (the CLI, the tests written before levels) ask these
/// for `detail: 2`.
pub fn takes_detail(tool: &str) -> bool {
    detail_tools().iter().any(|t| t == tool)
}

/// Every tool whose input schema takes `detail`, read from the router's schemas.
pub fn detail_tools() -> &'static [String] {
    static TOOLS: OnceLock<Vec<String>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        router()
            .list_all()
            .into_iter()
            .filter(|t| {
                t.input_schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| p.contains_key("detail"))
            })
            .map(|t| t.name.to_string())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A family's names are exactly the tools its router serves, and no two families share one.
    #[test]
    fn each_family_names_exactly_its_tools() {
        let mut seen = std::collections::HashSet::new();
        for family in &FAMILIES {
            let mut routed: Vec<String> = (family.router)()
                .list_all()
                .into_iter()
                .map(|t| t.name.to_string())
                .collect();
            routed.sort();
            let mut named: Vec<String> = family.tools.iter().map(|t| t.0.to_string()).collect();
            named.sort();
            assert_eq!(routed, named, "family {}", family.name);
            for (t, _) in family.tools {
                assert!(seen.insert(*t), "{t} registered twice");
            }
        }
        assert_eq!(seen.len(), router().list_all().len());
    }

    /// The scope table (issue 26): every tool that is not read-only needs a scope beyond
    /// `read`, and exactly these do, with these scopes. A new mutating tool fails here until
    /// it is given its scope on purpose.
    #[test]
    fn the_scope_of_every_tool_is_pinned() {
        let beyond_read: Vec<(&str, Scope)> = FAMILIES
            .iter()
            .flat_map(|f| f.tools)
            .filter(|(_, s)| *s != Scope::Read)
            .copied()
            .collect();
        use Scope::*;
        assert_eq!(
            beyond_read,
            [
                ("create_task", Write),
                ("update_task", Write),
                ("delete_task", Write),
                ("start_task_attempt", Write),
                ("follow_up", Write),
                ("stop_attempt", Write),
                ("rebase_attempt", Deliver),
                ("abort_attempt_conflicts", Deliver),
                ("merge_attempt", Deliver),
                ("push_attempt", Deliver),
                ("respond_approval", Approve),
            ]
        );
        for tool in router().list_all() {
            let read_only = tool
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false);
            assert_eq!(
                read_only,
                scope_of(&tool.name) == Some(Read),
                "{}: read-only tools need `read` only",
                tool.name
            );
        }
    }
}
