//! `GET /api/events`: open VK's SSE stream, resuming after a sequence id when we have one.
//!
//! VK sends its response headers only with the first event or keep-alive (up to 15 s on an idle
//! server), so connecting has no short timeout; stall detection lives in the ingest state machine.
//! The SSE parser drops comment lines, and VK's keep-alive is a comment (`:` and a blank line
//! every 15 s), so liveness is read below the parser: every chunk of bytes calls `on_bytes`.

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::Method;
use sse_stream::{Sse, SseByteStream};

use super::rest::{UpstreamError, VkClient};
use super::routes;

pub type SseEvents = BoxStream<'static, Result<Sse, sse_stream::Error>>;

/// Longest SSE line accepted. A stream that sends more without a newline (a broken or hostile
/// upstream) is cut, so the parser's buffer stays bounded; ingest reconnects.
pub(crate) const MAX_LINE_BYTES: usize = 8 << 20;

/// Pass bytes through while no line grows past `max` bytes; then yield an error and stop.
pub(crate) fn bound_lines<S, E>(
    bytes: S,
    max: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>>,
    E: std::fmt::Display,
{
    bytes.scan((0usize, false), move |(pending, failed), item| {
        if *failed {
            return futures::future::ready(None);
        }
        let out = match item {
            Ok(b) => {
                match b.iter().rposition(|&c| c == b'\n' || c == b'\r') {
                    Some(pos) => *pending = b.len() - pos - 1,
                    None => *pending += b.len(),
                }
                if *pending > max {
                    *failed = true;
                    Err(std::io::Error::other(format!(
                        "VK sent an SSE line longer than {max} bytes; dropping the connection"
                    )))
                } else {
                    Ok(b)
                }
            }
            Err(e) => Err(std::io::Error::other(e.to_string())),
        };
        futures::future::ready(Some(out))
    })
}

/// `after_seq` that asks VK for its watermark: past any watermark, so VK answers at once with
/// `invalidate_all {reason: resume_unavailable, requested_after_seq: WATERMARK_PROBE}` whose id
/// is its current watermark, then streams every later event live (docs/vk-contract.md §2.3).
/// Used when there is no resume point, so that the next reconnect can resume instead of resync.
pub const WATERMARK_PROBE: u64 = u64::MAX;

/// Connect to `/api/events`, with `after_seq` when resuming (or [`WATERMARK_PROBE`]).
/// `on_bytes` is called for every chunk VK sends, keep-alive comments included.
pub async fn connect(
    client: &VkClient,
    after_seq: Option<u64>,
    on_bytes: impl Fn() + Send + 'static,
) -> Result<SseEvents, UpstreamError> {
    let path = routes::events(after_seq);
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
    let bytes = resp.bytes_stream().inspect(move |_| on_bytes());
    Ok(SseByteStream::new(bound_lines(bytes, MAX_LINE_BYTES)).boxed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn an_endless_line_is_cut_and_normal_events_pass() {
        let chunk = bytes::Bytes::from(vec![b'x'; 1 << 20]);
        let endless =
            futures::stream::iter((0..64).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
        let mut s = Box::pin(bound_lines(endless, 4 << 20));
        let mut passed = 0;
        let mut failed = false;
        while let Some(item) = s.next().await {
            match item {
                Ok(b) => passed += b.len(),
                Err(_) => failed = true,
            }
        }
        assert!(failed, "the endless line must be cut");
        assert!(
            passed <= 4 << 20,
            "at most the limit passed through: {passed}"
        );

        let ok = futures::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from_static(
            b"id: 1\ndata: {}\n\n",
        ))]);
        let events: Vec<_> = SseByteStream::new(bound_lines(ok, 1024)).collect().await;
        assert_eq!(events.len(), 1);
        assert!(events[0].is_ok());
    }
}
