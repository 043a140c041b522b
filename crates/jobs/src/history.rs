//! A durable run's history in `outlive_run_events`: [`history`] reads it ([`history_first`]
//! its first events only), [`recent_runs`] and [`run_summary`] what it adds up to; a
//! [`Writer`] adds a pickup's events as they happen, off the run's task. A failed write is
//! logged, never fails the run. Events hold kinds, sizes and durations, never content.

use std::time::Duration;

use outlive::history::{Event, Step};
use serde::Serialize;
use sqlx::PgPool;
use tokio::sync::mpsc;

use crate::error::{Error, ErrorKind, db};
use crate::{PgStore, RunStatus};

/// The history table: one row per event of a run.
pub(crate) const EVENTS_TABLE: &str = "CREATE TABLE IF NOT EXISTS outlive_run_events (
    run_id text NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    at timestamptz NOT NULL,
    pickup integer,
    worker text,
    kind text NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
)";

/// One event of a run, as [`history`] answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent {
    /// The run.
    pub run_id: String,
    /// Its order among all events (increasing, not dense).
    pub seq: i64,
    /// When, in milliseconds since the Unix epoch (the writing worker's clock).
    pub at_ms: i64,
    /// The pickup it happened under (none for a cancel).
    pub pickup: Option<i32>,
    /// The worker it happened in.
    pub worker: Option<String>,
    /// What happened.
    #[serde(flatten)]
    pub step: Step,
}

/// Every event of run `run_id`, oldest first.
///
/// # Errors
///
/// [`ErrorKind::NoSuchRun`] when no run has this id; [`ErrorKind::Database`].
pub async fn history(store: &PgStore, run_id: &str) -> Result<Vec<RunEvent>, Error> {
    read(store, run_id, None).await
}

/// The first `max` events of run `run_id`, oldest first, and whether it has more (left out).
///
/// # Errors
///
/// As [`history`].
pub async fn history_first(
    store: &PgStore,
    run_id: &str,
    max: u32,
) -> Result<(Vec<RunEvent>, bool), Error> {
    let mut events = read(store, run_id, Some(i64::from(max) + 1)).await?;
    let more = events.len() > max as usize;
    events.truncate(max as usize);
    Ok((events, more))
}

/// The events of `run_id`, oldest first, `limit` rows of them at most (those of a newer
/// version's kinds among them, skipped).
async fn read(store: &PgStore, run_id: &str, limit: Option<i64>) -> Result<Vec<RunEvent>, Error> {
    let known: Option<i32> = sqlx::query_scalar("SELECT 1 FROM outlive_runs WHERE run_id = $1")
        .bind(run_id)
        .fetch_optional(store.pool())
        .await
        .map_err(|e| db("reading a run's history", e))?;
    if known.is_none() {
        return Err(Error::new(ErrorKind::NoSuchRun {
            run_id: run_id.to_owned(),
        }));
    }
    type Row = (
        i64,
        i64,
        Option<i32>,
        Option<String>,
        String,
        serde_json::Value,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT seq, (EXTRACT(EPOCH FROM at) * 1000)::bigint, pickup, worker, kind, detail
         FROM outlive_run_events WHERE run_id = $1 ORDER BY seq LIMIT $2",
    )
    .bind(run_id)
    .bind(limit)
    .fetch_all(store.pool())
    .await
    .map_err(|e| db("reading a run's history", e))?;
    let mut events = Vec::with_capacity(rows.len());
    for (seq, at_ms, pickup, worker, kind, detail) in rows {
        match Step::from_parts(&kind, detail) {
            Ok(step) => events.push(RunEvent {
                run_id: run_id.to_owned(),
                seq,
                at_ms,
                pickup,
                worker,
                step,
            }),
            // A kind from a newer version: skipped, not an error.
            Err(e) => tracing::debug!(kind, error = %e, "an event this version does not know"),
        }
    }
    Ok(events)
}

/// A run as a list shows it: its row, and what its events add up to (counted by the
/// database: its events are not read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// The run.
    pub run_id: String,
    /// The task's name.
    pub task: String,
    /// Where it is.
    pub status: RunStatus,
    /// The worker that took it last.
    pub worker: Option<String>,
    /// The highest attempt entered (0: none yet).
    pub attempts: i64,
    /// Browser sessions launched.
    pub sessions: i64,
    /// Its earliest event, in milliseconds since the Unix epoch (none: no event yet).
    pub first_at_ms: Option<i64>,
    /// Its latest event.
    pub last_at_ms: Option<i64>,
}

/// The query of the summaries of the runs `$runs` selects (`outlive_runs` rows), newest first.
macro_rules! summaries {
    ($runs:literal) => {
        concat!(
            "WITH r AS (SELECT run_id, task, status, worker, submitted_at FROM outlive_runs ",
            $runs,
            ")
    SELECT r.run_id, r.task, r.status, r.worker, COALESCE(e.attempts, 0), e.sessions,
        (EXTRACT(EPOCH FROM e.first_at) * 1000)::bigint,
        (EXTRACT(EPOCH FROM e.last_at) * 1000)::bigint
    FROM r LEFT JOIN LATERAL (
        SELECT max((detail->>'attempt')::bigint) FILTER (WHERE kind = 'entered') AS attempts,
            count(*) FILTER (WHERE kind = 'launched') AS sessions,
            min(at) AS first_at, max(at) AS last_at
        FROM outlive_run_events ev WHERE ev.run_id = r.run_id
    ) e ON true
    ORDER BY r.submitted_at DESC, r.run_id DESC"
        )
    };
}

type SummaryRow = (
    String,
    String,
    String,
    Option<String>,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
);

/// The newest `max` runs (by submission), newest first.
///
/// # Errors
///
/// [`ErrorKind::Database`].
pub async fn recent_runs(store: &PgStore, max: u32) -> Result<Vec<RunSummary>, Error> {
    let rows: Vec<SummaryRow> = sqlx::query_as(summaries!(
        "ORDER BY submitted_at DESC, run_id DESC LIMIT $1"
    ))
    .bind(i64::from(max))
    .fetch_all(store.pool())
    .await
    .map_err(|e| db("listing runs", e))?;
    rows.into_iter().map(summary).collect()
}

/// Run `run_id`'s summary, if there is such a run.
///
/// # Errors
///
/// [`ErrorKind::Database`].
pub async fn run_summary(store: &PgStore, run_id: &str) -> Result<Option<RunSummary>, Error> {
    let row: Option<SummaryRow> = sqlx::query_as(summaries!("WHERE run_id = $1"))
        .bind(run_id)
        .fetch_optional(store.pool())
        .await
        .map_err(|e| db("reading a run", e))?;
    row.map(summary).transpose()
}

fn summary(row: SummaryRow) -> Result<RunSummary, Error> {
    let (run_id, task, status, worker, attempts, sessions, first_at_ms, last_at_ms) = row;
    let status = status.parse().map_err(|e: String| {
        Error::with(
            ErrorKind::Database {
                what: "reading a run",
            },
            e,
        )
    })?;
    Ok(RunSummary {
        run_id,
        task,
        status,
        worker,
        attempts,
        sessions,
        first_at_ms,
        last_at_ms,
    })
}

/// Where a pickup's events are written: the run, the pickup and its worker.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub(crate) run_id: String,
    pub(crate) pickup: Option<i32>,
    pub(crate) worker: Option<String>,
}

/// Writes `event` at `place` now; a failure is logged.
pub(crate) async fn record(pool: &PgPool, place: &Place, event: &Event) {
    let written = sqlx::query(
        "INSERT INTO outlive_run_events (run_id, at, pickup, worker, kind, detail)
         VALUES ($1, to_timestamp($2::float8 / 1000), $3, $4, $5, $6)",
    )
    .bind(&place.run_id)
    .bind(event.at_ms as f64)
    .bind(place.pickup)
    .bind(place.worker.as_deref())
    .bind(event.step.kind())
    .bind(event.step.detail())
    .execute(pool)
    .await;
    if let Err(e) = written {
        tracing::warn!(run_id = place.run_id, kind = event.step.kind(), error = %e,
            "a run's history event was not written");
    }
}

/// Events queued at most, per pickup, before new ones are dropped (and logged).
const QUEUED: usize = 256;

/// A pickup's event writer: a task that writes what [`Writer::send`] and [`Writer::sink`]
/// hand it, in order, never making the run wait. [`Writer::close`] writes what is queued,
/// within a bound; dropping it ends the task at once (what is queued is lost).
pub(crate) struct Writer {
    tx: mpsc::Sender<Event>,
    task: tokio_util::task::AbortOnDropHandle<()>,
}

impl Writer {
    /// Starts writing events of `place` through `pool`.
    pub(crate) fn start(pool: PgPool, place: Place) -> Writer {
        let (tx, mut rx) = mpsc::channel::<Event>(QUEUED);
        let task = tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                record(&pool, &place, &event).await;
            }
        });
        Writer {
            tx,
            task: tokio_util::task::AbortOnDropHandle::new(task),
        }
    }

    /// Queues `event`, never waits: dropped (and logged) when the queue is full.
    pub(crate) fn send(&self, event: Event) {
        queue(&self.tx, event);
    }

    /// A sink for [`outlive::history::recorder`]: queues, never waits.
    pub(crate) fn sink(&self) -> impl Fn(Event) + Send + Sync + 'static {
        let tx = self.tx.clone();
        move |event| queue(&tx, event)
    }

    /// Writes what is queued, for up to `within`, then ends; what is left is dropped
    /// (history is best effort). Every sink should be dropped by now.
    pub(crate) async fn close(self, within: Duration) {
        let Writer { tx, task } = self;
        drop(tx);
        if tokio::time::timeout(within, task).await.is_err() {
            tracing::warn!(
                ?within,
                "a run's history was not all written in time: the rest is dropped"
            );
        }
    }

    /// [`Writer::close`] on a task of its own: the caller does not wait.
    pub(crate) fn close_detached(self, within: Duration) {
        tokio::spawn(self.close(within));
    }
}

fn queue(tx: &mpsc::Sender<Event>, event: Event) {
    if tx.try_send(event).is_err() {
        tracing::warn!("a run's history event was dropped: the database is behind");
    }
}
