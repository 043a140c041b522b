//! The relay's handle: it starts the relay's task, hears of deaths, and asks for probes.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::task::AbortOnDropHandle;

use super::calls::{Calls, Unanswered};
use super::control::{Control, Heartbeat, WatchedPage};
use super::death::{Death, DeathCause, DeathSender, PageDeath, Signals, declare_page, wait_death};
use super::link::LinkWatch;
use super::tap::Taps;
use super::{driver, forward, socket};
use crate::dialogs::Dialogs;
use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ErrorKind};

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
    /// Shared with the relay's task and every [`Calls`]: see [`Calls::tap`].
    taps: Taps,
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
        let upstream_ws = connect(upstream, connect_timeout, flows.clone()).await?;
        let (listener, path, client_url) = bind().await?;
        let (death_tx, death) = watch::channel(None);
        let (page_death_tx, page_death) = watch::channel(None);
        let (control, control_rx) = mpsc::unbounded_channel();
        let (cut_tx, cut_rx) = oneshot::channel();
        let taps = Taps::open();
        let task = crate::quiet::spawn_busy(
            crate::quiet::Busy::Relay,
            driver::run(driver::Task {
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
                taps: taps.clone(),
                second: link.second_connection.then(|| upstream.clone()),
                stalls: link.stalls,
            }),
        );
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
            taps,
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
    /// returned generation (see [`wait_page_death`](super::death::wait_page_death)), so its set-up can be given up at once.
    pub fn opening(&mut self) -> u64 {
        self.page_generation += 1;
        let _ = self.control.send(Control::Opening(self.page_generation));
        self.page_generation
    }

    /// A receiver and the watched page's generation, for [`wait_page_death`](super::death::wait_page_death).
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
            taps: self.taps.clone(),
        }
    }

    /// Closes the client side at once, so chromiumoxide stops talking to a dead browser.
    pub fn cut(&mut self) {
        if let Some(tx) = self.cut_tx.take() {
            let _ = tx.send(());
        }
    }
}

/// The websocket to `upstream`, opened within `connect_timeout`, its writes going as `flows`
/// says.
async fn connect(
    upstream: &CdpEndpoint,
    connect_timeout: Duration,
    flows: forward::Flows,
) -> Result<socket::Upstream, Error> {
    let connect = socket::connect_upstream(upstream, flows);
    tokio::time::timeout(connect_timeout, connect)
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
        })
}

/// The relay's listener on 127.0.0.1, the path its client must ask for, and the client's URL.
async fn bind() -> Result<(TcpListener, String, String), Error> {
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
    Ok((listener, path, client_url))
}
