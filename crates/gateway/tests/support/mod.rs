//! Test support: a gateway in this process, a Solari client for it, a raw websocket client,
//! and a shutdown that fails the test if a task panicked or a Chromium survived.
#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::{ConnectStream, connect_async};
use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::StreamExt;
use gateway::{Config, Gateway, Status};
use serde_json::Value;
use solari_browser::{Client, ClientOptions};

pub type Ws = WebSocketStream<ConnectStream>;

/// Upper bound for anything that should happen "at once".
pub const SOON: Duration = Duration::from_secs(10);

pub async fn start(config: Config) -> Gateway {
    gateway::spawn(config).await.expect("gateway starts")
}

/// The unmodified official client, pointed at the gateway.
pub fn client(gw: &Gateway) -> Client {
    client_with_key(gw, gw.api_key())
}

pub fn client_with_key(gw: &Gateway, key: &str) -> Client {
    Client::new(ClientOptions::new(key, gw.base_url()).backoff_ms(50)).expect("client")
}

/// Stops the gateway and asserts nothing is left behind.
pub async fn finish(gw: Gateway) {
    let status = gw.shutdown().await.expect("no gateway task panicked");
    assert_eq!(status, Status::default(), "left behind after shutdown");
}

pub async fn connect(url: &str) -> Ws {
    let (ws, _) = tokio::time::timeout(SOON, connect_async(url))
        .await
        .expect("connect in time")
        .expect("websocket connects");
    ws
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
