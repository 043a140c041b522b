//! `outlive-lab`: the lab's command. Parses arguments with clap and calls `outlive_lab`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "outlive-lab",
    version,
    about = "Measure outlive: benchmarks, soaks, probes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The survival benchmark (baseline against outlive) and the micro-measurements; writes
    /// raw JSON and a summary under --out.
    Bench(outlive_lab::cmd::BenchArgs),
    /// Measure how long a provider's sessions really live: create, hold idle, note when the
    /// connection dies, repeat. Without --base-url, probes an embedded gateway.
    Probe(outlive_lab::cmd::ProbeArgs),
    /// Many short runs with random deaths of every mode, then a leak audit (sessions,
    /// processes, temp profiles, file descriptors, memory); writes docs/measurements/soak.json.
    Soak(outlive_lab::cmd::SoakArgs),
    /// `outlive serve`, for the serve soak, which starts this binary as its `serve`.
    #[command(hide = true)]
    Serve(outlive_cli::cmd::serve::ServeArgs),
    /// `outlive worker`, for the durable bench, which starts this binary as its workers.
    #[command(hide = true)]
    Worker(outlive_cli::cmd::durable::WorkerArgs),
    /// The program `bench --silence-only` runs under `run`.
    #[command(name = "silence-program", hide = true)]
    SilenceProgram(outlive_lab::cmd::SilenceProgramArgs),
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
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    match cli.command {
        Command::Bench(args) => until_interrupted(args.run()).await,
        Command::Soak(args) => until_interrupted(args.run()).await,
        Command::Probe(args) => until_interrupted(args.run()).await,
        // These two end their browsers on SIGINT/SIGTERM themselves, as under `outlive`.
        Command::Serve(args) => Ok(status(args.run().await)),
        Command::Worker(args) => args.run().await.map(|()| ExitCode::SUCCESS),
        Command::SilenceProgram(args) => args.run().await,
    }
}

/// An exit status as the process's.
fn status(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Runs `work` until it ends or SIGINT/SIGTERM arrives. On a signal, `work` is dropped (and,
/// as `main` returns, every task it spawned), which ends each browser it started.
async fn until_interrupted(
    work: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<ExitCode> {
    let interrupted = outlive_cli::cmd::interrupted();
    tokio::select! {
        done = work => done.map(|()| ExitCode::SUCCESS),
        signal = interrupted => {
            eprintln!("outlive-lab: interrupted; its browsers are closed");
            Ok(status(128 + signal))
        }
    }
}
