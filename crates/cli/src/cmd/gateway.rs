//! `outlive gateway`: a Solari-compatible gateway whose sessions die on schedule.

use std::time::Duration;

use anyhow::Context;
use clap::Args;

/// Run a Solari-compatible gateway whose sessions die on schedule, until Ctrl-C.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct GatewayArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: std::net::SocketAddr,
    /// The API key clients must send.
    #[arg(long, default_value = "test-key")]
    pub api_key: String,
    /// Lifetime of each session.
    #[arg(long, default_value = "600s", value_parser = humantime::parse_duration)]
    pub lifetime: Duration,
    /// ± jitter on the lifetime.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub jitter: Duration,
    /// How sessions die: close, reset, silence or mixed.
    #[arg(long, default_value = "close")]
    pub death: gateway::DeathMode,
    /// Probability that a new browser is dead on arrival.
    #[arg(long, default_value_t = 0.0)]
    pub doa: f64,
    /// Answer `ended` for dead sessions instead of `active`.
    #[arg(long)]
    pub honest: bool,
    /// Added round-trip time per CDP message.
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    pub rtt: Duration,
    /// Concurrent sessions allowed.
    #[arg(long, default_value_t = 2)]
    pub max_sessions: usize,
    /// Page chaos: crash (`crash`) or close (`close`) every page of each session, once,
    /// `--page-fault-after` its creation; the browser lives on.
    #[arg(long, requires = "page_fault_after")]
    pub page_fault: Option<gateway::PageFault>,
    /// When the page fault strikes (must be shorter than the lifetime).
    #[arg(long, value_parser = humantime::parse_duration, requires = "page_fault")]
    pub page_fault_after: Option<Duration>,
    /// Also serve an Aurora Bank (its default user, password and TOTP secret) at this
    /// address: one bank that several `outlive worker --bank-url` share, so that a run taken
    /// over by another worker is seen signed in once.
    #[arg(long, value_name = "ADDR")]
    pub bank: Option<std::net::SocketAddr>,
}

impl GatewayArgs {
    /// Serves until `shutdown` resolves, logging at `info` (or `$RUST_LOG`) to stderr.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
            .with_writer(std::io::stderr)
            .init();
        let config = gateway::Config::new()
            .api_key(self.api_key)
            .lifetime(self.lifetime)
            .jitter(self.jitter)
            .death(self.death)
            .doa(self.doa)
            .honest(self.honest)
            .rtt(self.rtt)
            .max_sessions(self.max_sessions);
        let config = match (self.page_fault, self.page_fault_after) {
            (Some(fault), Some(after)) => config.page_fault(fault, after),
            _ => config,
        };
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .with_context(|| format!("could not listen on {}", self.listen))?;
        let bank = match self.bank {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("could not listen on {addr} for the bank"))?,
            ),
            None => None,
        };
        println!("gateway listening on http://{}", listener.local_addr()?);
        let shutdown = futures::FutureExt::shared(shutdown);
        let bank = async {
            let Some(bank) = bank else { return Ok(()) };
            println!("Aurora Bank listening on http://{}", bank.local_addr()?);
            aurora::serve(bank, aurora::Config::new(), shutdown.clone())
                .await
                .context("the bank failed")
        };
        let gateway = async {
            gateway::serve(listener, config, shutdown.clone())
                .await
                .context("the gateway failed")
        };
        tokio::try_join!(gateway, bank).map(|_| ())
    }
}
