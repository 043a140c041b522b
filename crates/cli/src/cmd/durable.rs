//! The durable-run commands: `outlive worker`, `submit`, `cancel` and `runs`, thin layers over
//! the `outlive-jobs` crate (the worker's set-up is [`crate::worker`]).

use std::time::Duration;

use clap::Args;

use outlive_bed::bank;

use crate::error::{Error, ErrorKind};
use crate::worker::{self, WorkerSettings};

/// The flags of `outlive worker`: take durable runs from the PostgreSQL queue.
#[derive(Args)] // no Debug: it holds the API key
pub struct WorkerArgs {
    /// PostgreSQL (`scripts/postgres` starts a local one and prints its URL).
    #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// A file holding the sealing key (64 hex digits); else $OUTLIVE_SEAL_KEY.
    #[arg(long)]
    pub key_file: Option<std::path::PathBuf>,
    /// Where browsers come from (none: the embedded test bed).
    #[command(flatten)]
    pub provider: super::ProviderArgs,
    /// The Aurora Bank for `bank` runs whose input names none.
    #[arg(long)]
    pub bank_url: Option<String>,
    /// Live browser sessions at most, across every worker on this database.
    #[arg(long)]
    pub max_sessions: Option<u32>,
    /// Browser sessions one run may use in this worker before it gives up, progress or not.
    ///
    /// The library's `max_sessions`.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_sessions_per_run: u32,
    /// Runs at once in this worker.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Heartbeat interval (the same on every worker).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub heartbeat: Duration,
    /// Heartbeats missed before a worker's runs go to another (the same on every worker).
    #[arg(long, default_value_t = 3)]
    pub missed_heartbeats: usize,
    /// Pickups of one run, without finishing, before it is failed instead of taken again.
    ///
    /// A run is taken again when its worker died under it.
    #[arg(long, default_value_t = 5)]
    pub max_pickups: u32,
    /// Interval of the automatic checkpoint.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub checkpoint_every: Duration,
    /// Lifetime of the embedded gateway's sessions (without a provider flag).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub lifetime: Duration,
    /// A task this worker runs, as NAME='CMD ARGS…' (repeatable).
    ///
    /// CMD runs as under `outlive run`, with the run's input in $OUTLIVE_INPUT.
    #[arg(long = "task", value_name = "NAME=CMD")]
    pub tasks: Vec<String>,
    /// Where its metrics are served (its runs' and its own).
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

/// The flags of `outlive submit`: enqueue a durable run.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct SubmitArgs {
    /// The task: `bank`, or a name a worker declared with --task.
    pub task: String,
    /// Its input, as JSON, at most 64 KiB.
    ///
    /// `bank`: {"polls": 30, "poll_every_ms": 500, "bank_url": …}. A command task gets it
    /// in $OUTLIVE_INPUT.
    #[arg(long, default_value = "{}")]
    pub input: String,
    /// PostgreSQL.
    #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

/// The flags of `outlive cancel`: cancel a durable run.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct CancelArgs {
    /// The run id (`outlive submit` printed it; `outlive runs` lists them).
    pub run_id: String,
    /// PostgreSQL.
    #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

/// The flags of `outlive runs`: list durable runs, or one run's history.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct RunsArgs {
    /// Print every run as JSON, wide event included, one per line.
    ///
    /// With --history: each event as JSON, one per line.
    #[arg(long)]
    pub json: bool,
    /// Print the history of run RUN_ID instead: pickups, entries, deaths, checkpoints, ….
    ///
    /// Sizes and durations only, never content.
    #[arg(long, value_name = "RUN_ID")]
    pub history: Option<String>,
    /// PostgreSQL.
    #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

impl WorkerArgs {
    /// Takes runs until SIGINT or SIGTERM, then lets the runs in hand go back to the queue.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::SealKey`], a provider flag's error, and whatever [`worker::prepare`]
    /// and the worker report.
    pub async fn run(self) -> Result<(), Error> {
        // Its source names the file or the variable, and what to do.
        let key = match &self.key_file {
            Some(path) => outlive::SealKey::from_file(path),
            None => outlive::SealKey::from_env("OUTLIVE_SEAL_KEY"),
        }
        .map_err(|e| Error::with(ErrorKind::SealKey, e))?;
        // Served until the worker stops; `/` shows the database's runs.
        let runs = std::sync::Arc::new(crate::ui::DurableRuns::new(self.database_url.clone()));
        let served = self
            .metrics
            .serve(
                |r| {
                    let runs = outlive::Metrics::register(r);
                    (runs, outlive_jobs::WorkerMetrics::register(r))
                },
                runs,
            )
            .await?;
        let (_server, metrics) = served.map(|(s, m)| (Some(s), Some(m))).unwrap_or_default();
        let provider = if self.provider.given() {
            Some(self.provider.provider()?)
        } else {
            None
        };
        let settings = WorkerSettings {
            database_url: self.database_url,
            key,
            provider,
            bank_url: self.bank_url,
            max_sessions: self.max_sessions,
            max_sessions_per_run: self.max_sessions_per_run,
            config: outlive_jobs::WorkerConfig {
                heartbeat: self.heartbeat,
                missed_heartbeats: self.missed_heartbeats,
                concurrency: self.concurrency,
                max_pickups: self.max_pickups,
            },
            checkpoint_every: self.checkpoint_every,
            lifetime: self.lifetime,
            tasks: self.tasks,
            metrics,
        };
        let stop = super::interrupted(); // handlers in place before any run is taken
        let prepared = worker::prepare(settings).await?;
        println!(
            "worker {} taking runs (Ctrl-C to stop){}",
            prepared.worker.name(),
            prepared
                .bed
                .as_ref()
                .map(|b| format!("; its Aurora Bank: {}", b.bank().base_url()))
                .unwrap_or_default()
        );
        prepared
            .worker
            .run(async {
                stop.await;
            })
            .await?;
        if let Some(bed) = prepared.bed {
            bed.shutdown().await?;
        }
        Ok(())
    }
}

/// The jobs store at `database_url`, its tables made ready.
pub(crate) async fn connect_and_setup(database_url: &str) -> Result<outlive_jobs::PgStore, Error> {
    let store = outlive_jobs::PgStore::connect(database_url).await?;
    outlive_jobs::setup(&store).await?;
    Ok(store)
}

impl SubmitArgs {
    /// Queues the run and prints its id.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Flag`] for an input that is not JSON, [`ErrorKind::Jobs`] otherwise.
    pub async fn run(self) -> Result<(), Error> {
        let input: serde_json::Value = serde_json::from_str(&self.input)
            .map_err(|e| Error::flag("--input", format!("not JSON: {e}")))?;
        let store = connect_and_setup(&self.database_url).await?;
        let tasks = bank::tasks(None);
        let run_id = outlive_jobs::submit(&store, &tasks, &self.task, input).await?;
        println!("{run_id}");
        Ok(())
    }
}

impl CancelArgs {
    /// Cancels the run and says what it was.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Jobs`].
    pub async fn run(self) -> Result<(), Error> {
        let store = connect_and_setup(&self.database_url).await?;
        let was = outlive_jobs::cancel(&store, &self.run_id).await?;
        println!("{} cancelled ({was:?} before)", self.run_id);
        Ok(())
    }
}

impl RunsArgs {
    /// Prints every run (or with `--history`, one run's events): a table, or one JSON object
    /// per line with `--json`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Jobs`], and [`ErrorKind::Encode`] if a run cannot be printed as JSON.
    pub async fn run(self) -> Result<(), Error> {
        let store = connect_and_setup(&self.database_url).await?;
        if let Some(run_id) = &self.history {
            let events = outlive_jobs::history(&store, run_id).await?;
            return print_history(&events, self.json);
        }
        let runs = outlive_jobs::runs(&store).await?;
        if self.json {
            for run in &runs {
                let json =
                    serde_json::to_string(run).map_err(|e| Error::with(ErrorKind::Encode, e))?;
                println!("{json}");
            }
            return Ok(());
        }
        println!(
            "{:<38} {:<6} {:<10} {:>7} {:>7}  result / error",
            "run", "task", "status", "pickups", "entries"
        );
        for r in &runs {
            let outcome = match (&r.result, &r.error) {
                (Some(v), _) => v.to_string(),
                (None, Some(e)) => e.clone(),
                (None, None) => String::new(),
            };
            println!(
                "{:<38} {:<6} {:<10} {:>7} {:>7}  {outcome}",
                r.run_id,
                r.task,
                r.status,
                r.pickups,
                r.entries.map_or("-".to_owned(), |e| e.to_string()),
            );
        }
        Ok(())
    }
}

/// A run's events: a table, or one JSON object per line.
fn print_history(events: &[outlive_jobs::RunEvent], json: bool) -> Result<(), Error> {
    if json {
        for event in events {
            let line =
                serde_json::to_string(event).map_err(|e| Error::with(ErrorKind::Encode, e))?;
            println!("{line}");
        }
        return Ok(());
    }
    let Some(first) = events.first() else {
        println!("no events yet");
        return Ok(());
    };
    let start = std::time::UNIX_EPOCH + Duration::from_millis(first.at_ms.max(0) as u64);
    println!("from {}", humantime::format_rfc3339_millis(start));
    println!(
        "{:>6} {:>9} {:>6} {:<14} detail",
        "seq", "at", "pickup", "kind"
    );
    for e in events {
        println!(
            "{:>6} {:>9} {:>6} {:<14} {}",
            e.seq,
            format!("+{:.1}s", (e.at_ms - first.at_ms) as f64 / 1000.0),
            e.pickup.map_or("-".to_owned(), |p| p.to_string()),
            e.step.kind(),
            crate::ui::detail_text(&e.step),
        );
    }
    Ok(())
}
