//! [`runs`]: every run with its [`RunStatus`], its result and each worker's part of it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::PgStore;
use crate::error::{Error, ErrorKind, db};

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
    /// The run id ([`submit`](crate::submit)'s answer).
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
