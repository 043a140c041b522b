//! `outlive`: the command. Parses arguments with clap and calls `outlive_cli`. The lab's
//! commands (`bench`, `soak`, `probe`) are the `outlive-lab` binary.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Take durable runs from the PostgreSQL queue until Ctrl-C or SIGTERM: each run's
    /// checkpoints are sealed (key in $OUTLIVE_SEAL_KEY, 64 hex digits, or --key-file) and
    /// saved; a run whose worker died is taken over from its newest checkpoint. Without
    /// a provider flag, the worker runs its own Aurora Bank and a gateway whose sessions die.
    Worker(outlive_cli::cmd::durable::WorkerArgs),
    /// Enqueue a durable run of a task by name; prints its run id.
    Submit(outlive_cli::cmd::durable::SubmitArgs),
    /// Cancel a durable run: a queued one is never taken; a running one is stopped by its
    /// worker (its command ended, its browser released) within a heartbeat.
    Cancel(outlive_cli::cmd::durable::CancelArgs),
    /// List durable runs: status, worker pickups, entries, result or error.
    Runs(outlive_cli::cmd::durable::RunsArgs),
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
        Command::Gateway(args) => {
            let interrupted = outlive_cli::cmd::interrupted();
            args.run(async {
                interrupted.await;
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Worker(args) => args.run().await.map(|()| ExitCode::SUCCESS),
        Command::Submit(args) => args.run().await.map(|()| ExitCode::SUCCESS),
        Command::Cancel(args) => args.run().await.map(|()| ExitCode::SUCCESS),
        Command::Runs(args) => args.run().await.map(|()| ExitCode::SUCCESS),
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
