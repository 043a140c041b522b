//! What durability costs and how runs scale out. The bank task's checkpoints in memory are set
//! against checkpoints sealed and saved in PostgreSQL (capture + seal + save, and the bytes
//! stored). Then runs per minute through the apalis queue with one and with two `outlive worker`
//! processes. Everything in a database of its own, dropped at the end.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outlive::{BoxFuture, CheckpointStore, Durable, Milestone, Options, SealKey, Sealer};
use outlive_jobs::{self as jobs, PgStore};
use outlive_testkit::{ScratchDatabase, ScratchError};
use serde::Serialize;

use super::records::ms;
use crate::binary::outlive_binary;
use crate::error::{Error, ErrorKind};
use crate::stats::{median, percentile};
use crate::sync::lock;
use outlive_bed::bank::BankProgress;
use outlive_bed::bed::{TestBed, until_killed};

/// Checkpoints of one arm of the persistence measurement.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointArm {
    /// `memory` or `postgres`.
    pub arm: &'static str,
    /// Every kept checkpoint: `Milestone::Checkpointed::took` (for `postgres`, capture, seal
    /// and save), ms.
    pub took_ms: Vec<f64>,
    /// Median of `took_ms`.
    pub took_median_ms: f64,
    /// The save alone (`CheckpointStore::save`: one upsert), ms; empty for `memory`.
    pub save_ms: Vec<f64>,
    /// Median of `save_ms`.
    pub save_median_ms: f64,
    /// The state captured (`Milestone::Checkpointed::bytes`), median.
    pub state_bytes: usize,
    /// What the database row holds (sealed), median; 0 for `memory`.
    pub sealed_bytes: usize,
}

/// How the runs through the queue are taken: workers, runs at once each, the session limit.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shape {
    /// `outlive worker` processes.
    pub workers: u32,
    /// Runs at once per worker (`--concurrency`).
    pub concurrency: u32,
    /// Sessions at once across the workers (`--max-sessions`), if limited.
    pub max_sessions: Option<u32>,
    /// Runs submitted (all at once).
    pub runs: u32,
}

/// Runs through the queue with some workers.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Throughput {
    /// How the runs were taken.
    pub shape: Shape,
    /// From the first submit to the last run completed, ms.
    pub wall_ms: f64,
    /// `runs` per minute of `wall_ms`.
    pub runs_per_minute: f64,
    /// Per run, from its submit to the first worker taking it (`outlive_runs.submitted_at`
    /// to the first `outlive_pickups.taken_at`), ms, in submit order.
    pub queue_wait_ms: Vec<f64>,
    /// Percentiles of `queue_wait_ms` (nearest rank).
    pub queue_wait_p50_ms: f64,
    /// 95th percentile of `queue_wait_ms`.
    pub queue_wait_p95_ms: f64,
    /// Per run, from its submit to its end recorded, ms, in submit order.
    pub submit_to_done_ms: Vec<f64>,
    /// Median of `submit_to_done_ms`.
    pub submit_to_done_p50_ms: f64,
    /// 95th percentile of `submit_to_done_ms`.
    pub submit_to_done_p95_ms: f64,
    /// The most sessions the gateway held at once (a gateway of this measurement's own,
    /// allowing more than any limit asked for).
    pub peak_sessions: usize,
    /// Pickups per run beyond one (a worker lost a run): should be 0.
    pub extra_pickups: u32,
}

/// Everything `durable()` measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DurableReport {
    /// The bank task's polls per run and pause between them.
    pub polls: u32,
    /// Pause between polls, ms.
    pub poll_every_ms: u64,
    /// In memory, then in PostgreSQL.
    pub checkpoints: Vec<CheckpointArm>,
    /// With one worker, then two, then the scale case (four workers under a session limit).
    pub throughput: Vec<Throughput>,
}

/// A store that times each save and notes the sealed size.
struct Timed {
    inner: PgStore,
    saves: Mutex<Vec<(f64, usize)>>,
}

impl CheckpointStore for Timed {
    fn save<'a>(
        &'a self,
        run_id: &'a str,
        attempt: u32,
        sealed: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), outlive::Error>> {
        Box::pin(async move {
            let len = sealed.len();
            let t = Instant::now();
            let r = self.inner.save(run_id, attempt, sealed).await;
            lock(&self.saves).push((ms(t.elapsed()), len));
            r
        })
    }
}

fn median_usize(v: &[usize]) -> usize {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

async fn checkpoint_arm(
    bed: &TestBed,
    store: Option<&PgStore>,
    polls: u32,
    every: Duration,
) -> Result<CheckpointArm, Error> {
    let seen: Arc<Mutex<Vec<(f64, usize)>>> = Arc::default();
    let sink = seen.clone();
    let mut options = Options::new()
        .checkpoint_every(Duration::from_millis(500))
        .on_milestone(move |m| {
            if let Milestone::Checkpointed { took, bytes } = m {
                lock(&sink).push((ms(*took), *bytes));
            }
        });
    let timed = store.map(|s| {
        Arc::new(Timed {
            inner: s.clone(),
            saves: Mutex::default(),
        })
    });
    if let Some(timed) = &timed {
        let sealer = Sealer::new(SealKey::from_bytes(rand_key()));
        options = options.durable(Durable::new(
            format!("bench-{}", uuid::Uuid::new_v4().simple()),
            sealer,
            timed.clone(),
        ));
    }
    let mut task = bed.task(polls, every);
    task.durable_progress = true;
    let outlive::Reported { result, event } = task
        .outlive(&bed.provider(), &BankProgress::default(), options)
        .await;
    if result.is_err() {
        return Err(Error::run(event));
    }
    let seen = lock(&seen).clone();
    let took_ms: Vec<f64> = seen.iter().map(|s| s.0).collect();
    let saves = timed.map(|t| lock(&t.saves).clone()).unwrap_or_default();
    let save_ms: Vec<f64> = saves.iter().map(|s| s.0).collect();
    Ok(CheckpointArm {
        arm: if store.is_some() {
            "postgres"
        } else {
            "memory"
        },
        took_median_ms: median(&took_ms),
        took_ms,
        save_median_ms: if save_ms.is_empty() {
            0.0
        } else {
            median(&save_ms)
        },
        save_ms,
        state_bytes: median_usize(&seen.iter().map(|s| s.1).collect::<Vec<_>>()),
        sealed_bytes: median_usize(&saves.iter().map(|s| s.1).collect::<Vec<_>>()),
    })
}

fn rand_key() -> [u8; 32] {
    rand::random()
}

/// `shape.runs` runs of the bank task through `shape.workers` worker processes (this
/// executable's `worker` command) on a gateway and bank of their own; the figures from the
/// gateway and the runs' rows.
async fn throughput(base: &str, shape: Shape, input: Input) -> Result<Throughput, Error> {
    let bed = TestBed::start(until_killed(Duration::ZERO).max_sessions(GATEWAY_SESSIONS)).await?;
    let db = ScratchDatabase::create(base, "outlive_bench")
        .await
        .map_err(scratch_error)?;
    let store = PgStore::connect(db.url()).await?;
    jobs::setup(&store).await?;
    let dir = tempfile::tempdir().map_err(|e| Error::with(ErrorKind::TempDir, e))?;
    let key = dir.path().join("seal.key");
    std::fs::write(&key, hex_key())
        .map_err(|e| Error::with(ErrorKind::Write { path: key.clone() }, e))?;
    let mut children = Vec::new();
    for _ in 0..shape.workers {
        children.push(spawn_worker(&bed, db.url(), &key, shape)?);
    }
    wait_for_workers(&store, shape.workers).await;
    let tasks = outlive_bed::bank::tasks(None);
    let input = serde_json::json!({
        "bank_url": bed.bank().base_url(),
        "polls": input.polls,
        "poll_every_ms": input.poll_every_ms,
    });
    let started = Instant::now();
    for _ in 0..shape.runs {
        jobs::submit(&store, &tasks, "bank", input.clone()).await?;
    }
    loop {
        let all = jobs::runs(&store).await?;
        if let Some(failed) = all.iter().find(|r| r.status == jobs::RunStatus::Failed) {
            return Err(Error::with(
                ErrorKind::Run,
                format!("run {} failed: {:?}", failed.run_id, failed.error),
            ));
        }
        if all.iter().all(|r| r.status == jobs::RunStatus::Completed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wall = started.elapsed();
    let timings = run_timings(&store).await?;
    stop_workers(&mut children).await;
    store.pool().close().await;
    db.drop_now().await.map_err(scratch_error)?;
    let peak_sessions = bed.gateway().status().peak_sessions;
    bed.shutdown().await?;
    let queue_wait_ms: Vec<f64> = timings.iter().map(|t| t.0).collect();
    let submit_to_done_ms: Vec<f64> = timings.iter().map(|t| t.1).collect();
    Ok(Throughput {
        shape,
        wall_ms: ms(wall),
        runs_per_minute: f64::from(shape.runs) / wall.as_secs_f64() * 60.0,
        queue_wait_p50_ms: percentile(&queue_wait_ms, 50),
        queue_wait_p95_ms: percentile(&queue_wait_ms, 95),
        queue_wait_ms,
        submit_to_done_p50_ms: percentile(&submit_to_done_ms, 50),
        submit_to_done_p95_ms: percentile(&submit_to_done_ms, 95),
        submit_to_done_ms,
        peak_sessions,
        extra_pickups: timings.iter().map(|t| t.2).sum(),
    })
}

/// Sessions the measurement's own gateway allows: above any limit the bench asks the
/// workers for, so that the limit, not the gateway, is what holds them.
const GATEWAY_SESSIONS: usize = 12;

/// The bank task's input for the runs through the queue.
#[derive(Debug, Clone, Copy)]
struct Input {
    polls: u32,
    poll_every_ms: u64,
}

/// The scratch database could not be created or dropped.
fn scratch_error(e: ScratchError) -> Error {
    Error::with(ErrorKind::Bench, e)
}

/// A worker: the product's `outlive worker` ([`outlive_binary`]).
fn spawn_worker(
    bed: &TestBed,
    database_url: &str,
    key: &std::path::Path,
    shape: Shape,
) -> Result<tokio::process::Child, Error> {
    let exe = outlive_binary()?;
    let mut command = tokio::process::Command::new(&exe);
    command
        .args(["worker", "--solari-url", bed.gateway().base_url()])
        .arg("--key-file")
        .arg(key)
        .args(["--heartbeat", "1s", "--checkpoint-every", "500ms"])
        .args(["--concurrency", &shape.concurrency.to_string()]);
    if let Some(max) = shape.max_sessions {
        command.args(["--max-sessions", &max.to_string()]);
    }
    command
        .env("OUTLIVE_DATABASE_URL", database_url)
        .env("SOLARI_API_KEY", bed.gateway().api_key())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::with(ErrorKind::Run, e))
}

/// Until `workers` workers are registered in `apalis.workers` (30 s at most), so that the
/// clock starts with every worker polling.
async fn wait_for_workers(store: &PgStore, workers: u32) {
    let up = Instant::now();
    loop {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM apalis.workers")
            .fetch_one(store.pool())
            .await
            .unwrap_or((0,));
        if n >= i64::from(workers) || up.elapsed() > Duration::from_secs(30) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn stop_workers(children: &mut [tokio::process::Child]) {
    for child in children.iter() {
        if let Some(pid) = child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
    for child in children.iter_mut() {
        let _ = tokio::time::timeout(Duration::from_secs(40), child.wait()).await;
    }
}

/// Per run, in submit order: submit → first pickup, submit → end (ms), pickups beyond one.
async fn run_timings(store: &PgStore) -> Result<Vec<(f64, f64, u32)>, Error> {
    let rows: Vec<(f64, f64, i64)> = sqlx::query_as(
        "SELECT EXTRACT(EPOCH FROM (min(p.taken_at) - r.submitted_at))::float8 * 1000,
                EXTRACT(EPOCH FROM (max(p.ended_at) - r.submitted_at))::float8 * 1000,
                count(*)
         FROM outlive_runs r JOIN outlive_pickups p ON p.run_id = r.run_id
         GROUP BY r.run_id, r.submitted_at ORDER BY r.submitted_at",
    )
    .fetch_all(store.pool())
    .await
    .map_err(|e| Error::with(ErrorKind::Bench, e))?;
    Ok(rows
        .into_iter()
        .map(|(wait, done, pickups)| (wait, done, (pickups - 1).max(0) as u32))
        .collect())
}

fn hex_key() -> String {
    hex::encode(rand_key())
}

/// The scale case: four workers taking two runs at once each, under a limit of six sessions
/// across them, forty runs.
pub const SCALE: Shape = Shape {
    workers: 4,
    concurrency: 2,
    max_sessions: Some(6),
    runs: 40,
};

/// Measures checkpoint persistence and queue throughput against PostgreSQL at `base` (a
/// database the bench may create databases from).
///
/// # Errors
///
/// [`ErrorKind::Jobs`] and [`ErrorKind::Bench`] for the database, and whatever the test bed
/// or a run reports.
pub async fn durable(base: &str, runs: u32) -> Result<DurableReport, Error> {
    let (polls, every) = (20, Duration::from_millis(200));
    let bed = TestBed::start(until_killed(Duration::ZERO).max_sessions(8)).await?;
    let db = ScratchDatabase::create(base, "outlive_bench")
        .await
        .map_err(scratch_error)?;
    let store = PgStore::connect(db.url()).await?;
    store.setup().await?;
    let memory = checkpoint_arm(&bed, None, polls, every).await?;
    let postgres = checkpoint_arm(&bed, Some(&store), polls, every).await?;
    store.pool().close().await;
    db.drop_now().await.map_err(scratch_error)?;
    bed.shutdown().await?;
    let input = Input {
        polls: 10,
        poll_every_ms: 200,
    };
    let mut throughputs = Vec::new();
    for workers in [1, 2] {
        let shape = Shape {
            workers,
            concurrency: 2,
            max_sessions: None,
            runs,
        };
        throughputs.push(throughput(base, shape, input).await?);
    }
    throughputs.push(throughput(base, SCALE, input).await?);
    Ok(DurableReport {
        polls,
        poll_every_ms: every.as_millis() as u64,
        checkpoints: vec![memory, postgres],
        throughput: throughputs,
    })
}

/// The figures as text.
pub fn durable_summary(r: &DurableReport) -> String {
    let mut s =
        String::from("durable: checkpoints of the bank task, in memory and in PostgreSQL\n");
    for c in &r.checkpoints {
        s += &format!(
            "  {:<8} checkpoint median {:.2} ms (n = {}), save alone {:.2} ms, state {} bytes, row {} bytes\n",
            c.arm,
            c.took_median_ms,
            c.took_ms.len(),
            c.save_median_ms,
            c.state_bytes,
            c.sealed_bytes
        );
    }
    s += "durable: runs through the queue (bank task, 10 polls 200 ms apart, all submitted at once; queue wait = submit → first worker took it)\n";
    for t in &r.throughput {
        let limit = t.shape.max_sessions.map_or_else(
            || "no session limit".to_owned(),
            |m| format!("--max-sessions {m}"),
        );
        s += &format!(
            "  {} worker(s) × {} at once, {limit}: {} runs in {:.1} s = {:.1} runs/min; queue wait p50 {:.0} ms, p95 {:.0} ms; submit → done p50 {:.0} ms, p95 {:.0} ms; peak sessions {}; runs taken twice {}\n",
            t.shape.workers,
            t.shape.concurrency,
            t.shape.runs,
            t.wall_ms / 1000.0,
            t.runs_per_minute,
            t.queue_wait_p50_ms,
            t.queue_wait_p95_ms,
            t.submit_to_done_p50_ms,
            t.submit_to_done_p95_ms,
            t.peak_sessions,
            t.extra_pickups,
        );
    }
    s
}
