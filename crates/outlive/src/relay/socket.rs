//! The relay's two websockets: the upstream one it opens to the browser, and the one
//! chromiumoxide opens to it on 127.0.0.1.

use async_tungstenite::WebSocketStream;
use async_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use async_tungstenite::tungstenite::http::StatusCode;
use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;

use super::control::{Control, ControlRx};
use super::death::{DeathCause, Signals};
use super::forward::{Draining, Flows};
use super::frames::{Frame, Reader, Reading, Writer};
use crate::endpoint::CdpEndpoint;

/// The websocket to the browser.
pub(super) type Upstream =
    WebSocketStream<async_tungstenite::tokio::ClientStream<Draining<TcpStream>>>;
/// The websocket from chromiumoxide.
pub(super) type Client = WebSocketStream<async_tungstenite::tokio::TokioAdapter<QuickAck>>;
/// The messages read from a socket, or the error that ended it.
pub(super) type FrameRx = mpsc::Receiver<Result<Frame, WsError>>;

/// A websocket past its handshake, read by its own task and written frame by frame.
pub(super) struct Ends<S> {
    pub frames: FrameRx,
    /// A streamed body's progress (the browser's socket only).
    pub reading: Reading,
    pub writer: Writer<WriteHalf<S>>,
    _reader: AbortOnDropHandle<()>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Ends<S> {
    /// The browser's socket (`browser`: large replies stream, writes are masked) or the
    /// client's.
    pub fn of(ws: WebSocketStream<S>, browser: bool) -> Ends<S> {
        // tungstenite holds no frame yet: the relay has sent the browser nothing, and a client
        // sends none before the handshake's answer (RFC 6455, 4.1).
        let (read, write) = ws.into_inner().split();
        let reader = Reader::spawn(read, browser);
        Ends {
            frames: reader.frames,
            reading: reader.reading,
            writer: Writer::new(write, browser),
            _reader: reader.task,
        }
    }
}

/// Opens the upstream websocket; its socket's writes keep `flows`.
pub(super) async fn connect_upstream(
    upstream: &CdpEndpoint,
    flows: Flows,
) -> Result<Upstream, WsError> {
    crate::websocket::connect(upstream, |socket| Draining::new(socket, flows)).await
}

/// tungstenite's HTTP error carries the response, which may echo the request URL; keep only
/// the status.
pub(super) fn ws_error_without_url(e: WsError) -> Box<dyn std::error::Error + Send + Sync> {
    match e {
        WsError::Http(resp) => {
            format!("HTTP {} during the websocket handshake", resp.status()).into()
        }
        WsError::Url(_) => "invalid websocket URL".into(),
        other => Box::new(other),
    }
}

/// How a websocket error ends the connection.
pub(super) fn classify(e: &WsError) -> DeathCause {
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => DeathCause::Closed,
        _ => DeathCause::Reset,
    }
}

/// Accepts the one client at `path`, keeping the upstream watched meanwhile (its close or
/// failure is published as the death) and keeping the control messages that arrive early.
/// `None`: the relay ends (cut, or the upstream died).
pub(super) async fn accept_client(
    listener: TcpListener,
    path: String,
    upstream: &mut FrameRx,
    control: &mut ControlRx,
    cut: &mut oneshot::Receiver<()>,
    signals: &Signals,
) -> Option<(Client, Vec<Control>)> {
    let mut early = Vec::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                if let Some(ws) = handshake(stream, &path).await {
                    return Some((ws, early));
                }
            }
            msg = upstream.recv() => match msg {
                Some(Ok(Frame::Whole(Message::Close(_)))) | None => {
                    signals.die(DeathCause::Closed);
                    return None;
                }
                Some(Err(e)) => {
                    signals.die(classify(&e));
                    return None;
                }
                Some(Ok(_)) => {}
            },
            Some(c) = control.recv() => early.push(c),
            _ = &mut *cut => return None,
        }
    }
}

/// The websocket handshake with a client, refused (404) unless it asks for `path`.
async fn handshake(stream: TcpStream, path: &str) -> Option<Client> {
    let _ = stream.set_nodelay(true);
    let expected = path.to_owned();
    #[allow(clippy::result_large_err)] // the signature tungstenite's callback requires
    let check = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        if req.uri().path() == expected {
            Ok(resp)
        } else {
            let mut refuse = ErrorResponse::new(None);
            *refuse.status_mut() = StatusCode::NOT_FOUND;
            Err(refuse)
        }
    };
    async_tungstenite::tokio::accept_hdr_async_with_config(
        QuickAck(stream),
        check,
        Some(crate::websocket::config()),
    )
    .await
    .ok()
}

/// The client side of the relay, acknowledging every read at once.
///
/// chromiumoxide's socket has Nagle's algorithm on. So when it writes several commands at
/// once (a checkpoint's three reads), the second waits for the first one's ACK. A delayed ACK
/// here would hold it for a whole upstream round trip. Re-arming `TCP_QUICKACK` after each
/// read keeps a capture at one round trip.
pub(super) struct QuickAck(TcpStream);

impl tokio::io::AsyncRead for QuickAck {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let polled = std::pin::Pin::new(&mut self.0).poll_read(cx, buf);
        if polled.is_ready() {
            let _ = self.0.set_quickack(true);
        }
        polled
    }
}

impl tokio::io::AsyncWrite for QuickAck {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
