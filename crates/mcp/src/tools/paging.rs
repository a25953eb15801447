//! The bounds every family checks the same way: page sizes and cursors of paged lists
//! (`query::paging`), and the most ids one call may name.

use vk_observer_query::paging::{PAGE_DEFAULT, PAGE_MAX, PageArgs};
use vk_observer_tool_error::ToolError;

/// Most attempts one batched call names (get_attempt_status, wait_for_attempt_change).
pub(crate) const MAX_BATCH: usize = 100;

/// Cursor and page size of a paged list (`query::paging`): the size within `1..=PAGE_MAX`.
pub(crate) fn page_args(
    cursor: Option<String>,
    limit: Option<u32>,
    field: &str,
) -> Result<PageArgs, ToolError> {
    Ok(PageArgs {
        cursor,
        limit: page_size(limit, PAGE_DEFAULT, PAGE_MAX, field)?,
    })
}

/// A page size within `1..=max` (default when absent); 0 is an error, above `max` is capped.
pub(crate) fn page_size(
    v: Option<u32>,
    default: usize,
    max: usize,
    field: &str,
) -> Result<usize, ToolError> {
    match v {
        None => Ok(default),
        Some(0) => Err(ToolError::invalid_field(
            field,
            format!("{field} must be between 1 and {max}."),
        )),
        Some(n) => Ok((n as usize).min(max)),
    }
}
