//! The loopback relay outlive owns between chromiumoxide and the browser's endpoint.
//!
//! chromiumoxide 0.9 does not surface a dead connection reliably (its handler stream never
//! ends, and page calls hang on a reset or a silent socket), so outlive sits in the middle:
//! every frame passes through the relay, which therefore sees a close frame, a reset or an
//! EOF first, and which asks the browser for a sign of life (`Browser.getVersion` under a
//! private message id) whenever the connection has been quiet for a heartbeat interval.
//! The first sign of death is published on a `watch` channel *before* the client side is
//! cut, so anything chromiumoxide sees afterwards is already explained.
//!
//! The relay also watches the task's **page** (one target and its flattened CDP session):
//! a renderer crash (`Inspector.targetCrashed`, `Target.targetCrashed`), the target destroyed
//! or detached by anyone but outlive, and a hung page — a command on the page outstanding for
//! half a heartbeat interval makes the relay ask the page (`Runtime.evaluate` of a constant) and the
//! browser (`Browser.getVersion`) at once; the browser answering and the page not within the
//! heartbeat timeout is a hung page. A page failure is published on its own channel, then every
//! command in flight on that page is answered with a CDP error at once, and so is every later
//! command to it: nothing the task awaits hangs on a dead target (chromiumoxide would wait for
//! its 30–60 s request timeout). The browser connection stays up for the next page.

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

/// What ended an entry: the browser connection died, or (the `Page*` causes) only the task's
/// page did, in a browser that lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The task's page crashed (its renderer died: out of memory, "Aw, Snap!"); the browser
    /// lives on.
    PageCrashed,
    /// The task's page target was closed or detached by something other than outlive (the
    /// site, another CDP client, the provider).
    PageClosed,
    /// The task's page stopped answering (its main thread is stuck, e.g. in an endless
    /// script) while the browser still answers.
    PageHung,
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
            DeathCause::PageCrashed => "page_crashed",
            DeathCause::PageClosed => "page_closed",
            DeathCause::PageHung => "page_hung",
        }
    }

    /// Whether only the page failed: the browser may still be alive, and a fresh page in it
    /// can take over.
    pub fn is_page(self) -> bool {
        matches!(
            self,
            DeathCause::PageCrashed | DeathCause::PageClosed | DeathCause::PageHung
        )
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

/// The page the relay watches: a target and its flattened session, numbered so that a
/// failure of an earlier page is never taken for one of the current page.
#[derive(Debug, Clone)]
pub(crate) struct WatchedPage {
    pub target_id: String,
    pub session_id: String,
    pub generation: u64,
}

/// A page failure: which page (generation) and the death.
type PageDeath = Option<(u64, Death)>;

/// What the relay's handle asks of its task.
enum Control {
    /// Ask the browser for a sign of life; answer when it replies.
    Probe(oneshot::Sender<()>),
    /// Ask the watched page for a sign of life; answer when it replies.
    ProbePage(oneshot::Sender<()>),
    /// Watch this page from now on.
    Watch(WatchedPage),
    /// The handle declared the watched page failed: fail its commands as for any page death.
    PageFailed(u64),
    /// Done with a failed page: crash its renderer first if it hangs (so no new page can
    /// share the stuck process), then close its target. Replies are not awaited.
    Retire {
        target_id: String,
        session_id: String,
        crash: bool,
    },
    /// Send a command of outlive's own on `session` and hand back the raw reply.
    Call {
        session: String,
        method: &'static str,
        params: serde_json::Value,
        reply: oneshot::Sender<String>,
    },
    /// The sessions of the out-of-process frames (cross-site iframes) of the watched page.
    Frames(oneshot::Sender<Vec<String>>),
}

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

/// Resolves with the failure of page `generation`.
pub(crate) async fn wait_page_death(rx: &mut watch::Receiver<PageDeath>, generation: u64) -> Death {
    loop {
        if let Some((g, d)) = *rx.borrow_and_update() {
            if g == generation {
                return d;
            }
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Records the failure of page `generation` unless one is recorded; returns the recorded one.
fn declare_page(tx: &watch::Sender<PageDeath>, generation: u64, cause: DeathCause) -> Death {
    let mut recorded = Death {
        cause,
        at: Instant::now(),
    };
    tx.send_if_modified(|d| match d {
        Some((g, existing)) if *g == generation => {
            recorded = *existing;
            false
        }
        _ => {
            *d = Some((generation, recorded));
            true
        }
    });
    recorded
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
    page_death: watch::Receiver<PageDeath>,
    page_death_tx: watch::Sender<PageDeath>,
    /// The generation of the page being watched (0: none yet).
    page_generation: u64,
    control: mpsc::UnboundedSender<Control>,
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
        let (page_death_tx, page_death) = watch::channel(None);
        let (control, control_rx) = mpsc::unbounded_channel();
        let (cut_tx, cut_rx) = oneshot::channel();
        let task = crate::quiet::spawn(run(
            listener,
            path,
            upstream_ws,
            heartbeat,
            Signals {
                death: death_tx.clone(),
                page_death: page_death_tx.clone(),
            },
            control_rx,
            cut_rx,
        ));
        Ok(Relay {
            client_url,
            death,
            death_tx,
            page_death,
            page_death_tx,
            page_generation: 0,
            control,
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
        self.death().is_none() && self.ask(Control::Probe, timeout).await
    }

    /// Asks the watched page for a sign of life now. `true` if it answered within `timeout`.
    pub async fn probe_page(&self, timeout: Duration) -> bool {
        self.page_death().is_none() && self.ask(Control::ProbePage, timeout).await
    }

    async fn ask(&self, control: fn(oneshot::Sender<()>) -> Control, timeout: Duration) -> bool {
        let (tx, rx) = oneshot::channel();
        self.control.send(control(tx)).is_ok()
            && matches!(tokio::time::timeout(timeout, rx).await, Ok(Ok(())))
    }

    /// Watches `target_id` (attached as `session_id`) as the task's page from now on; a
    /// failure of the page watched before is no longer reported.
    pub fn watch_page(&mut self, target_id: String, session_id: String) {
        self.page_generation += 1;
        let _ = self.control.send(Control::Watch(WatchedPage {
            target_id,
            session_id,
            generation: self.page_generation,
        }));
    }

    /// The failure of the watched page, if one was detected.
    pub fn page_death(&self) -> Option<Death> {
        match *self.page_death.borrow() {
            Some((g, d)) if g == self.page_generation && g > 0 => Some(d),
            _ => None,
        }
    }

    /// A receiver and the watched page's generation, for [`wait_page_death`].
    pub fn page_watch(&self) -> (watch::Receiver<PageDeath>, u64) {
        (self.page_death.clone(), self.page_generation)
    }

    /// Records a failure of the watched page learned elsewhere (an unanswered on-demand
    /// probe); its commands are failed as for any page death.
    pub fn declare_page(&self, cause: DeathCause) -> Death {
        let death = declare_page(&self.page_death_tx, self.page_generation, cause);
        let _ = self.control.send(Control::PageFailed(self.page_generation));
        death
    }

    /// Disposes of a failed page: crashes its renderer first when `crash` (a hung page), then
    /// closes its target. Does not wait for either.
    pub fn retire_page(&self, target_id: String, session_id: String, crash: bool) {
        let _ = self.control.send(Control::Retire {
            target_id,
            session_id,
            crash,
        });
    }

    /// A handle for commands of outlive's own (checkpoint reads in cross-site frames).
    pub fn calls(&self) -> Calls {
        Calls {
            control: self.control.clone(),
        }
    }

    /// Closes the client side at once, so chromiumoxide stops talking to a dead browser.
    pub fn cut(&mut self) {
        if let Some(tx) = self.cut_tx.take() {
            let _ = tx.send(());
        }
    }
}

/// Sends commands of outlive's own through the relay, on any session of the browser —
/// chromiumoxide has no handle on the sessions of out-of-process frames, the relay sees them.
#[derive(Clone)]
pub(crate) struct Calls {
    control: mpsc::UnboundedSender<Control>,
}

impl Calls {
    /// Calls with no relay behind them (a page connected directly, in tests): no frame
    /// sessions, every call unanswered.
    #[cfg(test)]
    pub fn detached() -> Calls {
        Calls {
            control: mpsc::unbounded_channel().0,
        }
    }

    /// The sessions of the watched page's out-of-process frames (cross-site iframes).
    pub async fn frame_sessions(&self) -> Vec<String> {
        let (tx, rx) = oneshot::channel();
        if self.control.send(Control::Frames(tx)).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }

    /// Sends `method` with `params` on `session`; the raw reply text, or `None` if the relay
    /// is gone or no reply came within `timeout`.
    pub async fn call(
        &self,
        session: String,
        method: &'static str,
        params: serde_json::Value,
        timeout: Duration,
    ) -> Option<String> {
        let (reply, rx) = oneshot::channel();
        self.control
            .send(Control::Call {
                session,
                method,
                params,
                reply,
            })
            .ok()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
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

/// The channels the relay task publishes deaths on.
struct Signals {
    death: watch::Sender<Option<Death>>,
    page_death: watch::Sender<PageDeath>,
}

/// A page probe sent because a command on the page stalled, with a browser probe beside it.
struct StallProbe {
    page_id: u64,
    browser_id: u64,
    sent: Instant,
    browser_answered: bool,
}

/// Silence while the task waits. When commands are in flight and *nothing at all* has come
/// from the browser for a few round trips, the relay asks the browser (`Browser.getVersion`)
/// at once instead of waiting for the idle heartbeat; no answer and still nothing else from
/// the browser within a timeout scaled to the round trip is a silent death. An idle
/// connection is left to the heartbeat: no extra traffic.
#[derive(Default)]
struct Waiting {
    /// Every client command in flight: id → when it was sent.
    in_flight: std::collections::HashMap<u64, Instant>,
    /// Recent reply latencies; the smallest is the round trip (long-running commands only
    /// add large samples, which the minimum ignores).
    samples: std::collections::VecDeque<Duration>,
    /// The fast probe in flight: its id and when it was sent.
    probe: Option<(u64, Instant)>,
    /// Fast probes answered since the last reply to a command: each doubles the quiet time
    /// before the next, so a long silent command costs a handful of probes, not a stream.
    answered: u32,
}

/// In-flight entries older than this are dropped (chromiumoxide gives up on them at 60 s).
const IN_FLIGHT_MAX_AGE: Duration = Duration::from_secs(120);

impl Waiting {
    /// The round trip; zero before any was measured (the fast path is off until then).
    fn rtt(&self) -> Duration {
        self.samples.iter().min().copied().unwrap_or_default()
    }

    /// How long the browser may be quiet while commands are in flight before it is asked.
    fn quiet(&self, heartbeat: Heartbeat) -> Duration {
        let base = (self.rtt() * 4).max(Duration::from_millis(250));
        base.saturating_mul(1 << self.answered.min(8))
            .min(heartbeat.interval)
    }

    /// How long the fast probe may go unanswered (with nothing else heard) before the
    /// browser counts as silent.
    fn timeout(&self, heartbeat: Heartbeat) -> Duration {
        (self.rtt() * 8)
            .max(Duration::from_millis(600))
            .min(heartbeat.timeout)
    }

    fn sample(&mut self, rtt: Duration) {
        if self.samples.len() == 16 {
            self.samples.pop_front();
        }
        self.samples.push_back(rtt);
    }

    fn sent(&mut self, id: u64, now: Instant) {
        self.in_flight.insert(id, now);
    }

    /// A reply to a client command.
    fn replied(&mut self, id: u64, now: Instant) {
        if let Some(sent) = self.in_flight.remove(&id) {
            self.sample(now - sent);
            self.answered = 0;
        }
    }

    /// Anything at all came from the browser: it is alive. Answers whether `reply_to` (a
    /// probe reply's id) was the fast probe.
    fn heard(&mut self, reply_to: Option<u64>, now: Instant) -> bool {
        match self.probe.take() {
            Some((id, sent)) if reply_to == Some(id) => {
                self.sample(now - sent);
                self.answered += 1;
                true
            }
            _ => false,
        }
    }

    /// When the loop must act: send the probe, or declare the silence.
    fn deadline(
        &mut self,
        last_rx: Instant,
        heartbeat: Heartbeat,
        now: Instant,
    ) -> Option<Instant> {
        if let Some((_, sent)) = self.probe {
            return Some(sent + self.timeout(heartbeat));
        }
        self.in_flight
            .retain(|_, sent| now.saturating_duration_since(*sent) < IN_FLIGHT_MAX_AGE);
        // Until a reply has shown what a round trip costs, the heartbeat alone watches.
        if self.samples.is_empty() {
            return None;
        }
        let oldest = *self.in_flight.values().min()?;
        Some(last_rx.max(oldest) + self.quiet(heartbeat))
    }
}

/// The relay's view of the task's page.
#[derive(Default)]
struct PageState {
    watched: Option<WatchedPage>,
    /// Commands in flight on the watched page: id → when sent. chromiumoxide's ids grow, so
    /// the first is the oldest.
    pending: std::collections::BTreeMap<u64, Instant>,
    /// Sessions of failed pages: every command to them is answered with an error at once.
    dead_sessions: std::collections::HashSet<String>,
    stall_probe: Option<StallProbe>,
    last_stall_probe: Option<Instant>,
    /// Navigation commands in flight on the watched page (`Page.navigate`, …): answered only
    /// when the navigation commits.
    navigations: std::collections::HashSet<u64>,
    /// A navigation of the page's main frame has started and not yet committed or stopped.
    navigating: bool,
    /// The generation of the last page that failed (0: none).
    failed_generation: u64,
    /// Sessions of the watched page's out-of-process frames, attached by chromiumoxide.
    frames: std::collections::BTreeSet<String>,
}

impl PageState {
    fn failed(&self) -> bool {
        self.watched
            .as_ref()
            .is_some_and(|w| w.generation == self.failed_generation)
    }

    /// When the stall logic next needs the loop's attention.
    /// Whether the page is between a navigation's start and its commit. Chromium holds
    /// DevTools messages for a page while its navigation is pending, so a probe then would
    /// go unanswered by a healthy page: no stall probing until the navigation commits (a
    /// navigation is bounded by its own timeouts).
    fn is_navigating(&self) -> bool {
        self.navigating || !self.navigations.is_empty()
    }

    fn deadline(&self, heartbeat: Heartbeat) -> Option<Instant> {
        if self.is_navigating() {
            return None;
        }
        if let Some(probe) = &self.stall_probe {
            return Some(probe.sent + heartbeat.timeout);
        }
        let (_, oldest) = self.pending.first_key_value()?;
        // Half an interval: the hung page is then declared within interval + timeout of the
        // stalled command being sent, probe round trip included.
        let stalled_after = heartbeat.interval / 2;
        let mut due = *oldest + stalled_after;
        if let Some(last) = self.last_stall_probe {
            due = due.max(last + stalled_after);
        }
        Some(due)
    }
}

async fn run(
    listener: TcpListener,
    path: String,
    upstream: async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>,
    heartbeat: Heartbeat,
    signals: Signals,
    mut control: mpsc::UnboundedReceiver<Control>,
    mut cut_rx: oneshot::Receiver<()>,
) {
    let die = |cause: DeathCause| {
        DeathSender(signals.death.clone()).declare(cause);
    };

    let (mut up_tx, mut up_rx) = upstream.split();
    let mut page = PageState::default();
    // Control messages that arrive before the client connects (none are expected but a
    // watch) are applied once it has.
    let mut early: Vec<Control> = Vec::new();

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
            Some(c) = control.recv() => early.push(c),
            _ = &mut cut_rx => return,
        }
    };
    drop(listener);
    let (mut cl_tx, mut cl_rx) = client.split();

    let mut next_probe_id = PROBE_ID_BASE;
    let mut waiting: Vec<(u64, Option<oneshot::Sender<()>>)> = Vec::new();
    let mut calls: std::collections::HashMap<u64, oneshot::Sender<String>> = Default::default();
    let mut heartbeat_sent: Option<Instant> = None;
    let mut last_rx = Instant::now();
    let mut silence = Waiting::default();
    let mut early = early.into_iter();

    loop {
        let heartbeat_due = match heartbeat_sent {
            Some(sent) => sent + heartbeat.timeout,
            None => last_rx + heartbeat.interval,
        };
        let stall_due = page.deadline(heartbeat);
        let waiting_due = silence.deadline(last_rx, heartbeat, Instant::now());
        let deadline = [stall_due, waiting_due]
            .into_iter()
            .flatten()
            .fold(heartbeat_due, Instant::min);
        let next_control = async {
            match early.next() {
                Some(c) => Some(c),
                None => control.recv().await,
            }
        };
        tokio::select! {
            biased;
            _ = &mut cut_rx => return,
            msg = up_rx.next() => {
                last_rx = Instant::now();
                let own_reply = match &msg {
                    Some(Ok(Message::Text(text))) => probe_reply_id(text.as_str()),
                    _ => None,
                };
                if silence.heard(own_reply, last_rx) {
                    heartbeat_sent = None;
                    continue;
                }
                match msg {
                    Some(Ok(Message::Text(text))) => {
                        heartbeat_sent = None;
                        if let Some(id) = own_reply {
                            match calls.remove(&id) {
                                Some(reply) => { let _ = reply.send(text.as_str().to_owned()); }
                                None => on_probe_reply(id, &mut waiting, &mut page),
                            }
                            continue;
                        }
                        wire_trace("from browser", text.as_str());
                        if !silence.in_flight.is_empty() || !page.pending.is_empty() {
                            if let Some(id) = reply_id(text.as_str()) {
                                silence.replied(id, last_rx);
                                page.pending.remove(&id);
                                page.navigations.remove(&id);
                            }
                        }
                        let event = page_event_of(text.as_str());
                        if let Some(e) = &event {
                            track_navigation(e, &mut page);
                            track_frames(e, &mut page);
                        }
                        let failure = event.as_ref().and_then(|e| page_failure(e, &page));
                        if cl_tx.send(Message::Text(text)).await.is_err() { return; }
                        if let Some(cause) = failure {
                            if fail_page(cause, &mut page, &mut silence, &signals, &mut cl_tx).await.is_err() { return; }
                        }
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
                    Some(Ok(Message::Text(text))) => {
                        wire_trace("to browser", text.as_str());
                        let head = Head::of(text.as_str());
                        if let (Some(id), Some(session)) = (head.id, head.session_id.as_deref()) {
                            if page.dead_sessions.contains(session) {
                                // A command to a failed page: answered at once, never sent.
                                let refusal = page_error(id, session, "the page failed earlier");
                                if cl_tx.send(refusal).await.is_err() { return; }
                                continue;
                            }
                            if page.watched.as_ref().is_some_and(|w| w.session_id == session) {
                                page.pending.insert(id, Instant::now());
                                if matches!(
                                    head.method.as_deref(),
                                    Some("Page.navigate" | "Page.reload" | "Page.navigateToHistoryEntry")
                                ) {
                                    page.navigations.insert(id);
                                    page.stall_probe = None;
                                }
                            }
                        }
                        if let Some(id) = head.id {
                            silence.sent(id, Instant::now());
                        }
                        if let Err(e) = up_tx.send(Message::Text(text)).await { die(classify(&e)); return; }
                    }
                    Some(Ok(m @ Message::Binary(_))) => {
                        if let Err(e) = up_tx.send(m).await { die(classify(&e)); return; }
                    }
                    Some(Ok(_)) => {}
                    // chromiumoxide went away: outlive is done with this browser.
                    Some(Err(_)) | None => return,
                }
            }
            Some(c) = next_control => {
                let sent = match c {
                    Control::Probe(reply) => {
                        let id = next_id(&mut next_probe_id);
                        waiting.push((id, Some(reply)));
                        up_tx.send(probe_message(id)).await
                    }
                    Control::ProbePage(reply) => match page.watched.as_ref() {
                        Some(w) if !page.failed() => {
                            let id = next_id(&mut next_probe_id);
                            waiting.push((id, Some(reply)));
                            up_tx.send(page_probe_message(id, &w.session_id)).await
                        }
                        _ => Ok(()),
                    },
                    Control::Watch(w) => {
                        page.pending.clear();
                        page.stall_probe = None;
                        page.last_stall_probe = None;
                        page.navigations.clear();
                        page.navigating = false;
                        page.frames.clear();
                        page.watched = Some(w);
                        Ok(())
                    }
                    Control::Call { session, method, params, reply } => {
                        let id = next_id(&mut next_probe_id);
                        calls.retain(|_, r| !r.is_closed());
                        calls.insert(id, reply);
                        let body = serde_json::json!({ "id": id, "sessionId": session, "method": method, "params": params });
                        up_tx.send(Message::Text(body.to_string().into())).await
                    }
                    Control::Frames(reply) => {
                        let _ = reply.send(page.frames.iter().cloned().collect());
                        Ok(())
                    }
                    Control::PageFailed(generation) => {
                        if page.watched.as_ref().is_some_and(|w| w.generation == generation) && !page.failed() {
                            let cause = DeathCause::PageHung;
                            if fail_page(cause, &mut page, &mut silence, &signals, &mut cl_tx).await.is_err() { return; }
                        }
                        Ok(())
                    }
                    Control::Retire { target_id, session_id, crash } => {
                        let mut r = Ok(());
                        if crash {
                            let id = next_id(&mut next_probe_id);
                            r = up_tx.send(crash_message(id, &session_id)).await;
                        }
                        if r.is_ok() {
                            let id = next_id(&mut next_probe_id);
                            r = up_tx.send(close_target_message(id, &target_id)).await;
                        }
                        r
                    }
                };
                if let Err(e) = sent { die(classify(&e)); return; }
            }
            _ = sleep_until(deadline) => {
                let now = Instant::now();
                if waiting_due.is_some_and(|d| d <= now) {
                    if silence.probe.is_some() {
                        tracing::debug!(timeout = ?silence.timeout(heartbeat), rtt = ?silence.rtt(), "nothing from the browser while commands wait, probe unanswered");
                        die(DeathCause::Silence);
                        return;
                    }
                    let id = next_id(&mut next_probe_id);
                    silence.probe = Some((id, now));
                    tracing::trace!(quiet = ?silence.quiet(heartbeat), "commands wait on a quiet browser; asking it");
                    if let Err(e) = up_tx.send(probe_message(id)).await { die(classify(&e)); return; }
                    continue;
                }
                if stall_due.is_some_and(|d| d <= now) {
                    match page.stall_probe.take() {
                        // The page did not answer in time.
                        Some(probe) if probe.browser_answered => {
                            tracing::debug!(timeout = ?heartbeat.timeout, "page probe unanswered while the browser answers");
                            if fail_page(DeathCause::PageHung, &mut page, &mut silence, &signals, &mut cl_tx).await.is_err() { return; }
                        }
                        // Neither answered: the connection is silent, the browser is gone.
                        Some(_) => {
                            tracing::debug!(timeout = ?heartbeat.timeout, "page and browser probes unanswered");
                            die(DeathCause::Silence);
                            return;
                        }
                        // A command has been outstanding for an interval: ask the page and the browser.
                        None => {
                            let Some(session) = page.watched.as_ref().map(|w| w.session_id.clone()) else { continue };
                            let (page_id, browser_id) = (next_id(&mut next_probe_id), next_id(&mut next_probe_id));
                            page.stall_probe = Some(StallProbe { page_id, browser_id, sent: now, browser_answered: false });
                            page.last_stall_probe = Some(now);
                            tracing::debug!(stalled = ?page.pending.first_key_value().map(|(_, t)| now - *t), "a page command stalled; probing the page");
                            if let Err(e) = up_tx.send(page_probe_message(page_id, &session)).await { die(classify(&e)); return; }
                            if let Err(e) = up_tx.send(probe_message(browser_id)).await { die(classify(&e)); return; }
                        }
                    }
                    continue;
                }
                if heartbeat_sent.is_some() {
                    tracing::debug!(timeout = ?heartbeat.timeout, "heartbeat unanswered");
                    die(DeathCause::Silence);
                    return;
                }
                let id = next_id(&mut next_probe_id);
                waiting.push((id, None));
                if waiting.len() > 64 { waiting.remove(0); }
                heartbeat_sent = Some(Instant::now());
                if let Err(e) = up_tx.send(probe_message(id)).await { die(classify(&e)); return; }
            }
        }
    }
}

fn next_id(next: &mut u64) -> u64 {
    let id = *next;
    *next += 1;
    id
}

/// A reply to one of the relay's own messages: answers whoever waits for it.
fn on_probe_reply(
    id: u64,
    waiting: &mut Vec<(u64, Option<oneshot::Sender<()>>)>,
    page: &mut PageState,
) {
    if let Some(probe) = page.stall_probe.as_mut() {
        if probe.browser_id == id {
            probe.browser_answered = true;
        } else if probe.page_id == id {
            page.stall_probe = None;
        }
    }
    waiting.retain_mut(|(pid, reply)| {
        if *pid == id {
            if let Some(r) = reply.take() {
                let _ = r.send(());
            }
            false
        } else {
            true
        }
    });
}

/// Publishes the watched page's failure, then answers every command in flight on it with an
/// error, and refuses every later one.
async fn fail_page<S>(
    cause: DeathCause,
    page: &mut PageState,
    silence: &mut Waiting,
    signals: &Signals,
    client: &mut S,
) -> Result<(), WsError>
where
    S: futures::Sink<Message, Error = WsError> + Unpin,
{
    use futures::SinkExt;
    let Some(watched) = page.watched.as_ref() else {
        return Ok(());
    };
    if page.failed() {
        return Ok(());
    }
    page.failed_generation = watched.generation;
    let session = watched.session_id.clone();
    declare_page(&signals.page_death, watched.generation, cause);
    page.dead_sessions.insert(session.clone());
    page.stall_probe = None;
    let message = match cause {
        DeathCause::PageCrashed => "the page crashed",
        DeathCause::PageClosed => "the page was closed",
        _ => "the page stopped answering",
    };
    for (id, _) in std::mem::take(&mut page.pending) {
        silence.in_flight.remove(&id);
        client.feed(page_error(id, &session, message)).await?;
    }
    client.flush().await
}

/// The error answer outlive gives chromiumoxide for a command on a failed page.
fn page_error(id: u64, session: &str, why: &str) -> Message {
    let body = serde_json::json!({
        "id": id,
        "sessionId": session,
        "error": {
            "code": -32000,
            "message": format!("outlive: {why}; the task is re-entered on a fresh page"),
        },
    });
    Message::Text(body.to_string().into())
}

/// The id of a reply, if `text` is one. Chromium writes `"id"` first; other orders are
/// parsed, for messages small enough to be replies to what is tracked.
fn reply_id(text: &str) -> Option<u64> {
    if let Some(rest) = text.strip_prefix("{\"id\":") {
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        return rest[..end].parse().ok();
    }
    if text.starts_with("{\"method\"") || text.len() > 1 << 20 {
        return None;
    }
    let head = Head::of(text);
    head.id.filter(|_| head.method.is_none())
}

/// An event about a page target or its main frame: the only events the relay acts on.
#[derive(serde::Deserialize)]
struct PageEvent {
    method: String,
    #[serde(default, rename = "sessionId")]
    session_id: Option<String>,
    #[serde(default)]
    params: PageEventParams,
}

#[derive(serde::Deserialize, Default)]
struct PageEventParams {
    #[serde(default, rename = "targetId")]
    target_id: Option<String>,
    #[serde(default, rename = "sessionId")]
    session_id: Option<String>,
    #[serde(default, rename = "frameId")]
    frame_id: Option<String>,
    #[serde(default)]
    frame: Option<FrameInfo>,
    #[serde(default, rename = "targetInfo")]
    target_info: Option<TargetInfo>,
}

#[derive(serde::Deserialize)]
struct TargetInfo {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(serde::Deserialize)]
struct FrameInfo {
    id: String,
    #[serde(default, rename = "parentId")]
    parent_id: Option<String>,
}

const PAGE_EVENTS: [&str; 8] = [
    "targetCrashed",
    "attachedToTarget",
    "targetDestroyed",
    "detachedFromTarget",
    "Page.frameRequestedNavigation",
    "Page.frameStartedNavigating",
    "Page.frameNavigated",
    "Page.frameStoppedLoading",
];

/// Parses `text` if it is one of [`PAGE_EVENTS`], once, for both page checks below. Events
/// open with their method in Chromium's encoding; anything else is parsed only when small
/// (these events are).
fn page_event_of(text: &str) -> Option<PageEvent> {
    let interesting = |m: &str| PAGE_EVENTS.iter().any(|e| m.contains(e));
    match text.strip_prefix("{\"method\":\"") {
        Some(rest) if !interesting(&rest[..rest.len().min(40)]) => return None,
        None if text.len() > 4096 || !interesting(text) => return None,
        _ => {}
    }
    serde_json::from_str(text).ok()
}

/// Follows the watched page's main-frame navigations (its frame id is its target id).
fn track_navigation(event: &PageEvent, page: &mut PageState) {
    let Some(watched) = page.watched.as_ref() else {
        return;
    };
    let starts = matches!(
        event.method.as_str(),
        "Page.frameRequestedNavigation" | "Page.frameStartedNavigating"
    );
    let ends = matches!(
        event.method.as_str(),
        "Page.frameNavigated" | "Page.frameStoppedLoading"
    );
    if !(starts || ends) || event.session_id.as_deref() != Some(watched.session_id.as_str()) {
        return;
    }
    let main_frame = match (&event.params.frame_id, &event.params.frame) {
        (Some(id), _) => *id == watched.target_id,
        (None, Some(f)) => f.parent_id.is_none() && f.id == watched.target_id,
        _ => false,
    };
    if main_frame {
        page.navigating = starts;
        if starts {
            page.stall_probe = None;
        }
    }
}

/// Follows the out-of-process frames (cross-site iframes) attached under the watched page.
fn track_frames(event: &PageEvent, page: &mut PageState) {
    let Some(watched) = page.watched.as_ref() else {
        return;
    };
    if event.session_id.as_deref() != Some(watched.session_id.as_str()) {
        return;
    }
    let Some(session) = event.params.session_id.clone() else {
        return;
    };
    match event.method.as_str() {
        "Target.attachedToTarget"
            if event
                .params
                .target_info
                .as_ref()
                .is_some_and(|t| t.kind == "iframe") =>
        {
            page.frames.insert(session);
        }
        "Target.detachedFromTarget" => {
            page.frames.remove(&session);
        }
        _ => {}
    }
}

/// Whether `event` reports the watched page's failure, and how.
fn page_failure(event: &PageEvent, page: &PageState) -> Option<DeathCause> {
    let watched = page.watched.as_ref()?;
    if page.failed() {
        return None;
    }
    let on_target = event.params.target_id.as_deref() == Some(watched.target_id.as_str());
    let on_session = |s: &Option<String>| s.as_deref() == Some(watched.session_id.as_str());
    match event.method.as_str() {
        "Inspector.targetCrashed" if on_session(&event.session_id) => Some(DeathCause::PageCrashed),
        "Target.targetCrashed" if on_target => Some(DeathCause::PageCrashed),
        "Target.targetDestroyed" if on_target => Some(DeathCause::PageClosed),
        "Target.detachedFromTarget"
            if event.session_id.is_none()
                && (on_target || on_session(&event.params.session_id)) =>
        {
            Some(DeathCause::PageClosed)
        }
        _ => None,
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

/// Asks the page's main thread for a constant: a hung page cannot answer.
fn page_probe_message(id: u64, session: &str) -> Message {
    let body = serde_json::json!({
        "id": id,
        "sessionId": session,
        "method": "Runtime.evaluate",
        "params": { "expression": "0", "returnByValue": true },
    });
    Message::Text(body.to_string().into())
}

/// Crashes a hung page's renderer (handled on the renderer's IO thread, so it works while the
/// main thread is stuck).
fn crash_message(id: u64, session: &str) -> Message {
    let body = serde_json::json!({ "id": id, "sessionId": session, "method": "Page.crash" });
    Message::Text(body.to_string().into())
}

/// Closes a target, at the browser level (its own session may be gone).
fn close_target_message(id: u64, target: &str) -> Message {
    let body = serde_json::json!({
        "id": id,
        "method": "Target.closeTarget",
        "params": { "targetId": target },
    });
    Message::Text(body.to_string().into())
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

    const HEARTBEAT: Heartbeat = Heartbeat {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
    };

    #[test]
    fn an_idle_connection_is_left_to_the_heartbeat() {
        let mut w = Waiting::default();
        let now = Instant::now();
        assert_eq!(w.deadline(now, HEARTBEAT, now), None);
        w.sent(7, now);
        assert_eq!(
            w.deadline(now, HEARTBEAT, now),
            None,
            "no round trip measured yet"
        );
        w.in_flight.clear();
        w.sent(1, now);
        w.replied(1, now + Duration::from_millis(2));
        assert_eq!(w.deadline(now, HEARTBEAT, now), None, "nothing in flight");
    }

    #[test]
    fn a_waiting_command_on_a_quiet_browser_is_asked_about_within_a_second() {
        let mut w = Waiting::default();
        let t0 = Instant::now();
        // A measured round trip of 2 ms.
        w.sent(1, t0);
        w.replied(1, t0 + Duration::from_millis(2));
        assert_eq!(w.rtt(), Duration::from_millis(2));
        // A long command goes out; then nothing comes back.
        w.sent(2, t0 + Duration::from_millis(10));
        let probe_at = w.deadline(t0, HEARTBEAT, t0).unwrap();
        assert_eq!(probe_at, t0 + Duration::from_millis(10 + 250));
        w.probe = Some((99, probe_at));
        let silent_at = w.deadline(t0, HEARTBEAT, probe_at).unwrap();
        assert_eq!(silent_at, probe_at + Duration::from_millis(600));
        assert!(silent_at - (t0 + Duration::from_millis(10)) <= Duration::from_secs(1));
    }

    #[test]
    fn anything_heard_clears_the_probe_and_answers_back_off() {
        let mut w = Waiting::default();
        let t0 = Instant::now();
        w.sent(1, t0);
        w.probe = Some((99, t0));
        // An event (not the probe's reply): alive, and no back-off.
        assert!(!w.heard(None, t0 + Duration::from_millis(5)));
        assert!(w.probe.is_none());
        assert_eq!(w.answered, 0);
        // The probe's reply: alive, and the next quiet period doubles.
        w.probe = Some((100, t0));
        let before = w.quiet(HEARTBEAT);
        assert!(w.heard(Some(100), t0 + Duration::from_millis(1)));
        assert_eq!(w.quiet(HEARTBEAT), before * 2);
        // Capped by the heartbeat interval; a reply to a command resets the back-off.
        w.answered = 20;
        assert_eq!(w.quiet(HEARTBEAT), HEARTBEAT.interval);
        w.replied(1, t0 + Duration::from_millis(3));
        assert_eq!(w.answered, 0);
    }

    #[test]
    fn the_timeouts_scale_with_the_round_trip_and_stay_within_the_heartbeat() {
        let mut w = Waiting::default();
        w.sample(Duration::from_millis(100));
        assert_eq!(w.quiet(HEARTBEAT), Duration::from_millis(400));
        assert_eq!(w.timeout(HEARTBEAT), Duration::from_millis(800));
        let slow = Heartbeat {
            interval: Duration::from_millis(300),
            timeout: Duration::from_millis(500),
        };
        assert_eq!(w.quiet(slow), Duration::from_millis(300));
        assert_eq!(w.timeout(slow), Duration::from_millis(500));
    }

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
