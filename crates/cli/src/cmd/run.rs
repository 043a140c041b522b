//! `outlive run [options] -- CMD [ARGS…]`: any program, in any language, made to outlive its
//! browser.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use clap::Args;
use outlive::{Command, EXIT_GAVE_UP, EXIT_NOT_FOUND, EXIT_USAGE, ErrorKind, RunError};

use super::{ProviderArgs, RunOptionArgs, interrupted};

/// Exit status for a failure of outlive itself (`EX_SOFTWARE`).
pub const EXIT_INTERNAL: i32 = 70;

/// The flags of `outlive run`.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct RunArgs {
    /// Where browsers come from.
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// How the run goes.
    #[command(flatten)]
    pub options: RunOptionArgs,
    /// Where its metrics are served.
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
    /// After SIGTERM, how long the command has before its process group is killed.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub kill_after: Duration,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// Runs the command; answers the exit status `outlive` should exit with.
    pub async fn run(self) -> i32 {
        let Some((program, args)) = self.command.split_first() else {
            eprintln!("outlive: no command given: outlive run [options] -- CMD [ARGS…]");
            return EXIT_USAGE;
        };
        let command = Command::new(program).args(args).kill_after(self.kill_after);
        if let Err(why) = command.find_program() {
            eprintln!("outlive: {}: {why}", Path::new(program).display());
            return EXIT_NOT_FOUND;
        }
        let provider = match self.provider.provider() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("outlive: {e}");
                return EXIT_USAGE;
            }
        };
        // The run as `/` of --metrics shows it.
        let recent = crate::ui::RecentRuns::new();
        let this = recent.start();
        let ended = this.clone();
        let mut options = this.observe(self.options.options_with(move |e| {
            eprintln!("{}", super::summary(e));
            ended.finish(e);
        }));
        if let Err(e) = options.validate() {
            eprintln!("outlive: {e}");
            return EXIT_USAGE;
        }
        // Served until the run returns.
        let _metrics = match super::serve_metrics(&self.metrics, &recent).await {
            Ok(Some((server, metrics))) => {
                options = options.metrics(metrics);
                Some(server)
            }
            Ok(None) => None,
            Err(code) => return code,
        };
        match outlive::run_command(&provider, &command, options, interrupted()).await {
            Ok(()) => 0,
            Err(RunError::Task(failed)) => {
                if let outlive::CommandFailed::Spawn(e) = &failed {
                    eprintln!("outlive: {}: {e}", Path::new(program).display());
                }
                failed.exit_code()
            }
            Err(RunError::Outlive(e)) => match e.kind() {
                ErrorKind::GaveUp => EXIT_GAVE_UP,
                ErrorKind::InvalidOption => EXIT_USAGE,
                _ => {
                    eprintln!("outlive: {e}");
                    EXIT_INTERNAL
                }
            },
        }
    }
}
