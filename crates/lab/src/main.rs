//! `outlive-lab`: the lab's command. Parses arguments with clap and calls `outlive_lab`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use outlive_lab::cmd;

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
    Bench(cmd::BenchArgs),
    /// Measure how long a provider's sessions really live: create, hold idle, note when the
    /// connection dies, repeat. Without --base-url, probes an embedded gateway.
    Probe(cmd::ProbeArgs),
    /// Many short runs with random deaths of every mode, then a leak audit (sessions,
    /// processes, temp profiles, file descriptors, memory); writes docs/measurements/soak.json.
    Soak(cmd::SoakArgs),
    /// False deaths per hour under network weather, and detection latency per death kind,
    /// before and after; writes raw JSON and a summary under --out.
    Weather(cmd::WeatherArgs),
    /// The program `bench --silence-only` runs under `run`.
    #[command(name = "silence-program", hide = true)]
    SilenceProgram(cmd::SilenceProgramArgs),
    /// One arm of `bench --watching-only`.
    #[command(name = "watching-arm", hide = true)]
    WatchingArm(cmd::WatchingArmArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli: Cli = match cmd::parse() {
        Ok(cli) => cli,
        Err(status) => return Ok(status),
    };
    cmd::log_to_stderr();
    let status = match cli.command {
        Command::Bench(args) => cmd::until_interrupted(args.run()).await?,
        Command::Soak(args) => cmd::until_interrupted(args.run()).await?,
        Command::Probe(args) => cmd::until_interrupted(args.run()).await?,
        Command::Weather(args) => cmd::until_interrupted(args.run()).await?,
        Command::SilenceProgram(args) => args.run().await?,
        Command::WatchingArm(args) => args.run().await?,
    };
    Ok(status)
}
