//! `outlive probe`: how long a provider's sessions really live.

use std::time::Duration;

use clap::Args;

use crate::probe;

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
    pub async fn run(self) -> anyhow::Result<()> {
        let target = match (self.base_url, self.api_key) {
            (None, _) => probe::Target::Embedded {
                lifetime: self.lifetime,
            },
            (Some(base_url), Some(api_key)) => probe::Target::Provider { base_url, api_key },
            (Some(_), None) => anyhow::bail!("--base-url needs --api-key (or SOLARI_API_KEY)"),
        };
        probe::run(target, self.sessions, self.max_hold, self.heartbeat).await?;
        Ok(())
    }
}
