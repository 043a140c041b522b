//! The gateway's websockets: one configuration for every socket it opens or accepts, and one
//! connector to a session's Chromium (used by the relay and by page faults).

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::{ConnectStream, connect_async_with_config};
use async_tungstenite::tungstenite::Error;
use async_tungstenite::tungstenite::protocol::WebSocketConfig;

/// CDP messages (screenshots, big DOM snapshots) can be large.
const MAX_MESSAGE: usize = 256 << 20;

/// A websocket the gateway opened to a browser.
pub(crate) type BrowserWs = WebSocketStream<ConnectStream>;

/// The configuration of every websocket: messages and frames up to [`MAX_MESSAGE`].
pub(crate) fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// Opens a websocket to `url` (a browser's CDP endpoint); the caller bounds the wait.
pub(crate) async fn connect(url: &str) -> Result<BrowserWs, Error> {
    let (ws, _) = connect_async_with_config(url, Some(config())).await?;
    Ok(ws)
}
