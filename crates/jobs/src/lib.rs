//! Durable runs as jobs on [apalis](https://docs.rs/apalis) with its PostgreSQL storage. Any
//! number of workers, on one machine or many, take runs from one queue. A run whose worker
//! dies (kill -9, a lost machine) is taken by another once the dead worker's heartbeats lapse.
//! It resumes from its newest checkpoint, sealed in [`PgStore`].
//!
//! # Layout
//!
//! * [`Tasks`] — tasks by name: Rust functions with a serde input type
//!   ([`Tasks::register`]), or commands ([`Tasks::command`], `outlive worker --task
//!   NAME='CMD ARGS…'`, parsed by [`parse_task`]) run as `outlive run -- CMD` runs them.
//! * [`submit`] — enqueue a run; [`runs`] — every run with its status, entries and wide event.
//! * [`Worker`] — takes runs from the queue and runs them through outlive, durable.
//! * `lease` — exactly one worker per run: the lease a worker renews while it holds a run,
//!   the self-stop before anyone may take it over, and [`FencedStore`], whose checkpoint
//!   writes name the pickup that holds the run.
//! * [`SessionLimit`] — at most N browser sessions at once across every worker, through
//!   PostgreSQL advisory locks (a dead worker's locks go with its connections).
//!
//! Tables: apalis keeps its queue in the `apalis` schema (`apalis.jobs`, `apalis.workers`).
//! This crate adds `outlive_runs` (one row per run: task, status, worker pickups, lease, result
//! or error, the last wide event), `outlive_tasks` (every task name a worker declared: what
//! [`submit`] accepts besides its own [`Tasks`]) and `outlive_checkpoints` ([`PgStore`]).

mod command;
mod error;
mod held;
mod lease;
mod slots;
mod store;

pub use command::{MAX_INPUT_BYTES, parse_task};
pub use error::{Error, ErrorKind};
pub use lease::FencedStore;
pub use slots::{LISTENER_APPLICATION, SLOT_APPLICATION, SessionLimit};
pub use store::{PgStore, Saved};

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use apalis::prelude::{
    AbortError, BoxDynError, Data, Monitor, TaskId, WorkerBuilder, WorkerBuilderExt, WorkerContext,
};
use apalis_postgres::{Config, PostgresStorage};
use backon::{ExponentialBuilder, Retryable};
use outlive::{BoxFuture, Ctx, Durable, Options, Page, Provider, Sealer, WideEvent};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::sync::watch;
use tokio_util::task::AbortOnDrop;

use lease::{Claim, Lease, Lost};

/// The apalis queue every outlive run goes through.
pub const QUEUE: &str = "outlive-runs";

/// What a queued run holds: the task's name and its input. The run id is the apalis task id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunJob {
    /// A name registered in the workers' [`Tasks`].
    pub task: String,
    /// The task's input, as JSON.
    pub input: serde_json::Value,
}

const RUNS_TABLE: &str = "CREATE TABLE IF NOT EXISTS outlive_runs (
    run_id text PRIMARY KEY,
    task text NOT NULL,
    status text NOT NULL,
    worker text,
    pickups integer NOT NULL DEFAULT 0,
    result jsonb,
    error text,
    event jsonb,
    submitted_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz
)";

/// For a runs table created before leases.
const RUNS_LEASE: &str =
    "ALTER TABLE outlive_runs ADD COLUMN IF NOT EXISTS lease_until timestamptz";

/// One row per pickup of a run: which worker, when, how it ended, its wide event.
const PICKUPS_TABLE: &str = "CREATE TABLE IF NOT EXISTS outlive_pickups (
    run_id text NOT NULL,
    pickup integer NOT NULL,
    worker text NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now(),
    ended_at timestamptz,
    ending text,
    event jsonb,
    PRIMARY KEY (run_id, pickup)
)";

const TASKS_TABLE: &str = "CREATE TABLE IF NOT EXISTS outlive_tasks (
    name text PRIMARY KEY,
    declared_at timestamptz NOT NULL DEFAULT now()
)";

/// Creates what durable runs need in the database, if missing: apalis' schema (its own
/// migrations), `outlive_runs` and `outlive_checkpoints`. Safe to run from every worker.
///
/// # Errors
///
/// [`ErrorKind::Database`].
pub async fn setup(store: &PgStore) -> Result<(), Error> {
    // `CREATE … IF NOT EXISTS` is not safe against itself: two workers starting at once on a
    // fresh database both create, and one fails on a duplicate type. One at a time, under a
    // session advisory lock on a connection of its own (unlocked when it closes, however).
    // (Not a pooled connection: a pool of one would wait for itself.)
    let mut lock =
        <sqlx::PgConnection as sqlx::Connection>::connect_with(&store.pool().connect_options())
            .await
            .map_err(|e| db("connecting", e))?;
    sqlx::query("SELECT pg_advisory_lock($1, 0)")
        .bind(SETUP_CLASS)
        .execute(&mut lock)
        .await
        .map_err(|e| db("waiting for another worker's setup", e))?;
    let created = create_tables(store).await;
    let _ = sqlx::Connection::close(lock).await;
    created
}

/// The advisory lock class of [`setup`] ("olsu").
const SETUP_CLASS: i32 = 0x6f6c_7375;

async fn create_tables(store: &PgStore) -> Result<(), Error> {
    PostgresStorage::setup(store.pool())
        .await
        .map_err(|e| db("creating apalis' tables", e))?;
    for table in [
        RUNS_TABLE,
        RUNS_LEASE,
        held::HELD_COLUMN,
        PICKUPS_TABLE,
        TASKS_TABLE,
    ] {
        sqlx::query(table)
            .execute(store.pool())
            .await
            .map_err(|e| db("creating the runs tables", e))?;
    }
    store.setup().await
}

/// How a run ended, as a task reports it.
struct Finished {
    result: Result<serde_json::Value, String>,
    event: Option<WideEvent>,
}

type Erased = Arc<
    dyn Fn(
            serde_json::Value,
            Arc<dyn Provider>,
            Options,
            watch::Receiver<bool>,
        ) -> BoxFuture<'static, Finished>
        + Send
        + Sync,
>;
type Check = Arc<dyn Fn(&serde_json::Value) -> Result<(), String> + Send + Sync>;

/// One task: a Rust function, or a command.
#[derive(Clone)]
enum Task {
    Rust { run: Erased, check: Check },
    Command(outlive::Command),
}

/// Resolves once `stop` says so; never if its sender is gone without saying it.
async fn stopped(mut stop: watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Tasks by name. A Rust task takes a serde input (checked when a run is submitted, and again
/// when a worker takes it). It runs through outlive with the page and [`Ctx`] of each entry.
/// A command task takes any JSON input and runs as `outlive run -- CMD` runs it. A durable
/// task keeps its progress in its checkpoints ([`Ctx::checkpoint_with`], or `POST
/// $OUTLIVE_CONTROL_URL/checkpoint` from a command), never in memory outside the task: the
/// next entry may run in another process.
#[derive(Clone, Default)]
pub struct Tasks {
    by_name: BTreeMap<String, Task>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.by_name.keys()).finish()
    }
}

impl Tasks {
    /// No tasks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `task` under `name`: each entry gets the run's input, the page and the
    /// entry's [`Ctx`]; what it returns (serialised) is the run's result.
    #[must_use]
    pub fn register<I, F, Fut, T, E>(mut self, name: impl Into<String>, task: F) -> Self
    where
        I: DeserializeOwned + Send + Sync + 'static,
        F: Fn(Arc<I>, Page, Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize + Send + 'static,
        E: Display + Send + 'static,
    {
        let task = Arc::new(task);
        let run: Erased = Arc::new(move |input, provider, options, stop| {
            let task = task.clone();
            Box::pin(async move {
                let input: Arc<I> = match serde_json::from_value(input) {
                    Ok(i) => Arc::new(i),
                    Err(e) => {
                        return Finished {
                            result: Err(format!("the input does not fit the task: {e}")),
                            event: None,
                        };
                    }
                };
                let run = outlive::outlive_with_event(
                    provider.as_ref(),
                    |page, ctx| task(input.clone(), page, ctx),
                    options,
                );
                // Stopped: the entry is dropped, and its browser released with it.
                let outlive::Reported { result, event } = tokio::select! {
                    ran = run => ran,
                    () = stopped(stop) => {
                        return Finished {
                            result: Err("stopped".to_owned()),
                            event: None,
                        };
                    }
                };
                let result = match result {
                    Ok(v) => serde_json::to_value(v)
                        .map_err(|e| format!("the result does not serialise: {e}")),
                    Err(e) => Err(e.to_string()),
                };
                Finished {
                    result,
                    event: Some(event),
                }
            })
        });
        let check: Check = Arc::new(|input| {
            serde_json::from_value::<I>(input.clone())
                .map(drop)
                .map_err(|e| e.to_string())
        });
        self.by_name.insert(name.into(), Task::Rust { run, check });
        self
    }

    /// Registers `command` under `name` (see [`parse_task`] for `NAME='CMD ARGS…'`): each run
    /// runs it as `outlive run -- CMD` does, with the run's input, as JSON, in
    /// `OUTLIVE_INPUT`; `OUTLIVE_ATTEMPT` and `OUTLIVE_PROGRESS` go on across workers. It
    /// completes when the command exits 0 (result `{"exitCode": 0}`), and fails when the
    /// command fails with its browser alive.
    #[must_use]
    pub fn command(mut self, name: impl Into<String>, command: outlive::Command) -> Self {
        self.by_name.insert(name.into(), Task::Command(command));
        self
    }

    /// Registers the command task of a declaration, `NAME='CMD ARGS…'` ([`parse_task`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidTask`] when it does not parse, its program is not found, or its
    /// name is already registered.
    pub fn declare(self, declaration: &str) -> Result<Self, Error> {
        let (name, command) = parse_task(declaration)?;
        if self.by_name.contains_key(&name) {
            return Err(Error::new(ErrorKind::InvalidTask {
                name,
                reason: "declared twice (or the name of a task already registered)".to_owned(),
            }));
        }
        Ok(self.command(name, command))
    }

    /// The registered names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Checks that `name` is registered and `input` fits it: a Rust task's input type, or
    /// for a command any JSON up to [`MAX_INPUT_BYTES`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnknownTask`]; [`ErrorKind::Input`] with what in the input does not fit.
    pub fn check(&self, name: &str, input: &serde_json::Value) -> Result<(), Error> {
        let task = self.by_name.get(name).ok_or_else(|| {
            Error::new(ErrorKind::UnknownTask {
                name: name.to_owned(),
                known: self.names().map(str::to_owned).collect(),
            })
        })?;
        check_size(name, input)?;
        match task {
            Task::Rust { check, .. } => check(input).map_err(|e| {
                Error::with(
                    ErrorKind::Input {
                        task: name.to_owned(),
                    },
                    e,
                )
            }),
            Task::Command(_) => Ok(()),
        }
    }
}

/// Refuses an input over [`MAX_INPUT_BYTES`].
fn check_size(task: &str, input: &serde_json::Value) -> Result<(), Error> {
    let len = input.to_string().len();
    if len > MAX_INPUT_BYTES {
        return Err(Error::with(
            ErrorKind::Input {
                task: task.to_owned(),
            },
            format!(
                "the input is {len} bytes of JSON, over the cap of {MAX_INPUT_BYTES}: pass a \
                 reference (a URL, a key) to the data instead"
            ),
        ));
    }
    Ok(())
}

/// Enqueues a run of `task` with `input` and answers its run id. The run shows in [`runs`]
/// as `queued` until a worker takes it.
///
/// `task` must be one of `tasks` (its input is then checked against it). Or it is a name a
/// worker declared on this database: in `outlive_tasks`, where a worker records its task names
/// when it starts. Such a run's input may be any JSON up to [`MAX_INPUT_BYTES`].
///
/// # Errors
///
/// [`ErrorKind::UnknownTask`], [`ErrorKind::Input`], [`ErrorKind::Database`]; nothing is
/// queued then.
pub async fn submit(
    store: &PgStore,
    tasks: &Tasks,
    task: &str,
    input: serde_json::Value,
) -> Result<String, Error> {
    if tasks.by_name.contains_key(task) {
        tasks.check(task, &input)?;
    } else {
        let declared: Vec<String> =
            sqlx::query_scalar("SELECT name FROM outlive_tasks ORDER BY name")
                .fetch_all(store.pool())
                .await
                .map_err(|e| db("reading the declared tasks", e))?;
        if !declared.iter().any(|d| d == task) {
            let mut known: Vec<String> = tasks.names().map(str::to_owned).collect();
            known.extend(declared);
            known.sort();
            known.dedup();
            return Err(Error::new(ErrorKind::UnknownTask {
                name: task.to_owned(),
                known,
            }));
        }
        check_size(task, &input)?;
    }
    // apalis' PostgreSQL storage reads task ids back as ULIDs.
    let id = TaskId::from_ulid(ulid::Ulid::generate());
    let run_id = id.to_string();
    let job = RunJob {
        task: task.to_owned(),
        input,
    };
    // apalis' JSON codec, as its own push would write it.
    let job = serde_json::to_vec(&job).map_err(|e| db("encoding the run", e))?;
    // The run's row and its job, both or neither: a row no worker will ever take, or a job
    // without its row, is never left behind.
    let mut tx = store
        .pool()
        .begin()
        .await
        .map_err(|e| db("enqueueing the run", e))?;
    sqlx::query("INSERT INTO outlive_runs (run_id, task, status) VALUES ($1, $2, 'queued')")
        .bind(&run_id)
        .bind(task)
        .execute(&mut *tx)
        .await
        .map_err(|e| db("recording the run", e))?;
    // apalis' own push (its `sink.sql`), in this transaction. One attempt: a run that fails
    // has already had outlive's relaunches; a worker that dies does not count (apalis
    // re-enqueues it regardless).
    sqlx::query(
        "INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at, priority)
         VALUES ($1, $2, $3, 'Pending', 0, 1, now(), 0)",
    )
    .bind(&run_id)
    .bind(QUEUE)
    .bind(job)
    .execute(&mut *tx)
    .await
    .map_err(|e| db("enqueueing the run", e))?;
    tx.commit().await.map_err(|e| db("enqueueing the run", e))?;
    Ok(run_id)
}

/// What [`cancel`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The run was queued: no worker will take it.
    Queued,
    /// The run was running: its worker stops it (ends its command, releases its browser)
    /// within a heartbeat.
    Running,
}

/// Cancels run `run_id`: status `cancelled` at once. A queued run is never taken; a running
/// one is stopped by its worker at its next lease renewal, and nothing it writes after that
/// counts.
///
/// # Errors
///
/// [`ErrorKind::NoSuchRun`], [`ErrorKind::RunOver`] (completed, failed or cancelled already),
/// [`ErrorKind::Database`].
pub async fn cancel(store: &PgStore, run_id: &str) -> Result<Cancelled, Error> {
    let mut tx = store
        .pool()
        .begin()
        .await
        .map_err(|e| db("cancelling the run", e))?;
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM outlive_runs WHERE run_id = $1 FOR UPDATE")
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| db("cancelling the run", e))?;
    let Some(status) = status else {
        return Err(Error::new(ErrorKind::NoSuchRun {
            run_id: run_id.to_owned(),
        }));
    };
    let was = match status.parse::<RunStatus>() {
        Ok(RunStatus::Queued) => Cancelled::Queued,
        Ok(RunStatus::Running) => Cancelled::Running,
        _ => {
            return Err(Error::new(ErrorKind::RunOver {
                run_id: run_id.to_owned(),
                status,
            }));
        }
    };
    sqlx::query(
        "UPDATE outlive_runs SET status = 'cancelled', updated_at = now() WHERE run_id = $1",
    )
    .bind(run_id)
    .execute(&mut *tx)
    .await
    .map_err(|e| db("cancelling the run", e))?;
    // A queued job is taken out of the queue; a worker that fetched it already finds the
    // run cancelled when it claims it.
    sqlx::query(
        "UPDATE apalis.jobs SET status = 'Killed', done_at = now()
         WHERE id = $1 AND status = 'Pending'",
    )
    .bind(run_id)
    .execute(&mut *tx)
    .await
    .map_err(|e| db("cancelling the run", e))?;
    tx.commit().await.map_err(|e| db("cancelling the run", e))?;
    Ok(was)
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RunStatus {
    /// Submitted, not taken yet (or given back to the queue by a worker that died).
    Queued,
    /// A worker holds it.
    Running,
    /// The task finished.
    Completed,
    /// The task failed, or outlive gave up; [`RunRow::error`] says why.
    Failed,
    /// `outlive cancel`.
    Cancelled,
}

impl RunStatus {
    /// As stored and shown: `queued`, `running`, `completed`, `failed`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the run is over (completed, failed or cancelled).
    pub fn is_over(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
        .ok_or_else(|| format!("no run status {s:?}"))
    }
}

/// One run, as [`runs`] lists it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    /// The run id ([`submit`]'s answer).
    pub run_id: String,
    /// The task's name.
    pub task: String,
    /// Where it is.
    pub status: RunStatus,
    /// The worker that took it last.
    pub worker: Option<String>,
    /// How many times a worker took it (more than 1: a worker died under it).
    pub pickups: i32,
    /// Entries of the task so far, across workers (the wide event's `attempts`).
    pub entries: Option<i64>,
    /// The task's result, when it completed.
    pub result: Option<serde_json::Value>,
    /// Why it failed.
    pub error: Option<String>,
    /// The newest wide event (one per worker that ran it; the last one's).
    pub event: Option<serde_json::Value>,
    /// Every pickup, first first: each worker's part of the run.
    pub history: Vec<Pickup>,
}

/// One worker's part of a run, as [`RunRow::history`] lists it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pickup {
    /// 1 for the first worker that took the run, then 2, …: the fencing token of its writes.
    pub pickup: i32,
    /// The worker.
    pub worker: String,
    /// When it took the run, in milliseconds since the Unix epoch.
    pub taken_at_ms: i64,
    /// When its part ended, if it could say so (a worker that died, or lost the database,
    /// could not).
    pub ended_at_ms: Option<i64>,
    /// How: `completed`, `failed`, `taken over`, `cancelled`.
    pub ending: Option<String>,
    /// Its wide event, if its run loop ended before it let go.
    pub event: Option<serde_json::Value>,
}

/// Every run, oldest first.
///
/// # Errors
///
/// [`ErrorKind::Database`].
pub async fn runs(store: &PgStore) -> Result<Vec<RunRow>, Error> {
    type Row = (
        String,
        String,
        String,
        Option<String>,
        i32,
        Option<serde_json::Value>,
        Option<String>,
        Option<serde_json::Value>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT run_id, task, status, worker, pickups, result, error, event
         FROM outlive_runs ORDER BY submitted_at, run_id",
    )
    .fetch_all(store.pool())
    .await
    .map_err(|e| db("listing runs", e))?;
    type PickupRow = (
        String,
        i32,
        String,
        i64,
        Option<i64>,
        Option<String>,
        Option<serde_json::Value>,
    );
    let pickups: Vec<PickupRow> = sqlx::query_as(
        "SELECT run_id, pickup, worker, (EXTRACT(EPOCH FROM taken_at) * 1000)::bigint,
                (EXTRACT(EPOCH FROM ended_at) * 1000)::bigint, ending, event
         FROM outlive_pickups ORDER BY run_id, pickup",
    )
    .fetch_all(store.pool())
    .await
    .map_err(|e| db("listing runs", e))?;
    let mut history: BTreeMap<String, Vec<Pickup>> = BTreeMap::new();
    for (run_id, pickup, worker, taken_at_ms, ended_at_ms, ending, event) in pickups {
        history.entry(run_id).or_default().push(Pickup {
            pickup,
            worker,
            taken_at_ms,
            ended_at_ms,
            ending,
            event,
        });
    }
    rows.into_iter()
        .map(
            |(run_id, task, status, worker, pickups, result, error, event)| {
                let status = status.parse().map_err(|e: String| {
                    Error::with(
                        ErrorKind::Database {
                            what: "listing runs",
                        },
                        e,
                    )
                })?;
                let history = history.remove(&run_id).unwrap_or_default();
                Ok(RunRow {
                    entries: event.as_ref().and_then(|e| e["attempts"].as_i64()),
                    run_id,
                    task,
                    status,
                    worker,
                    pickups,
                    result,
                    error,
                    event,
                    history,
                })
            },
        )
        .collect()
}

/// How workers share the queue. Every worker on a queue must use the same heartbeat and
/// missed-heartbeat count: each judges the others by its own.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// A worker tells the database it is alive this often.
    pub heartbeat: Duration,
    /// After this many heartbeats missed, its runs are given to another worker: the takeover
    /// delay is `heartbeat × missed_heartbeats`. A worker that could not renew its hold on a
    /// run for `heartbeat × (missed_heartbeats − 1)` stops the run's task (the self-stop
    /// deadline), and has half a heartbeat to end it; so at least 2.
    pub missed_heartbeats: usize,
    /// Runs at once in this worker.
    pub concurrency: usize,
    /// A run taken more often than this without finishing — each worker that had it stopped
    /// under it (killed, crashed, cut off from the database) — is marked failed instead of
    /// run again. A run that brings its worker down every time would otherwise be taken
    /// again after every heartbeat timeout, a browser session each time: apalis gives
    /// orphaned runs back to the queue whatever their attempt count.
    pub max_pickups: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            heartbeat: Duration::from_secs(5),
            missed_heartbeats: 3,
            concurrency: 2,
            max_pickups: 5,
        }
    }
}

impl WorkerConfig {
    /// Refuses settings under which a worker could not take runs, or would fail every one.
    fn check(&self) -> Result<(), Error> {
        let invalid =
            |option, message| Err(Error::new(ErrorKind::InvalidOption { option, message }));
        if self.heartbeat.is_zero() {
            return invalid("heartbeat", "must be longer than 0");
        }
        if self.missed_heartbeats < 2 {
            return invalid(
                "missed_heartbeats",
                "must be at least 2 (a worker stops a run it cannot renew a heartbeat before \
                 another may take it)",
            );
        }
        if self.concurrency == 0 {
            return invalid("concurrency", "must be at least 1");
        }
        if self.max_pickups == 0 {
            return invalid(
                "max_pickups",
                "must be at least 1 (every run would be failed)",
            );
        }
        Ok(())
    }
}

/// The queue as a worker takes runs from it.
fn worker_queue(store: &PgStore, config: &WorkerConfig) -> PostgresStorage<RunJob> {
    PostgresStorage::new(store.pool()).with_config(
        Config::default()
            .queue(QUEUE)
            .heartbeat_interval(config.heartbeat)
            .missed_heartbeats(config.missed_heartbeats)
            // Claim only what it runs: a claimed run waits for this worker.
            .batch_size(1),
    )
}

/// A worker: takes runs from the queue and runs each through outlive, durable (checkpoints
/// sealed and saved in PostgreSQL; a run another worker started resumes from its newest).
pub struct Worker {
    store: PgStore,
    sealer: Sealer,
    tasks: Tasks,
    provider: Arc<dyn Provider>,
    options: Options,
    config: WorkerConfig,
    name: String,
}

impl Worker {
    /// A worker for `tasks`, launching browsers through `provider` (wrap it in a
    /// [`SessionLimit`] to cap sessions across workers), sealing with `sealer`, each run with
    /// `options` (its durability is set by the worker).
    pub fn new(
        store: PgStore,
        sealer: Sealer,
        tasks: Tasks,
        provider: Arc<dyn Provider>,
        options: Options,
    ) -> Self {
        Worker {
            store,
            sealer,
            tasks,
            provider,
            options,
            config: WorkerConfig::default(),
            // Unique per process: a restarted worker must not inherit a dead one's name (its
            // runs would stay locked to that name while the new one heartbeats).
            name: format!(
                "outlive-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ),
        }
    }

    /// How it shares the queue; see [`WorkerConfig`].
    #[must_use]
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Its name in `apalis.workers` and in [`RunRow::worker`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes runs until `shutdown` resolves, then lets the runs in hand finish, up to 30 s. A
    /// run cut off there is taken by another worker after the heartbeats lapse.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`] for a [`WorkerConfig`] with a zero field (nothing is
    /// started). [`ErrorKind::Database`] when the queue cannot be used.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        self.config.check()?;
        let Worker {
            store,
            sealer,
            tasks,
            provider,
            options,
            config,
            name,
        } = self;
        let shared = Arc::new(Shared {
            store: store.clone(),
            sealer,
            tasks,
            provider,
            options,
            max_pickups: config.max_pickups,
            timing: lease::Timing::new(config.heartbeat, config.missed_heartbeats as u32),
        });
        declare(&store, &shared.tasks).await?;
        tracing::info!(worker = %name, heartbeat = ?config.heartbeat, missed = config.missed_heartbeats, "worker started");
        let _requeue = AbortOnDrop::new(
            tokio::spawn(requeue_lapsed(store.clone(), shared.timing)).abort_handle(),
        );
        Monitor::new()
            .shutdown_timeout(Duration::from_secs(30))
            // apalis ends a worker whose connection the server reset (a restart): it would
            // take no more runs, and the runs it had would be dropped with it.
            .should_restart(|_, e| {
                tracing::warn!(error = %e, "the worker's queue failed: restarting it");
                true
            })
            .register(move |_| {
                WorkerBuilder::new(name.clone())
                    .backend(worker_queue(&store, &config).with_pubsub())
                    .data(shared.clone())
                    .concurrency(config.concurrency)
                    .build(take)
            })
            .run_with_signal(async move {
                shutdown.await;
                Ok(())
            })
            .await
            .map_err(|e| db("running the worker", e))
    }
}

struct Shared {
    store: PgStore,
    sealer: Sealer,
    tasks: Tasks,
    provider: Arc<dyn Provider>,
    options: Options,
    max_pickups: u32,
    timing: lease::Timing,
}

/// Every heartbeat, gives back to the queue the job of every run `running` under a lease that
/// lapsed a whole takeover delay ago. No worker holds it: a holder renews, and one that lost
/// its hold claims it again within that time. Yet apalis may never give it back: its worker's
/// heartbeats go on when only the run was dropped (apalis restarting that worker).
async fn requeue_lapsed(store: PgStore, timing: lease::Timing) {
    loop {
        tokio::time::sleep(timing.heartbeat).await;
        let requeued = sqlx::query(
            "UPDATE apalis.jobs j SET status = 'Pending', lock_by = NULL, lock_at = NULL,
                done_at = NULL, max_attempts = GREATEST(j.max_attempts, j.attempts + 1)
             FROM outlive_runs r
             WHERE j.id = r.run_id AND j.job_type = $2 AND r.status = 'running'
               AND r.lease_until < now() - $1
               AND NOT (j.status = 'Pending' AND j.lock_by IS NULL)",
        )
        .bind(timing.takeover)
        .bind(QUEUE)
        .execute(store.pool())
        .await;
        match requeued {
            Ok(r) if r.rows_affected() > 0 => {
                tracing::warn!(
                    runs = r.rows_affected(),
                    "runs held by no worker given back to the queue"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "could not look for runs held by no worker"),
        }
    }
}

/// Records the names of `tasks` in `outlive_tasks`, for [`submit`] to accept.
async fn declare(store: &PgStore, tasks: &Tasks) -> Result<(), Error> {
    let names: Vec<String> = tasks.names().map(str::to_owned).collect();
    sqlx::query(
        "INSERT INTO outlive_tasks (name) SELECT unnest($1::text[])
         ON CONFLICT (name) DO UPDATE SET declared_at = now()",
    )
    .bind(&names)
    .execute(store.pool())
    .await
    .map_err(|e| db("declaring the worker's tasks", e))?;
    Ok(())
}

/// One run, taken from the queue: claimed, run while held. A hold lost because the lease
/// could not be renewed (the database was unreachable) is claimed again once it can be. This
/// worker claims it, or another that took the run meanwhile. So a database outage never
/// leaves a run `running` with no worker: apalis would not give it back (this worker's
/// heartbeats resume).
async fn take(
    job: RunJob,
    id: TaskId,
    shared: Data<Arc<Shared>>,
    worker: WorkerContext,
) -> Result<serde_json::Value, BoxDynError> {
    let run_id = id.to_string();
    loop {
        let claimed = persist("claiming the run", || {
            Lease::claim(shared.store.pool(), &run_id, worker.name(), shared.timing)
        })
        .await?;
        let lease = match claimed {
            Claim::Held(lease) => lease,
            Claim::Over(status) => {
                tracing::info!(run_id, status, "not run: over, or held by a live worker");
                return Ok(serde_json::json!({ "notRun": status }));
            }
        };
        match hold(&job, lease, &shared).await? {
            Held::Finished(held) => {
                let (finished, lease) = *held;
                let event = finished.event.as_ref().map(WideEvent::to_json);
                persist("recording the run's end", || {
                    finish(
                        &lease,
                        shared.store.pool(),
                        &finished.result,
                        event.as_deref(),
                    )
                })
                .await?;
                return match finished.result {
                    Ok(v) => Ok(v),
                    Err(e) => Err(AbortError::new(e).into()),
                };
            }
            Held::Lost(Lost::Cancelled) => return Ok(serde_json::json!({ "cancelled": true })),
            Held::Lost(Lost::TakenOver) => {
                return Err(AbortError::new("stopped: another worker took the run over").into());
            }
            Held::Lost(Lost::Unrenewed) => {
                tracing::warn!(run_id, "claiming the run again once the database answers");
            }
        }
    }
}

/// Retries `step` (with a backoff up to 5 s, for up to 10 minutes) while the database does
/// not answer: a run's claim and its end must reach the store.
async fn persist<T, Fut>(what: &'static str, step: impl FnMut() -> Fut) -> Result<T, sqlx::Error>
where
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .with_total_delay(Some(Duration::from_secs(600)))
        .without_max_times()
        .with_jitter();
    step.retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e| {
            matches!(
                e,
                sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
            ) || matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| c.starts_with("57") || c.starts_with("08")))
        })
        .notify(|e, after| tracing::warn!(what, error = %e, ?after, "PostgreSQL did not answer; again"))
        .await
}

/// Runs the task of `job` under `lease`: refused when taken too often or unknown here, else
/// durable from the run's newest checkpoint, until it finishes or the hold is lost.
async fn hold(job: &RunJob, mut lease: Lease, shared: &Shared) -> Result<Held, BoxDynError> {
    let run_id = lease.run_id().to_owned();
    let pool = shared.store.pool();
    let pickups = lease.pickup();
    if pickups > 1 {
        // First of all: what a dead predecessor held is released before anything launches.
        lease.takeover = held::release_inherited(pool, &run_id, shared.provider.as_ref()).await?;
    }
    if i64::from(pickups) > i64::from(shared.max_pickups) {
        let error = format!(
            "taken {pickups} times without finishing (max_pickups is {}): every worker that had \
             this run stopped under it; not run again. Look at why those workers ended (their \
             logs), then submit it again",
            shared.max_pickups
        );
        tracing::warn!(run_id, pickups, "a run taken too often is failed, not run");
        finish(&lease, pool, &Err(error.clone()), None).await?;
        return Err(AbortError::new(error).into());
    }
    let Some(task) = shared.tasks.by_name.get(&job.task) else {
        let error = format!("this worker has no task named {:?}", job.task);
        finish(&lease, pool, &Err(error.clone()), None).await?;
        return Err(AbortError::new(error).into());
    };
    let mut durable = Durable::new(
        run_id.clone(),
        shared.sealer.clone(),
        Arc::new(lease.store(&shared.store)),
    );
    if let Some(saved) = shared.store.load(&run_id).await? {
        tracing::info!(
            run_id,
            entries = saved.attempt,
            "taking over a run from its checkpoint"
        );
        durable = durable.resume(saved.sealed, saved.attempt);
    }
    let options = shared.options.clone().durable(durable);
    let provider: Arc<dyn Provider> = Arc::new(held::Recorded {
        inner: shared.provider.clone(),
        pool: pool.clone(),
        run_id: run_id.clone(),
        pickup: pickups,
    });
    let (stop, stopped) = watch::channel(false);
    let input = job.input.clone();
    let run: BoxFuture<'static, Finished> = match task {
        Task::Rust { run, .. } => run(input, provider, options, stopped),
        Task::Command(command) => {
            let command = command.clone();
            // Ended well within the grace: SIGTERM, then SIGKILL half-way.
            let kill_after = (shared.timing.stop_grace / 2).min(Duration::from_secs(5));
            Box::pin(async move {
                command::run(&command, &input, provider, options, kill_after, stopped).await
            })
        }
    };
    let holding = Holding {
        lease,
        run,
        stop,
        grace: shared.timing.stop_grace,
    };
    Ok(holding.run().await)
}

/// A run's task while this worker holds the run: it runs until it finishes or the hold is
/// lost, and is stopped then.
struct Holding {
    lease: Lease,
    run: BoxFuture<'static, Finished>,
    stop: watch::Sender<bool>,
    grace: Duration,
}

/// How a [`Holding`] ended.
enum Held {
    /// The task finished while held; the lease, to record its end with.
    Finished(Box<(Finished, Lease)>),
    /// The hold was lost, and the task stopped.
    Lost(Lost),
}

impl Holding {
    /// Runs the task, renewing the lease; stops it when the lease is lost.
    async fn run(mut self) -> Held {
        // Renewed on a task of its own: a run that keeps its task busy (sealing a large
        // checkpoint, a slow drop) must not make the lease look unrenewable.
        let mut renewing = self.lease.clone();
        let mut renewal = tokio::spawn(async move { renewing.lost().await });
        let _renewal = AbortOnDrop::new(renewal.abort_handle());
        let lost = tokio::select! {
            finished = &mut self.run => return Held::Finished(Box::new((finished, self.lease))),
            lost = &mut renewal => lost.unwrap_or(Lost::Unrenewed),
        };
        self.stop_task(lost).await;
        Held::Lost(lost)
    }

    /// Tells the task to stop, gives it the grace to end its command and release its browser,
    /// then drops it (which ends both).
    async fn stop_task(self, lost: Lost) {
        tracing::warn!(
            run_id = self.lease.run_id(),
            pickup = self.lease.pickup(),
            ?lost,
            "this worker no longer holds the run: stopping its task"
        );
        self.stop.send_replace(true);
        let event = match tokio::time::timeout(self.grace, self.run).await {
            Ok(finished) => finished.event.as_ref().map(WideEvent::to_json),
            Err(_) => {
                tracing::warn!(
                    run_id = self.lease.run_id(),
                    "the task did not stop within the grace: dropped"
                );
                None
            }
        };
        // The task is gone: only now may this take time.
        self.lease.record_lost(lost, event).await;
    }
}

/// Records the run's end, if this worker still holds it.
async fn finish(
    lease: &Lease,
    pool: &PgPool,
    result: &Result<serde_json::Value, String>,
    event: Option<&str>,
) -> Result<(), sqlx::Error> {
    let (status, value, error) = match result {
        Ok(v) => ("completed", Some(v), None),
        Err(e) => ("failed", None, Some(e.as_str())),
    };
    let recorded = sqlx::query(
        "WITH ended AS (
            UPDATE outlive_runs SET status = $2, result = $3, error = $4, event = $5::jsonb,
            lease_until = NULL, updated_at = now()
            WHERE run_id = $1 AND pickups = $6 AND status = 'running'
            RETURNING run_id
         )
         UPDATE outlive_pickups p SET ended_at = now(), ending = $2, event = $5::jsonb
         FROM ended WHERE p.run_id = ended.run_id AND p.pickup = $6",
    )
    .bind(lease.run_id())
    .bind(status)
    .bind(value)
    .bind(error)
    .bind(lease.takeover.into_event(event.map(str::to_owned)))
    .bind(lease.pickup())
    .execute(pool)
    .await?;
    if recorded.rows_affected() == 0 {
        tracing::warn!(
            run_id = lease.run_id(),
            "the run's end was not recorded: this worker no longer holds it"
        );
    }
    Ok(())
}

fn db(what: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::with(ErrorKind::Database { what }, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_config_with_a_zero_field_is_refused_by_name() {
        assert!(WorkerConfig::default().check().is_ok());
        type Zero = fn(&mut WorkerConfig);
        let zeroed: [(&str, Zero); 4] = [
            ("heartbeat", |c| c.heartbeat = Duration::ZERO),
            ("missed_heartbeats", |c| c.missed_heartbeats = 1),
            ("concurrency", |c| c.concurrency = 0),
            ("max_pickups", |c| c.max_pickups = 0),
        ];
        for (field, zero) in zeroed {
            let mut config = WorkerConfig::default();
            zero(&mut config);
            let e = config.check().expect_err(field);
            assert!(
                matches!(e.kind(), ErrorKind::InvalidOption { option, .. } if *option == field),
                "{field}: {e}"
            );
        }
    }
}
