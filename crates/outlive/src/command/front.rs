//! The front: one loopback HTTP server per run that a foreign client talks to, at the same
//! address for the whole run, whichever browser serves it now.
//!
//! * `GET /json/version` (and `/json/version/`): Chromium's discovery answer, whose
//!   `webSocketDebuggerUrl` is the front's browser socket.
//! * `GET /devtools/browser/<id>` (websocket): a CDP connection to the current browser. The
//!   front opens a connection of its own to the browser for each client and forwards frames
//!   both ways, holding back outlive's isolated worlds ([`WorldFilter`]). When the entry ends
//!   (a death, a page failure, a rotation), every client connection is closed at once, so
//!   the client's pending calls fail instead of hanging. A client that connects while no
//!   browser is up, or while the entry's has failed, waits for the next one (bounded).
//! * `POST /<token>/checkpoint` (optional JSON body: the task's progress), `POST
//!   /<token>/hold`, `POST /<token>/release`: the control, for scripts in any language.
//!
//! Like Chromium's own endpoint, it refuses requests that carry an `Origin` (a web page) or a
//! `Host` that is not loopback (DNS rebinding).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_tungstenite::tokio::ConnectStream;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::handshake::derive_accept_key;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use async_tungstenite::{WebSocketReceiver, WebSocketSender, WebSocketStream};
use futures::StreamExt;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    CONNECTION, CONTENT_TYPE, HOST, ORIGIN, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_VERSION, UPGRADE,
};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::filter::WorldFilter;
use super::usage::{self, Sessions, Usage};
use super::waiting::ProgramCalls;
use crate::ctx::{CheckpointHold, Ctx};
use crate::endpoint::CdpEndpoint;
use tokio_util::task::AbortOnDropHandle;

/// The most progress a checkpoint request may carry.
pub const MAX_PROGRESS_BYTES: usize = 1 << 20;
/// How long a closing connection waits for its close frame to go out.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The browser the front serves now: one entry's.
#[derive(Clone)]
struct Serving {
    /// Counts entries: a client connection belongs to one.
    generation: u64,
    endpoint: CdpEndpoint,
    ctx: Ctx,
}

struct State {
    port: u16,
    /// The browser socket's id (unguessable: the URL is the credential, as Chromium's is).
    browser_id: String,
    /// The control URL's secret path segment.
    token: String,
    serving: watch::Sender<Option<Serving>>,
    generations: std::sync::atomic::AtomicU64,
    holds: Mutex<Vec<CheckpointHold>>,
    /// How long a client connecting between browsers waits for the next.
    wait_limit: Duration,
    /// Set when the front is dropped: every connection ends.
    closed: watch::Sender<bool>,
    /// What the clients do with the browser served now (the capture reads it).
    usage: Arc<Usage>,
}

/// The server, owned: dropping it closes every connection.
pub(crate) struct Front {
    state: Arc<State>,
    _accept: AbortOnDropHandle<()>,
}

impl Front {
    /// Listens on 127.0.0.1 (a free port). A client that connects between browsers waits
    /// up to `wait_limit` for the next.
    pub(crate) async fn start(wait_limit: Duration, usage: Arc<Usage>) -> std::io::Result<Front> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            port,
            browser_id: uuid::Uuid::new_v4().to_string(),
            token: hex::encode(rand::random::<[u8; 16]>()),
            serving: watch::channel(None).0,
            generations: Default::default(),
            holds: Mutex::default(),
            wait_limit,
            closed: watch::channel(false).0,
            usage,
        });
        let accept = AbortOnDropHandle::new(crate::quiet::spawn(accept(listener, state.clone())));
        Ok(Front {
            state,
            _accept: accept,
        })
    }

    /// `ws://127.0.0.1:PORT/devtools/browser/<id>`.
    pub(crate) fn cdp_url(&self) -> String {
        format!(
            "ws://127.0.0.1:{}/devtools/browser/{}",
            self.state.port, self.state.browser_id
        )
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.state.port)
    }

    /// `http://127.0.0.1:PORT/<token>`.
    pub(crate) fn control_url(&self) -> String {
        format!("http://127.0.0.1:{}/{}", self.state.port, self.state.token)
    }

    /// Serves the entry's browser until the returned guard is dropped (or another entry is
    /// served); then every client connection to it is closed.
    pub(crate) fn serve(&self, endpoint: CdpEndpoint, ctx: Ctx) -> Served {
        let generation = self
            .state
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        self.state.holds.lock().expect("holds poisoned").clear();
        self.state.usage.new_browser();
        self.state.serving.send_replace(Some(Serving {
            generation,
            endpoint,
            ctx,
        }));
        Served {
            state: self.state.clone(),
            generation,
        }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.state.closed.send_replace(true);
        self.state.serving.send_replace(None);
    }
}

/// One entry's browser being served; dropping it stops serving it.
pub(crate) struct Served {
    state: Arc<State>,
    generation: u64,
}

impl Served {
    /// Stops serving now: every client connection is closed at once.
    pub(crate) fn stop(&self) {
        let state = &self.state;
        let current = state.serving.borrow().as_ref().map(|s| s.generation);
        if current == Some(self.generation) {
            state.holds.lock().expect("holds poisoned").clear();
            state.serving.send_replace(None);
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn accept(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Small CDP commands and the tail of big replies must not wait for an ACK (Nagle +
        // delayed ACK cost up to 40 ms per message).
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        crate::quiet::spawn(async move {
            let mut closed = state.closed.subscribe();
            let service = hyper::service::service_fn(move |req| handle(state.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                _ = conn => {}
                _ = closed.wait_for(|c| *c) => {}
            }
        });
    }
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, body: serde_json::Value) -> Reply {
    let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, "application/json".parse().expect("static"));
    res
}

fn refuse(status: StatusCode, why: &str) -> Reply {
    reply(status, json!({ "error": why }))
}

/// Whether `host` names this front on loopback.
fn loopback_host(host: &str, port: u16) -> bool {
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|h| host == format!("{h}:{port}"))
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Reply, Infallible> {
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !loopback_host(host, state.port) {
        return Ok(refuse(
            StatusCode::FORBIDDEN,
            "the Host header must name this loopback address (127.0.0.1 or localhost and the port)",
        ));
    }
    if req.headers().contains_key(ORIGIN) {
        return Ok(refuse(
            StatusCode::FORBIDDEN,
            "requests from web pages (with an Origin header) are refused",
        ));
    }
    let path = req.uri().path().to_owned();
    let browser_path = format!("/devtools/browser/{}", state.browser_id);
    let control = path
        .strip_prefix('/')
        .and_then(|p| p.split_once('/'))
        .filter(|(token, _)| constant_time_eq(token.as_bytes(), state.token.as_bytes()))
        .map(|(_, action)| action.to_owned());
    Ok(match (req.method(), path.as_str(), control) {
        (&Method::GET, "/json/version" | "/json/version/", _) => reply(
            StatusCode::OK,
            json!({
                "Browser": "outlive (Chromium)",
                "Protocol-Version": "1.3",
                "webSocketDebuggerUrl": format!("ws://127.0.0.1:{}{}", state.port, browser_path),
            }),
        ),
        (&Method::GET, p, _) if p == browser_path => upgrade(state, req),
        (&Method::POST, _, Some(action)) => control_request(&state, &action, req).await,
        (_, _, Some(_)) => refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "control requests are POSTs: checkpoint, hold, release",
        ),
        _ => refuse(
            StatusCode::NOT_FOUND,
            "no such path on this outlive endpoint",
        ),
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn control_request(state: &State, action: &str, req: Request<Incoming>) -> Reply {
    if !matches!(action, "checkpoint" | "hold" | "release") {
        return refuse(
            StatusCode::NOT_FOUND,
            "unknown control action; use checkpoint, hold or release",
        );
    }
    let body = match Limited::new(req.into_body(), MAX_PROGRESS_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the progress is over {MAX_PROGRESS_BYTES} bytes"),
            );
        }
    };
    let Some(serving) = state.serving.borrow().clone() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "no browser is up: outlive is replacing it; this run's command ends now",
        );
    };
    match action {
        "checkpoint" => checkpoint(serving.ctx, &body).await,
        "hold" => {
            let mut holds = state.holds.lock().expect("holds poisoned");
            holds.push(serving.ctx.hold_checkpoints());
            reply(StatusCode::OK, json!({ "held": holds.len() }))
        }
        _ => {
            let mut holds = state.holds.lock().expect("holds poisoned");
            match holds.pop() {
                Some(_) => reply(StatusCode::OK, json!({ "held": holds.len() })),
                None => refuse(StatusCode::CONFLICT, "nothing is held"),
            }
        }
    }
}

/// A checkpoint with the body as the progress (none when empty). Answers once the capture is
/// done; if the entry ends meanwhile (a death, or a rotation at this very checkpoint), answers
/// that instead of waiting forever.
async fn checkpoint(ctx: Ctx, body: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(body);
    let progress = if text.trim().is_empty() {
        None
    } else {
        match serde_json::from_str::<Box<RawValue>>(text.trim()) {
            Ok(p) => Some(p),
            Err(e) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "the body is not JSON ({:?} error at line {}, column {})",
                        e.classify(),
                        e.line(),
                        e.column()
                    ),
                );
            }
        }
    };
    let retired = ctx.retired();
    let capture = async {
        match &progress {
            Some(p) => ctx.checkpoint_with(p).await,
            None => ctx.checkpoint().await,
        }
    };
    tokio::select! {
        wrote = capture => reply(StatusCode::OK, json!({ "checkpointed": wrote })),
        () = retired => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "checkpointed": false, "error": "the entry ended: the browser is being replaced and this command ends now" }),
        ),
    }
}

fn upgrade(state: Arc<State>, mut req: Request<Incoming>) -> Reply {
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
    /// Not an end: the front answered the client's command itself.
    Answered,
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
    let mut serving = state.serving.subscribe();
    let mut closed = state.closed.subscribe();
    // An entry already retired (its browser failed) is not handed out: a client connecting
    // during its grace would be cut at once, and Playwright then hangs in its connect for 30 s.
    let live = |s: &Option<Serving>| s.as_ref().is_some_and(|s| !s.ctx.is_retired());
    let current = match tokio::time::timeout(state.wait_limit, serving.wait_for(live)).await {
        Ok(Ok(s)) => s.clone(),
        _ => None,
    };
    let current = match current {
        Some(s) => s,
        None => {
            return close(
                &mut client,
                CloseCode::Again,
                "no browser came up in time; try again",
            )
            .await;
        }
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
    let Ok(mut client) = WebSocketStream::reunite(client_tx, client_rx) else {
        return;
    };
    match end {
        End::ClientGone | End::Answered => {}
        End::ClientClosedBrowser(id) => {
            let done = json!({ "id": id, "result": {} }).to_string();
            let _ = client.send(Message::text(done)).await;
            close(&mut client, CloseCode::Normal, "the browser is closed").await;
        }
        End::BrowserGone | End::EntryOver => {
            close(
                &mut client,
                CloseCode::Away,
                "the browser is gone; outlive is replacing it",
            )
            .await;
        }
    }
}

/// What one client connection's halves learn of the client (see `usage`).
struct Seen<'a> {
    usage: &'a Usage,
    /// The browser's endpoint: which browser's contexts made again are this one's.
    endpoint: String,
    sessions: Mutex<Sessions>,
    /// Ids of the client's `Target.createBrowserContext` commands still unanswered.
    creating: Mutex<Vec<u64>>,
    /// Ids of the client's `Target.getBrowserContexts` commands still unanswered.
    listing: Mutex<Vec<u64>>,
    /// Ids of the client's `Target.createTarget` commands still unanswered.
    opening: Mutex<Vec<u64>>,
    /// The tabs shown to the client in its order when it asks to attach to them.
    attach: Mutex<usage::AttachOrder>,
    /// Replies the front gives itself, for the browser-to-client half to send.
    answers: tokio::sync::mpsc::UnboundedSender<String>,
    /// What the relay's watchdog learns of the client's commands waiting for the browser.
    program: ProgramCalls,
}

impl<'a> Seen<'a> {
    /// A connection's view, and where the front's own replies to it arrive.
    fn new(
        usage: &'a Usage,
        endpoint: &CdpEndpoint,
        program: ProgramCalls,
    ) -> (Self, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (answers, answered) = tokio::sync::mpsc::unbounded_channel();
        let seen = Seen {
            usage,
            endpoint: endpoint.expose().to_owned(),
            sessions: Mutex::default(),
            creating: Mutex::default(),
            listing: Mutex::default(),
            opening: Mutex::default(),
            attach: Mutex::default(),
            answers,
            program,
        };
        (seen, answered)
    }

    /// A command from the client: whether to forward it.
    fn on_client(&self, frame: &str) -> Result<(), End> {
        self.sessions
            .lock()
            .expect("sessions poisoned")
            .on_client(frame, self.usage);
        match usage::Command::of(frame) {
            usage::Command::Forward => {}
            usage::Command::CloseBrowser(id) => return Err(End::ClientClosedBrowser(id)),
            usage::Command::CreateContext(id) => match self.usage.take_ready(&self.endpoint) {
                // A context made again from the checkpoint, its state in place: answered here.
                Some(context) => {
                    let _ = self.answers.send(usage::context_reply(id, &context));
                    return Err(End::Answered);
                }
                None => self.creating.lock().expect("creating poisoned").push(id),
            },
            usage::Command::ListContexts(id) => {
                self.listing.lock().expect("listing poisoned").push(id);
            }
            usage::Command::CreateTab(id) => {
                self.opening.lock().expect("opening poisoned").push(id)
            }
            usage::Command::AutoAttach(id) => {
                self.attach.lock().expect("attach poisoned").asked(id)
            }
        }
        let sessions = self.sessions.lock().expect("sessions poisoned");
        self.program
            .sent(frame.as_bytes(), |session| sessions.target(session));
        Ok(())
    }

    /// A message from the browser, as the client is to see it: `None` as it is, else the
    /// messages to send in its place.
    fn on_browser(&self, frame: &str) -> Option<Vec<String>> {
        self.program.heard(frame.as_bytes());
        self.sessions
            .lock()
            .expect("sessions poisoned")
            .on_browser(frame);
        self.note_made(frame);
        let order = || self.usage.tab_order(&self.endpoint);
        if let Some(frames) = self
            .attach
            .lock()
            .expect("attach poisoned")
            .on_browser(frame, order)
        {
            return Some(frames);
        }
        self.without_waiting_contexts(frame).map(|f| vec![f])
    }

    /// Notes the tabs and contexts the browser says the client made.
    fn note_made(&self, frame: &str) {
        let mut opening = self.opening.lock().expect("opening poisoned");
        let made = opening
            .iter()
            .enumerate()
            .find_map(|(i, &id)| usage::tab_created(frame, id).map(|t| (i, t)));
        if let Some((i, tab)) = made {
            opening.remove(i);
            self.usage.tab_opened(&self.endpoint, &tab);
        }
        drop(opening);
        let mut creating = self.creating.lock().expect("creating poisoned");
        let made = creating
            .iter()
            .enumerate()
            .find_map(|(i, &id)| usage::context_created(frame, id).map(|c| (i, c)));
        if let Some((i, context)) = made {
            creating.remove(i);
            self.usage.context_made(&context);
        }
    }

    /// A reply to the client's `Target.getBrowserContexts` without the contexts not handed out.
    fn without_waiting_contexts(&self, frame: &str) -> Option<String> {
        let mut listing = self.listing.lock().expect("listing poisoned");
        if listing.is_empty() || !frame.contains("browserContextIds") {
            return None;
        }
        let waiting = self.usage.waiting(&self.endpoint);
        let (i, reply) = listing
            .iter()
            .enumerate()
            .find_map(|(i, &id)| usage::without_contexts(frame, id, &waiting).map(|r| (i, r)))?;
        listing.remove(i);
        Some(reply)
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
                        Ok(()) => {}
                        Err(End::Answered) => continue,
                        Err(end) => return end,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_with_the_port() {
        assert!(loopback_host("127.0.0.1:9222", 9222));
        assert!(loopback_host("localhost:9222", 9222));
        assert!(!loopback_host("127.0.0.1:9223", 9222));
        assert!(!loopback_host("evil.example:9222", 9222));
        assert!(!loopback_host("", 9222));
    }
}
