//! The queue's side of a run: [`submit`] enqueues it, [`cancel`] stops it.

use apalis::prelude::TaskId;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, db};
use crate::task::check_size;
use crate::{PgStore, RunStatus, Tasks};

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

/// Enqueues a run of `task` with `input` and answers its run id. The run shows in
/// [`runs`](crate::runs()) as `queued` until a worker takes it.
///
/// `task` must be one of `tasks` (its input is then checked against it). Or it is a name a
/// worker declared on this database: in `outlive_tasks`, where a worker records its task names
/// when it starts. Such a run's input may be any JSON up to
/// [`MAX_INPUT_BYTES`](crate::MAX_INPUT_BYTES).
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
    let place = crate::history::Place {
        run_id: run_id.to_owned(),
        pickup: None,
        worker: None,
    };
    let event = outlive::history::Event::now(outlive::history::Step::Cancelled);
    crate::history::record(store.pool(), &place, &event).await;
    Ok(was)
}
