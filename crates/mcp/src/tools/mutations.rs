//! The mutating tools by name, outside rmcp's router: a fleet node checks a call's arguments
//! before it forwards it ([`check_args`]), and a host daemon runs a call the fleet forwarded
//! through the same handlers its own clients reach ([`run`]; design-notes §23).

use rmcp::model::{CallToolResult, JsonObject};
use serde::de::DeserializeOwned;

use super::args::Args;
use super::{VkTools, approvals, attempts, delivery, tasks};
use vk_observer_tool_error::ToolError;

/// Whether `args` parse as `tool`'s arguments (the same parse its handler makes); None for a
/// name that is not a mutating tool.
pub(crate) fn check_args(tool: &str, args: &JsonObject) -> Option<Result<(), ToolError>> {
    fn parses<T: DeserializeOwned>(args: &JsonObject) -> Result<(), ToolError> {
        Args::<T>::parse(args.clone()).0.map(|_| ())
    }
    Some(match tool {
        tasks::CREATE_TASK => parses::<tasks::CreateTaskArgs>(args),
        tasks::UPDATE_TASK => parses::<tasks::UpdateTaskArgs>(args),
        tasks::DELETE_TASK => parses::<tasks::DeleteTaskArgs>(args),
        attempts::START_TASK_ATTEMPT => parses::<attempts::StartAttemptArgs>(args),
        attempts::FOLLOW_UP => parses::<attempts::FollowUpArgs>(args),
        attempts::STOP_ATTEMPT => parses::<attempts::StopArgs>(args),
        delivery::REBASE_ATTEMPT => parses::<delivery::RebaseArgs>(args),
        delivery::ABORT_ATTEMPT_CONFLICTS | delivery::MERGE_ATTEMPT => {
            parses::<delivery::RepoActionArgs>(args)
        }
        delivery::PUSH_ATTEMPT => parses::<delivery::PushArgs>(args),
        approvals::RESPOND_APPROVAL => parses::<approvals::RespondApprovalArgs>(args),
        _ => return None,
    })
}

/// Run the mutating `tool` with `args` through its handler; None for a name that is not one.
pub(crate) async fn run(tools: &VkTools, tool: &str, args: JsonObject) -> Option<CallToolResult> {
    Some(match tool {
        tasks::CREATE_TASK => tools.create_task(Args::parse(args)).await,
        tasks::UPDATE_TASK => tools.update_task(Args::parse(args)).await,
        tasks::DELETE_TASK => tools.delete_task(Args::parse(args)).await,
        attempts::START_TASK_ATTEMPT => tools.start_task_attempt(Args::parse(args)).await,
        attempts::FOLLOW_UP => tools.follow_up(Args::parse(args)).await,
        attempts::STOP_ATTEMPT => tools.stop_attempt(Args::parse(args)).await,
        delivery::REBASE_ATTEMPT => tools.rebase_attempt(Args::parse(args)).await,
        delivery::ABORT_ATTEMPT_CONFLICTS => tools.abort_attempt_conflicts(Args::parse(args)).await,
        delivery::MERGE_ATTEMPT => tools.merge_attempt(Args::parse(args)).await,
        delivery::PUSH_ATTEMPT => tools.push_attempt(Args::parse(args)).await,
        approvals::RESPOND_APPROVAL => tools.respond_approval(Args::parse(args)).await,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tool beyond `read` is dispatched here: a new mutating tool fails until it is.
    #[test]
    fn every_mutating_tool_is_named() {
        for (tool, scope) in super::super::FAMILIES.iter().flat_map(|f| f.tools) {
            let named = check_args(tool, &JsonObject::new()).is_some();
            assert_eq!(named, *scope != super::super::Scope::Read, "{tool}");
        }
    }
}
