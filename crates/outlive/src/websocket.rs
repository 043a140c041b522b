//! The websocket settings and the connector of outlive's own CDP connections: the relay's
//! (the task's), the front's (a program's, under `outlive run` and `serve`), and short checks'.

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::ClientStream;
use async_tungstenite::tungstenite::Error as WsError;
use async_tungstenite::tungstenite::error::UrlError;
use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::endpoint::CdpEndpoint;

/// The largest CDP message (and frame) either connection accepts: 512 MiB. Full-page
/// screenshots and DOM snapshots can far exceed tungstenite's 64 MiB default; the cap still
/// bounds what one message may hold in memory.
pub(crate) const MAX_MESSAGE: usize = 512 << 20;

/// The one websocket configuration, for both ends of both connections.
pub(crate) fn config() -> WebSocketConfig {
    capped(MAX_MESSAGE)
}

/// The websocket configuration with messages (and frames) of at most `max_message` bytes.
fn capped(max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
}

/// Opens a websocket to the browser at `endpoint` with `TCP_NODELAY`: CDP sends small
/// messages back to back (a checkpoint is three at once), and Nagle's algorithm against a
/// delayed ACK would hold the second one back ~40 ms. `wrap` wraps the TCP socket first.
pub(crate) async fn connect<S>(
    endpoint: &CdpEndpoint,
    wrap: impl FnOnce(TcpStream) -> S,
) -> Result<WebSocketStream<ClientStream<S>>, WsError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    open(endpoint, wrap, config()).await
}

/// Opens a plain websocket to the browser at `endpoint` that takes messages of at most
/// `max_message` bytes (a short-lived check's smaller limit).
pub(crate) async fn connect_with(
    endpoint: &CdpEndpoint,
    max_message: usize,
) -> Result<WebSocketStream<ClientStream<TcpStream>>, WsError> {
    open(endpoint, |socket| socket, capped(max_message)).await
}

async fn open<S>(
    endpoint: &CdpEndpoint,
    wrap: impl FnOnce(TcpStream) -> S,
    config: WebSocketConfig,
) -> Result<WebSocketStream<ClientStream<S>>, WsError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let url = url::Url::parse(endpoint.expose()).map_err(|_| WsError::Url(UrlError::NoHostName))?;
    let host = url
        .host_str()
        .ok_or(WsError::Url(UrlError::NoHostName))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let socket = TcpStream::connect((host.as_str(), port)).await?;
    socket.set_nodelay(true)?;
    let (ws, _) = async_tungstenite::tokio::client_async_tls_with_connector_and_config(
        endpoint.expose(),
        wrap(socket),
        None,
        Some(config),
    )
    .await?;
    Ok(ws)
}
