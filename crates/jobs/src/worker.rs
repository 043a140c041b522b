//! [`Worker`]: takes runs from the queue and runs each through outlive, durable, while it holds
//! the run's lease.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use apalis::prelude::{
    AbortError, BoxDynError, Data, Monitor, TaskId, WorkerBuilder, WorkerBuilderExt, WorkerContext,
};
use apalis_postgres::{Config, PostgresStorage};
use backon::{ExponentialBuilder, Retryable};
use outlive::{BoxFuture, Durable, Options, Provider, Sealer, WideEvent};
use sqlx::PgPool;
use tokio::sync::watch;
use tokio_util::task::AbortOnDrop;
use tracing::Instrument;

use crate::error::{Error, ErrorKind, db};
use crate::finish::Finished;
use crate::lease::{self, Claim, Lease, Lost};
use crate::metrics::{InState, RunState, WorkerMetrics};
use crate::queue::{QUEUE, RunJob};
use crate::task::Task;
use crate::{PgStore, Tasks, command, held, history, trace};
use outlive::history::{Event, Step};

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
    metrics: Option<WorkerMetrics>,
}

impl Worker {
    /// A worker for `tasks`, launching browsers through `provider` (wrap it in a
    /// [`SessionLimit`](crate::SessionLimit) to cap sessions across workers), sealing with
    /// `sealer`. Each run has `options`: the worker sets its durability, and its milestones
    /// also go to the run's history ([`history`](crate::history())).
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
            metrics: None,
        }
    }

    /// Where the worker records its runs' states, outcomes and queue waits; see
    /// [`WorkerMetrics`]. The runs' own deaths and sessions go where their [`Options`] say.
    ///
    /// # Default
    ///
    /// None: nothing is recorded.
    #[must_use]
    pub fn metrics(mut self, metrics: WorkerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// How it shares the queue; see [`WorkerConfig`].
    #[must_use]
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Its name in `apalis.workers` and in [`RunRow::worker`](crate::RunRow::worker).
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
            metrics,
        } = self;
        let shared = Arc::new(Shared {
            store: store.clone(),
            sealer,
            tasks,
            provider,
            options,
            max_pickups: config.max_pickups,
            timing: lease::Timing::new(config.heartbeat, config.missed_heartbeats as u32),
            metrics,
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
    metrics: Option<WorkerMetrics>,
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

/// Records the names of `tasks` in `outlive_tasks`, for [`submit`](crate::submit) to accept.
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
    let metrics = shared.metrics.as_ref();
    let mut state = metrics.map(|m| m.enter(RunState::Claiming));
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
        if let (Some(m), Some(waited)) = (metrics, lease.queued_for) {
            m.waited(waited);
        }
        let (held, writer) = traced_hold(&job, lease, &shared, worker.name(), &mut state).await?;
        let outcome = held.outcome();
        if let (Some(m), Some(outcome)) = (metrics, outcome) {
            m.finished(outcome);
        }
        let flush = shared.timing.flush();
        match held {
            Held::Finished(held) => {
                let (finished, lease) = *held;
                let event = finished.event.as_ref().map(WideEvent::to_json);
                let saved = persist("recording the run's end", || {
                    finish(
                        &lease,
                        shared.store.pool(),
                        &finished.result,
                        event.as_deref(),
                    )
                })
                .await?;
                // The run's end is saved (no lease to keep now): only then its history's.
                if let (true, Some(outcome)) = (saved, outcome) {
                    writer.send(Event::now(Step::Finished {
                        outcome: outcome.to_owned(),
                    }));
                }
                writer.close(flush).await;
                return match finished.result {
                    Ok(v) => Ok(v),
                    Err(e) => Err(AbortError::new(e).into()),
                };
            }
            Held::Lost(lost) => {
                // Not held: what is queued is written off this task.
                writer.close_detached(flush);
                match lost {
                    Lost::Cancelled => return Ok(serde_json::json!({ "cancelled": true })),
                    Lost::TakenOver => {
                        return Err(
                            AbortError::new("stopped: another worker took the run over").into()
                        );
                    }
                    Lost::Unrenewed => {
                        tracing::warn!(run_id, "claiming the run again once the database answers");
                        if let Some(s) = &mut state {
                            s.go(RunState::Claiming);
                        }
                    }
                }
            }
        }
    }
}

/// [`hold`] in the pickup's span (a child of the run's trace), which records how it ended.
async fn traced_hold(
    job: &RunJob,
    lease: Lease,
    shared: &Shared,
    worker: &str,
    state: &mut Option<InState>,
) -> Result<(Held, history::Writer), BoxDynError> {
    let pickup = trace::Pickup {
        run_id: lease.run_id(),
        task: &job.task,
        pickup: lease.pickup(),
        worker,
        traceparent: lease.traceparent.as_deref(),
    };
    let limit = shared.timing.heartbeat / 2;
    let span = trace::pickup_span(shared.store.pool(), &pickup, limit).await;
    let held = hold(job, lease, shared, worker, state)
        .instrument(span.clone())
        .await;
    let outcome = match &held {
        Ok((held, _)) => held.outcome().unwrap_or("unrenewed"),
        Err(_) => "error",
    };
    span.record("ended", outcome);
    if matches!(outcome, "error" | "failed" | "gave_up") {
        span.record("otel.status_code", "ERROR");
    }
    held
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
/// durable from the run's newest checkpoint, until it finishes or the hold is lost. Its
/// history goes to the writer answered (never waited on here): the caller closes it, once
/// the run's end is saved.
async fn hold(
    job: &RunJob,
    mut lease: Lease,
    shared: &Shared,
    worker: &str,
    state: &mut Option<InState>,
) -> Result<(Held, history::Writer), BoxDynError> {
    let run_id = lease.run_id().to_owned();
    let pool = shared.store.pool();
    let pickups = lease.pickup();
    if pickups > 1 {
        // First of all: what a dead predecessor held is released before anything launches.
        lease.takeover = held::release_inherited(pool, &run_id, shared.provider.as_ref()).await?;
    }
    let place = history::Place {
        run_id,
        pickup: Some(pickups),
        worker: Some(worker.to_owned()),
    };
    let writer = history::Writer::start(pool.clone(), place);
    writer.send(Event::now(if pickups > 1 {
        Step::Takeover
    } else {
        Step::Pickup
    }));
    match run_held(job, lease, shared, &writer, state).await {
        Ok(held) => Ok((held, writer)),
        Err(e) => {
            writer.close_detached(shared.timing.flush());
            Err(e)
        }
    }
}

/// [`hold`]'s run: its milestones go to `writer`.
async fn run_held(
    job: &RunJob,
    lease: Lease,
    shared: &Shared,
    writer: &history::Writer,
    state: &mut Option<InState>,
) -> Result<Held, BoxDynError> {
    let run_id = lease.run_id().to_owned();
    let pool = shared.store.pool();
    let pickups = lease.pickup();
    if i64::from(pickups) > i64::from(shared.max_pickups) {
        let error = format!(
            "taken {pickups} times without finishing (max_pickups is {}): every worker that had \
             this run stopped under it; not run again. Look at why those workers ended (their \
             logs), then submit it again",
            shared.max_pickups
        );
        tracing::warn!(run_id, pickups, "a run taken too often is failed, not run");
        return Err(refuse(&lease, shared, writer, error).await?);
    }
    let Some(task) = shared.tasks.by_name.get(&job.task) else {
        let error = format!("this worker has no task named {:?}", job.task);
        return Err(refuse(&lease, shared, writer, error).await?);
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
    let options = shared
        .options
        .clone()
        .durable(durable)
        .also_on_milestone(outlive::history::recorder(writer.sink()));
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
    if let Some(s) = state {
        s.go(RunState::Running);
    }
    Ok(holding.run(state).await)
}

/// Fails the run with `error` (taken too often, or a task this worker does not have); its
/// history says so once that is saved. Answers the error that ends its job for good.
async fn refuse(
    lease: &Lease,
    shared: &Shared,
    writer: &history::Writer,
    error: String,
) -> Result<BoxDynError, sqlx::Error> {
    if finish(lease, shared.store.pool(), &Err(error.clone()), None).await? {
        writer.send(Event::now(Step::Finished {
            outcome: "failed".to_owned(),
        }));
    }
    if let Some(m) = &shared.metrics {
        m.finished("refused");
    }
    Ok(AbortError::new(error).into())
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

impl Held {
    /// How the run left this worker, for `outlive_runs_finished_total`; `None` when this
    /// worker claims it again.
    fn outcome(&self) -> Option<&'static str> {
        match self {
            Held::Finished(held) => Some(match (&held.0.result, &held.0.event) {
                (Ok(_), _) => "completed",
                (Err(_), Some(e)) if e.outcome == outlive::Outcome::GaveUp => "gave_up",
                (Err(_), _) => "failed",
            }),
            Held::Lost(Lost::Cancelled) => Some("cancelled"),
            Held::Lost(Lost::TakenOver) => Some("taken_over"),
            Held::Lost(Lost::Unrenewed) => None,
        }
    }
}

impl Holding {
    /// Runs the task, renewing the lease; stops it when the lease is lost (the run counted
    /// in `state` as stopping meanwhile).
    async fn run(mut self, state: &mut Option<InState>) -> Held {
        // Renewed on a task of its own: a run that keeps its task busy (sealing a large
        // checkpoint, a slow drop) must not make the lease look unrenewable.
        let mut renewing = self.lease.clone();
        let mut renewal = tokio::spawn(async move { renewing.lost().await });
        let _renewal = AbortOnDrop::new(renewal.abort_handle());
        let lost = tokio::select! {
            finished = &mut self.run => return Held::Finished(Box::new((finished, self.lease))),
            lost = &mut renewal => lost.unwrap_or(Lost::Unrenewed),
        };
        if let Some(s) = state {
            s.go(RunState::Stopping);
        }
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

/// Records the run's end, if this worker still holds it; answers whether it did.
async fn finish(
    lease: &Lease,
    pool: &PgPool,
    result: &Result<serde_json::Value, String>,
    event: Option<&str>,
) -> Result<bool, sqlx::Error> {
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
    Ok(recorded.rows_affected() > 0)
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
