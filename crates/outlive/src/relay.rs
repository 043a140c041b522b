//! The loopback relay outlive owns between chromiumoxide and the browser's endpoint.
//!
//! chromiumoxide 0.9 does not surface a dead connection reliably (its handler stream never
//! ends, and page calls hang on a reset or a silent socket), so outlive sits in the middle:
//! every frame passes through the relay, which therefore sees a close frame, a reset or an
//! EOF first, and which asks the browser for a sign of life (`Browser.getVersion` under a
//! private message id) whenever the connection has been quiet for a heartbeat interval.
//! The first sign of death is published on a `watch` channel *before* the client side is
//! cut, so anything chromiumoxide sees afterwards is already explained.

use std::time::Duration;

use async_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use async_tungstenite::tungstenite::http::StatusCode;
use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::StreamExt;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};

use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ErrorKind};
use crate::task::AbortOnDrop;

/// Message ids at and above this are the relay's own; chromiumoxide counts up from 0.
const PROBE_ID_BASE: u64 = 1_900_000_000;

/// How a browser connection died, as the relay saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeathCause {
    /// The endpoint sent a websocket close frame, or closed the TCP connection cleanly.
    Closed,
    /// The TCP connection was reset or failed with an I/O error.
    Reset,
    /// No answer to a heartbeat within the heartbeat timeout: a half-open, silent connection.
    Silence,
    /// The provider reported the browser gone (the local process exited).
    ProcessExit,
    /// A page call failed and the browser did not answer an on-demand probe.
    ProbeFailed,
}

impl DeathCause {
    /// A short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DeathCause::Closed => "closed",
            DeathCause::Reset => "reset",
            DeathCause::Silence => "silence",
            DeathCause::ProcessExit => "process_exit",
            DeathCause::ProbeFailed => "probe_failed",
        }
    }
}

/// A death and the moment it was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Death {
    /// What the relay saw.
    pub cause: DeathCause,
    /// When it saw it.
    pub at: Instant,
}

/// Heartbeat settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heartbeat {
    pub interval: Duration,
    pub timeout: Duration,
}

fn ws_config() -> WebSocketConfig {
    // CDP messages (screenshots, big DOMs) can be far larger than the 64 MiB default.
    WebSocketConfig::default()
        .max_message_size(Some(512 << 20))
        .max_frame_size(Some(512 << 20))
}

type ProbeRequest = oneshot::Sender<()>;

/// Resolves with the first death published on `rx`.
pub(crate) async fn wait_death(rx: &mut watch::Receiver<Option<Death>>) -> Death {
    loop {
        if let Some(d) = *rx.borrow_and_update() {
            return d;
        }
        if rx.changed().await.is_err() {
            // The relay is gone without reporting; treat it as a closed connection.
            return Death {
                cause: DeathCause::Closed,
                at: Instant::now(),
            };
        }
    }
}

/// Reports a death to the relay's watchers; the first report wins.
#[derive(Clone)]
pub(crate) struct DeathSender(watch::Sender<Option<Death>>);

impl DeathSender {
    /// Records `cause` now unless a death is already recorded; returns the recorded one.
    pub fn declare(&self, cause: DeathCause) -> Death {
        let mut recorded = Death {
            cause,
            at: Instant::now(),
        };
        self.0.send_if_modified(|d| match d {
            Some(existing) => {
                recorded = *existing;
                false
            }
            None => {
                *d = Some(recorded);
                true
            }
        });
        recorded
    }
}

/// A running relay. Dropping it stops the relay task and closes both sockets.
pub(crate) struct Relay {
    client_url: String,
    death: watch::Receiver<Option<Death>>,
    death_tx: watch::Sender<Option<Death>>,
    probe_tx: mpsc::Sender<ProbeRequest>,
    cut_tx: Option<oneshot::Sender<()>>,
    _task: AbortOnDrop,
}

impl Relay {
    /// Connects to `upstream`, then listens on 127.0.0.1 for exactly one client.
    pub async fn start(
        upstream: &CdpEndpoint,
        heartbeat: Heartbeat,
        connect_timeout: Duration,
    ) -> Result<Relay, Error> {
        let connect = connect_upstream(upstream);
        let upstream_ws = tokio::time::timeout(connect_timeout, connect)
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Connect,
                    format!(
                        "no websocket connection to {} within {:?}",
                        upstream.redacted(),
                        connect_timeout
                    ),
                )
            })?
            .map_err(|e| {
                Error::new(
                    ErrorKind::Connect,
                    format!(
                        "could not open the CDP websocket at {}",
                        upstream.redacted()
                    ),
                )
                .with_source(ws_error_without_url(e))
            })?;

        let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
            Error::new(ErrorKind::Io, "could not bind the relay on 127.0.0.1").with_source(e)
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::Io, "relay address").with_source(e))?
            .port();
        // A random path: any local process can reach the port, none can guess the path.
        let path = format!(
            "/devtools/browser/outlive-{}",
            uuid::Uuid::new_v4().simple()
        );
        let client_url = format!("ws://127.0.0.1:{port}{path}");

        let (death_tx, death) = watch::channel(None);
        let (probe_tx, probe_rx) = mpsc::channel(8);
        let (cut_tx, cut_rx) = oneshot::channel();
        let task = crate::quiet::spawn(run(
            listener,
            path,
            upstream_ws,
            heartbeat,
            death_tx.clone(),
            probe_rx,
            cut_rx,
        ));
        Ok(Relay {
            client_url,
            death,
            death_tx,
            probe_tx,
            cut_tx: Some(cut_tx),
            _task: AbortOnDrop(task),
        })
    }

    /// The `ws://127.0.0.1:…` URL chromiumoxide connects to.
    pub fn client_url(&self) -> &str {
        &self.client_url
    }

    /// The death, if one was detected.
    pub fn death(&self) -> Option<Death> {
        *self.death.borrow()
    }

    /// A receiver for [`wait_death`], usable without borrowing the relay.
    pub fn watch(&self) -> watch::Receiver<Option<Death>> {
        self.death.clone()
    }

    /// Resolves with the first death the relay detects.
    pub async fn died(&mut self) -> Death {
        wait_death(&mut self.death).await
    }

    /// A handle other tasks use to report a death they noticed first.
    pub fn death_sender(&self) -> DeathSender {
        DeathSender(self.death_tx.clone())
    }

    /// Records a death learned elsewhere (process exit, failed probe); the first one wins.
    pub fn declare(&self, cause: DeathCause) -> Death {
        DeathSender(self.death_tx.clone()).declare(cause)
    }

    /// Asks the browser for a sign of life now. `true` if it answered within `timeout`.
    pub async fn probe(&self, timeout: Duration) -> bool {
        if self.death().is_some() {
            return false;
        }
        let (tx, rx) = oneshot::channel();
        if self.probe_tx.send(tx).await.is_err() {
            return false;
        }
        matches!(tokio::time::timeout(timeout, rx).await, Ok(Ok(())))
    }

    /// Closes the client side at once, so chromiumoxide stops talking to a dead browser.
    pub fn cut(&mut self) {
        if let Some(tx) = self.cut_tx.take() {
            let _ = tx.send(());
        }
    }
}

/// Opens the upstream websocket with `TCP_NODELAY`: CDP sends small messages back to back
/// (a checkpoint is three at once), and Nagle's algorithm against a delayed ACK would hold
/// the second one back ~40 ms.
async fn connect_upstream(
    upstream: &CdpEndpoint,
) -> Result<async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>, WsError> {
    let url = url::Url::parse(upstream.expose())
        .map_err(|_| WsError::Url(async_tungstenite::tungstenite::error::UrlError::NoHostName))?;
    let host = url
        .host_str()
        .ok_or(WsError::Url(
            async_tungstenite::tungstenite::error::UrlError::NoHostName,
        ))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let socket = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    socket.set_nodelay(true)?;
    let (ws, _) = async_tungstenite::tokio::client_async_tls_with_connector_and_config(
        upstream.expose(),
        socket,
        None,
        Some(ws_config()),
    )
    .await?;
    Ok(ws)
}

/// tungstenite's HTTP error carries the response, which may echo the request URL; keep only
/// the status.
fn ws_error_without_url(e: WsError) -> Box<dyn std::error::Error + Send + Sync> {
    match e {
        WsError::Http(resp) => {
            format!("HTTP {} during the websocket handshake", resp.status()).into()
        }
        WsError::Url(_) => "invalid websocket URL".into(),
        other => Box::new(other),
    }
}

async fn run(
    listener: TcpListener,
    path: String,
    upstream: async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>,
    heartbeat: Heartbeat,
    death_tx: watch::Sender<Option<Death>>,
    mut probe_rx: mpsc::Receiver<ProbeRequest>,
    mut cut_rx: oneshot::Receiver<()>,
) {
    let die = |cause: DeathCause| {
        DeathSender(death_tx.clone()).declare(cause);
    };

    let (mut up_tx, mut up_rx) = upstream.split();

    // Accept the one client, keeping the upstream watched meanwhile.
    let client = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let expected = path.clone();
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
                match async_tungstenite::tokio::accept_hdr_async_with_config(QuickAck(stream), check, Some(ws_config())).await {
                    Ok(ws) => break ws,
                    Err(_) => continue,
                }
            }
            msg = up_rx.next() => {
                match msg {
                    Some(Ok(Message::Close(_))) | None => { die(DeathCause::Closed); return; }
                    Some(Err(e)) => { die(classify(&e)); return; }
                    Some(Ok(_)) => {}
                }
            }
            _ = &mut cut_rx => return,
        }
    };
    drop(listener);
    let (mut cl_tx, mut cl_rx) = client.split();

    let mut next_probe_id = PROBE_ID_BASE;
    let mut waiting: Vec<(u64, Option<ProbeRequest>)> = Vec::new();
    let mut heartbeat_sent: Option<Instant> = None;
    let mut last_rx = Instant::now();

    loop {
        let deadline = match heartbeat_sent {
            Some(sent) => sent + heartbeat.timeout,
            None => last_rx + heartbeat.interval,
        };
        tokio::select! {
            biased;
            _ = &mut cut_rx => return,
            msg = up_rx.next() => {
                last_rx = Instant::now();
                match msg {
                    Some(Ok(Message::Text(text))) => {
                        if let Some(id) = probe_reply_id(text.as_str()) {
                            heartbeat_sent = None;
                            waiting.retain_mut(|(pid, reply)| {
                                if *pid == id {
                                    if let Some(r) = reply.take() { let _ = r.send(()); }
                                    false
                                } else { true }
                            });
                            continue;
                        }
                        heartbeat_sent = None;
                        wire_trace("from browser", text.as_str());
                        if cl_tx.send(Message::Text(text)).await.is_err() { return; }
                    }
                    Some(Ok(Message::Binary(bytes))) => {
                        heartbeat_sent = None;
                        if cl_tx.send(Message::Binary(bytes)).await.is_err() { return; }
                    }
                    Some(Ok(Message::Close(_))) | None => { die(DeathCause::Closed); return; }
                    Some(Ok(_)) => { heartbeat_sent = None; }
                    Some(Err(e)) => { die(classify(&e)); return; }
                }
            }
            msg = cl_rx.next() => {
                match msg {
                    Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => {
                        if let Message::Text(text) = &m { wire_trace("to browser", text.as_str()); }
                        if let Err(e) = up_tx.send(m).await { die(classify(&e)); return; }
                    }
                    Some(Ok(_)) => {}
                    // chromiumoxide went away: outlive is done with this browser.
                    Some(Err(_)) | None => return,
                }
            }
            req = probe_rx.recv() => {
                let Some(reply) = req else { continue };
                let id = next_probe_id;
                next_probe_id += 1;
                waiting.push((id, Some(reply)));
                if let Err(e) = up_tx.send(probe_message(id)).await { die(classify(&e)); return; }
            }
            _ = sleep_until(deadline) => {
                if heartbeat_sent.is_some() {
                    tracing::debug!(timeout = ?heartbeat.timeout, "heartbeat unanswered");
                    die(DeathCause::Silence);
                    return;
                }
                let id = next_probe_id;
                next_probe_id += 1;
                waiting.push((id, None));
                if waiting.len() > 64 { waiting.remove(0); }
                heartbeat_sent = Some(Instant::now());
                if let Err(e) = up_tx.send(probe_message(id)).await { die(classify(&e)); return; }
            }
        }
    }
}

/// The client side of the relay, acknowledging every read at once.
///
/// chromiumoxide's socket has Nagle's algorithm on, so when it writes several commands at
/// once (a checkpoint's three reads) the second waits for the first one's ACK; a delayed ACK
/// here would hold it for a whole upstream round trip. Re-arming `TCP_QUICKACK` after each
/// read keeps a capture at one round trip.
struct QuickAck(tokio::net::TcpStream);

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

/// What a CDP message is, without what it carries: its id, method and session.
#[derive(serde::Deserialize, Default)]
struct Head<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<std::borrow::Cow<'a, str>>,
}

impl<'a> Head<'a> {
    fn of(text: &'a str) -> Head<'a> {
        serde_json::from_str(text).unwrap_or_default()
    }
}

/// outlive's own account of the wire, for debugging: direction, size, id, method, session —
/// never a payload (see `quiet`).
fn wire_trace(direction: &'static str, text: &str) {
    if tracing::enabled!(target: "outlive::wire", tracing::Level::TRACE) {
        let head = Head::of(text);
        tracing::trace!(
            target: "outlive::wire",
            direction,
            bytes = text.len(),
            id = head.id,
            method = head.method.as_deref(),
            session = head.session_id.as_deref(),
            "cdp frame"
        );
    }
}

fn probe_message(id: u64) -> Message {
    Message::Text(format!(r#"{{"id":{id},"method":"Browser.getVersion"}}"#).into())
}

/// The id of a reply to one of the relay's own probes, if `text` is one. Chromium writes
/// `"id"` first, which the fast path reads without parsing; a proxy that re-serialises its
/// messages may put it elsewhere, so text that mentions an id in the relay's range is parsed.
fn probe_reply_id(text: &str) -> Option<u64> {
    if let Some(rest) = text.strip_prefix("{\"id\":") {
        let digits = &rest[..rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len())];
        let id: u64 = digits.parse().ok()?;
        return (id >= PROBE_ID_BASE).then_some(id);
    }
    // Replies to probes are tiny; events and big results are never probe replies.
    if text.len() > 4096 || !text.contains("\"id\":19") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Reply {
        id: u64,
    }
    let reply: Reply = serde_json::from_str(text).ok()?;
    (reply.id >= PROBE_ID_BASE).then_some(reply.id)
}

fn classify(e: &WsError) -> DeathCause {
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => DeathCause::Closed,
        _ => DeathCause::Reset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_its_own_replies() {
        assert_eq!(
            probe_reply_id(r#"{"id":1900000003,"result":{}}"#),
            Some(1_900_000_003)
        );
        assert_eq!(probe_reply_id(r#"{"id":12,"result":{}}"#), None);
        assert_eq!(probe_reply_id(r#"{"method":"Page.loadEventFired"}"#), None);
        assert_eq!(probe_reply_id(r#"{"id":"#), None);
        // Re-serialised by a proxy, with the id last.
        assert_eq!(
            probe_reply_id(r#"{"result":{"product":"Chrome"},"id":1900000007}"#),
            Some(1_900_000_007)
        );
        assert_eq!(probe_reply_id(r#"{"result":{},"id":19}"#), None);
    }
}
