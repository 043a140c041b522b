//! Exactly one worker per run: a run is held under a lease in `outlive_runs`, and the pickup
//! number is its fencing token.
//!
//! * A worker claims a run only if it is queued or its lease has lapsed.
//! * The holder renews the lease every heartbeat. It stops the task at the *self-stop*
//!   deadline (`heartbeat × (missed − 1)`) without a renewal, or when a renewal finds the run
//!   taken over or cancelled. With `heartbeat / 2` more to end, it is gone before the lapse.
//! * Every write of the holder (checkpoints through [`FencedStore`], the run's end) names its
//!   pickup in the same statement: a worker that no longer holds the run writes nothing.
//! * The rules and their measurements: `docs/durable.md`, "Exactly one worker per run".

use std::time::Duration;

use outlive::CheckpointStore;
use sqlx::PgPool;
use tokio::time::Instant;

use crate::PgStore;
use crate::store::Saving;

/// The lease timeline, from the heartbeat and the missed-heartbeat count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// How often the holder renews.
    pub(crate) heartbeat: Duration,
    /// How long a lease lasts after its renewal: another worker may claim the run then.
    pub(crate) takeover: Duration,
    /// Unrenewed this long, the holder stops the task.
    pub(crate) self_stop: Duration,
    /// What the task has to end once told to stop; then it is dropped.
    pub(crate) stop_grace: Duration,
}

impl Timing {
    /// `missed` must be at least 2 (checked by the worker's config).
    pub(crate) fn new(heartbeat: Duration, missed: u32) -> Timing {
        Timing {
            heartbeat,
            takeover: heartbeat * missed,
            self_stop: heartbeat * (missed - 1),
            stop_grace: heartbeat / 2,
        }
    }

    /// How long a pickup's last history events may take to be written: well under a
    /// heartbeat (at most 1 s), so a slow database never holds a run up.
    pub(crate) fn flush(&self) -> Duration {
        (self.heartbeat / 2).min(Duration::from_secs(1))
    }
}

/// Why a worker no longer holds a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// Its lease could not be renewed within the self-stop deadline (the database is
    /// unreachable, or too slow).
    Unrenewed,
    /// Another worker claimed it (this one's lease had lapsed).
    TakenOver,
    /// `outlive cancel`.
    Cancelled,
}

/// What a claim found.
pub(crate) enum Claim {
    /// This worker holds the run now.
    Held(Lease),
    /// The run is over (its status: completed, failed, cancelled): nothing to run.
    Over(String),
}

/// A run this worker holds.
#[derive(Clone)]
pub(crate) struct Lease {
    pool: PgPool,
    run_id: String,
    pickup: i32,
    timing: Timing,
    /// When the last renewal (or the claim) that succeeded was sent.
    renewed: Instant,
    /// What this pickup released of its predecessors' sessions.
    pub(crate) takeover: crate::held::Takeover,
    /// At the run's first pickup: how long it waited in the queue.
    pub(crate) queued_for: Option<Duration>,
    /// The run's trace context (W3C `traceparent`), when a pickup before kept one.
    pub(crate) traceparent: Option<String>,
}

impl Lease {
    /// Claims `run_id` for `worker`, waiting for another worker's lease to lapse; answers
    /// [`Claim::Over`] when the run is over, or when that lease is renewed meanwhile (its
    /// holder is alive).
    pub(crate) async fn claim(
        pool: &PgPool,
        run_id: &str,
        worker: &str,
        timing: Timing,
    ) -> Result<Claim, sqlx::Error> {
        let mut seen: Option<f64> = None;
        loop {
            let sent = Instant::now();
            // With the pickup, the time since the run's submission (its queue wait, at the
            // first pickup), and the run's trace context.
            let claimed: Option<(i32, f64, Option<String>)> = sqlx::query_as(
                "WITH claimed AS (
                    UPDATE outlive_runs SET status = 'running', worker = $2,
                    pickups = pickups + 1, lease_until = now() + $3, updated_at = now()
                    WHERE run_id = $1 AND (status = 'queued'
                       OR (status = 'running' AND (lease_until IS NULL OR lease_until < now())))
                    RETURNING run_id, pickups, submitted_at, traceparent
                 ), picked AS (
                    INSERT INTO outlive_pickups (run_id, pickup, worker)
                    SELECT run_id, pickups, $2 FROM claimed
                    RETURNING pickup
                 )
                 SELECT picked.pickup,
                        GREATEST(EXTRACT(EPOCH FROM now() - claimed.submitted_at), 0)::float8,
                        claimed.traceparent
                 FROM picked, claimed",
            )
            .bind(run_id)
            .bind(worker)
            .bind(timing.takeover)
            .fetch_optional(pool)
            .await?;
            if let Some((pickup, since_submitted, traceparent)) = claimed {
                return Ok(Claim::Held(Lease {
                    pool: pool.clone(),
                    run_id: run_id.to_owned(),
                    pickup,
                    timing,
                    renewed: sent,
                    takeover: Default::default(),
                    queued_for: (pickup == 1)
                        .then_some(since_submitted)
                        .and_then(|s| Duration::try_from_secs_f64(s).ok()),
                    traceparent,
                }));
            }
            let (status, until, left): (String, Option<f64>, Option<f64>) = sqlx::query_as(
                "SELECT status, EXTRACT(EPOCH FROM lease_until)::float8,
                        EXTRACT(EPOCH FROM lease_until - now())::float8
                 FROM outlive_runs WHERE run_id = $1",
            )
            .bind(run_id)
            .fetch_one(pool)
            .await?;
            if status != "running" {
                return Ok(Claim::Over(status));
            }
            // A lease that moved on while this worker waited is renewed by a live holder: the
            // run is in its hands (apalis gave it back for nothing, or this worker's own hold
            // lapsed and another took it).
            if seen.is_some_and(|seen| until.is_some_and(|until| until > seen)) {
                return Ok(Claim::Over(status));
            }
            seen = until.or(Some(f64::MIN));
            // Still another worker's: try again the moment its lease lapses.
            let left = Duration::from_secs_f64(left.unwrap_or(0.0).max(0.0));
            tracing::info!(
                run_id,
                ?left,
                "the run is still under another worker's lease"
            );
            tokio::time::sleep(left + Duration::from_millis(20)).await;
        }
    }

    /// The pickup number: the fencing token of this worker's writes.
    pub(crate) fn pickup(&self) -> i32 {
        self.pickup
    }

    /// The run's id.
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Renews the lease every heartbeat until the run is lost, and answers why.
    pub(crate) async fn lost(&mut self) -> Lost {
        loop {
            let deadline = self.renewed + self.timing.self_stop;
            let sent = Instant::now();
            match tokio::time::timeout_at(deadline, self.renew()).await {
                Err(_) => return Lost::Unrenewed,
                Ok(Ok(None)) => {
                    self.renewed = sent;
                }
                Ok(Ok(Some(lost))) => return lost,
                Ok(Err(e)) => {
                    tracing::warn!(run_id = self.run_id, error = %e, "the lease was not renewed");
                }
            }
            let next = (sent + self.timing.heartbeat).min(self.renewed + self.timing.self_stop);
            tokio::time::sleep_until(next).await;
            if Instant::now() >= self.renewed + self.timing.self_stop {
                return Lost::Unrenewed;
            }
        }
    }

    /// One renewal: `None` when renewed, else why the run is no longer this worker's.
    async fn renew(&self) -> Result<Option<Lost>, sqlx::Error> {
        let renewed = sqlx::query(
            "UPDATE outlive_runs SET lease_until = now() + $3
             WHERE run_id = $1 AND pickups = $2 AND status = 'running'",
        )
        .bind(&self.run_id)
        .bind(self.pickup)
        .bind(self.timing.takeover)
        .execute(&self.pool)
        .await?;
        if renewed.rows_affected() == 1 {
            return Ok(None);
        }
        let status: String =
            sqlx::query_scalar("SELECT status FROM outlive_runs WHERE run_id = $1")
                .bind(&self.run_id)
                .fetch_one(&self.pool)
                .await?;
        Ok(Some(if status == "cancelled" {
            Lost::Cancelled
        } else {
            Lost::TakenOver
        }))
    }

    /// Notes in this pickup's row how it ended, when the database can still be told (taken
    /// over, cancelled); best effort, within a heartbeat.
    pub(crate) async fn record_lost(&self, lost: Lost, event: Option<String>) {
        let ending = match lost {
            Lost::Unrenewed => return,
            Lost::TakenOver => "taken over",
            Lost::Cancelled => "cancelled",
        };
        let recorded = sqlx::query(
            "UPDATE outlive_pickups SET ended_at = now(), ending = $3, event = $4::jsonb
             WHERE run_id = $1 AND pickup = $2",
        )
        .bind(&self.run_id)
        .bind(self.pickup)
        .bind(ending)
        .bind(self.takeover.into_event(event))
        .execute(&self.pool);
        if !matches!(
            tokio::time::timeout(self.timing.heartbeat, recorded).await,
            Ok(Ok(_))
        ) {
            tracing::debug!(run_id = self.run_id, "the pickup's end was not recorded");
        }
    }

    /// A checkpoint store whose saves count only while this worker holds the run.
    pub(crate) fn store(&self, store: &PgStore) -> FencedStore {
        FencedStore::new(store.clone(), self.pickup)
    }
}

/// A [`PgStore`] for the worker holding pickup `pickup` of a run: a save is refused, in the
/// statement that writes it, unless that pickup still holds the run (running, under an
/// unexpired lease). A checkpoint a cut-off worker sent before it stopped, delivered late,
/// cannot overwrite the newer one of the worker that took the run over.
#[derive(Clone, Debug)]
pub struct FencedStore {
    store: PgStore,
    pickup: i32,
}

impl FencedStore {
    /// Saves of the worker holding pickup `pickup` (the `pickups` count its claim set).
    pub fn new(store: PgStore, pickup: i32) -> FencedStore {
        FencedStore { store, pickup }
    }
}

impl CheckpointStore for FencedStore {
    fn save<'a>(&'a self, run_id: &'a str, attempt: u32, sealed: Vec<u8>) -> Saving<'a> {
        Box::pin(async move {
            // `FOR SHARE` waits for a claim in flight and checks the row it leaves.
            let saved = sqlx::query(
                "WITH holder AS (
                    SELECT run_id FROM outlive_runs
                    WHERE run_id = $1 AND pickups = $4 AND status = 'running'
                      AND lease_until > now()
                    FOR SHARE
                 )
                 INSERT INTO outlive_checkpoints (run_id, attempt, sealed)
                 SELECT run_id, $2, $3 FROM holder
                 ON CONFLICT (run_id) DO UPDATE
                 SET attempt = excluded.attempt, sealed = excluded.sealed, saved_at = now()",
            )
            .bind(run_id)
            .bind(i32::try_from(attempt).unwrap_or(i32::MAX))
            .bind(sealed)
            .bind(self.pickup)
            .execute(self.store.pool())
            .await
            .map_err(crate::store::save_failed)?;
            if saved.rows_affected() == 0 {
                return Err(outlive::Error::provider(
                    outlive::ProviderFailure::Io,
                    "the checkpoint was refused: this worker no longer holds the run (taken \
                     over, cancelled, or its lease lapsed)",
                ));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_is_gone_before_the_lease_lapses() {
        for (heartbeat, missed) in [(Duration::from_secs(5), 3), (Duration::from_secs(1), 2)] {
            let t = Timing::new(heartbeat, missed);
            assert!(t.self_stop + t.stop_grace < t.takeover, "{t:?}");
            assert!(t.heartbeat <= t.self_stop, "one renewal may fail: {t:?}");
        }
    }
}
