//! Page faults: every page of a session's browser crashes or closes while the browser, and the
//! client's relay connection to it, live on.
//!
//! The gateway opens a CDP connection of its own to the browser for each fault (Chromium takes
//! several clients on its browser endpoint). So the client's connection carries nothing it did
//! not ask for but the events of the fault itself. A fault is done once each page is seen
//! crashed or gone, so a caller that gets an answer can rely on what its clients will see.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::{Instant, timeout, timeout_at};

use crate::config::PageFault;
use crate::error::{Error, ErrorKind};
use crate::websocket::{self, BrowserWs};

/// How long the browser gets to accept the fault's connection.
const CONNECT: Duration = Duration::from_secs(10);
/// How long the browser gets to answer one command.
const REPLY: Duration = Duration::from_secs(10);
/// How long a page gets to crash or close once told to.
const SETTLE: Duration = Duration::from_secs(5);
/// Between two tries of a refused `Page.crash`.
const RETRY: Duration = Duration::from_millis(50);
/// How long the close handshake of the fault's connection may take.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Why a page fault was not carried out in full.
#[derive(Debug)]
pub(crate) enum PageError {
    /// The browser could not be reached, or its connection broke: most likely it died.
    Connection {
        what: &'static str,
        source: Option<std::io::Error>,
    },
    /// Chromium did not answer a command in time.
    NoAnswer { method: &'static str },
    /// Chromium answered a command with an error.
    Refused {
        method: &'static str,
        message: String,
    },
    /// Some pages were told to crash or close but were not seen to in time.
    Unsettled {
        fault: PageFault,
        missed: usize,
        total: usize,
    },
}

impl PageError {
    /// Whether the browser's connection failed (rather than the browser answering badly).
    pub(crate) fn is_connection(&self) -> bool {
        matches!(self, PageError::Connection { .. })
    }
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::Connection { what, .. } => write!(f, "{what}"),
            PageError::NoAnswer { method } => write!(
                f,
                "the browser did not answer {method} within {} s",
                REPLY.as_secs()
            ),
            PageError::Refused { method, message } => {
                write!(f, "the browser refused {method}: {message}")
            }
            PageError::Unsettled {
                fault,
                missed,
                total,
            } => write!(
                f,
                "{missed} of {total} page(s) did not {fault} within {} s",
                SETTLE.as_secs()
            ),
        }
    }
}

impl From<PageError> for Error {
    fn from(e: PageError) -> Self {
        let message = e.to_string();
        match e {
            PageError::Connection {
                source: Some(io), ..
            } => Error::new(ErrorKind::PageFault, message).with_source(io),
            _ => Error::new(ErrorKind::PageFault, message),
        }
    }
}

/// Crashes or closes every page target of the browser at `upstream` (its own DevTools
/// websocket URL, a capability that no message here repeats) and returns how many pages were
/// seen to crash or close. Pages that were already crashed, or went away meanwhile, are not
/// counted and are no failure.
pub(crate) async fn fail_pages(upstream: &str, fault: PageFault) -> Result<usize, PageError> {
    let mut cdp = Cdp::connect(upstream).await?;
    let result = fault_all(&mut cdp, fault).await;
    cdp.close().await;
    result
}

async fn fault_all(cdp: &mut Cdp, fault: PageFault) -> Result<usize, PageError> {
    // Discovery makes Chromium report each crash and each destroyed target on this connection.
    cdp.call("Target.setDiscoverTargets", json!({"discover": true}), None)
        .await?
        .map_err(|message| PageError::Refused {
            method: "Target.setDiscoverTargets",
            message,
        })?;
    let targets = cdp
        .call("Target.getTargets", json!({}), None)
        .await?
        .map_err(|message| PageError::Refused {
            method: "Target.getTargets",
            message,
        })?;
    let pages: Vec<String> = targets["targetInfos"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["type"] == "page")
        .filter_map(|t| t["targetId"].as_str().map(str::to_owned))
        .collect();

    let (mut hit, mut missed) = (0, 0);
    for page in &pages {
        let outcome = match fault {
            PageFault::Crash => crash(cdp, page).await?,
            PageFault::Close => close(cdp, page).await?,
        };
        match outcome {
            Outcome::Hit => hit += 1,
            Outcome::Gone => {}
            Outcome::Missed => missed += 1,
        }
    }
    if missed > 0 {
        return Err(PageError::Unsettled {
            fault,
            missed,
            total: pages.len(),
        });
    }
    Ok(hit)
}

/// What became of one page.
enum Outcome {
    /// It crashed or closed.
    Hit,
    /// It was already crashed, or went away by itself.
    Gone,
    /// It was told to, but was not seen to in time.
    Missed,
}

async fn crash(cdp: &mut Cdp, page: &str) -> Result<Outcome, PageError> {
    if cdp.crashed.contains(page) {
        // Its renderer was shared with a page crashed before it.
        return Ok(Outcome::Hit);
    }
    if cdp.destroyed.contains(page) {
        return Ok(Outcome::Gone);
    }
    let attached = cdp
        .call(
            "Target.attachToTarget",
            json!({"targetId": page, "flatten": true}),
            None,
        )
        .await?;
    let session = match attached {
        Ok(v) => v["sessionId"].as_str().map(str::to_owned),
        Err(refusal) => {
            tracing::debug!(refusal, "Target.attachToTarget refused");
            None
        }
    };
    let Some(session) = session else {
        return Ok(Outcome::Gone); // closed meanwhile
    };
    cdp.sessions.insert(session.clone(), page.to_owned());
    let deadline = Instant::now() + SETTLE;
    loop {
        // Never answered when it works: the renderer is gone before it could reply. An answer
        // is a refusal: "The target has already crashed", or one given while a navigation
        // swaps the page's renderer, which a later try gets past.
        let id = cdp.send("Page.crash", json!({}), Some(&session)).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        let settled = cdp
            .wait_until(left, |c| {
                c.crashed.contains(page)
                    || c.destroyed.contains(page)
                    || c.replies.contains_key(&id)
            })
            .await?;
        if cdp.crashed.contains(page) {
            return Ok(Outcome::Hit);
        }
        if !settled {
            return Ok(Outcome::Missed);
        }
        if cdp.destroyed.contains(page) {
            return Ok(Outcome::Gone);
        }
        let refusal = cdp.replies.remove(&id).and_then(Result::err);
        if refusal
            .as_deref()
            .is_some_and(|m| m.contains("already crashed"))
        {
            return Ok(Outcome::Gone);
        }
        tracing::debug!(?refusal, "Page.crash refused; trying again");
        if Instant::now() + RETRY >= deadline {
            return Ok(Outcome::Missed);
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn close(cdp: &mut Cdp, page: &str) -> Result<Outcome, PageError> {
    if cdp.destroyed.contains(page) {
        return Ok(Outcome::Gone);
    }
    let closed = cdp
        .call("Target.closeTarget", json!({"targetId": page}), None)
        .await?;
    if closed.is_err() {
        return Ok(Outcome::Gone); // no such target any more
    }
    // The answer comes when the close starts; the target is gone at `targetDestroyed`.
    let gone = cdp
        .wait_until(SETTLE, |c| c.destroyed.contains(page))
        .await?;
    Ok(if gone { Outcome::Hit } else { Outcome::Missed })
}

/// A minimal CDP client: numbered commands, replies kept until taken, and the target events a
/// fault waits for.
struct Cdp {
    ws: BrowserWs,
    next_id: u64,
    /// Replies not taken yet: the result, or the error's message.
    replies: HashMap<u64, Result<Value, String>>,
    /// Targets seen crashed.
    crashed: HashSet<String>,
    /// Targets seen destroyed.
    destroyed: HashSet<String>,
    /// This connection's flattened sessions, to their target.
    sessions: HashMap<String, String>,
}

impl Cdp {
    async fn connect(url: &str) -> Result<Self, PageError> {
        let ws = match timeout(CONNECT, websocket::connect(url)).await {
            Ok(Ok(ws)) => ws,
            // Not the error itself: some carry the URL, and the URL is a capability.
            Ok(Err(e)) => {
                return Err(PageError::Connection {
                    what: "could not connect to the session's browser",
                    source: match e {
                        WsError::Io(io) => Some(io),
                        _ => None,
                    },
                });
            }
            Err(_) => {
                return Err(PageError::Connection {
                    what: "the session's browser did not accept a connection in time",
                    source: None,
                });
            }
        };
        Ok(Self {
            ws,
            next_id: 0,
            replies: HashMap::new(),
            crashed: HashSet::new(),
            destroyed: HashSet::new(),
            sessions: HashMap::new(),
        })
    }

    /// Sends one command (to a flattened `session`, or the browser) and returns its id.
    async fn send(
        &mut self,
        method: &'static str,
        params: Value,
        session: Option<&str>,
    ) -> Result<u64, PageError> {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            command["sessionId"] = Value::String(session.to_owned());
        }
        self.ws
            .send(Message::Text(command.to_string().into()))
            .await
            .map_err(lost)?;
        Ok(id)
    }

    /// Sends one command and waits for its answer: the result, or Chromium's error message.
    async fn call(
        &mut self,
        method: &'static str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Result<Value, String>, PageError> {
        let id = self.send(method, params, session).await?;
        if !self
            .wait_until(REPLY, |c| c.replies.contains_key(&id))
            .await?
        {
            return Err(PageError::NoAnswer { method });
        }
        Ok(self.replies.remove(&id).unwrap_or(Ok(Value::Null)))
    }

    /// Reads messages until `done` holds (`true`) or `limit` has passed (`false`).
    async fn wait_until(
        &mut self,
        limit: Duration,
        done: impl Fn(&Self) -> bool,
    ) -> Result<bool, PageError> {
        let deadline = Instant::now() + limit;
        while !done(self) {
            match timeout_at(deadline, self.ws.next()).await {
                Err(_) => return Ok(false),
                Ok(Some(Ok(Message::Text(text)))) => self.file(text.as_str()),
                Ok(Some(Ok(Message::Close(_))) | None) => {
                    return Err(PageError::Connection {
                        what: "the session's browser closed the connection",
                        source: None,
                    });
                }
                Ok(Some(Err(e))) => return Err(lost(e)),
                Ok(Some(Ok(_))) => {} // pings are answered by tungstenite
            }
        }
        Ok(true)
    }

    /// Files one message: a reply by its id, or a target event this module waits for.
    fn file(&mut self, text: &str) {
        let Ok(message) = serde_json::from_str::<Value>(text) else {
            return;
        };
        if let Some(id) = message["id"].as_u64() {
            let answer = match message.get("error") {
                Some(error) => Err(error["message"]
                    .as_str()
                    .unwrap_or("unknown error")
                    .to_owned()),
                None => Ok(message["result"].clone()),
            };
            self.replies.insert(id, answer);
            return;
        }
        let target = || message["params"]["targetId"].as_str().map(str::to_owned);
        match message["method"].as_str() {
            Some("Target.targetCrashed") => self.crashed.extend(target()),
            Some("Target.targetDestroyed") => self.destroyed.extend(target()),
            Some("Inspector.targetCrashed") => {
                let page = message["sessionId"]
                    .as_str()
                    .and_then(|s| self.sessions.get(s))
                    .cloned();
                self.crashed.extend(page);
            }
            _ => {}
        }
    }

    /// Closes the connection (which detaches this connection's sessions), bounded in time.
    async fn close(mut self) {
        let _ = timeout(CLOSE_WAIT, async {
            if self.ws.close(None).await.is_ok() {
                while let Some(Ok(_)) = self.ws.next().await {}
            }
        })
        .await;
    }
}

/// The browser connection failed mid-fault.
fn lost(e: WsError) -> PageError {
    PageError::Connection {
        what: "the connection to the session's browser broke",
        source: match e {
            WsError::Io(io) => Some(io),
            _ => None,
        },
    }
}
