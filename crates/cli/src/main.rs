//! `outlive`: the command. Parses arguments with clap and calls `outlive_cli`. The lab's
//! commands (`bench`, `soak`, `probe`) are the `outlive-lab` binary.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use outlive_cli::cmd;

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
    let cli: Cli = match cmd::parse() {
        Ok(cli) => cli,
        Err(status) => return Ok(status),
    };
    // The gateway sets up its own logging.
    if !matches!(cli.command, Command::Gateway(_)) {
        cmd::log_to_stderr();
    }
    // Returning (rather than `process::exit`) lets the runtime shut down: every task a command
    // spawned is dropped, and with it every browser it started and its profile.
    match cli.command {
        // These two end their command and browsers on SIGINT/SIGTERM themselves.
        Command::Run(args) => Ok(cmd::status(args.run().await)),
        Command::Serve(args) => Ok(cmd::status(args.run().await)),
        Command::Demo(args) => Ok(cmd::until_interrupted("outlive", args.run()).await?),
        Command::Gateway(args) => {
            let interrupted = cmd::interrupted();
            args.run(async {
                interrupted.await;
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Worker(args) => {
            args.run().await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Submit(args) => {
            args.run().await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Cancel(args) => {
            args.run().await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Runs(args) => {
            args.run().await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
