//! The accept loop ([`serve`]), and the in-process handle for tests ([`spawn`], [`Gateway`]).
//!
//! Connections are served by hyper directly (HTTP/1.1 with upgrades) rather than through
//! `axum::serve`, so that an upgraded connection can be downcast back to its [`TcpStream`]
//! (see [`relay`](crate::relay)).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use crate::api;
use crate::chaos::Death;
use crate::config::{Config, DeathMode, PageFault};
use crate::error::{Error, ErrorKind};
use crate::fault::{self, DeleteFault, FaultCounters};
use crate::page;
use crate::session::{KillError, Phase, Shared, Status, parse_session_id};

/// How long a page fault whose browser connection broke waits to learn whether the session
/// died meanwhile (its keeper publishes the death once Chromium is gone).
const DEATH_NOTICE: Duration = Duration::from_secs(2);

/// Serves the gateway on `listener` until `shutdown` resolves, then kills every Chromium it
/// started and returns once they are gone. (Helpers whose browser died before them are left
/// as zombies for the init process to reap: dead, but listed by `ps` until it does.)
///
/// ```no_run
/// # async fn demo() -> Result<(), gateway::Error> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
/// gateway::serve(listener, gateway::Config::new(), async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await
/// # }
/// ```
///
/// # Errors
///
/// [`ErrorKind::InvalidConfig`] before anything starts; [`ErrorKind::Io`] if the listener has
/// no local address; [`ErrorKind::TaskPanicked`] (after a complete shutdown) if a connection or
/// session task panicked.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    config.validate()?;
    let addr = local_addr(&listener)?;
    // Quietly: the relay carries CDP frames (cookies) and the CDP URLs carry tokens.
    outlive::quietly(run(listener, Shared::new(config, addr), shutdown)).await
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, Error> {
    listener
        .local_addr()
        .map_err(|e| Error::new(ErrorKind::Io, "the listener has no local address").with_source(e))
}

async fn run(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let router = api::router(shared.clone());
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    // The link's weather runs while the gateway serves; it clears when dropped.
    let mut link = Box::pin(shared.climate.drive_link());
    tracing::info!(addr = %shared.local_addr, "gateway listening");
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            never = &mut link => match never {},
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(outlive::quietly(serve_connection(stream, router.clone())));
                }
                Err(e) => {
                    // Per-connection failures (ECONNABORTED, EMFILE, …) must not end the server.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                if matches!(done, Err(e) if e.is_panic()) {
                    shared.record_panic();
                }
            }
        }
    }
    tracing::info!("gateway shutting down");
    drop(link);
    drop(listener);
    // In-flight requests (a create mid-launch included) are dropped: whatever they started
    // is killed by its owner's Drop.
    connections.shutdown().await;
    shared.close().await;
    match shared.panics() {
        0 => Ok(()),
        n => Err(Error::new(
            ErrorKind::TaskPanicked,
            format!("{n} gateway task(s) panicked"),
        )),
    }
}

async fn serve_connection(stream: TcpStream, router: axum::Router) {
    let _ = stream.set_nodelay(true);
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router))
        .with_upgrades();
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Starts a gateway on `127.0.0.1:0` in this process and returns its handle.
///
/// ```no_run
/// # async fn demo() -> Result<(), gateway::Error> {
/// let gw = gateway::spawn(gateway::Config::new()).await?;
/// println!("{} (key {})", gw.base_url(), gw.api_key());
/// let status = gw.shutdown().await?;
/// assert_eq!(status.chromium_processes, 0);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`ErrorKind::InvalidConfig`] before anything starts; [`ErrorKind::Io`] if no port can be
/// bound.
pub async fn spawn(config: Config) -> Result<Gateway, Error> {
    config.validate()?;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Error::new(ErrorKind::Io, "could not bind 127.0.0.1:0").with_source(e))?;
    let addr = local_addr(&listener)?;
    let shared = Shared::new(config, addr);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(outlive::quietly(run(
        listener,
        shared.clone(),
        async move {
            let _ = stop_rx.await;
        },
    )));
    Ok(Gateway {
        base_url: format!("http://{addr}"),
        shared,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

/// A running in-process gateway. Dropping it stops the gateway and kills its browsers;
/// [`Gateway::shutdown`] does the same and waits for it.
pub struct Gateway {
    base_url: String,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), Error>>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// `http://127.0.0.1:PORT`, the base URL for a Solari client.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The address the gateway listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The API key clients must present.
    pub fn api_key(&self) -> &str {
        &self.shared.config.api_key
    }

    /// Live and dead sessions, the Chromium processes still alive, and the weather's stalls
    /// that held a frame.
    pub fn status(&self) -> Status {
        self.shared.status()
    }

    /// The ids of the sessions whose browser is alive, oldest first: what a test from outside
    /// the process that made them can kill.
    pub fn live_sessions(&self) -> Vec<String> {
        self.shared
            .list()
            .into_iter()
            .filter(|s| s.phase == crate::session::Phase::Live)
            .map(|s| s.id.to_string())
            .collect()
    }

    /// Kills a live session's browser now, the way `mode` says, and returns once Chromium is
    /// gone; the answer is the mode applied ([`DeathMode::Mixed`] resolved).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnknownSession`] for an id this gateway never issued;
    /// [`ErrorKind::SessionEnded`] if the browser is already dead or the session released.
    pub async fn kill(&self, session_id: &str, mode: DeathMode) -> Result<DeathMode, Error> {
        let id = parse_session_id(session_id).ok_or_else(|| {
            Error::new(
                ErrorKind::UnknownSession,
                "no session with this id on this gateway",
            )
        })?;
        match self.shared.kill(id, Some(Death::resolve(mode, 0))).await {
            Ok(death) => Ok(death.mode()),
            Err(KillError::Unknown) => Err(Error::new(
                ErrorKind::UnknownSession,
                "no session with this id on this gateway",
            )),
            Err(KillError::Ended) => Err(Error::new(
                ErrorKind::SessionEnded,
                "the session's browser is already dead or the session was released",
            )),
        }
    }

    /// Crashes or closes every page (CDP target of type `page`) of a live session's browser
    /// now, and returns how many pages crashed or closed once each is seen to. The browser,
    /// and the client's relay connection to it, live on; clients see `Target.targetCrashed` /
    /// `Inspector.targetCrashed` or `Target.targetDestroyed` for their pages (see
    /// [`PageFault`]). Pages already crashed, or closed meanwhile, are not counted.
    ///
    /// The gateway uses a CDP connection of its own to the browser, so the fault works with or
    /// without a client connected, and takes nothing from the client's connection.
    ///
    /// ```no_run
    /// # async fn demo(gw: gateway::Gateway, session_id: &str) -> Result<(), gateway::Error> {
    /// let crashed = gw.fail_page(session_id, gateway::PageFault::Crash).await?;
    /// println!("{crashed} page(s) crashed");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnknownSession`] for an id this gateway never issued;
    /// [`ErrorKind::SessionEnded`] if the browser is dead or the session released, before or
    /// during the fault; [`ErrorKind::PageFault`] if the browser could not be reached over
    /// CDP, refused a command, or a page did not crash or close within a few seconds.
    pub async fn fail_page(&self, session_id: &str, fault: PageFault) -> Result<usize, Error> {
        let unknown = || {
            Error::new(
                ErrorKind::UnknownSession,
                "no session with this id on this gateway",
            )
        };
        let ended = || {
            Error::new(
                ErrorKind::SessionEnded,
                "the session's browser is dead or the session was released",
            )
        };
        let id = parse_session_id(session_id).ok_or_else(unknown)?;
        let (upstream, mut phase) = self.shared.live_browser(id).map_err(|e| match e {
            KillError::Unknown => unknown(),
            KillError::Ended => ended(),
        })?;
        let session_ended = async move {
            while *phase.borrow_and_update() == Phase::Live {
                if phase.changed().await.is_err() {
                    break;
                }
            }
        };
        let mut session_ended = std::pin::pin!(session_ended);
        let result = tokio::select! {
            result = page::fail_pages(&upstream, fault) => result,
            () = &mut session_ended => return Err(ended()),
        };
        match result {
            Ok(pages) => {
                tracing::info!(session = %id, %fault, pages, "pages faulted on demand");
                Ok(pages)
            }
            // The browser went away under the fault: say so if that is the session ending.
            Err(e) if e.is_connection() => {
                match tokio::time::timeout(DEATH_NOTICE, session_ended).await {
                    Ok(()) => Err(ended()),
                    Err(_) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the next `n` `POST /sessions` requests answer `status`, then lets creates
    /// through again; replaces any create fault already queued (`n == 0` clears it).
    ///
    /// A faulted create starts no browser and takes no concurrency slot, and its answer is
    /// the one a real refusal carries: `503` has code `BrowserUnhealthy`, `429`
    /// `ConcurrencyLimitExceeded`, `500` `InternalError`, `502` `BadGateway`, `504`
    /// `GatewayTimeout` (other statuses: `InjectedFault`). Faults are taken per HTTP request,
    /// after the request passed auth and validation, so a client's own retries each take one;
    /// a faulted request never records or replays its `Idempotency-Key`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), gateway::Error> {
    /// let gw = gateway::spawn(gateway::Config::new()).await?;
    /// gw.fail_creates(2, 503)?; // two BrowserUnhealthy, then a browser
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidFault`] if `status` is not 400–599; nothing changes.
    pub fn fail_creates(&self, n: u32, status: u16) -> Result<(), Error> {
        fault::check_status(status)?;
        self.shared.faults.fail_creates(n, status);
        Ok(())
    }

    /// Makes the next `n` `DELETE /sessions/:id` requests (`None`: every one, until
    /// [`clear_faults`](Self::clear_faults)) answer with `fault`; replaces any delete fault
    /// already queued (`Some(0)` clears it).
    ///
    /// Only deletes of ids this gateway issued take a fault (others are answered `404` as
    /// usual). A faulted delete still kills the session's browser before it answers (or
    /// starts hanging), so nothing leaks, but does not release the session: [`Status`] counts
    /// it in `dead_sessions` (still holding its concurrency slot) with its Chromium gone,
    /// until a delete that is not faulted, or shutdown, releases it. A hanging request ends
    /// when the client gives up or the gateway stops.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidFault`] if a [`DeleteFault::Status`] is not 400–599; nothing
    /// changes.
    pub fn fail_deletes(&self, n: Option<u32>, fault: DeleteFault) -> Result<(), Error> {
        if let DeleteFault::Status(status) = fault {
            fault::check_status(status)?;
        }
        self.shared.faults.fail_deletes(n, fault);
        Ok(())
    }

    /// Drops every queued create and delete fault (the [`FaultCounters`] keep counting).
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// How many requests were answered with an injected fault so far.
    pub fn fault_counters(&self) -> FaultCounters {
        self.shared.faults.counters()
    }

    /// Stops the gateway: refuses new connections, releases every session, kills every
    /// Chromium, and returns the final [`Status`] once they are gone.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::TaskPanicked`] if a task of the gateway panicked (it is stopped anyway).
    pub async fn shutdown(mut self) -> Result<Status, Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            match task.await {
                Ok(result) => result?,
                Err(e) if e.is_panic() => {
                    return Err(Error::new(
                        ErrorKind::TaskPanicked,
                        "the gateway task panicked",
                    ));
                }
                Err(_) => {}
            }
        }
        Ok(self.shared.status())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
            // The server task finishes the orderly shutdown if the runtime lives on; kill the
            // browsers now in case it does not.
            self.shared.processes.kill_unreaped();
        }
    }
}
