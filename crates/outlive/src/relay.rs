//! The loopback relay outlive owns between chromiumoxide and the browser's endpoint.
//!
//! chromiumoxide 0.9 does not surface a dead connection reliably: its handler stream never
//! ends, and page calls hang on a reset or a silent socket. So every frame passes through the
//! relay. It sees a close, a reset or an EOF first, and asks for a sign of life
//! (`Browser.getVersion`) after a quiet heartbeat interval. It also watches the task's page for
//! a crash, a close and a hang. Each death is published before the client side is cut.
//! Parts: this module (the handle: [`Relay`], [`Calls`], [`DeathSender`], [`Death`],
//! [`DeathCause`], [`IdbFeeds`]), `driver`, `forward`, `gate`, `watchdog`, `confirm` (the second
//! path), `wire`, `socket`. How and why: `docs/deaths.md`, "The browser dies" to "Inside the
//! relay".

mod confirm;
mod driver;
mod forward;
mod frames;
mod gate;
mod socket;
mod watchdog;
pub(crate) mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::dialogs::Dialogs;
use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ErrorKind};
use tokio_util::task::AbortOnDropHandle;

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

/// How a browser's death was made sure of: what the connection, or a second one, showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Confirmation {
    /// A close frame or an end of stream, on the connection or on a second one.
    Close,
    /// A TCP reset or another I/O error.
    Reset,
    /// A second connection was refused (no listener; HTTP 403, 404 or 410), or reached a
    /// browser without the targets of this one.
    Refused,
    /// Nothing: a silence outlasted its allowance, with no second connection to ask or none
    /// that answered.
    Silence,
    /// The local browser process exited.
    Exit,
}

impl Confirmation {
    /// A short stable name for logs and the wide event.
    pub fn as_str(self) -> &'static str {
        match self {
            Confirmation::Close => "close",
            Confirmation::Reset => "reset",
            Confirmation::Refused => "refused",
            Confirmation::Silence => "silence",
            Confirmation::Exit => "exit",
        }
    }

    /// How a death of `cause` is confirmed when nothing more was learned; `None` for a page's
    /// failure.
    pub fn of(cause: DeathCause) -> Option<Confirmation> {
        match cause {
            DeathCause::Closed => Some(Confirmation::Close),
            DeathCause::Reset => Some(Confirmation::Reset),
            DeathCause::ProcessExit => Some(Confirmation::Exit),
            DeathCause::Silence | DeathCause::ProbeFailed => Some(Confirmation::Silence),
            _ => None,
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
    /// How the browser's death was made sure of; `None` for a page's failure.
    pub confirmed: Option<Confirmation>,
}

impl Death {
    /// A death of `cause` detected at `at`, confirmed as the cause alone says.
    pub fn new(cause: DeathCause, at: Instant) -> Death {
        Death {
            cause,
            at,
            confirmed: Confirmation::of(cause),
        }
    }
}

/// Heartbeat settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heartbeat {
    pub interval: Duration,
    pub timeout: Duration,
}

/// The page the relay watches: a target and its flattened session, numbered so that a
/// failure of an earlier page is never taken for one of the current page.
#[derive(Debug, Clone)]
pub(crate) struct WatchedPage {
    pub target_id: String,
    pub session_id: String,
    pub generation: u64,
    /// What the relay does with a JavaScript dialog the page opens.
    pub dialogs: Dialogs,
}

/// A page failure: which page (generation) and the death.
type PageDeath = Option<(u64, Death)>;

/// The receiving end of the handle's requests.
type ControlRx = mpsc::UnboundedReceiver<Control>;

/// What the relay's handle asks of its task.
enum Control {
    /// Ask the browser for a sign of life; answer when it replies.
    Probe(oneshot::Sender<()>),
    /// Ask the watched page for a sign of life; answer when it replies.
    ProbePage(oneshot::Sender<()>),
    /// Watch this page from now on.
    Watch(WatchedPage),
    /// A page is being opened, to be watched as this generation: the first page target created
    /// from now on is taken for it, and its crash or close fails that generation at once.
    Opening(u64),
    /// The handle declared the watched page failed: fail its commands as for any page death.
    PageFailed(u64),
    /// Done with a failed page: crash its renderer first if it hangs (so no new page can
    /// share the stuck process), then close its target. Replies are not awaited.
    Retire {
        target_id: String,
        session_id: String,
        crash: bool,
    },
    /// Send a command of outlive's own and hand back the raw reply.
    Call {
        call: OwnCall,
        reply: oneshot::Sender<String>,
    },
    /// The out-of-process frames (cross-site iframes) of the page with this session, and the
    /// sessions of every frame known.
    Frames(String, oneshot::Sender<(Vec<FrameSession>, Vec<String>)>),
    /// From now on, register these scripts (`Page.addScriptToEvaluateOnNewDocument`) on every
    /// out-of-process frame, as it attaches.
    ArmFrames(Vec<String>),
    /// A program's command on its own connection to the browser (see [`ProgramCall`]).
    Program(ProgramCall),
    /// An on-demand probe went unanswered: suspect the connection, as for a silence, and tell
    /// the sender when it is heard again (dropped if the browser is dead).
    Suspect(oneshot::Sender<()>),
}

/// How the relay may make sure a silent browser is dead, and where it sums the stalls it
/// survived.
#[derive(Clone, Default)]
pub(crate) struct LinkWatch {
    /// A second, short-lived connection to the endpoint may ask the browser whether it lives
    /// ([`crate::Session::second_connection`]).
    pub second_connection: bool,
    /// Shared by the relays of one run.
    pub stalls: Arc<Stalls>,
}

/// The stalls the relays of one run survived: silences that raised a suspicion and ended
/// with the connection heard again.
#[derive(Debug, Default)]
pub(crate) struct Stalls {
    survived: AtomicU32,
    longest_ms: AtomicU64,
}

impl Stalls {
    /// A stall of `stall` survived.
    pub fn record(&self, stall: Duration) {
        self.survived.fetch_add(1, Ordering::Relaxed);
        let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
        self.longest_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// How many were survived.
    pub fn survived(&self) -> u32 {
        self.survived.load(Ordering::Relaxed)
    }

    /// The longest, in milliseconds.
    pub fn longest_ms(&self) -> u64 {
        self.longest_ms.load(Ordering::Relaxed)
    }
}

/// What the front tells the relay of a program's commands, which travel on the program's own
/// connection to the browser: silence while one waits is judged as under outlive's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProgramCall {
    /// Command `id` of connection `conn` went to the browser `at`; `target` is its page's
    /// target, when it was sent on a page's session the front knows.
    Sent {
        conn: u64,
        id: u64,
        target: Option<String>,
        /// Whether it keeps the browser busy ([`wire::keeps_browser_busy`]).
        busy: bool,
        at: Instant,
    },
    /// The browser answered command `id` of connection `conn` `at`.
    Answered { conn: u64, id: u64, at: Instant },
    /// Connection `conn` ended: its commands wait no more.
    Gone { conn: u64 },
}

/// Resolves with the first death published on `rx`.
pub(crate) async fn wait_death(rx: &mut watch::Receiver<Option<Death>>) -> Death {
    loop {
        if let Some(d) = *rx.borrow_and_update() {
            return d;
        }
        if rx.changed().await.is_err() {
            // The relay is gone without reporting; treat it as a closed connection.
            return Death::new(DeathCause::Closed, Instant::now());
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
    let mut recorded = Death::new(cause, Instant::now());
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
        self.declare_confirmed(cause, Confirmation::of(cause))
    }

    /// Records `cause`, made sure of as `confirmed`, now unless a death is already recorded;
    /// returns the recorded one.
    pub fn declare_confirmed(&self, cause: DeathCause, confirmed: Option<Confirmation>) -> Death {
        let mut recorded = Death {
            cause,
            at: Instant::now(),
            confirmed,
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
    dialogs: Dialogs,
    /// Shared by every [`Calls`] of this relay: see [`Calls::call_unless_unanswered`].
    unanswered: Unanswered,
    /// Shared with the relay's task and every [`Calls`]: see [`Calls::indexed_db_changes`].
    idb_feeds: IdbFeeds,
    _task: AbortOnDropHandle<()>,
}

impl Relay {
    /// Connects to `upstream`, then listens on 127.0.0.1 for exactly one client.
    pub async fn start(
        upstream: &CdpEndpoint,
        heartbeat: Heartbeat,
        dialogs: Dialogs,
        connect_timeout: Duration,
        link: LinkWatch,
    ) -> Result<Relay, Error> {
        let flows = forward::Flows::default();
        let connect = socket::connect_upstream(upstream, flows.clone());
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
                .with_source(socket::ws_error_without_url(e))
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
        let idb_feeds = IdbFeeds::open();
        let task = crate::quiet::spawn(driver::run(driver::Task {
            listener,
            path,
            upstream: upstream_ws,
            flows,
            heartbeat,
            signals: Signals {
                death: death_tx.clone(),
                page_death: page_death_tx.clone(),
            },
            control: control_rx,
            cut: cut_rx,
            idb_feeds: idb_feeds.clone(),
            second: link.second_connection.then(|| upstream.clone()),
            stalls: link.stalls,
        }));
        Ok(Relay {
            client_url,
            death,
            death_tx,
            page_death,
            page_death_tx,
            page_generation: 0,
            control,
            cut_tx: Some(cut_tx),
            dialogs,
            unanswered: Unanswered::default(),
            idb_feeds,
            _task: AbortOnDropHandle::new(task),
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

    /// After an on-demand probe went unanswered: whether the connection is heard again (it
    /// was stalled), judged as any silence is (`docs/deaths.md`). `false` once the browser is
    /// found dead.
    pub async fn heard_again(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        if self.death().is_some() || self.control.send(Control::Suspect(tx)).is_err() {
            return false;
        }
        let mut death = self.watch();
        tokio::select! {
            heard = rx => heard.is_ok(),
            _ = wait_death(&mut death) => false,
        }
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
            dialogs: self.dialogs,
        }));
    }

    /// The failure of the watched page, if one was detected.
    pub fn page_death(&self) -> Option<Death> {
        match *self.page_death.borrow() {
            Some((g, d)) if g == self.page_generation && g > 0 => Some(d),
            _ => None,
        }
    }

    /// A page is about to be opened: its crash or close before it is watched fails the
    /// returned generation (see [`wait_page_death`]), so its set-up can be given up at once.
    pub fn opening(&mut self) -> u64 {
        self.page_generation += 1;
        let _ = self.control.send(Control::Opening(self.page_generation));
        self.page_generation
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
            unanswered: self.unanswered.clone(),
            idb_feeds: self.idb_feeds.clone(),
        }
    }

    /// Closes the client side at once, so chromiumoxide stops talking to a dead browser.
    pub fn cut(&mut self) {
        if let Some(tx) = self.cut_tx.take() {
            let _ = tx.send(());
        }
    }
}

/// An out-of-process frame of the watched page: its session on the relay, and its frame id
/// (its target's id; empty if the browser did not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrameSession {
    pub session: String,
    pub frame_id: String,
}

/// A command of outlive's own: `method` with `params`, on `session`.
pub(crate) struct OwnCall {
    pub(crate) session: String,
    pub(crate) method: &'static str,
    pub(crate) params: serde_json::Value,
}

/// Sends commands of outlive's own through the relay, on any session of the browser —
/// chromiumoxide has no handle on the sessions of out-of-process frames, the relay sees them.
#[derive(Clone)]
pub(crate) struct Calls {
    control: mpsc::UnboundedSender<Control>,
    unanswered: Unanswered,
    idb_feeds: IdbFeeds,
}

/// Where the relay's task hands the storage key of each IndexedDB change event
/// (`Storage.indexedDB{Content,List}Updated`) as it reads it from the browser, by the session
/// the event came on: one receiver per session (see [`Calls::indexed_db_changes`]). `None`
/// once the task has ended (its receivers then see their channel closed).
#[derive(Clone)]
pub(crate) struct IdbFeeds(Arc<Mutex<Option<Feeds>>>);

/// Each session's receiver of IndexedDB change events (see [`IdbFeeds`]).
type Feeds = HashMap<String, mpsc::UnboundedSender<String>>;

impl IdbFeeds {
    fn open() -> IdbFeeds {
        IdbFeeds(Arc::new(Mutex::new(Some(HashMap::new()))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Feeds>> {
        crate::sync::lock(&self.0)
    }

    /// Whether some session's changes are asked for (the relay reads no event for them
    /// otherwise). Receivers dropped (a page's watch gone with its page) are forgotten.
    fn wanted(&self) -> bool {
        self.lock().as_mut().is_some_and(|feeds| {
            feeds.retain(|_, tx| !tx.is_closed());
            !feeds.is_empty()
        })
    }

    /// Hands the change event `bytes` (if it is one) to its session's receiver. One the relay
    /// cannot read goes to every receiver as a storage key never tracked (a change to every
    /// key: nothing is taken as unchanged on a report nobody could read).
    fn feed(&self, bytes: &[u8]) {
        let Some(change) = wire::indexed_db_change(bytes) else {
            return;
        };
        let mut feeds = self.lock();
        let Some(feeds) = feeds.as_mut() else {
            return;
        };
        match change {
            Ok(wire::IndexedDbChange {
                session_id: Some(session),
                params,
            }) => {
                if let Some(tx) = feeds.get(&session) {
                    let _ = tx.send(params.storage_key);
                }
            }
            // On the browser's own session: not a tracking of outlive's.
            Ok(_) => {}
            Err(_) => {
                tracing::debug!(
                    "an IndexedDB change event could not be read; counted as a change to every storage key"
                );
                for tx in feeds.values() {
                    let _ = tx.send(String::new());
                }
            }
        }
    }

    /// The relay's task ended: every receiver sees its channel closed, and none is given out.
    fn close(&self) {
        self.lock().take();
    }
}

/// The replies still awaited for calls that outlived their timeout, by session (one each), with
/// when they were sent: the browser answers them when the session's renderer is free again,
/// or never (a promise that never settles).
type Unanswered = Arc<Mutex<HashMap<String, Waiting>>>;

/// A call's reply still awaited after its timeout.
struct Waiting {
    sent: Instant,
    reply: oneshot::Receiver<String>,
}

impl Waiting {
    /// Whether the reply is still to come (the browser has not answered, the relay still
    /// waits for it) and the call was sent less than `retry_after` ago.
    fn holds(&mut self, retry_after: Duration) -> bool {
        let pending = matches!(
            self.reply.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        pending && self.sent.elapsed() < retry_after
    }
}

/// A session whose call has gone unanswered this many times its timeout gets a new one. A hung
/// renderer gets at most one call per this span. And a call that will never be answered (a
/// promise that never settles) does not shut the session out for good.
const UNANSWERED_RETRY_AFTER: u32 = 6;

impl Calls {
    /// Calls with no relay behind them (a page connected directly, in tests): no frame
    /// sessions, every call unanswered.
    #[cfg(test)]
    pub fn detached() -> Calls {
        let idb_feeds = IdbFeeds::open();
        idb_feeds.close();
        Calls {
            control: mpsc::unbounded_channel().0,
            unanswered: Unanswered::default(),
            idb_feeds,
        }
    }

    /// Whether a relay is behind these calls (it may still die before the next one).
    pub fn is_relayed(&self) -> bool {
        !self.control.is_closed()
    }

    /// The out-of-process frames (cross-site iframes) of the page whose session is `page`.
    /// The unanswered calls of frames no longer there are forgotten.
    pub async fn frame_sessions(&self, page: &str) -> Vec<FrameSession> {
        let (tx, rx) = oneshot::channel();
        if self
            .control
            .send(Control::Frames(page.to_owned(), tx))
            .is_err()
        {
            return Vec::new();
        }
        let (frames, known) = rx.await.unwrap_or_default();
        self.unanswered()
            .retain(|session, _| known.iter().any(|s| s == session));
        frames
    }

    /// From now on, each out-of-process frame attached under the watched page gets `scripts`
    /// registered to run as its documents start, before chromiumoxide lets it run (it attaches
    /// frames paused; the relay sends these as it forwards the attach). Replies are not awaited.
    pub fn arm_frames(&self, scripts: Vec<String>) {
        let _ = self.control.send(Control::ArmFrames(scripts));
    }

    /// From now on, the storage key of each IndexedDB change event that comes on `session`, in
    /// the order the browser sent them, handed over as the relay reads each — before it
    /// forwards the event to chromiumoxide, so before any reply the browser sent after it
    /// reaches its caller (chromiumoxide hands a reply over at once but queues the events read
    /// with it for its listeners' next pass). One receiver per session: a second replaces the
    /// first, whose channel closes. `None` with no relay behind these calls; the channel
    /// closes when the relay ends.
    pub fn indexed_db_changes(&self, session: String) -> Option<mpsc::UnboundedReceiver<String>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.idb_feeds.lock().as_mut()?.insert(session, tx);
        Some(rx)
    }

    /// Tells the relay what a program's command on its own connection does (see
    /// [`ProgramCall`]).
    pub fn program(&self, call: ProgramCall) {
        let _ = self.control.send(Control::Program(call));
    }

    /// Sends `call`; the raw reply text, or `None` if the relay is gone or no reply came
    /// within `timeout`.
    pub async fn call(&self, call: OwnCall, timeout: Duration) -> Option<String> {
        let rx = self.send(call)?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }

    /// Like [`Calls::call`], except on a session where an earlier such call outlived its
    /// timeout and the browser has not answered it since (for less than
    /// [`UNANSWERED_RETRY_AFTER`] times `timeout`): there nothing is sent and `None` comes at
    /// once, as it does for a zero `timeout`. A renderer that hangs runs every command queued
    /// for it once it is free again, so repeated calls to a hung frame (a capture per
    /// checkpoint) would pile up.
    pub async fn call_unless_unanswered(&self, call: OwnCall, timeout: Duration) -> Option<String> {
        if timeout.is_zero() {
            return None;
        }
        let retry_after = timeout.saturating_mul(UNANSWERED_RETRY_AFTER);
        let waiting = self
            .unanswered()
            .get_mut(&call.session)
            .is_some_and(|earlier| earlier.holds(retry_after));
        if waiting {
            tracing::debug!(
                "an earlier call on this session is still unanswered; not calling again"
            );
            return None;
        }
        self.unanswered().remove(&call.session);
        let session = call.session.clone();
        let sent = Instant::now();
        let mut reply = self.send(call)?;
        match tokio::time::timeout(timeout, &mut reply).await {
            Ok(reply) => reply.ok(),
            Err(_) => {
                // Kept, so the relay keeps its way to it until the browser answers.
                self.unanswered().insert(session, Waiting { sent, reply });
                None
            }
        }
    }

    /// Hands `call` to the relay; where its reply will come.
    fn send(&self, call: OwnCall) -> Option<oneshot::Receiver<String>> {
        let (reply, rx) = oneshot::channel();
        self.control.send(Control::Call { call, reply }).ok()?;
        Some(rx)
    }

    /// The replies awaited after their timeout (see [`Unanswered`]).
    fn unanswered(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        crate::sync::lock(&self.unanswered)
    }
}

/// The channels the relay task publishes deaths on.
struct Signals {
    death: watch::Sender<Option<Death>>,
    page_death: watch::Sender<PageDeath>,
}

impl Signals {
    /// Publishes the browser's death (unless one is published already).
    fn die(&self, cause: DeathCause) {
        DeathSender(self.death.clone()).declare(cause);
    }

    /// Publishes the browser's death, made sure of as `confirmed`.
    fn die_confirmed(&self, cause: DeathCause, confirmed: Confirmation) {
        DeathSender(self.death.clone()).declare_confirmed(cause, Some(confirmed));
    }

    /// Publishes the failure of page `generation` (unless one is published already).
    fn fail_page(&self, generation: u64, cause: DeathCause) {
        declare_page(&self.page_death, generation, cause);
    }
}

#[cfg(test)]
mod tests;
