//! `outlive worker`: a [`jobs::Worker`] for the command's own tasks
//! ([`bank::tasks`](crate::bank::tasks)), on a Solari-compatible provider or, without one, on
//! an embedded Aurora Bank and gateway whose sessions die (so the durable flow can be tried
//! with nothing else running but PostgreSQL).

use std::sync::Arc;
use std::time::Duration;

use outlive::solari_browser::{Client, ClientOptions};
use outlive::{Options, Provider, SealKey, Sealer, Solari};

use crate::bed::{TestBed, dying};
use crate::durable::PgStore;
use crate::error::{Error, ErrorKind};
use crate::jobs::{self, SessionLimit, Worker, WorkerConfig};

/// What `outlive worker` was asked for.
pub struct WorkerArgs {
    /// PostgreSQL.
    pub database_url: String,
    /// The sealing key.
    pub key: SealKey,
    /// A Solari-compatible API (base URL, API key); none: an embedded gateway.
    pub solari: Option<(String, String)>,
    /// The Aurora Bank for runs whose input names none.
    pub bank_url: Option<String>,
    /// Sessions at most across every worker on the database.
    pub max_sessions: Option<u32>,
    /// How the worker shares the queue.
    pub config: WorkerConfig,
    /// Interval of the automatic checkpoint.
    pub checkpoint_every: Duration,
    /// Lifetime of the embedded gateway's sessions.
    pub lifetime: Duration,
}

/// A worker ready to run, and the embedded test bed it uses, if any.
pub struct Prepared {
    /// The worker.
    pub worker: Worker,
    /// The embedded Aurora Bank and gateway (without a provider of the caller's).
    pub bed: Option<TestBed>,
}

/// Connects, creates the tables if missing, and builds the worker.
///
/// # Errors
///
/// [`ErrorKind::Database`]; [`ErrorKind::Client`] for a bad provider URL;
/// [`ErrorKind::Bank`] / [`ErrorKind::Gateway`] if the embedded bed does not start;
/// [`ErrorKind::InvalidOption`] for `max_sessions` 0.
pub async fn prepare(args: WorkerArgs) -> Result<Prepared, Error> {
    let store = PgStore::connect(&args.database_url).await?;
    jobs::setup(&store).await?;
    let (provider, bed, bank) = match args.solari {
        Some((url, key)) => {
            let client = Client::new(ClientOptions::new(key, url))
                .map_err(|e| Error::with(ErrorKind::Client, e.to_string()))?;
            (Solari::new(client), None, args.bank_url)
        }
        None => {
            let bed = TestBed::start(
                dying(args.lifetime, args.lifetime / 10, gateway::DeathMode::Close).max_sessions(8),
            )
            .await?;
            let bank = args.bank_url.or_else(|| Some(bed.bank().base_url()));
            (bed.provider(), Some(bed), bank)
        }
    };
    let provider: Arc<dyn Provider> = match args.max_sessions {
        Some(max) => Arc::new(SessionLimit::new(provider, args.database_url, max)?),
        None => Arc::new(provider),
    };
    let options = Options::new()
        .checkpoint_every(args.checkpoint_every)
        .max_relaunches(100);
    let worker = Worker::new(
        store,
        Sealer::new(args.key),
        crate::bank::tasks(bank),
        provider,
        options,
    )
    .config(args.config);
    Ok(Prepared { worker, bed })
}
