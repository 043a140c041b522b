//! Running the app: [`serve`] on a bound listener until a shutdown future resolves, or
//! [`spawn`] it on a task and hold the [`Aurora`] handle.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::bank::{Bank, Counters, Transfer};
use crate::listening::Listening;
use crate::{Config, routes};

/// Serves Aurora on `listener` until `shutdown` resolves, then finishes the requests in
/// flight and returns.
///
/// # Errors
///
/// Only if the listener fails in a way the server cannot recover from.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    run(listener, Arc::new(Bank::new(config)), shutdown).await
}

#[tracing::instrument(name = "aurora", skip_all, fields(addr = ?listener.local_addr().ok()))]
async fn run(
    listener: TcpListener,
    bank: Arc<Bank>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    tracing::debug!("serving");
    axum::serve(listener, routes::router(bank))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds `127.0.0.1:0` and serves Aurora on a new tokio task.
///
/// # Errors
///
/// If the listener cannot be bound.
pub async fn spawn(config: Config) -> io::Result<Aurora> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let bank = Arc::new(Bank::new(config));
    let server = Listening::spawn(|stop| run(listener, Arc::clone(&bank), stop.requested()));
    Ok(Aurora { addr, bank, server })
}

/// A running Aurora server started by [`spawn`]. Dropping it stops the server at once;
/// [`shutdown`](Self::shutdown) stops it gracefully and reports how it ended.
pub struct Aurora {
    addr: SocketAddr,
    bank: Arc<Bank>,
    server: Listening,
}

impl Aurora {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's origin, e.g. `http://127.0.0.1:41234`, with no trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The absolute URL of `path` (which starts with `/`) on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url())
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &Config {
        &self.bank.config
    }

    /// A snapshot of the server's counters (the same as `GET /__counters`).
    pub fn counters(&self) -> Counters {
        self.bank.counters()
    }

    /// The transfers recorded so far, oldest first (the same as `GET /__transfers`).
    pub fn transfers(&self) -> Vec<Transfer> {
        self.bank.transfers()
    }

    /// Stops accepting connections, waits for requests in flight, and returns once the
    /// listener is closed.
    ///
    /// # Errors
    ///
    /// The server's own error, or an error of kind `Other` if its task panicked.
    pub async fn shutdown(self) -> io::Result<()> {
        self.server.shutdown().await
    }
}

impl fmt::Debug for Aurora {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aurora")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}
