//! One client connection to the browser socket: the upgrade, then two halves forwarding
//! frames until the client or the browser goes, or the entry ends (see [`End`]).

use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::tokio::{ConnectStream, TokioAdapter};
use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::handshake::derive_accept_key;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use async_tungstenite::{WebSocketReceiver, WebSocketSender, WebSocketStream};
use futures::StreamExt;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;

use super::filter::WorldFilter;
use super::seen::{Heard, Seen};
use super::state::{Reply, Serving, State, refuse};
use super::waiting::ProgramCalls;
use crate::ctx::Ctx;
use crate::endpoint::CdpEndpoint;

/// How long a closing connection waits for its close frame to go out.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Answers a websocket upgrade to the browser socket; the connection runs on its own task.
pub(super) fn upgrade(state: Arc<State>, mut req: Request<Incoming>) -> Reply {
    let headers = req.headers();
    let has = |name, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    let key = headers
        .get(SEC_WEBSOCKET_KEY)
        .and_then(|k| k.to_str().ok())
        .map(str::to_owned);
    let version_ok = headers
        .get(SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    let (true, true, true, Some(key)) = (
        has(UPGRADE, "websocket"),
        has(CONNECTION, "upgrade"),
        version_ok,
        key,
    ) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "this is a CDP websocket (Upgrade: websocket, version 13)",
        );
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    crate::quiet::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let client = WebSocketStream::from_raw_socket(
            TokioAdapter::new(TokioIo::new(upgraded)),
            Role::Server,
            Some(crate::websocket::config()),
        )
        .await;
        client_connection(state, client).await;
    });
    let mut res = Response::new(Full::new(Bytes::new()));
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = res.headers_mut();
    h.insert(UPGRADE, "websocket".parse().expect("static"));
    h.insert(CONNECTION, "Upgrade".parse().expect("static"));
    h.insert(
        SEC_WEBSOCKET_ACCEPT,
        derive_accept_key(key.as_bytes()).parse().expect("base64"),
    );
    res
}

/// Why a client connection ended.
enum End {
    ClientGone,
    /// The client sent `Browser.close` (this id): it is done with the browser.
    ClientClosedBrowser(u64),
    BrowserGone,
    /// The entry it belonged to ended (or the front closed).
    EntryOver,
}

/// One client connection: waits for a browser, connects to it, forwards until one side goes
/// or the entry ends.
async fn client_connection<S>(state: Arc<State>, mut client: WebSocketStream<S>)
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let Some(current) = next_browser(&state).await else {
        let why = "no browser came up in time; try again";
        return close(&mut client, CloseCode::Again, why).await;
    };
    let Some(upstream) = connect_upstream(&current.endpoint).await else {
        return close(&mut client, CloseCode::Error, "the browser is unreachable").await;
    };
    tracing::debug!(
        generation = current.generation,
        "client connected to the browser"
    );
    let (mut client_tx, mut client_rx) = client.split();
    let (mut up_tx, mut up_rx) = upstream.split();
    let mut filter = WorldFilter::default();
    let program = ProgramCalls::new(current.ctx.link().calls.clone());
    let (seen, mut answered) = Seen::new(&state.usage, &current.endpoint, program);
    let end = {
        let to_browser = client_to_browser(&mut client_rx, &mut up_tx, &seen, &current.ctx);
        let to_client = browser_to_client(
            &mut up_rx,
            &mut client_tx,
            &mut filter,
            &seen,
            &mut answered,
        );
        let mut serving = state.serving.subscribe();
        let mut closed = state.closed.subscribe();
        let over = async {
            let generation = current.generation;
            let _ = serving
                .wait_for(|s| s.as_ref().map(|s| s.generation) != Some(generation))
                .await;
        };
        tokio::select! {
            end = to_browser => end,
            end = to_client => end,
            () = over => End::EntryOver,
            _ = closed.wait_for(|c| *c) => End::EntryOver,
        }
    };
    let _ = up_tx.close(None).await;
    drop((up_tx, up_rx));
    if let Ok(client) = WebSocketStream::reunite(client_tx, client_rx) {
        finish(client, end).await;
    }
}

/// The entry served now, once one is up and live, waiting at most the front's limit.
async fn next_browser(state: &State) -> Option<Serving> {
    let mut serving = state.serving.subscribe();
    // An entry already retired (its browser failed) is not handed out: a client connecting
    // during its grace would be cut at once, and Playwright then hangs in its connect for 30 s.
    let live = |s: &Option<Serving>| s.as_ref().is_some_and(|s| !s.ctx.is_retired());
    match tokio::time::timeout(state.wait_limit, serving.wait_for(live)).await {
        Ok(Ok(s)) => s.clone(),
        _ => None,
    }
}

/// Tells the client why its connection ends, as the end requires.
async fn finish<S>(mut client: WebSocketStream<S>, end: End)
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    match end {
        End::ClientGone => {}
        End::ClientClosedBrowser(id) => {
            let done = json!({ "id": id, "result": {} }).to_string();
            let _ = client.send(Message::text(done)).await;
            close(&mut client, CloseCode::Normal, "the browser is closed").await;
        }
        End::BrowserGone | End::EntryOver => {
            let why = "the browser is gone; outlive is replacing it";
            close(&mut client, CloseCode::Away, why).await;
        }
    }
}

/// Forwards the client's text and binary messages to the browser until one side goes; a
/// `Browser.close` ends the connection instead (the client is done, the browser lives on).
async fn client_to_browser<S>(
    client_rx: &mut WebSocketReceiver<S>,
    up_tx: &mut WebSocketSender<ConnectStream>,
    seen: &Seen<'_>,
    ctx: &Ctx,
) -> End
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    while let Some(m) = client_rx.next().await {
        match m {
            Ok(m @ (Message::Text(_) | Message::Binary(_))) => {
                if let Message::Text(t) = &m {
                    match seen.on_client(t.as_str()) {
                        Heard::Forward => {}
                        Heard::Answered => continue,
                        Heard::CloseBrowser(id) => return End::ClientClosedBrowser(id),
                    }
                }
                if up_tx.send(m).await.is_err() {
                    return End::BrowserGone;
                }
                ctx.note_client_used();
            }
            Ok(Message::Close(_)) | Err(_) => return End::ClientGone,
            Ok(_) => {}
        }
    }
    End::ClientGone
}

/// Forwards the browser's messages to the client, those `filter` holds back excepted, and the
/// front's own replies (`answered`), until one side goes.
async fn browser_to_client<S>(
    up_rx: &mut WebSocketReceiver<ConnectStream>,
    client_tx: &mut WebSocketSender<S>,
    filter: &mut WorldFilter,
    seen: &Seen<'_>,
    answered: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
) -> End
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    loop {
        let m = tokio::select! {
            m = up_rx.next() => m,
            Some(answer) = answered.recv() => Some(Ok(Message::text(answer))),
        };
        let Some(m) = m else {
            return End::BrowserGone;
        };
        let m = match m {
            Ok(Message::Text(t)) => match seen.on_browser(t.as_str()) {
                Some(frames) => {
                    for f in frames {
                        if client_tx.send(Message::text(f)).await.is_err() {
                            return End::ClientGone;
                        }
                    }
                    continue;
                }
                None if filter.passes(t.as_str()) => Message::Text(t),
                None => continue,
            },
            Ok(m @ Message::Binary(_)) => m,
            Ok(Message::Close(_)) | Err(_) => return End::BrowserGone,
            Ok(_) => continue,
        };
        if client_tx.send(m).await.is_err() {
            return End::ClientGone;
        }
    }
}

/// A websocket to the browser; `None` if it cannot be opened.
async fn connect_upstream(endpoint: &CdpEndpoint) -> Option<WebSocketStream<ConnectStream>> {
    crate::websocket::connect(endpoint, |socket| socket)
        .await
        .ok()
}

async fn close<S>(client: &mut WebSocketStream<S>, code: CloseCode, reason: &str)
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let frame = CloseFrame {
        code,
        reason: reason.into(),
    };
    let _ = tokio::time::timeout(CLOSE_WAIT, client.close(Some(frame))).await;
}
