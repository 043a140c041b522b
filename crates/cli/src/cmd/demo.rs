//! `outlive demo`: the Aurora Bank task through outlive on an embedded gateway whose sessions
//! die.

use std::time::Duration;

use clap::Args;

use crate::demo::{self, DemoConfig};
use crate::error::Error;

/// The flags of `outlive demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Lifetime of each browser session.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lifetime: Duration,
    /// How long the task's polling takes without deaths.
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    pub task: Duration,
    /// How sessions die: close, reset, silence or mixed.
    #[arg(long, default_value = "mixed")]
    pub death: gateway::DeathMode,
    /// Probability that a new browser is dead on arrival.
    #[arg(long, default_value_t = 0.0)]
    pub doa: f64,
    /// Print only the wide event, as JSON, as the last line.
    #[arg(long)]
    pub json: bool,
}

impl DemoArgs {
    /// Runs the demo in the terminal.
    ///
    /// # Errors
    ///
    /// As [`demo::run_in_terminal`].
    pub async fn run(self) -> Result<(), Error> {
        let config = DemoConfig {
            lifetime: self.lifetime,
            task: self.task,
            death: self.death,
            doa: self.doa,
            ..DemoConfig::default()
        };
        demo::run_in_terminal(&config, self.json).await?;
        Ok(())
    }
}
