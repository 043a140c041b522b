//! `outlive`: the command. Parses its [`Cli`] and calls `outlive_cli`. The lab's
//! commands (`bench`, `soak`, `probe`) are the `outlive-lab` binary.

use std::process::ExitCode;

use outlive_cli::cli::{Cli, Command};
use outlive_cli::cmd;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli: Cli = match cmd::parse() {
        Ok(cli) => cli,
        Err(status) => return Ok(status),
    };
    // The gateway sets up its own logging. Traces are sent until this is dropped, as `main`
    // returns.
    let _traces = if matches!(cli.command, Command::Gateway(_)) {
        None
    } else {
        cmd::log_to_stderr()
    };
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
        Command::Ui(args) => {
            args.run().await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
