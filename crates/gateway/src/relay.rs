//! The CDP relay at `/cdp/:id?token=…`: client websockets forwarded frame by frame to the
//! session's Chromium, through the gateway's [`Weather`](crate::Weather), and killed the way
//! the session's fate says. A connection that arrives after the death is closed `1011`.
//!
//! The upgrade is done by hand (not with axum's `WebSocketUpgrade`) so that the relay gets the
//! raw [`TcpStream`] back from hyper. A [`Death::Reset`] needs it to set `SO_LINGER` to zero
//! before dropping the socket, which makes the kernel answer with a TCP RST instead of a FIN.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::handshake::derive_accept_key;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use async_tungstenite::{WebSocketReceiver, WebSocketSender};
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::header::{
    CONNECTION, HOST, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode, uri::Authority};
use axum::response::Response;
use futures::StreamExt;
use futures::io::{AsyncRead, AsyncWrite};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until, timeout};
use uuid::Uuid;

use crate::chaos::Death;
use crate::error::json_error as error;
use crate::session::{AttachError, Attachment, Phase, Shared, constant_time_eq, parse_session_id};
use crate::weather::Flow;
use crate::websocket::{self, BrowserWs};

/// How long the relay waits for Chromium to accept its websocket.
const UPSTREAM_CONNECT: Duration = Duration::from_secs(10);
/// How long the relay waits, after Chromium's side went away, to learn how the session died.
const DEATH_NOTICE: Duration = Duration::from_secs(5);
/// How long a closing relay waits to send its close frame, and then for the client's reply.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// Messages in flight per direction (read, waiting out the added latency, not yet written).
const QUEUE: usize = 1024;
/// Why a connection to a dead browser is closed (code 1011).
const UNREACHABLE: &str = "the browser is unreachable";

type ClientWs = WebSocketStream<TokioAdapter<TcpStream>>;

/// The authority clients reached this gateway by, for the websocket URLs it hands out.
pub(crate) fn request_host(headers: &HeaderMap, shared: &Shared) -> String {
    headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.contains('@'))
        .and_then(|h| Authority::from_str(h).ok())
        .map(|a| a.to_string())
        .unwrap_or_else(|| shared.local_addr.to_string())
}

#[derive(Debug, Deserialize)]
pub(crate) struct TokenQuery {
    token: Option<String>,
}

/// `GET /cdp/:id?token=…`: checks the session and its token, answers `101`, and hands the
/// upgraded socket to a relay task owned by the session registry.
pub(crate) async fn upgrade(
    State(shared): State<Arc<Shared>>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<TokenQuery>, QueryRejection>,
    mut req: Request,
) -> Response {
    let Some(id) = id.ok().and_then(|Path(id)| parse_session_id(&id)) else {
        return error(
            StatusCode::NOT_FOUND,
            "InvalidSessionId",
            "no such session on this gateway",
        );
    };
    let token = query.ok().and_then(|Query(q)| q.token);
    // The account's key opens its sessions too, as on Browserless (its CDP URLs take the key).
    let token = match token {
        Some(t) if constant_time_eq(t.as_bytes(), shared.config.api_key.as_bytes()) => {
            shared.get(id).map(|s| s.token)
        }
        t => t,
    };
    let attachment = match shared.attach(id, token.as_deref()) {
        Ok(a) => a,
        Err(refused) => return refusal(refused),
    };

    let accept = websocket_key(req.headers())
        .and_then(|key| HeaderValue::from_str(&derive_accept_key(key.as_bytes())).ok());
    let Some(accept) = accept else {
        shared.detach(id);
        return error(
            StatusCode::BAD_REQUEST,
            "NotAWebSocket",
            "this endpoint speaks CDP over a websocket (Upgrade: websocket, version 13)",
        );
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let pace = Pace {
        delay: shared.config.rtt / 2,
        flow: shared.climate.flow(),
    };
    let detach = Detach {
        shared: shared.clone(),
        id,
    };
    let spawned = shared.spawn(serve(on_upgrade, attachment, pace, detach));
    if !spawned {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "the gateway is shutting down",
        );
    }

    switching_protocols(accept)
}

/// The answer to an attach the session registry refused.
fn refusal(refused: AttachError) -> Response {
    let (status, code, message) = match refused {
        AttachError::Unknown => (
            StatusCode::NOT_FOUND,
            "InvalidSessionId",
            "no such session on this gateway",
        ),
        AttachError::BadToken => (
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "missing or wrong token",
        ),
        AttachError::Released => (
            StatusCode::GONE,
            "SessionReleased",
            "the session was released",
        ),
        AttachError::Busy => (
            StatusCode::CONFLICT,
            "SessionBusy",
            "another client is connected to this session",
        ),
        AttachError::ShuttingDown => (
            StatusCode::SERVICE_UNAVAILABLE,
            "ShuttingDown",
            "the gateway is shutting down",
        ),
    };
    error(status, code, message)
}

/// `101 Switching Protocols` with the websocket's accept key.
fn switching_protocols(accept: HeaderValue) -> Response {
    let mut res = Response::new(Body::empty());
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = res.headers_mut();
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
    res
}

/// The relay task of one upgraded connection: takes the socket back from hyper and relays
/// until the session or the client ends it; the session is detached when it returns.
async fn serve(on_upgrade: OnUpgrade, attachment: Attachment, pace: Pace, detach: Detach) {
    let id = detach.id;
    let _detach = detach;
    let upgraded = match on_upgrade.await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(session = %id, error = %e, "websocket upgrade failed");
            return;
        }
    };
    let Ok(parts) = upgraded.downcast::<TokioIo<TcpStream>>() else {
        tracing::error!(session = %id, "upgraded connection is not a plain TCP stream");
        return;
    };
    let client = WebSocketStream::from_partially_read(
        TokioAdapter::new(parts.io.into_inner()),
        parts.read_buf.to_vec(),
        Role::Server,
        Some(websocket::config()),
    )
    .await;
    tracing::debug!(session = %id, "relay connected");
    run(client, attachment, pace).await;
    tracing::debug!(session = %id, "relay ended");
}

/// The client's `Sec-WebSocket-Key`, if this is a websocket upgrade request we can serve.
fn websocket_key(headers: &HeaderMap) -> Option<String> {
    let has_token = |name, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .map(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
                .unwrap_or(false)
        })
    };
    if !has_token(UPGRADE, "websocket") || !has_token(CONNECTION, "upgrade") {
        return None;
    }
    if headers.get(SEC_WEBSOCKET_VERSION)?.as_bytes() != b"13" {
        return None;
    }
    let key = headers.get(SEC_WEBSOCKET_KEY)?.to_str().ok()?.trim();
    (!key.is_empty()).then(|| key.to_owned())
}

/// Frees the session's relay slot when the relay task ends, however it ends.
struct Detach {
    shared: Arc<Shared>,
    id: Uuid,
}

impl Drop for Detach {
    fn drop(&mut self) {
        self.shared.detach(self.id);
    }
}

/// What a connection's frames wait for: the added latency each way, and the weather on the
/// browser's frames to the client.
struct Pace {
    delay: Duration,
    flow: Flow,
}

/// Why the forwarding stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The client closed, went away, or sent garbage.
    ClientGone,
    /// Chromium's side closed or failed.
    UpstreamGone,
    /// The session's phase changed (death or release).
    PhaseChanged,
}

/// Relays one client connection until it or the session ends.
async fn run(client: ClientWs, att: Attachment, pace: Pace) {
    let Attachment {
        upstream,
        mut phase,
    } = att;
    let arrived = *phase.borrow_and_update();
    match arrived {
        Phase::Live => {}
        // Too late for the death itself: the browser is gone, so no proxy could reach it.
        Phase::Dead(_) => return close_with(client, CloseCode::Error, UNREACHABLE).await,
        Phase::Released => return finish(client, phase).await,
    }
    let connect = timeout(UPSTREAM_CONNECT, websocket::connect(&upstream));
    let upstream = tokio::select! {
        biased;
        _ = phase.changed() => return finish(client, phase).await,
        connected = connect => match connected {
            Ok(Ok(ws)) => ws,
            _ => return close_with(client, CloseCode::Error, UNREACHABLE).await,
        },
    };

    if let Some((client, end)) = relay(client, upstream, &mut phase, &pace).await {
        conclude(client, end, phase).await;
    }
}

/// Forwards both ways until a side or the session's phase ends it; returns the client socket
/// (unless it broke) and why it stopped.
async fn relay(
    client: ClientWs,
    upstream: BrowserWs,
    phase: &mut watch::Receiver<Phase>,
    pace: &Pace,
) -> Option<(ClientWs, End)> {
    let (mut client_tx, mut client_rx) = client.split();
    let (mut upstream_tx, mut upstream_rx) = upstream.split();
    let Pace { delay, flow } = pace;
    let end = tokio::select! {
        biased;
        _ = phase.changed() => End::PhaseChanged,
        end = forward(&mut client_rx, &mut upstream_tx, *delay, None, End::ClientGone, End::UpstreamGone) => end,
        end = forward(&mut upstream_rx, &mut client_tx, *delay, Some(flow), End::UpstreamGone, End::ClientGone) => end,
        never = flow.drive() => match never {},
    };
    // Nothing more reaches Chromium, whatever happens to the client next.
    drop((upstream_tx, upstream_rx));
    let client = WebSocketStream::reunite(client_tx, client_rx).ok()?;
    Some((client, end))
}

/// Ends the client connection once the forwarding stopped, as `end` says.
async fn conclude(mut client: ClientWs, end: End, mut phase: watch::Receiver<Phase>) {
    match end {
        End::ClientGone => {
            // Let tungstenite send its close reply (or notice EOF) before the socket is dropped.
            let _ = timeout(CLOSE_WAIT, async {
                while let Some(Ok(_)) = client.next().await {}
            })
            .await;
        }
        End::UpstreamGone => {
            // Chromium's side went first: the keeper publishes how the session died once the
            // browser is gone. Without word from it, the browser only hung up on the relay.
            let told = timeout(DEATH_NOTICE, async {
                while *phase.borrow_and_update() == Phase::Live {
                    if phase.changed().await.is_err() {
                        break;
                    }
                }
            })
            .await;
            match told {
                Ok(()) => finish(client, phase).await,
                Err(_) => {
                    close_with(
                        client,
                        CloseCode::Error,
                        "the browser closed the connection",
                    )
                    .await;
                }
            }
        }
        End::PhaseChanged => finish(client, phase).await,
    }
}

/// Forwards data frames from one side to the other, each delayed by `delay`, in order; with
/// `weather`, also jittered and held through its stalls. Pings are answered by tungstenite
/// itself, on the side that received them.
async fn forward<A, B>(
    from: &mut WebSocketReceiver<A>,
    to: &mut WebSocketSender<B>,
    delay: Duration,
    weather: Option<&Flow>,
    from_gone: End,
    to_gone: End,
) -> End
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    // Bounded, so a side that stops reading pushes back instead of filling memory.
    let (queue_tx, mut queue_rx) = mpsc::channel::<(Instant, Message)>(QUEUE);
    let read = async {
        loop {
            match from.next().await {
                Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => {
                    let jitter = weather.map_or(Duration::ZERO, Flow::jitter);
                    let at = Instant::now() + delay + jitter;
                    if queue_tx.send((at, m)).await.is_err() {
                        return to_gone;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => return from_gone,
            }
        }
    };
    let write = async {
        // In queue order: a frame never overtakes one jittered longer.
        while let Some((at, m)) = queue_rx.recv().await {
            if at > Instant::now() {
                sleep_until(at).await;
            }
            if let Some(weather) = weather {
                weather.pass().await;
            }
            if to.send(m).await.is_err() {
                return to_gone;
            }
        }
        from_gone
    };
    tokio::select! {
        end = read => end,
        end = write => end,
    }
}

/// Ends a client connection the way the session's current phase says.
async fn finish(client: ClientWs, mut phase: watch::Receiver<Phase>) {
    let current = *phase.borrow_and_update();
    match current {
        Phase::Dead(Death::Close) => {
            close_with(client, CloseCode::Away, "the browser session ended").await;
        }
        Phase::Dead(Death::OnArrival) => {
            close_with(client, CloseCode::Error, UNREACHABLE).await;
        }
        Phase::Dead(Death::Reset) => reset(client),
        Phase::Dead(Death::Silence) => hold_silently(client, phase).await,
        Phase::Released | Phase::Live => {
            close_with(client, CloseCode::Away, "the session was released").await;
        }
    }
}

/// Sends a close frame, waits for the client's close reply, then drops the socket (FIN).
async fn close_with(mut client: ClientWs, code: CloseCode, reason: &str) {
    let frame = CloseFrame {
        code,
        reason: reason.into(),
    };
    if let Ok(Ok(())) = timeout(CLOSE_WAIT, client.close(Some(frame))).await {
        // Unread bytes at close() would turn the FIN into a reset: read up to the reply.
        let _ = timeout(CLOSE_WAIT, async {
            while let Some(Ok(_)) = client.next().await {}
        })
        .await;
    }
}

/// Drops the socket with `SO_LINGER` 0: the kernel discards unsent data and sends RST.
fn reset(client: ClientWs) {
    if let Err(e) = client.get_ref().get_ref().set_zero_linger() {
        tracing::warn!(error = %e, "could not set SO_LINGER 0; the socket closes with FIN");
    }
    drop(client);
}

/// Neither reads nor writes the client socket (so pings go unanswered) until the session is
/// released or the gateway stops; then drops it.
async fn hold_silently(client: ClientWs, mut phase: watch::Receiver<Phase>) {
    while *phase.borrow_and_update() != Phase::Released {
        if phase.changed().await.is_err() {
            break;
        }
    }
    drop(client);
}
