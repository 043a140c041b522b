//! A durable run's history in `outlive_run_events`: [`history`] reads it; a [`Writer`] adds
//! a pickup's events as they happen, off the run's task. A failed write is logged, never
//! fails the run. Events hold kinds, sizes and durations, never content.

use std::time::Duration;

use outlive::history::{Event, Step};
use serde::Serialize;
use sqlx::PgPool;
use tokio::sync::mpsc;

use crate::PgStore;
use crate::error::{Error, ErrorKind, db};

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
         FROM outlive_run_events WHERE run_id = $1 ORDER BY seq",
    )
    .bind(run_id)
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

/// A pickup's event writer: a task that writes what [`Writer::sink`] hands it, in order.
/// [`Writer::close`] writes what is queued; dropping it ends the task at once.
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

    /// A sink for [`outlive::history::recorder`]: queues, never waits.
    pub(crate) fn sink(&self) -> impl Fn(Event) + Send + Sync + 'static {
        let tx = self.tx.clone();
        move |event| {
            if tx.try_send(event).is_err() {
                tracing::warn!("a run's history event was dropped: the database is behind");
            }
        }
    }

    /// Writes what is queued (up to 5 s), then ends. Every sink must be dropped by now.
    pub(crate) async fn close(self) {
        let Writer { tx, task } = self;
        drop(tx);
        if tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .is_err()
        {
            tracing::warn!("a run's history was not all written within 5 s");
        }
    }
}
