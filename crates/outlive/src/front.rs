//! The front: one loopback HTTP server per run that a foreign client talks to, at the same
//! address for the whole run, whichever browser serves it now.
//!
//! * `GET /json/version`: Chromium's discovery answer, naming the front's browser socket.
//! * `GET /devtools/browser/<id>` (websocket): a CDP connection to the current browser
//!   ([`connection`]), outlive's isolated worlds held back ([`filter`]). It is closed when the
//!   entry ends; a client that connects between browsers waits for the next (bounded).
//! * `POST /<token>/checkpoint`, `…/hold`, `…/release`: the [`control`], for any language.
//!
//! Like Chromium's, it refuses an `Origin` (a web page) and a non-loopback `Host` (rebinding).

mod connection;
mod control;
mod filter;
pub(crate) mod loads;
mod seen;
mod state;
mod swap;
pub(crate) mod usage;
mod waiting;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HOST, ORIGIN};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

pub use control::MAX_PROGRESS_BYTES;
pub(crate) use usage::{Client, Usage};

use crate::ctx::Ctx;
use crate::endpoint::CdpEndpoint;
use state::{Reply, Serving, State, refuse, reply};

/// The server, owned: dropping it closes every connection.
pub(crate) struct Front {
    state: Arc<State>,
    _accept: AbortOnDropHandle<()>,
}

impl Front {
    /// Listens on 127.0.0.1 (a free port). A client that connects between browsers waits
    /// up to `wait_limit` for the next.
    /// `carry`: a client's connection is carried to the next browser at a death.
    pub(crate) async fn start(
        wait_limit: Duration,
        usage: Arc<Usage>,
        carry: bool,
    ) -> std::io::Result<Front> {
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
            carry,
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
        crate::sync::lock(&self.state.holds).clear();
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
            crate::sync::lock(&state.holds).clear();
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
        (&Method::GET, p, _) if p == browser_path => connection::upgrade(state, req),
        (&Method::POST, _, Some(action)) => control::request(&state, &action, req).await,
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
