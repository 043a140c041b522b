//! What durability costs and how runs scale out: the bank task's checkpoints in memory against
//! checkpoints sealed and saved in PostgreSQL (capture + seal + save, and the bytes stored),
//! and runs per minute through the apalis queue with one and with two `outlive worker`
//! processes. Everything in a database of its own, dropped at the end.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outlive::{BoxFuture, CheckpointStore, Durable, Milestone, Options, SealKey, Sealer};
use serde::Serialize;

use super::records::ms;
use crate::bank::BankProgress;
use crate::bed::{TestBed, until_killed};
use crate::durable::{PgStore, ScratchDatabase};
use crate::error::{Error, ErrorKind};
use crate::jobs;
use crate::stats::median;

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

/// Runs through the queue with some workers.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Throughput {
    /// `outlive worker` processes.
    pub workers: u32,
    /// Runs at once per worker.
    pub concurrency: u32,
    /// Runs submitted (all at once).
    pub runs: u32,
    /// From the first submit to the last run completed, ms.
    pub wall_ms: f64,
    /// `runs` per minute of `wall_ms`.
    pub runs_per_minute: f64,
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
    /// With one worker, then two.
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
            self.saves
                .lock()
                .expect("saves")
                .push((ms(t.elapsed()), len));
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
                sink.lock().expect("seen").push((ms(*took), *bytes));
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
    let (result, event) = task
        .outlive(&bed.provider(), &BankProgress::default(), options)
        .await;
    if result.is_err() {
        return Err(Error::run(event));
    }
    let seen = seen.lock().expect("seen").clone();
    let took_ms: Vec<f64> = seen.iter().map(|s| s.0).collect();
    let saves = timed
        .map(|t| t.saves.lock().expect("saves").clone())
        .unwrap_or_default();
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

/// `runs` runs of the bank task through `workers` worker processes (this executable's
/// `worker` command), `concurrency` each.
async fn throughput(
    base: &str,
    bed: &TestBed,
    workers: u32,
    concurrency: u32,
    runs: u32,
    input: &serde_json::Value,
) -> Result<Throughput, Error> {
    let db = ScratchDatabase::create(base, "outlive_bench").await?;
    let store = PgStore::connect(db.url()).await?;
    jobs::setup(&store).await?;
    let dir = tempfile::tempdir().map_err(|e| Error::with(ErrorKind::TempDir, e))?;
    let key = dir.path().join("seal.key");
    std::fs::write(&key, hex_key())
        .map_err(|e| Error::with(ErrorKind::Write { path: key.clone() }, e))?;
    let exe = std::env::current_exe().map_err(|e| Error::with(ErrorKind::TempDir, e))?;
    let mut children = Vec::new();
    for _ in 0..workers {
        let child = tokio::process::Command::new(&exe)
            .args(["worker", "--solari-url", bed.gateway().base_url()])
            .arg("--key-file")
            .arg(&key)
            .args(["--heartbeat", "1s", "--checkpoint-every", "500ms"])
            .args(["--concurrency", &concurrency.to_string()])
            .env("OUTLIVE_DATABASE_URL", db.url())
            .env("SOLARI_API_KEY", bed.gateway().api_key())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::with(ErrorKind::Run, e))?;
        children.push(child);
    }
    // Workers up (registered in apalis.workers) before the clock starts.
    let up = Instant::now();
    loop {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM apalis.workers")
            .fetch_one(store.pool())
            .await
            .unwrap_or((0,));
        if n >= i64::from(workers) || up.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tasks = crate::bank::tasks(None);
    let started = Instant::now();
    for _ in 0..runs {
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
    for child in &mut children {
        if let Some(pid) = child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
    for child in &mut children {
        let _ = tokio::time::timeout(Duration::from_secs(40), child.wait()).await;
    }
    store.pool().close().await;
    db.drop_now().await?;
    Ok(Throughput {
        workers,
        concurrency,
        runs,
        wall_ms: ms(wall),
        runs_per_minute: f64::from(runs) / wall.as_secs_f64() * 60.0,
    })
}

fn hex_key() -> String {
    hex::encode(rand_key())
}

/// Measures checkpoint persistence and queue throughput against PostgreSQL at `base` (a
/// database the bench may create databases from).
///
/// # Errors
///
/// [`ErrorKind::Database`], and whatever the test bed or a run reports.
pub async fn durable(base: &str, runs: u32) -> Result<DurableReport, Error> {
    let (polls, every) = (20, Duration::from_millis(200));
    let bed = TestBed::start(until_killed(Duration::ZERO).max_sessions(8)).await?;
    let db = ScratchDatabase::create(base, "outlive_bench").await?;
    let store = PgStore::connect(db.url()).await?;
    store.setup().await?;
    let memory = checkpoint_arm(&bed, None, polls, every).await?;
    let postgres = checkpoint_arm(&bed, Some(&store), polls, every).await?;
    store.pool().close().await;
    db.drop_now().await?;
    let input = serde_json::json!({
        "bank_url": bed.bank().base_url(),
        "polls": 10,
        "poll_every_ms": 200,
    });
    let mut throughputs = Vec::new();
    for workers in [1, 2] {
        throughputs.push(throughput(base, &bed, workers, 2, runs, &input).await?);
    }
    bed.shutdown().await?;
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
    s += "durable: runs through the queue (bank task, 10 polls 200 ms apart, submitted at once)\n";
    for t in &r.throughput {
        s += &format!(
            "  {} worker(s) × {} at once: {} runs in {:.1} s = {:.1} runs/min\n",
            t.workers,
            t.concurrency,
            t.runs,
            t.wall_ms / 1000.0,
            t.runs_per_minute
        );
    }
    s
}
