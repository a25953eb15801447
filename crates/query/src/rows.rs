//! The typed views of the cached VK objects (`store::rows`): the query layer's hot read paths
//! decode only the fields they need. They live in the store since the writer's per-task digest
//! (`store::task_digest`) reads the same rows.

pub use vk_observer_store::rows::*;
