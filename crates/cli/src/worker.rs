//! `outlive worker`: a [`jobs::Worker`] for the tasks declared with `--task NAME='CMD ARGS…'`
//! and the command's own ([`bank::tasks`]). It runs on the provider its
//! flags name or, without one, on an embedded Aurora Bank and gateway whose sessions die. So
//! the durable flow can be tried with nothing else running but PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use outlive::{Options, Provider, SealKey, Sealer};

use outlive_bed::bank;
use outlive_bed::bed::{TestBed, dying};
use outlive_jobs::{self as jobs, PgStore, SessionLimit, Worker, WorkerConfig};

use crate::error::Error;

/// The worker's settings, derived from `outlive worker`'s flags
/// ([`WorkerArgs`](crate::cmd::durable::WorkerArgs)).
pub struct WorkerSettings {
    /// PostgreSQL.
    pub database_url: String,
    /// The sealing key.
    pub key: SealKey,
    /// Where browsers come from; none: an embedded gateway.
    pub provider: Option<Box<dyn Provider>>,
    /// The Aurora Bank for runs whose input names none.
    pub bank_url: Option<String>,
    /// Sessions at most across every worker on the database.
    pub max_sessions: Option<u32>,
    /// Sessions one run may use in this worker (`Options::max_sessions`).
    pub max_sessions_per_run: u32,
    /// How the worker shares the queue.
    pub config: WorkerConfig,
    /// Interval of the automatic checkpoint.
    pub checkpoint_every: Duration,
    /// Lifetime of the embedded gateway's sessions.
    pub lifetime: Duration,
    /// Command tasks, each `NAME=CMD ARGS…` (see [`jobs::parse_task`]).
    pub tasks: Vec<String>,
    /// Where the runs and the worker record their metrics, if anywhere.
    pub metrics: Option<(outlive::Metrics, jobs::WorkerMetrics)>,
}

/// A worker ready to run, and the embedded test bed it uses, if any.
pub struct Prepared {
    /// The worker.
    pub worker: Worker,
    /// The embedded Aurora Bank and gateway (without a provider of the caller's).
    pub bed: Option<TestBed>,
}

/// Checks the task declarations, connects, creates the tables if missing, and builds the
/// worker.
///
/// # Errors
///
/// [`ErrorKind::Jobs`](crate::ErrorKind::Jobs) for a declaration that does not parse, whose
/// program is not found, or whose name is taken (before anything is connected or started).
/// The same for the database, and for `max_sessions` 0.
/// [`ErrorKind::Bed`](crate::ErrorKind::Bed) if the embedded bed does not start.
pub async fn prepare(args: WorkerSettings) -> Result<Prepared, Error> {
    // Every declaration checked before anything is connected or started.
    let mut tasks = bank::tasks(None);
    for declaration in &args.tasks {
        tasks = tasks.declare(declaration)?;
    }
    // apalis' listener, fetches and heartbeats, and per run its lease, its checkpoints and
    // its history's writer (one each: history inserts never starve a lease's renewal).
    let connections = 4 + 3 * u32::try_from(args.config.concurrency).unwrap_or(u32::MAX / 4);
    let store = PgStore::connect_with(&args.database_url, connections).await?;
    jobs::setup(&store).await?;
    let (provider, bed, bank): (Box<dyn Provider>, _, _) = match args.provider {
        Some(provider) => (provider, None, args.bank_url),
        None => {
            let bed = TestBed::start(
                dying(args.lifetime, args.lifetime / 10, gateway::DeathMode::Close).max_sessions(8),
            )
            .await?;
            let bank = args.bank_url.or_else(|| Some(bed.bank().base_url()));
            (Box::new(bed.provider()), Some(bed), bank)
        }
    };
    let provider: Arc<dyn Provider> = match args.max_sessions {
        Some(max) => Arc::new(SessionLimit::new(provider, args.database_url, max)?),
        None => Arc::new(provider),
    };
    let mut options = Options::new()
        .checkpoint_every(args.checkpoint_every)
        .max_relaunches(100)
        .max_sessions(args.max_sessions_per_run);
    let (runs_metrics, worker_metrics) = args.metrics.unzip();
    if let Some(m) = runs_metrics {
        options = options.metrics(m);
    }
    tasks = bank::tasks(bank);
    for declaration in &args.tasks {
        tasks = tasks.declare(declaration)?;
    }
    let mut worker =
        Worker::new(store, Sealer::new(args.key), tasks, provider, options).config(args.config);
    if let Some(m) = worker_metrics {
        worker = worker.metrics(m);
    }
    Ok(Prepared { worker, bed })
}
