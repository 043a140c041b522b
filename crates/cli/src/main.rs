//! `outlive`: the command. Parses arguments with clap and calls `outlive_cli`: `demo`, `probe`
//! and `gateway` are the product; `bench` and `soak` are the lab (`outlive_cli::lab`).

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use outlive_cli::demo::{self, DemoConfig};
use outlive_cli::lab::{bench, soak};
use outlive_cli::probe;
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
    Demo {
        /// Lifetime of each browser session.
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// How long the task's polling takes without deaths.
        #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
        task: Duration,
        /// How sessions die: close, reset, silence or mixed.
        #[arg(long, default_value = "mixed")]
        death: gateway::DeathMode,
        /// Probability that a new browser is dead on arrival.
        #[arg(long, default_value_t = 0.0)]
        doa: f64,
        /// Print only the wide event, as JSON, as the last line.
        #[arg(long)]
        json: bool,
    },
    /// The survival benchmark (baseline against outlive) and the micro-measurements; writes
    /// raw JSON and a summary under --out.
    Bench {
        /// Tasks per arm.
        #[arg(long, default_value_t = 5)]
        tasks: u32,
        /// Session lifetime (tasks need 1.2 lifetimes of polling).
        #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// How sessions die: close, reset, silence or mixed.
        #[arg(long, default_value = "close")]
        death: gateway::DeathMode,
        /// Where the raw data and the summary go.
        #[arg(long, default_value = "docs/measurements")]
        out: std::path::PathBuf,
        /// Skip the survival benchmark.
        #[arg(long)]
        micro_only: bool,
        /// Skip the micro-measurements.
        #[arg(long)]
        survival_only: bool,
        /// Only the storage figures (checkpoint and restore cost with big storage).
        #[arg(long, conflicts_with_all = ["micro_only", "survival_only"])]
        storage_only: bool,
        /// Only the rotation benchmark (reactive, rotation, rotation + standby).
        #[arg(long, conflicts_with_all = ["micro_only", "survival_only", "storage_only"])]
        rotation_only: bool,
        /// Only the durable-mode figures (needs --database-url).
        #[arg(long, requires = "database_url", conflicts_with_all = ["micro_only", "survival_only", "storage_only", "rotation_only"])]
        durable_only: bool,
        /// PostgreSQL for the durable-mode figures (the bench creates and drops a database);
        /// without it they are skipped.
        #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
        /// Runs per durable throughput measurement.
        #[arg(long, default_value_t = 12)]
        durable_runs: u32,
        /// Checkpoints per RTT setting.
        #[arg(long, default_value_t = 20)]
        samples: u32,
        /// Kills per death mode for the detection latency.
        #[arg(long, default_value_t = 5)]
        kills: u32,
        /// Only the foreign-client figures: a Playwright script straight to a session against
        /// the same script under `outlive run` (needs `scripts/clients`).
        #[arg(long)]
        foreign_only: bool,
        /// The Python with Playwright the foreign-client figures run.
        #[arg(long, default_value = "target/clients/venv/bin/python")]
        python: std::path::PathBuf,
        /// Rounds of the foreign-client figures (each phase once per arm).
        #[arg(long, default_value_t = 3)]
        foreign_rounds: u32,
    },
    /// Measure how long a provider's sessions really live: create, hold idle, note when the
    /// connection dies, repeat. Without --base-url, probes an embedded gateway.
    Probe {
        /// A Solari-compatible API base URL (e.g. `https://api.solari.example`).
        #[arg(long, requires = "api_key")]
        base_url: Option<String>,
        /// The API key (or set SOLARI_API_KEY).
        #[arg(long, env = "SOLARI_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// Sessions to hold, one after another.
        #[arg(long, default_value_t = 3)]
        sessions: u32,
        /// Give up waiting for a death after this long.
        #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
        max_hold: Duration,
        /// CDP heartbeat interval (a heartbeat unanswered for this long is a silent death).
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        heartbeat: Duration,
        /// Lifetime of the embedded gateway's sessions (without --base-url).
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
    },
    /// Many short runs with random deaths of every mode, then a leak audit (sessions,
    /// processes, temp profiles, file descriptors, memory); writes docs/measurements/soak.json.
    Soak {
        /// Runs in total.
        #[arg(long, default_value_t = 200)]
        runs: u32,
        /// Runs at once.
        #[arg(long, default_value_t = 2)]
        concurrency: u32,
        /// Session lifetime (deaths at lifetime ± lifetime/2).
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// Where soak.json goes.
        #[arg(long, default_value = "docs/measurements")]
        out: std::path::PathBuf,
    },
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
    Gateway {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:7070")]
        listen: std::net::SocketAddr,
        /// The API key clients must send.
        #[arg(long, default_value = "test-key")]
        api_key: String,
        /// Lifetime of each session.
        #[arg(long, default_value = "600s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// ± jitter on the lifetime.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        jitter: Duration,
        /// How sessions die: close, reset, silence or mixed.
        #[arg(long, default_value = "close")]
        death: gateway::DeathMode,
        /// Probability that a new browser is dead on arrival.
        #[arg(long, default_value_t = 0.0)]
        doa: f64,
        /// Answer `ended` for dead sessions instead of `active`.
        #[arg(long)]
        honest: bool,
        /// Added round-trip time per CDP message.
        #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
        rtt: Duration,
        /// Concurrent sessions allowed.
        #[arg(long, default_value_t = 2)]
        max_sessions: usize,
        /// Page chaos: crash (`crash`) or close (`close`) every page of each session, once,
        /// `--page-fault-after` its creation; the browser lives on.
        #[arg(long, requires = "page_fault_after")]
        page_fault: Option<gateway::PageFault>,
        /// When the page fault strikes (must be shorter than the lifetime).
        #[arg(long, value_parser = humantime::parse_duration, requires = "page_fault")]
        page_fault_after: Option<Duration>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; a bad command line is a usage error (EX_USAGE).
            std::process::exit(if e.use_stderr() {
                outlive::EXIT_USAGE
            } else {
                0
            });
        }
    };
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") {
        if !matches!(cli.command, Command::Gateway { .. }) {
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .init();
        }
    }
    match cli.command {
        Command::Run(args) => std::process::exit(args.run().await),
        Command::Serve(args) => std::process::exit(args.run().await),
        Command::Demo {
            lifetime,
            task,
            death,
            doa,
            json,
        } => {
            let config = DemoConfig {
                lifetime,
                task,
                death,
                doa,
                ..DemoConfig::default()
            };
            demo::run_in_terminal(&config, json).await?;
        }
        Command::Bench {
            tasks,
            lifetime,
            death,
            out,
            micro_only,
            survival_only,
            storage_only,
            rotation_only,
            durable_only,
            database_url,
            durable_runs,
            samples,
            kills,
            foreign_only,
            python,
            foreign_rounds,
        } => {
            if foreign_only {
                let config = outlive_cli::lab::foreign::ForeignConfig {
                    python,
                    rounds: foreign_rounds,
                    out,
                };
                let report = outlive_cli::lab::foreign::run(&config).await?;
                print!("{}", outlive_cli::lab::foreign::summary(&report));
                return Ok(());
            }
            let survival = bench::SurvivalConfig {
                tasks,
                lifetime,
                death,
                checkpoint_every: lifetime / 20,
                ..Default::default()
            };
            let only = micro_only || survival_only || storage_only || rotation_only || durable_only;
            // Two lifetimes of polling: each run meets two deaths of old age.
            let rotation = bench::SurvivalConfig {
                polls: 60,
                ..survival.clone()
            };
            let plan = bench::BenchPlan {
                survival: (!only || survival_only).then_some(survival),
                rotation: (!only || rotation_only).then_some(rotation),
                micro: (!only || micro_only).then_some(bench::MicroConfig { samples, kills }),
                storage: (!only || storage_only || micro_only).then_some(samples),
                durable: database_url
                    .filter(|_| !only || durable_only)
                    .map(|url| (url, durable_runs)),
                out,
            };
            bench::run(&plan).await?;
        }
        Command::Soak {
            runs,
            concurrency,
            lifetime,
            out,
        } => {
            let config = soak::SoakConfig {
                runs,
                concurrency,
                lifetime,
                ..soak::SoakConfig::default()
            };
            soak::run(&config, &out).await?;
        }
        Command::Probe {
            base_url,
            api_key,
            sessions,
            max_hold,
            heartbeat,
            lifetime,
        } => {
            let target = match (base_url, api_key) {
                (None, _) => probe::Target::Embedded { lifetime },
                (Some(base_url), Some(api_key)) => probe::Target::Provider { base_url, api_key },
                (Some(_), None) => anyhow::bail!("--base-url needs --api-key (or SOLARI_API_KEY)"),
            };
            probe::run(target, sessions, max_hold, heartbeat).await?;
        }
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
            }
            .context("no sealing key")?;
            let config = durable_cli::WorkerArgs {
                database_url,
                key,
                solari: solari_url.zip(api_key),
                bank_url,
                max_sessions,
                config: outlive_cli::jobs::WorkerConfig {
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
            let store = outlive_cli::durable::PgStore::connect(&database_url).await?;
            outlive_cli::jobs::setup(&store).await?;
            let run_id =
                outlive_cli::jobs::submit(&store, &outlive_cli::bank::tasks(None), &task, input)
                    .await?;
            println!("{run_id}");
        }
        Command::Cancel {
            run_id,
            database_url,
        } => {
            let store = outlive_cli::durable::PgStore::connect(&database_url).await?;
            outlive_cli::jobs::setup(&store).await?;
            let was = outlive_cli::jobs::cancel(&store, &run_id).await?;
            println!("{run_id} cancelled ({was:?} before)");
        }
        Command::Runs { json, database_url } => {
            let store = outlive_cli::durable::PgStore::connect(&database_url).await?;
            outlive_cli::jobs::setup(&store).await?;
            let runs = outlive_cli::jobs::runs(&store).await?;
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
        Command::Gateway {
            listen,
            api_key,
            lifetime,
            jitter,
            death,
            doa,
            honest,
            rtt,
            max_sessions,
            page_fault,
            page_fault_after,
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info".into()),
                )
                .init();
            let config = gateway::Config::new()
                .api_key(api_key)
                .lifetime(lifetime)
                .jitter(jitter)
                .death(death)
                .doa(doa)
                .honest(honest)
                .rtt(rtt)
                .max_sessions(max_sessions);
            let config = match (page_fault, page_fault_after) {
                (Some(fault), Some(after)) => config.page_fault(fault, after),
                _ => config,
            };
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("could not listen on {listen}"))?;
            println!("gateway listening on http://{}", listener.local_addr()?);
            gateway::serve(listener, config, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("the gateway failed")?;
        }
    }
    Ok(())
}
