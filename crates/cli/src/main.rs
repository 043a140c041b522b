//! `outlive`: the command. Parses arguments with clap and calls `outlive_cli`: `demo`, `probe`
//! and `gateway` are the product; `bench` and `soak` are the lab (`outlive_cli::lab`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use outlive_cli::worker as durable_cli;

#[derive(Parser)]
#[command(
    name = "outlive",
    version,
    about = "Make a browser task outlive its browser"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run CMD against a browser that outlives its deaths: CMD gets a CDP endpoint
    /// ($OUTLIVE_CDP_URL) and a control URL; when the browser dies, outlive ends CMD,
    /// replaces the browser, restores cookies and storage, and runs CMD again with
    /// $OUTLIVE_ATTEMPT + 1.
    Run(outlive_cli::cmd::run::RunArgs),
    /// Serve a browser that outlives its deaths at one CDP endpoint until Ctrl-C or SIGTERM,
    /// for clients that reconnect by themselves.
    Serve(outlive_cli::cmd::serve::ServeArgs),
    /// Run the Aurora Bank task through outlive on an embedded gateway whose sessions die.
    Demo(outlive_cli::cmd::demo::DemoArgs),
    /// The survival benchmark (baseline against outlive) and the micro-measurements; writes
    /// raw JSON and a summary under --out.
    Bench(outlive_cli::cmd::lab::BenchArgs),
    /// Measure how long a provider's sessions really live: create, hold idle, note when the
    /// connection dies, repeat. Without --base-url, probes an embedded gateway.
    Probe(outlive_cli::cmd::probe::ProbeArgs),
    /// Many short runs with random deaths of every mode, then a leak audit (sessions,
    /// processes, temp profiles, file descriptors, memory); writes docs/measurements/soak.json.
    Soak(outlive_cli::cmd::lab::SoakArgs),
    /// Take durable runs from the PostgreSQL queue until Ctrl-C or SIGTERM: each run's
    /// checkpoints are sealed (key in $OUTLIVE_SEAL_KEY, 64 hex digits, or --key-file) and
    /// saved; a run whose worker died is taken over from its newest checkpoint. Without
    /// --solari-url, the worker runs its own Aurora Bank and a gateway whose sessions die.
    Worker {
        /// PostgreSQL (`scripts/postgres` starts a local one and prints its URL).
        #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// A file holding the sealing key (64 hex digits); else $OUTLIVE_SEAL_KEY.
        #[arg(long)]
        key_file: Option<std::path::PathBuf>,
        /// A Solari-compatible API base URL to launch browsers from.
        #[arg(long, requires = "api_key")]
        solari_url: Option<String>,
        /// Its API key (or set SOLARI_API_KEY).
        #[arg(long, env = "SOLARI_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// The Aurora Bank for `bank` runs whose input names none.
        #[arg(long)]
        bank_url: Option<String>,
        /// Live browser sessions at most, across every worker on this database.
        #[arg(long)]
        max_sessions: Option<u32>,
        /// Runs at once in this worker.
        #[arg(long, default_value_t = 2)]
        concurrency: usize,
        /// Heartbeat interval (the same on every worker).
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        heartbeat: Duration,
        /// Heartbeats missed before a worker's runs go to another (the same on every worker).
        #[arg(long, default_value_t = 3)]
        missed_heartbeats: usize,
        /// A run taken this many times without finishing (its workers died under it) is
        /// failed instead of taken again.
        #[arg(long, default_value_t = 5)]
        max_pickups: u32,
        /// Interval of the automatic checkpoint.
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        checkpoint_every: Duration,
        /// Lifetime of the embedded gateway's sessions (without --solari-url).
        #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// A task this worker runs, as NAME='CMD ARGS…' (repeatable): CMD runs as under
        /// `outlive run`, with the run's input in $OUTLIVE_INPUT.
        #[arg(long = "task", value_name = "NAME=CMD")]
        tasks: Vec<String>,
    },
    /// Enqueue a durable run of a task by name; prints its run id.
    Submit {
        /// The task: `bank`, or a name a worker declared with --task.
        task: String,
        /// Its input, as JSON, at most 64 KiB (`bank`: {"polls": 30, "poll_every_ms": 500,
        /// "bank_url": …}; a command task gets it in $OUTLIVE_INPUT).
        #[arg(long, default_value = "{}")]
        input: String,
        /// PostgreSQL.
        #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
    /// Cancel a durable run: a queued one is never taken; a running one is stopped by its
    /// worker (its command ended, its browser released) within a heartbeat.
    Cancel {
        /// The run id (`outlive submit` printed it; `outlive runs` lists them).
        run_id: String,
        /// PostgreSQL.
        #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
    /// List durable runs: status, worker pickups, entries, result or error.
    Runs {
        /// Print every run as JSON, wide event included, one per line.
        #[arg(long)]
        json: bool,
        /// PostgreSQL.
        #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
    /// Run a Solari-compatible gateway whose sessions die on schedule, until Ctrl-C.
    Gateway(outlive_cli::cmd::gateway::GatewayArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; a bad command line is a usage error (EX_USAGE).
            return Ok(ExitCode::from(if e.use_stderr() {
                outlive::EXIT_USAGE as u8
            } else {
                0
            }));
        }
    };
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") {
        if !matches!(cli.command, Command::Gateway(_)) {
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .init();
        }
    }
    // Returning (rather than `process::exit`) lets the runtime shut down: every task a command
    // spawned is dropped, and with it every browser it started and its profile.
    match cli.command {
        // These two end their command and browsers on SIGINT/SIGTERM themselves.
        Command::Run(args) => Ok(status(args.run().await)),
        Command::Serve(args) => Ok(status(args.run().await)),
        Command::Demo(args) => until_interrupted(args.run()).await,
        Command::Bench(args) => until_interrupted(args.run()).await,
        Command::Soak(args) => until_interrupted(args.run()).await,
        Command::Probe(args) => until_interrupted(args.run()).await,
        Command::Gateway(args) => {
            let interrupted = outlive_cli::cmd::interrupted();
            args.run(async {
                interrupted.await;
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        command => {
            durable(command).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// An exit status as the process's.
fn status(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Runs `work` until it ends or SIGINT/SIGTERM arrives. On a signal, `work` is dropped (and,
/// as `main` returns, every task it spawned), which ends each browser it started and removes
/// its profile; the exit status is 128 + the signal's number, as a shell's.
async fn until_interrupted(
    work: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<ExitCode> {
    let interrupted = outlive_cli::cmd::interrupted();
    tokio::select! {
        done = work => done.map(|()| ExitCode::SUCCESS),
        signal = interrupted => {
            eprintln!("outlive: interrupted; its browsers are closed");
            Ok(status(128 + signal))
        }
    }
}

/// The durable mode's commands: `worker`, `submit`, `runs`.
async fn durable(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Worker {
            database_url,
            key_file,
            solari_url,
            api_key,
            bank_url,
            max_sessions,
            concurrency,
            heartbeat,
            missed_heartbeats,
            max_pickups,
            checkpoint_every,
            lifetime,
            tasks,
        } => {
            let key = match key_file {
                Some(path) => outlive::SealKey::from_file(&path),
                None => outlive::SealKey::from_env("OUTLIVE_SEAL_KEY"),
            }?; // its message names the file or the variable, and what to do
            let config = durable_cli::WorkerArgs {
                database_url,
                key,
                solari: solari_url.zip(api_key),
                bank_url,
                max_sessions,
                config: outlive_jobs::WorkerConfig {
                    heartbeat,
                    missed_heartbeats,
                    concurrency,
                    max_pickups,
                },
                checkpoint_every,
                lifetime,
                tasks,
            };
            let prepared = durable_cli::prepare(config).await?;
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
                    let mut term =
                        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                            .expect("SIGTERM handler");
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                })
                .await?;
            if let Some(bed) = prepared.bed {
                bed.shutdown().await?;
            }
        }
        Command::Submit {
            task,
            input,
            database_url,
        } => {
            let input: serde_json::Value =
                serde_json::from_str(&input).context("--input is not JSON")?;
            let store = outlive_jobs::PgStore::connect(&database_url).await?;
            outlive_jobs::setup(&store).await?;
            let run_id =
                outlive_jobs::submit(&store, &outlive_cli::bank::tasks(None), &task, input).await?;
            println!("{run_id}");
        }
        Command::Cancel {
            run_id,
            database_url,
        } => {
            let store = outlive_jobs::PgStore::connect(&database_url).await?;
            outlive_jobs::setup(&store).await?;
            let was = outlive_jobs::cancel(&store, &run_id).await?;
            println!("{run_id} cancelled ({was:?} before)");
        }
        Command::Runs { json, database_url } => {
            let store = outlive_jobs::PgStore::connect(&database_url).await?;
            outlive_jobs::setup(&store).await?;
            let runs = outlive_jobs::runs(&store).await?;
            if json {
                for run in &runs {
                    println!("{}", serde_json::to_string(run)?);
                }
            } else {
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
            }
        }
        _ => unreachable!("dispatched in main"),
    }
    Ok(())
}
