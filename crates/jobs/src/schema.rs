//! The tables durable runs keep beside apalis' own, and [`setup`], which creates them all.

use apalis_postgres::PostgresStorage;

use crate::error::{Error, ErrorKind, db};
use crate::{PgStore, held, history, trace};

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

/// For listing the newest runs ([`recent_runs`](crate::recent_runs)) without reading all.
const RUNS_SUBMITTED: &str =
    "CREATE INDEX IF NOT EXISTS outlive_runs_submitted ON outlive_runs (submitted_at)";

const TASKS_TABLE: &str = "CREATE TABLE IF NOT EXISTS outlive_tasks (
    name text PRIMARY KEY,
    declared_at timestamptz NOT NULL DEFAULT now()
)";

/// Creates what durable runs need in the database, if missing: apalis' schema (its own
/// migrations), `outlive_runs`, `outlive_run_events` and `outlive_checkpoints`. Safe to run from every worker.
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

/// Checks, creating nothing (a read-only role may call it), that the tables a reader of runs
/// and their histories needs are there: `outlive_runs` and `outlive_run_events`.
///
/// # Errors
///
/// [`ErrorKind::NotSetUp`] naming the tables missing; [`ErrorKind::Database`].
pub async fn check_setup(store: &PgStore) -> Result<(), Error> {
    let missing: Vec<String> = sqlx::query_scalar(
        "SELECT t FROM unnest(ARRAY['outlive_runs', 'outlive_run_events']) AS t
         WHERE to_regclass(t) IS NULL",
    )
    .fetch_all(store.pool())
    .await
    .map_err(|e| db("looking for the runs tables", e))?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(ErrorKind::NotSetUp { missing }))
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
        RUNS_SUBMITTED,
        held::HELD_COLUMN,
        trace::TRACEPARENT_COLUMN,
        PICKUPS_TABLE,
        TASKS_TABLE,
    ] {
        sqlx::query(table)
            .execute(store.pool())
            .await
            .map_err(|e| db("creating the runs tables", e))?;
    }
    sqlx::query(history::EVENTS_TABLE)
        .execute(store.pool())
        .await
        .map_err(|e| db("creating the run history table", e))?;
    store.setup().await
}
