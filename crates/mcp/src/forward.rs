//! Mutations on a fleet (design-notes §23). A fleet node has no VK of its own: every mutating
//! call that passed its grant check here is routed to the host that owns its target (from the
//! node's cache: an attempt's or task's `host`, a project's hosts, or the caller's `host`
//! argument), forwarded there by a [`Forward`] (the daemon's NATS request/reply, injected:
//! this layer cannot name it), and its answer made this node's own (its token, its freshness,
//! `host` on the task or status). A host daemon runs what the fleet forwards through the same
//! handlers as its own calls (`VkTools::call_forwarded`).

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};

use super::tools::{answer, mutations};
use vk_observer_query::Query;
use vk_observer_tool_error::{ErrorCode, InvalidReason, ToolError};

/// The argument naming the host a call should run on: every mutating tool takes it, needed
/// when its target lives on several hosts.
pub(crate) const HOST_ARG: &str = "host";

/// Sends a mutating call to its host and answers once this node's cache shows the change.
pub trait Forward: Send + Sync + 'static {
    /// `tool` with `arguments` (without `host`) on `host`, for `caller` (its token's name).
    fn forward<'a>(
        &'a self,
        host: &'a str,
        tool: &'a str,
        arguments: JsonObject,
        caller: &'a str,
    ) -> BoxFuture<'a, Result<CallToolResult, ToolError>>;
}

/// Where a server stands in a fleet.
#[derive(Clone, Default)]
pub enum FleetRole {
    /// No fleet.
    #[default]
    Alone,
    /// A host daemon of the fleet, by its `[fleet] host` name.
    Host(String),
    /// A fleet node: mutations go to the owning host.
    Node(Arc<dyn Forward>),
}

/// A fleet node's answer to a mutating call (the grant was checked): routed, forwarded, and
/// made this node's own.
pub(crate) async fn forwarded(
    forward: &dyn Forward,
    query: &Query,
    tool: &str,
    mut args: JsonObject,
    caller: &str,
) -> CallToolResult {
    let routed = async {
        if let Some(Err(e)) = mutations::check_args(tool, &args) {
            return Err(e);
        }
        let named = match args.remove(HOST_ARG) {
            None => None,
            Some(Value::String(h)) => Some(h),
            Some(_) => return Err(ToolError::invalid_field(HOST_ARG, "host is a string")),
        };
        let host = route(tool, &args, named, query)?;
        let result = forward.forward(&host, tool, args, caller).await?;
        Ok(own_answer(result, &host, query))
    };
    match routed.await {
        Ok(result) => result,
        Err(e) => answer::error_result(&e),
    }
}

/// The host a call runs on: the one named (a known host that reports the target), else the only
/// host of its target; `host_required` when the target lives on several.
fn route(
    tool: &str,
    args: &JsonObject,
    named: Option<String>,
    query: &Query,
) -> Result<String, ToolError> {
    let known = query.fleet_host_names();
    if let Some(h) = &named
        && !known.contains(h)
    {
        return Err(unknown_host(h, &known, "the hosts this fleet node knows"));
    }
    let Some(owning) = query.owning_hosts(args)? else {
        return Err(ToolError::new(
            ErrorCode::NotFound,
            false,
            format!(
                "{tool}: this fleet node's cache does not hold the target it names, so no host can be chosen. Re-list (list_projects, list_tasks, list_task_attempts) for current ids; a change a host made a moment ago may still be on its way (freshness.hosts)."
            ),
        ));
    };
    let what = match (owning.owner.attempt, owning.owner.task) {
        (Some(_), _) => "attempt",
        (None, Some(_)) => "task",
        (None, None) => "project",
    };
    match (named, owning.hosts.as_slice()) {
        (Some(h), hosts) if !hosts.contains(&h) => Err(unknown_host(
            &h,
            hosts,
            &format!("the hosts that report the {what}"),
        )),
        (Some(h), _) => Ok(h),
        (None, [one]) => Ok(one.clone()),
        (None, hosts) => Err(host_required(tool, what, hosts)),
    }
}

/// A target several hosts report (a project they all list; a task or attempt id a copied VK
/// database gave them all) and no `host` to choose one.
fn host_required(tool: &str, what: &str, hosts: &[String]) -> ToolError {
    ToolError::invalid_because(
        InvalidReason::HostRequired,
        format!(
            "{tool}: the {what} lives on {} hosts ({}); pass `host` with one of them (details.hosts).",
            hosts.len(),
            hosts.join(", ")
        ),
        json!({"field": HOST_ARG, "hosts": hosts}),
    )
}

fn unknown_host(host: &str, valid: &[String], which: &str) -> ToolError {
    ToolError::invalid_because(
        InvalidReason::UnknownWord,
        format!(
            "host {host:?} is not one of {which} (details.valid); use one of them, or leave host out where the target names its host."
        ),
        json!({"field": HOST_ARG, "got": host, "valid": valid}),
    )
}

/// The host's successful answer with this node's token and freshness, and `host` on the task
/// or status it carries; errors as the host sent them.
fn own_answer(result: CallToolResult, host: &str, query: &Query) -> CallToolResult {
    if result.is_error == Some(true) {
        return result;
    }
    let Some(Value::Object(mut m)) = result.structured_content.clone() else {
        return result;
    };
    if m.contains_key("token") {
        m.insert("token".into(), query.token().into());
    }
    if m.contains_key("freshness") {
        let freshness = serde_json::to_value(query.freshness()).unwrap_or_default();
        m.insert("freshness".into(), freshness);
    }
    for key in ["task", "status"] {
        if let Some(Value::Object(o)) = m.get_mut(key) {
            o.insert(HOST_ARG.into(), host.into());
            // The host's own token means nothing here; this node's covers the change, as it
            // applied the host's stream up to the answer before answering.
            if o.contains_key("attempt_token") {
                o.insert("attempt_token".into(), query.token().into());
            }
        }
    }
    answer::success(Value::Object(m))
}

/// On a daemon that is not a fleet node, `host` may only name this daemon's own host.
pub(crate) fn check_host_arg(role: &FleetRole, named: Option<&str>) -> Result<(), ToolError> {
    let Some(named) = named else {
        return Ok(());
    };
    match role {
        FleetRole::Host(own) if own == named => Ok(()),
        FleetRole::Host(own) => Err(unknown_host(named, &[own.clone()], "this host daemon")),
        _ => Err(ToolError::invalid_because(
            InvalidReason::UnknownWord,
            format!(
                "host {named:?}: this daemon is not a fleet node and serves one VK only; leave host out (only a fleet node, serve --fleet, routes calls to hosts)."
            ),
            json!({"field": HOST_ARG, "got": named, "valid": []}),
        )),
    }
}
