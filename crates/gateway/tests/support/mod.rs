//! Test support: a gateway in this process that fails the test if it is not shut down cleanly,
//! Solari clients and raw HTTP for it, a raw websocket client, and bounded waits.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::{ConnectStream, connect_async};
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::StreamExt;
use gateway::{Config, Gateway, Status};
use procfs::process::ProcState;
use serde_json::{Value, json};
use solari_browser::{Client, ClientOptions, CreateSessionOptions, Session};

pub type Ws = WebSocketStream<ConnectStream>;

/// Upper bound for anything that should happen "at once".
pub const SOON: Duration = Duration::from_secs(10);

/// A gateway in this process, for one test. [`TestGateway::finish`] stops it and fails the
/// test if a task panicked or anything was left behind; dropping it unfinished fails the test
/// too (the gateway's own drop still kills its browsers).
pub struct TestGateway {
    gw: Option<Gateway>,
}

pub async fn start(config: Config) -> TestGateway {
    TestGateway {
        gw: Some(gateway::spawn(config).await.expect("gateway starts")),
    }
}

impl Deref for TestGateway {
    type Target = Gateway;

    fn deref(&self) -> &Gateway {
        self.gw.as_ref().expect("not finished")
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if self.gw.is_some() && !std::thread::panicking() {
            panic!("the test ended without `finish`: nothing checked what it left behind");
        }
    }
}

impl TestGateway {
    /// The unmodified official client, pointed at the gateway.
    pub fn client(&self) -> Client {
        self.client_with(|o| o)
    }

    /// The official client with `options` applied over the test defaults.
    pub fn client_with(&self, options: impl FnOnce(ClientOptions) -> ClientOptions) -> Client {
        let defaults = ClientOptions::new(self.api_key(), self.base_url()).backoff_ms(50);
        Client::new(options(defaults)).expect("client")
    }

    /// The official client presenting `key` instead of the gateway's.
    pub fn client_with_key(&self, key: &str) -> Client {
        Client::new(ClientOptions::new(key, self.base_url()).backoff_ms(50)).expect("client")
    }

    /// Creates a session with the official client.
    pub async fn create(&self) -> Session {
        self.create_with(CreateSessionOptions::new()).await
    }

    /// Creates a session whose `userMetadata` is `metadata` (a JSON object).
    pub async fn create_with_metadata(&self, metadata: Value) -> Session {
        let metadata = metadata.as_object().expect("a JSON object").clone();
        self.create_with(CreateSessionOptions::new().user_metadata(metadata))
            .await
    }

    async fn create_with(&self, options: CreateSessionOptions) -> Session {
        self.client()
            .sessions()
            .create(options)
            .await
            .expect("create")
    }

    /// Releases a session with the official client.
    pub async fn release(&self, id: &str) {
        self.client().sessions().release(id).await.expect("release");
    }

    /// `(live sessions, dead sessions, Chromium processes)`.
    pub fn census(&self) -> (usize, usize, usize) {
        let s = self.status();
        (s.live_sessions, s.dead_sessions, s.chromium_processes)
    }

    /// A raw request to `path`, with the API key.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .request(method, format!("{}{path}", self.base_url()))
            .bearer_auth(self.api_key())
    }

    /// A raw `POST /sessions` with an empty body and this `Idempotency-Key`.
    pub async fn keyed_create(&self, key: &str) -> (u16, Value) {
        let res = self
            .request(reqwest::Method::POST, "/sessions")
            .header("Idempotency-Key", key)
            .header("Content-Length", "0")
            .send()
            .await
            .expect("an answer");
        answer(res).await
    }

    /// Stops the gateway and asserts nothing is left behind.
    pub async fn finish(mut self) {
        let gw = self.gw.take().expect("not finished");
        let status = gw.shutdown().await.expect("no gateway task panicked");
        // Everything but the peak, which is history.
        let left = |s: &Status| {
            (
                s.live_sessions,
                s.dead_sessions,
                s.chromium_processes,
                s.relay_clients,
            )
        };
        assert_eq!(
            left(&status),
            left(&Status::default()),
            "left behind after shutdown: {status:?}"
        );
    }

    /// Asserts the gateway holds no session and runs no Chromium before it is stopped (every
    /// session the test made was released, or never started), then [`finish`](Self::finish)es.
    pub async fn finish_idle(self) {
        assert_eq!(self.census(), (0, 0, 0), "left behind before shutdown");
        self.finish().await;
    }

    /// Hands the gateway over to a test that stops it itself (or drops it) on purpose.
    pub fn into_inner(mut self) -> Gateway {
        self.gw.take().expect("not finished")
    }
}

/// An answer's status and JSON body (`null` if it has none).
pub async fn answer(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// An answer's status and the `code` of its JSON error body.
pub async fn answer_code(res: reqwest::Response) -> (u16, Value) {
    let (status, body) = answer(res).await;
    (status, body["code"].clone())
}

/// Waits, bounded by `SOON`, until `done` holds: for what the gateway does in the background.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    eventually_async(what, || std::future::ready(done())).await;
}

/// As [`eventually`], for a check that has to await.
pub async fn eventually_async<F: Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let reached = tokio::time::timeout(SOON, async {
        while !done().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "{what}: not in time");
}

/// Whether a process of this `stat` is still running (not a zombie).
pub fn is_live(stat: &procfs::process::Stat) -> bool {
    !matches!(
        ProcState::from_char(stat.state),
        Some(ProcState::Zombie | ProcState::Dead)
    )
}

pub async fn connect(url: &str) -> Ws {
    let (ws, _) = tokio::time::timeout(SOON, connect_async(url))
        .await
        .expect("connect in time")
        .expect("websocket connects");
    ws
}

/// Connects through the relay and checks that the browser answers.
pub async fn attach(url: &str) -> Ws {
    let mut ws = connect(url).await;
    cdp(&mut ws, 1, "Browser.getVersion").await;
    ws
}

/// The next event is a close frame with `code`, and then the connection ends.
pub async fn expect_close(ws: &mut Ws, code: CloseCode) {
    match next_event(ws).await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, code),
        other => panic!("expected a close frame, got {other:?}"),
    }
    assert!(next_event(ws).await.is_none(), "then the connection ends");
}

/// The HTTP status a refused websocket handshake was answered with.
pub async fn refused_status(url: &str) -> u16 {
    match tokio::time::timeout(SOON, connect_async(url))
        .await
        .expect("answer in time")
    {
        Err(WsError::Http(res)) => res.status().as_u16(),
        Ok(_) => panic!("handshake unexpectedly accepted"),
        Err(e) => panic!("unexpected handshake error: {e}"),
    }
}

/// Sends one CDP command and waits for the reply with the same id.
pub async fn cdp(ws: &mut Ws, id: u64, method: &str) -> Value {
    let cmd = serde_json::json!({ "id": id, "method": method }).to_string();
    ws.send(Message::Text(cmd.into())).await.expect("send");
    loop {
        let msg = tokio::time::timeout(SOON, ws.next())
            .await
            .expect("reply in time")
            .expect("connection open")
            .expect("no websocket error");
        if let Message::Text(text) = msg {
            let v: Value = serde_json::from_str(text.as_str()).expect("CDP JSON");
            if v["id"] == id {
                return v;
            }
        }
    }
}

/// The next event on the websocket, bounded by `SOON`.
pub async fn next_event(ws: &mut Ws) -> Option<Result<Message, WsError>> {
    tokio::time::timeout(SOON, ws.next())
        .await
        .expect("an event in time")
}

/// A raw CDP client on a relay connection: commands with parameters, to the browser or to a
/// flattened session, and every event kept until a test asks for it (so none is lost while
/// waiting for a reply). Each wait is bounded by `SOON`.
pub struct Cdp {
    pub ws: Ws,
    next_id: u64,
    events: VecDeque<Value>,
}

impl Cdp {
    pub async fn connect(url: &str) -> Self {
        Self {
            ws: connect(url).await,
            next_id: 0,
            events: VecDeque::new(),
        }
    }

    /// Sends a browser-level command and returns its `result`; panics on an error reply.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.call_on(None, method, params).await
    }

    /// Sends a command (to a flattened `session`, or the browser) and returns its `result`;
    /// panics on an error reply.
    pub async fn call_on(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut cmd = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            cmd["sessionId"] = json!(session);
        }
        self.ws
            .send(Message::Text(cmd.to_string().into()))
            .await
            .expect("send");
        loop {
            let msg = self.read(method).await;
            if msg["id"] == id {
                assert!(msg.get("error").is_none(), "{method} refused: {msg}");
                return msg["result"].clone();
            }
            if msg.get("method").is_some() {
                self.events.push_back(msg);
            }
        }
    }

    /// The first event (kept or still to come) named `method` whose message satisfies
    /// `matches`; earlier events stay kept.
    pub async fn event(&mut self, method: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let wanted = |m: &Value| m["method"] == method && matches(m);
        if let Some(i) = self.events.iter().position(wanted) {
            return self.events.remove(i).expect("kept event");
        }
        loop {
            let msg = self.read(method).await;
            if wanted(&msg) {
                return msg;
            }
            if msg.get("method").is_some() {
                self.events.push_back(msg);
            }
        }
    }

    /// Every kept event named `method`, in order of arrival.
    pub fn kept(&self, method: &str) -> Vec<Value> {
        self.events
            .iter()
            .filter(|m| m["method"] == method)
            .cloned()
            .collect()
    }

    /// Opens a new `about:blank` page and attaches to it flattened: `(targetId, sessionId)`.
    pub async fn open_page(&mut self) -> (String, String) {
        let created = self
            .call("Target.createTarget", json!({ "url": "about:blank" }))
            .await;
        let target = created["targetId"].as_str().expect("targetId").to_owned();
        let attached = self
            .call(
                "Target.attachToTarget",
                json!({ "targetId": target, "flatten": true }),
            )
            .await;
        let session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        (target, session)
    }

    /// The browser answers `Browser.getVersion` on this connection.
    pub async fn assert_browser_answers(&mut self) {
        let version = self.call("Browser.getVersion", json!({})).await;
        assert!(
            version["product"].as_str().is_some_and(|p| !p.is_empty()),
            "{version}"
        );
    }

    /// The next CDP message, bounded by `SOON`; panics if the connection ends.
    async fn read(&mut self, waiting_for: &str) -> Value {
        loop {
            let msg = tokio::time::timeout(SOON, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("{waiting_for} in time"))
                .unwrap_or_else(|| panic!("connection open while waiting for {waiting_for}"))
                .unwrap_or_else(|e| {
                    panic!("no websocket error while waiting for {waiting_for}: {e}")
                });
            match msg {
                Message::Text(text) => {
                    return serde_json::from_str(text.as_str()).expect("CDP JSON");
                }
                Message::Close(frame) => {
                    panic!("closed while waiting for {waiting_for}: {frame:?}")
                }
                _ => {}
            }
        }
    }
}
