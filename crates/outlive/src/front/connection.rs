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
use super::loads::SwapGuard;
use super::seen::{Heard, Seen};
use super::state::{Reply, Serving, State, refuse};
use super::swap::{Link, Out, Reason};
use super::waiting::ProgramCalls;
use crate::ctx::Ctx;
use crate::endpoint::CdpEndpoint;
use crate::report::Milestone;

/// The least a client is held while its browser is replaced (the front's wait limit if longer).
const HOLD_LIMIT: Duration = Duration::from_secs(120);
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
    /// The front closed: no browser comes next.
    FrontClosed,
    /// No browser came up within the front's limit.
    NoBrowser,
    /// The browser's socket could not be opened.
    Unreachable,
    /// The connection cannot be carried to the next browser, for this reason.
    Uncarried(Reason),
}

/// What a generation's loop woke up for.
enum Event {
    Client(Option<Result<Message, WsError>>),
    Browser(Option<Result<Message, WsError>>),
    /// A reply the front gives itself (see `Seen`).
    Answer(String),
    /// The swap step's deadline.
    Deadline,
    /// The entry ended.
    Over,
    /// The front closed.
    Closed,
}

type WsError = async_tungstenite::tungstenite::Error;
type ClientTx<S> = WebSocketSender<S>;
type ClientRx<S> = WebSocketReceiver<S>;

/// One client connection: waits for a browser, connects to it, and forwards until one side
/// goes. At a death it stays: the client is carried to the next browser (see `swap`), unless
/// it uses what cannot be carried, and then it is closed as the end requires.
async fn client_connection<S>(state: Arc<State>, client: WebSocketStream<S>)
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let (mut client_tx, mut client_rx) = client.split();
    let mut link = Link::default();
    // Held from a death to the end of the swap: a restore meanwhile leaves the loads to it.
    let mut swapping: Option<SwapGuard> = None;
    let Some(mut current) = next_browser(&state).await else {
        return finish(&state, client_tx, client_rx, End::NoBrowser).await;
    };
    loop {
        let Some(upstream) = connect_upstream(&current.endpoint).await else {
            return finish(&state, client_tx, client_rx, End::Unreachable).await;
        };
        tracing::debug!(
            generation = current.generation,
            "client connected to the browser"
        );
        let end = generation(
            &state,
            &current,
            &mut link,
            &mut swapping,
            &mut client_tx,
            &mut client_rx,
            upstream,
        )
        .await;
        if !matches!(end, End::BrowserGone | End::EntryOver) || !state.carry {
            return finish(&state, client_tx, client_rx, end).await;
        }
        let next = match link.died() {
            Ok(out) => match send_all(&mut client_tx, out.client).await {
                true => {
                    swapping.get_or_insert_with(|| state.usage.loads().swap());
                    hold(&state, current.generation, &mut link, &mut client_rx).await
                }
                false => return,
            },
            Err(reason) => Err(End::Uncarried(reason)),
        };
        let next =
            next.and_then(
                |next| match next.endpoint.expose() == current.endpoint.expose() {
                    true => Err(End::Uncarried(Reason::PageDeath)),
                    false => Ok(next),
                },
            );
        match next {
            Ok(next) => current = next,
            Err(end) => return finish(&state, client_tx, client_rx, end).await,
        }
    }
}

/// Reads the client into the link while the browser is replaced, until the next one is
/// served (within the front's limit).
async fn hold<S>(
    state: &State,
    dead: u64,
    link: &mut Link,
    client_rx: &mut ClientRx<S>,
) -> Result<Serving, End>
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let mut serving = state.serving.subscribe();
    let mut closed = state.closed.subscribe();
    let next = |s: &Option<Serving>| {
        s.as_ref()
            .is_some_and(|s| s.generation > dead && !s.ctx.is_retired())
    };
    let limit = tokio::time::sleep(state.wait_limit.max(HOLD_LIMIT));
    tokio::pin!(limit);
    loop {
        tokio::select! {
            s = serving.wait_for(next) => {
                return s.ok().and_then(|s| s.clone()).ok_or(End::FrontClosed);
            }
            m = client_rx.next() => match m {
                Some(Ok(Message::Text(t))) => {
                    if let Err(reason) = link.client_sent(t.as_str().to_owned()) {
                        return Err(End::Uncarried(reason));
                    }
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => return Err(End::ClientGone),
                Some(Ok(_)) => {}
            },
            () = &mut limit => return Err(End::Uncarried(Reason::SwapTimedOut)),
            _ = closed.wait_for(|c| *c) => return Err(End::FrontClosed),
        }
    }
}

/// One browser's part of a connection: the link rebound to it if it is not the first, then
/// frames both ways until one side goes or the entry ends.
async fn generation<S>(
    state: &State,
    current: &Serving,
    link: &mut Link,
    swapping: &mut Option<SwapGuard>,
    client_tx: &mut ClientTx<S>,
    client_rx: &mut ClientRx<S>,
    upstream: WebSocketStream<ConnectStream>,
) -> End
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let (mut up_tx, mut up_rx) = upstream.split();
    let mut filter = WorldFilter::default();
    let program = ProgramCalls::new(current.ctx.link().calls.clone());
    let (seen, mut answered) = Seen::new(&state.usage, &current.endpoint, program);
    let mut to = Sides {
        client: client_tx,
        browser: &mut up_tx,
        seen: &seen,
        ctx: &current.ctx,
    };
    if let Some(end) = rebind(state, current, link, swapping, &mut to).await {
        return end;
    }
    let mut serving = state.serving.subscribe();
    let mut closed = state.closed.subscribe();
    let over = async {
        let generation = current.generation;
        let _ = serving
            .wait_for(|s| s.as_ref().map(|s| s.generation) != Some(generation))
            .await;
    };
    tokio::pin!(over);
    let end = loop {
        let deadline = link.deadline();
        let until = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            m = client_rx.next() => Event::Client(m),
            m = up_rx.next() => Event::Browser(m),
            Some(answer) = answered.recv() => Event::Answer(answer),
            () = until => Event::Deadline,
            () = &mut over => Event::Over,
            _ = closed.wait_for(|c| *c) => Event::Closed,
        };
        let out = match on_event(event, link, &mut to, &mut filter).await {
            Then::Send(out) => out,
            Then::Next => continue,
            Then::End(end) => break end,
        };
        match out {
            Ok(out) => {
                if let Some(end) = send_noting_loads(&mut to, out, link, swapping).await {
                    break end;
                }
                if let Some(took) = link.take_carried() {
                    carried(state, &current.ctx, took);
                }
            }
            Err(reason) => break End::Uncarried(reason),
        }
    };
    let _ = up_tx.close(None).await;
    end
}

/// Carries the link to this browser if a swap is under way; the end, if it cannot be.
async fn rebind<S>(
    state: &State,
    current: &Serving,
    link: &mut Link,
    swapping: &mut Option<SwapGuard>,
    to: &mut Sides<'_, '_, S>,
) -> Option<End>
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    if !link.swapping() {
        return None;
    }
    let endpoint = current.endpoint.expose();
    let pairs = state.usage.restored_pairs(endpoint);
    let states = state.usage.page_states_of(endpoint);
    let remade = state.usage.waiting(endpoint);
    let out = match link.rebind(&pairs, &states, &remade) {
        Ok(out) => out,
        Err(reason) => return Some(End::Uncarried(reason)),
    };
    // The client has its contexts: those made again are its, not a reconnecting client's.
    for _ in 0..link.made_contexts().min(remade.len()) {
        state.usage.take_ready(endpoint);
    }
    send_noting_loads(to, out, link, swapping).await
}

/// Sends what the link asks, telling the swap's guard of the page loads it begins and ends;
/// the guard goes once the swap is over.
async fn send_noting_loads<S>(
    to: &mut Sides<'_, '_, S>,
    out: Out,
    link: &Link,
    swapping: &mut Option<SwapGuard>,
) -> Option<End>
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    if let Some(guard) = swapping.as_mut() {
        out.loading.iter().for_each(|t| guard.loading(t));
        out.loaded.iter().for_each(|t| guard.loaded(t));
    }
    let end = to.send(out).await;
    if !link.swapping() {
        *swapping = None;
    }
    end
}

/// What an event asks of a generation's loop.
enum Then {
    Send(Result<Out, Reason>),
    Next,
    End(End),
}

/// An event through the link; binary messages pass as they are.
async fn on_event<S>(
    event: Event,
    link: &mut Link,
    to: &mut Sides<'_, '_, S>,
    filter: &mut WorldFilter,
) -> Then
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    Then::Send(match event {
        Event::Client(Some(Ok(Message::Text(t)))) => link.client_sent(t.as_str().to_owned()),
        Event::Client(Some(Ok(m @ Message::Binary(_)))) => {
            return match to.browser.send(m).await {
                Ok(()) => Then::Next,
                Err(_) => Then::End(End::BrowserGone),
            };
        }
        Event::Browser(Some(Ok(Message::Text(t)))) => {
            Ok(from_browser(link, to.seen, filter, t.as_str()))
        }
        Event::Browser(Some(Ok(m @ Message::Binary(_)))) => {
            return match to.client.send(m).await {
                Ok(()) => Then::Next,
                Err(_) => Then::End(End::ClientGone),
            };
        }
        Event::Client(Some(Ok(Message::Close(_)) | Err(_)) | None) => {
            return Then::End(End::ClientGone);
        }
        Event::Browser(Some(Ok(Message::Close(_)) | Err(_)) | None) => {
            return Then::End(End::BrowserGone);
        }
        Event::Client(Some(Ok(_))) | Event::Browser(Some(Ok(_))) => return Then::Next,
        Event::Answer(answer) => Ok(link.browser_sent(&answer)),
        Event::Deadline => link.timed_out(),
        Event::Over => return Then::End(End::EntryOver),
        Event::Closed => return Then::End(End::FrontClosed),
    })
}

/// A client's swap is over, in `took`: counted, told as a milestone, logged.
fn carried(state: &State, ctx: &Ctx, took: Duration) {
    state.usage.client_carried(took);
    let at = tokio::time::Instant::now().into_std();
    ctx.note(&Milestone::ClientCarried { took, at });
    tracing::debug!(
        ms = took.as_millis() as u64,
        "a client was carried to the new browser"
    );
}

/// A browser's frame through the connection's bookkeeping and filter, then the link.
fn from_browser(link: &mut Link, seen: &Seen<'_>, filter: &mut WorldFilter, frame: &str) -> Out {
    let frames = match seen.on_browser(frame) {
        Some(frames) => frames,
        None if filter.passes(frame) => return link.browser_sent(frame),
        None => return Out::default(),
    };
    let mut out = Out::default();
    for f in frames {
        out.extend(link.browser_sent(&f));
    }
    out
}

/// Where a generation's frames go.
struct Sides<'a, 's, S> {
    client: &'a mut ClientTx<S>,
    browser: &'a mut WebSocketSender<ConnectStream>,
    seen: &'a Seen<'s>,
    ctx: &'a Ctx,
}

impl<S> Sides<'_, '_, S>
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    /// Sends what the link asks; the end, if a side went (or the client closed the browser).
    async fn send(&mut self, out: Out) -> Option<End> {
        for frame in out.client {
            if self.client.send(Message::text(frame)).await.is_err() {
                return Some(End::ClientGone);
            }
        }
        for frame in out.own {
            if self.browser.send(Message::text(frame)).await.is_err() {
                return Some(End::BrowserGone);
            }
        }
        for frame in out.browser {
            match self.seen.on_client(&frame) {
                Heard::Forward => {}
                Heard::Answered => continue,
                Heard::CloseBrowser(id) => return Some(End::ClientClosedBrowser(id)),
            }
            if self.browser.send(Message::text(frame)).await.is_err() {
                return Some(End::BrowserGone);
            }
            self.ctx.note_client_used();
        }
        None
    }
}

/// Sends frames to the client; whether it is still there.
async fn send_all<S>(client_tx: &mut ClientTx<S>, frames: Vec<String>) -> bool
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    for frame in frames {
        if client_tx.send(Message::text(frame)).await.is_err() {
            return false;
        }
    }
    true
}

/// The entry served now, once one is up and live, waiting at most the front's limit.
async fn next_browser(state: &State) -> Option<Serving> {
    let mut serving = state.serving.subscribe();
    // An entry already retired (its browser failed) is not handed out: a client connecting
    // during its grace would be cut at once, and Playwright then hangs in its connect for 30 s.
    let live = |s: &Option<Serving>| s.as_ref().is_some_and(|s| !s.ctx.is_retired());
    let serving = match tokio::time::timeout(state.wait_limit, serving.wait_for(live)).await {
        Ok(Ok(s)) => s.clone()?,
        _ => return None,
    };
    // Pages whose load was left to clients carried through the death are not shown half
    // done: a new client waits for those loads (bounded).
    let _ = tokio::time::timeout(state.wait_limit, state.usage.loads().settled()).await;
    Some(serving)
}

/// Tells the client why its connection ends, as the end requires.
async fn finish<S>(state: &State, tx: ClientTx<S>, rx: ClientRx<S>, end: End)
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let Ok(mut client) = WebSocketStream::reunite(tx, rx) else {
        return;
    };
    let (code, why) = match end {
        End::ClientGone => return,
        End::ClientClosedBrowser(id) => {
            let done = json!({ "id": id, "result": {} }).to_string();
            let _ = client.send(Message::text(done)).await;
            (CloseCode::Normal, "the browser is closed".to_owned())
        }
        End::NoBrowser => (
            CloseCode::Again,
            "no browser came up in time; try again".to_owned(),
        ),
        End::Unreachable => (CloseCode::Error, "the browser is unreachable".to_owned()),
        End::Uncarried(reason) => {
            state.usage.client_fell_back(reason.name());
            tracing::info!(
                reason = reason.name(),
                "a client's connection was closed at a death: {reason}"
            );
            let why =
                format!("the browser is gone; this connection cannot be carried over: {reason}");
            (CloseCode::Away, why)
        }
        End::BrowserGone | End::EntryOver | End::FrontClosed => (
            CloseCode::Away,
            "the browser is gone; outlive is replacing it".to_owned(),
        ),
    };
    close(&mut client, code, &why).await;
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
