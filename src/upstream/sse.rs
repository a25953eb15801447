//! `GET /api/events`: open VK's SSE stream, resuming after a sequence id when we have one.
//!
//! VK sends its response headers only with the first event or keep-alive (up to 15 s on an idle
//! server), so connecting has no short timeout; stall detection lives in the ingest state machine.

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::Method;
use sse_stream::{Sse, SseByteStream};

use super::rest::{UpstreamError, VkClient};

pub type SseEvents = BoxStream<'static, Result<Sse, sse_stream::Error>>;

/// Connect to `/api/events`, with `after_seq` when resuming.
pub async fn connect(
    client: &VkClient,
    after_seq: Option<u64>,
) -> Result<SseEvents, UpstreamError> {
    let path = match after_seq {
        Some(n) => format!("/api/events?after_seq={n}"),
        None => "/api/events".to_string(),
    };
    let resp = client
        .request(Method::GET, &path)
        .header("accept", "text/event-stream")
        .send()
        .await
        .map_err(|e| UpstreamError::Unreachable {
            url: client.url(&path),
            reason: e.to_string(),
        })?;
    let status = resp.status();
    if !status.is_success() {
        return Err(UpstreamError::Status {
            status: status.as_u16(),
            path,
            message: "SSE connect refused".into(),
        });
    }
    Ok(SseByteStream::new(resp.bytes_stream()).boxed())
}
