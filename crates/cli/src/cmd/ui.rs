//! `outlive ui --listen ADDR`: the durable runs and their timelines, as a page.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Args;

use crate::error::Error;
use crate::http::{Routes, Server, loopback_only};
use crate::ui::DurableRuns;

/// The flags of `outlive ui`.
#[derive(Args)] // no Debug: it holds a secret (the database URL)
pub struct UiArgs {
    /// Where to serve the page, as IP:PORT (port 0: any free one).
    ///
    /// Loopback only, unless --public. The address is printed on stderr.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9465")]
    pub listen: SocketAddr,
    /// Let --listen be an address other than loopback (the network can read the page).
    #[arg(long)]
    pub public: bool,
    /// PostgreSQL.
    #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

impl UiArgs {
    /// Serves the page until SIGINT or SIGTERM.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Flag`](crate::ErrorKind::Flag) for an address off loopback without
    /// `--public`, [`ErrorKind::Listen`](crate::ErrorKind::Listen) when it cannot be bound
    /// (both before the database is asked), [`ErrorKind::Jobs`](crate::ErrorKind::Jobs) for
    /// the database.
    pub async fn run(self) -> Result<(), Error> {
        loopback_only(self.listen, "--listen", "--public", self.public)?;
        let stop = super::interrupted();
        let routes = Routes {
            metrics: None,
            runs: Some(Arc::new(DurableRuns::new(self.database_url.clone()))),
        };
        // Bound first: an address in use is said before anything else.
        let server = Server::bind(self.listen, "--listen", routes).await?;
        // Asked once at start: a database that cannot be reached, or has no runs tables, is
        // said at once too. Nothing is created: a read-only role may serve the page.
        let store = outlive_jobs::PgStore::connect(&self.database_url).await?;
        let set_up = outlive_jobs::check_setup(&store).await;
        store.pool().close().await;
        set_up?;
        eprintln!("outlive: runs at http://{}/", server.addr());
        stop.await;
        Ok(())
    }
}
