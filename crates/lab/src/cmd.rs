//! The lab's commands, one `#[derive(Args)]` struct each: `outlive-lab bench` (raw data and
//! summaries under `--out`), `outlive-lab soak` (many short runs, then a leak audit),
//! `outlive-lab probe` (how long a provider's sessions really live) and `outlive-lab weather`
//! (false deaths under a bad network and detection latency, before and after). Also what
//! the binary needs around them: parsing, logging, and stopping on Ctrl-C.

use std::time::Duration;

use clap::Args;

use crate::error::{Error, ErrorKind};
use crate::{bench, foreign, probe, relay_bench, serve_soak, soak, tabs_bench, weather_bench};

/// The survival benchmark (baseline against outlive) and the micro-measurements; writes
/// raw JSON and a summary under --out.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct BenchArgs {
    /// Tasks per arm.
    #[arg(long, default_value_t = 5)]
    pub tasks: u32,
    /// Session lifetime (tasks need 1.2 lifetimes of polling).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub lifetime: Duration,
    /// How sessions die: close, reset, silence or mixed.
    #[arg(long, default_value = "close")]
    pub death: gateway::DeathMode,
    /// Where the raw data and the summary go.
    #[arg(long, default_value = "docs/measurements")]
    pub out: std::path::PathBuf,
    /// Skip the survival benchmark.
    #[arg(long)]
    pub micro_only: bool,
    /// Skip the micro-measurements.
    #[arg(long)]
    pub survival_only: bool,
    /// Only the storage figures (checkpoint and restore cost with big storage).
    #[arg(long, conflicts_with_all = ["micro_only", "survival_only"])]
    pub storage_only: bool,
    /// Only the rotation benchmark (reactive, rotation, rotation + standby).
    #[arg(long, conflicts_with_all = ["micro_only", "survival_only", "storage_only"])]
    pub rotation_only: bool,
    /// Only the durable-mode figures (needs --database-url).
    #[arg(long, requires = "database_url", conflicts_with_all = ["micro_only", "survival_only", "storage_only", "rotation_only"])]
    pub durable_only: bool,
    /// PostgreSQL for the durable-mode figures (the bench creates and drops a database);
    /// without it they are skipped.
    #[arg(long, env = "OUTLIVE_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Runs per durable throughput measurement.
    #[arg(long, default_value_t = 12)]
    pub durable_runs: u32,
    /// Checkpoints per RTT setting.
    #[arg(long, default_value_t = 20)]
    pub samples: u32,
    /// Kills per death mode for the detection latency.
    #[arg(long, default_value_t = 5)]
    pub kills: u32,
    /// Only the foreign-client figures: a Playwright script straight to a session against
    /// the same script under `outlive run` (needs `scripts/clients`).
    #[arg(long)]
    pub foreign_only: bool,
    /// The Python with Playwright the foreign-client figures run.
    #[arg(long, default_value = "target/clients/venv/bin/python")]
    pub python: std::path::PathBuf,
    /// Rounds of the foreign-client, relay, silence and carry figures (each phase once per
    /// arm).
    #[arg(long, default_value_t = 3)]
    pub foreign_rounds: u32,
    /// Only the relay figures: chromiumoxide's full-page screenshots straight to a session
    /// against the same through `outlive::outlive`'s relay.
    #[arg(long)]
    pub relay_only: bool,
    /// Only the tabs figures: a checkpoint of a program's three tabs on three origins
    /// (1 MiB of localStorage each) against one such tab's, rounds of --foreign-rounds.
    #[arg(long)]
    pub tabs_only: bool,
    /// Only the silence figures: a silent death while a call waits, in library mode, under
    /// `serve` and under `run` (--kills deaths per arm, --foreign-rounds rounds).
    #[arg(long)]
    pub silence_only: bool,
    /// Only the carry figures (issue 51): a death under a Playwright client, in library mode,
    /// under `serve` carrying the client and under `serve` closing its connection (--kills
    /// deaths per arm, --foreign-rounds rounds; needs `scripts/clients`).
    #[arg(long)]
    pub carry_only: bool,
    /// Metrics and traces on against off, on the relay and on checkpoints (rounds:
    /// --foreign-rounds); writes watching.json and watching-summary.txt.
    #[arg(long)]
    pub watching_only: bool,
    /// Only the typed-fields figures (issue 48): checkpoints of a page with 200 filled fields
    /// against the same page without (--foreign-rounds rounds of --samples each), then
    /// --kills deaths per page; writes forms.json and forms-summary.txt.
    #[arg(long)]
    pub forms_only: bool,
}

impl BenchArgs {
    /// Runs the benchmarks the flags select.
    ///
    /// # Errors
    ///
    /// Whatever the benchmark reports.
    pub async fn run(self) -> Result<(), Error> {
        if self.silence_only {
            let report = bench::silence::run(self.foreign_rounds, self.kills, &self.out).await?;
            print!("{}", bench::silence::summary(&report));
            return Ok(());
        }
        if self.watching_only {
            let report = bench::watching::run(self.foreign_rounds, &self.out).await?;
            print!("{}", bench::watching::summary(&report));
            return Ok(());
        }
        if self.forms_only {
            let (rounds, samples, kills) = (self.foreign_rounds, self.samples, self.kills);
            let report = bench::forms::run(rounds, samples, kills, &self.out).await?;
            print!("{}", bench::forms::summary(&report));
            return Ok(());
        }
        if self.carry_only {
            let (rounds, kills) = (self.foreign_rounds, self.kills);
            let report = bench::carry::run(&self.python, rounds, kills, &self.out).await?;
            print!("{}", bench::carry::summary(&report));
            return Ok(());
        }
        if self.relay_only {
            let report = relay_bench::run(self.foreign_rounds, &self.out).await?;
            print!("{}", relay_bench::summary(&report));
            return Ok(());
        }
        if self.tabs_only {
            let report = tabs_bench::run(self.foreign_rounds, self.samples, &self.out).await?;
            print!("{}", tabs_bench::summary(&report));
            return Ok(());
        }
        if self.foreign_only {
            let config = foreign::ForeignConfig {
                python: self.python,
                rounds: self.foreign_rounds,
                out: self.out,
            };
            let report = foreign::run(&config).await?;
            print!("{}", foreign::summary(&report));
            return Ok(());
        }
        let survival = bench::SurvivalConfig {
            tasks: self.tasks,
            lifetime: self.lifetime,
            death: self.death,
            checkpoint_every: self.lifetime / 20,
            ..Default::default()
        };
        let only = self.micro_only
            || self.survival_only
            || self.storage_only
            || self.rotation_only
            || self.durable_only;
        // Two lifetimes of polling: each run meets two deaths of old age.
        let rotation = bench::SurvivalConfig {
            polls: 60,
            ..survival.clone()
        };
        let plan = bench::BenchPlan {
            survival: (!only || self.survival_only).then_some(survival),
            rotation: (!only || self.rotation_only).then_some(rotation),
            micro: (!only || self.micro_only).then_some(bench::MicroConfig {
                samples: self.samples,
                kills: self.kills,
            }),
            storage: (!only || self.storage_only || self.micro_only).then_some(self.samples),
            durable: self
                .database_url
                .filter(|_| !only || self.durable_only)
                .map(|url| (url, self.durable_runs)),
            out: self.out,
        };
        bench::run(&plan).await
    }
}

/// Many short runs with random deaths of every mode, then a leak audit (sessions,
/// processes, temp profiles, file descriptors, memory); writes docs/measurements/soak.json.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Runs in total.
    #[arg(long, default_value_t = 200)]
    pub runs: u32,
    /// Runs at once.
    #[arg(long, default_value_t = 2)]
    pub concurrency: u32,
    /// Session lifetime (deaths at lifetime ± lifetime/2).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub lifetime: Duration,
    /// Where soak.json goes.
    #[arg(long, default_value = "docs/measurements")]
    pub out: std::path::PathBuf,
    /// Keep the poll count only with the caller, not in a checkpoint after each poll (the
    /// soak before 8dcf2da): every death then counts toward `max_relaunches`.
    #[arg(long)]
    pub no_progress_checkpoints: bool,
    /// Instead of runs: `outlive serve` for this long under a reconnecting agent, its
    /// sessions dying every `--lifetime` (give `--lifetime 4s`); writes serve-soak.json.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub serve_for: Option<Duration>,
    /// With `--serve-for`: growth is measured after this warm-up.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub warm_up: Duration,
    /// With `--serve-for`: the Python with `websockets` for the agent.
    #[arg(long, default_value = "target/clients/venv/bin/python")]
    pub python: std::path::PathBuf,
}

impl SoakArgs {
    /// Runs the soak and writes its report.
    ///
    /// # Errors
    ///
    /// Whatever the soak reports.
    pub async fn run(self) -> Result<(), Error> {
        if let Some(duration) = self.serve_for {
            let config = serve_soak::ServeSoakConfig {
                duration,
                lifetime: self.lifetime,
                warm_up: self.warm_up,
                every: Duration::from_secs(10),
                screenshot_every: 20,
                python: self.python,
            };
            serve_soak::run(&config, &self.out).await?;
            return Ok(());
        }
        let config = soak::SoakConfig {
            runs: self.runs,
            concurrency: self.concurrency,
            lifetime: self.lifetime,
            progress_checkpoints: !self.no_progress_checkpoints,
            ..soak::SoakConfig::default()
        };
        soak::run(&config, &self.out).await?;
        Ok(())
    }
}

/// False deaths per hour under network weather, and detection latency per death kind, for
/// a build before and this one, alternating; writes weather.json and a summary under --out.
#[derive(Debug, Args)]
pub struct WeatherArgs {
    /// The `outlive` binary of the build before.
    #[arg(long)]
    pub before: std::path::PathBuf,
    /// The weathers of the false-death arms: `calm`, `flows:HOLD/EVERY`, `link:HOLD/EVERY`.
    #[arg(
        long = "weather",
        value_delimiter = ',',
        default_value = "calm,flows:1.2s/10s,flows:3s/15s,link:2s/15s,flows:10s/30s"
    )]
    pub skies: Vec<weather_bench::Sky>,
    /// How long the agent works in each false-death arm, minutes.
    #[arg(long, default_value_t = 3.0)]
    pub minutes: f64,
    /// Kills per death kind (close, reset, silence) and case (waiting, idle), per build.
    #[arg(long, default_value_t = 5)]
    pub kills: u32,
    /// Where weather.json, the summary and serve's logs of arms with a relaunch go.
    #[arg(long, default_value = "docs/measurements")]
    pub out: std::path::PathBuf,
    /// The Python with `websockets` for the agent and the latency client.
    #[arg(long, default_value = "target/clients/venv/bin/python")]
    pub python: std::path::PathBuf,
}

impl WeatherArgs {
    /// Runs the benchmark and prints its summary.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`] for `--minutes`, and whatever the benchmark reports.
    pub async fn run(self) -> Result<(), Error> {
        if !(self.minutes.is_finite() && self.minutes > 0.0) {
            return Err(Error::new(ErrorKind::InvalidOption {
                option: "--minutes",
                message: "must be more than zero",
            }));
        }
        let command = std::env::args()
            .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
            .collect::<Vec<_>>()
            .join(" ");
        let config = weather_bench::WeatherConfig {
            command,
            skies: self.skies,
            minutes: self.minutes,
            kills: self.kills,
            before: self.before,
            python: self.python,
        };
        let report = weather_bench::run(&config, &self.out).await?;
        print!("{}", weather_bench::summary(&report));
        Ok(())
    }
}

/// Measure how long a provider's sessions really live: create, hold idle, note when the
/// connection dies, repeat. Without --base-url, probes an embedded gateway.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct ProbeArgs {
    /// A Solari-compatible API base URL (e.g. `https://api.solari.example`).
    #[arg(long, requires = "api_key")]
    pub base_url: Option<String>,
    /// The API key (or set SOLARI_API_KEY).
    #[arg(long, env = "SOLARI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Sessions to hold, one after another.
    #[arg(long, default_value_t = 3)]
    pub sessions: u32,
    /// Give up waiting for a death after this long.
    #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
    pub max_hold: Duration,
    /// CDP heartbeat interval (a heartbeat unanswered for this long is a silent death).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub heartbeat: Duration,
    /// Lifetime of the embedded gateway's sessions (without --base-url).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub lifetime: Duration,
}

impl ProbeArgs {
    /// Holds the sessions and prints what it saw.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`] for `--base-url` without a key, and whatever the probe
    /// reports.
    pub async fn run(self) -> Result<(), Error> {
        let target = match (self.base_url, self.api_key) {
            (None, _) => probe::Target::Embedded {
                lifetime: self.lifetime,
            },
            (Some(base_url), Some(api_key)) => probe::Target::Provider { base_url, api_key },
            (Some(_), None) => {
                return Err(Error::new(ErrorKind::InvalidOption {
                    option: "--base-url",
                    message: "needs --api-key (or SOLARI_API_KEY)",
                }));
            }
        };
        probe::run(target, self.sessions, self.max_hold, self.heartbeat).await?;
        Ok(())
    }
}

/// The program the silence figures' `run` arm starts: it leaves a call waiting on the
/// browser at `$OUTLIVE_CDP_URL`, then says so to the bench (not for use by hand).
#[derive(Debug, Args)]
pub struct SilenceProgramArgs {}

/// `outlive-lab watching-arm`: one arm of `bench --watching-only`, in a process of its own.
#[derive(Debug, Args)]
pub struct WatchingArmArgs {
    /// One of the works: round-trips, screenshots, checkpoints.
    #[arg(long, value_parser = bench::watching::WORKS)]
    pub work: String,
    /// Metrics and traces on (traces to OTEL_EXPORTER_OTLP_ENDPOINT).
    #[arg(long)]
    pub on: bool,
}

impl WatchingArmArgs {
    /// Runs the arm; its steps' times go to stdout as JSON.
    ///
    /// # Errors
    ///
    /// As [`bench::watching::child`].
    pub async fn run(self) -> Result<std::process::ExitCode, Error> {
        bench::watching::child(&self.work, self.on).await?;
        Ok(std::process::ExitCode::SUCCESS)
    }
}

impl SilenceProgramArgs {
    /// Runs the program: exit status 0 at the last attempt, 1 (and nothing printed) when
    /// the browser's death cut its connection, as the bench expects.
    ///
    /// # Errors
    ///
    /// As [`bench::silence::program`].
    pub async fn run(self) -> Result<std::process::ExitCode, Error> {
        Ok(if bench::silence::program().await? {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        })
    }
}

/// The command line as `C`, or the exit status to leave with: 0 after `--help` or
/// `--version`, [`EXIT_USAGE`](outlive::EXIT_USAGE) after a bad command line (clap has printed
/// either).
pub fn parse<C: clap::Parser>() -> Result<C, std::process::ExitCode> {
    C::try_parse().map_err(|e| {
        let _ = e.print();
        std::process::ExitCode::from(if e.use_stderr() {
            outlive::EXIT_USAGE as u8
        } else {
            0
        })
    })
}

/// Sends tracing to stderr, filtered by `RUST_LOG`, when it is set.
pub fn log_to_stderr() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
}

/// Runs `work` until it ends or SIGINT/SIGTERM arrives. On a signal, `work` is dropped (and,
/// as `main` returns, every task it spawned), which ends each browser it started and removes
/// its profile; the lab says so, and the exit status is 128 + the signal's number.
pub async fn until_interrupted(
    work: impl Future<Output = Result<(), Error>>,
) -> Result<std::process::ExitCode, Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let signal: u8 = tokio::select! {
        done = work => return done.map(|()| std::process::ExitCode::SUCCESS),
        _ = int.recv() => 2,
        _ = term.recv() => 15,
    };
    eprintln!("outlive-lab: interrupted; its browsers are closed");
    Ok(std::process::ExitCode::from(128 + signal))
}
