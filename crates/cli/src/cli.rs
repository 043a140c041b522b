//! The command line of `outlive`: its subcommands and their flags, as clap parses them. The
//! binary parses it and runs the chosen command; the flags reference in the book is rendered
//! from it.

use clap::{Parser, Subcommand};

use crate::cmd;

/// Help is wrapped to the terminal, and never wider than this.
pub const HELP_WIDTH: usize = 100;

/// `outlive`'s command line.
#[derive(Parser)]
#[command(
    name = "outlive",
    version,
    about = "Make a browser task outlive its browser",
    max_term_width = HELP_WIDTH
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// `outlive`'s subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Run CMD against a browser that outlives its deaths.
    ///
    /// CMD gets a CDP endpoint ($OUTLIVE_CDP_URL) and a control URL. When the browser dies,
    /// outlive ends CMD, replaces the browser, restores cookies and storage, and runs CMD
    /// again with $OUTLIVE_ATTEMPT + 1.
    Run(cmd::run::RunArgs),
    /// Serve a browser that outlives its deaths at one CDP endpoint, until Ctrl-C or SIGTERM.
    ///
    /// For clients that reconnect by themselves. With --stdio, for the TypeScript and Python
    /// packages.
    Serve(cmd::serve::ServeArgs),
    /// Run the Aurora Bank task through outlive on an embedded gateway whose sessions die.
    Demo(cmd::demo::DemoArgs),
    /// Take durable runs from the PostgreSQL queue, until Ctrl-C or SIGTERM.
    ///
    /// Each run's checkpoints are sealed (key in $OUTLIVE_SEAL_KEY, 64 hex digits, or
    /// --key-file) and saved. A run whose worker died is taken over from its newest
    /// checkpoint. Without a provider flag, the worker runs its own Aurora Bank and a gateway
    /// whose sessions die.
    Worker(cmd::durable::WorkerArgs),
    /// Enqueue a durable run of a task by name; prints its run id.
    Submit(cmd::durable::SubmitArgs),
    /// Cancel a durable run.
    ///
    /// A queued run is never taken. A running one is stopped by its worker (its command
    /// ended, its browser released) within a heartbeat.
    Cancel(cmd::durable::CancelArgs),
    /// List durable runs: status, worker pickups, entries, result or error.
    ///
    /// With --history RUN_ID: that run's events (pickups, entries, deaths, checkpoints,
    /// takeovers, its end).
    Runs(cmd::durable::RunsArgs),
    /// Serve a page of the durable runs and their timelines, until Ctrl-C or SIGTERM.
    ///
    /// Each run's sessions as bars on a time axis, deaths marked by cause, checkpoints as
    /// ticks, redone work shaded. It refreshes while a run goes on.
    Ui(cmd::ui::UiArgs),
    /// Run a Solari-compatible gateway whose sessions die on schedule, until Ctrl-C.
    Gateway(cmd::gateway::GatewayArgs),
}
