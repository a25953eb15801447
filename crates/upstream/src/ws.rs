//! WebSocket connections to VK: upgrade with auth, then a stream of text frames and a typed end
//! (VK's 4404 for a finished process, a normal close, or an abrupt drop as VK does after
//! `finished`). Pings are answered by tungstenite; every message, pings included, is reported to
//! the caller's `on_message` so that a quiet but healthy socket (VK pings every 30 s) is not
//! mistaken for a stalled one.

use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};

use super::rest::{UpstreamError, VkClient};

/// How a WebSocket ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsEnd {
    /// Closed with a code (4404 = VK says the process or workspace does not exist / is finished).
    Closed { code: u16, reason: String },
    /// Dropped without a close frame (VK does this right after a log stream's `finished`).
    Dropped(String),
}

/// VK's close code for a process or workspace that does not exist or is finished.
pub(crate) const CLOSE_GONE: u16 = 4404;

impl WsEnd {
    /// VK closed the socket because what it streams is gone or finished ([`CLOSE_GONE`]).
    pub fn is_gone(&self) -> bool {
        matches!(self, WsEnd::Closed { code, .. } if *code == CLOSE_GONE)
    }
}

pub type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub async fn connect(client: &VkClient, path_and_query: &str) -> Result<WsStream, UpstreamError> {
    let url = client.ws_url(path_and_query);
    let unreachable = |reason: String| UpstreamError::Unreachable {
        url: url.to_string(),
        reason,
    };
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| unreachable(e.to_string()))?;
    if let Some(t) = client.token() {
        let v = format!("Bearer {t}")
            .parse()
            .map_err(|_| unreachable("the upstream token is not a valid header value".into()))?;
        req.headers_mut().insert("authorization", v);
    }
    // 4 KiB read buffers instead of tungstenite's eager 128 KiB: the daemon keeps two sockets
    // open per running process (plus object streams), and each buffer is zero-filled to its
    // full size at the first read, so it is resident for as long as the socket lives (a
    // bigger frame grows it as needed; VK's frames are mostly log entries of a few hundred
    // bytes). 16 → 4 KiB: issue 27's idle RSS, docs/performance.md.
    let cfg = tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(4 << 10)
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(16 << 20));
    let (ws, _) = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio_tungstenite::connect_async_with_config(req, Some(cfg), false),
    )
    .await
    .map_err(|_| unreachable("timed out connecting".into()))?
    .map_err(|e| unreachable(e.to_string()))?;
    Ok(ws)
}

/// The next text (or binary, read as UTF-8) message, without copying it out of the frame, or
/// how the socket ended. `on_message` is called for every message received, pings included.
pub async fn next_text(
    ws: &mut WsStream,
    on_message: &(dyn Fn() + Sync),
) -> Result<tokio_tungstenite::tungstenite::Utf8Bytes, WsEnd> {
    loop {
        let next = ws.next().await;
        if matches!(next, Some(Ok(_))) {
            on_message();
        }
        match next {
            None => return Err(WsEnd::Dropped("stream ended".into())),
            Some(Err(e)) => return Err(WsEnd::Dropped(e.to_string())),
            Some(Ok(Message::Text(t))) => return Ok(t),
            Some(Ok(Message::Binary(b))) => {
                return Ok(String::from_utf8_lossy(&b).into_owned().into());
            }
            Some(Ok(Message::Close(frame))) => {
                let (code, reason) = frame
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                return Err(WsEnd::Closed { code, reason });
            }
            Some(Ok(_)) => continue, // ping/pong/frame
        }
    }
}

/// [`next_text`] on a server that sends no pings of its own (VK 0.1.x's sockets): after `every`
/// without a message the client pings, and the pong counts as a message, so a quiet but
/// healthy socket stays alive for the caller's stall watchdog while a dead one is found.
pub async fn next_text_pinging(
    ws: &mut WsStream,
    on_message: &(dyn Fn() + Sync),
    every: std::time::Duration,
) -> Result<tokio_tungstenite::tungstenite::Utf8Bytes, WsEnd> {
    loop {
        match tokio::time::timeout(every, next_text(ws, on_message)).await {
            Ok(read) => return read,
            Err(_quiet) => ws
                .send(Message::Ping(Default::default()))
                .await
                .map_err(|e| WsEnd::Dropped(e.to_string()))?,
        }
    }
}
