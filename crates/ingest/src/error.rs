//! Typed ingest errors: what went wrong while following VK, by kind, so callers decide on the
//! kind (retry, back off, fall back to history) and never on an error's text.

use vk_observer_store::StoreError;
use vk_observer_upstream::UpstreamError;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// VK could not be reached or answered with an error (see `UpstreamError::is_retryable`).
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The local store refused a read or a write (the daemon is shutting down, or the disk).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// VK accepted the connection but sent nothing (not even headers) within the stall window.
    #[error("VK sent nothing within {0:?}")]
    Silent(std::time::Duration),
}

impl IngestError {
    /// Worth trying again after a backoff: VK trouble and silence are; a store that stopped
    /// (writer gone at shutdown) or an unreadable answer are not retried in a tight loop.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            IngestError::Upstream(e) => e.is_retryable(),
            IngestError::Silent(_) => true,
            IngestError::Store(_) => false,
        }
    }
}

pub(crate) type IngestResult<T> = Result<T, IngestError>;
