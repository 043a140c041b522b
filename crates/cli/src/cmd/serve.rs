//! `outlive serve [options]`: the browser at one endpoint that outlives it, for clients that
//! reconnect by themselves (Playwright MCP's `--cdp-endpoint`, browser-use, a notebook).

use std::io::Write;

use clap::Args;
use outlive::{ErrorKind, RunError};

use super::run::EXIT_INTERNAL;
use super::{ProviderArgs, RunOptionArgs, interrupted};

/// The flags of `outlive serve`.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct ServeArgs {
    /// Where browsers come from.
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// How the run goes.
    #[command(flatten)]
    pub options: RunOptionArgs,
    /// Serve a task that runs in the caller's process (the TypeScript and Python packages).
    ///
    /// JSON lines: entries and the end on stdout, the task's outcome on stdin. The run ends
    /// when the task does. See docs/stdio.md.
    #[arg(long)]
    pub stdio: bool,
    /// Close each client's connection at a death, instead of carrying it to the next browser.
    ///
    /// For clients that reconnect by themselves and want to see each death.
    #[arg(long)]
    pub reconnect_clients: bool,
    /// Where its metrics are served.
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

impl ServeArgs {
    /// Serves until SIGINT or SIGTERM; answers the exit status.
    pub async fn run(self) -> i32 {
        let provider = match self.provider.provider() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("outlive: {e}");
                return outlive::EXIT_USAGE;
            }
        };
        // Served until the run returns.
        // The run as `/` of --metrics shows it (not under --stdio: its runs are the
        // caller's).
        let recent = crate::ui::RecentRuns::new();
        let (_server, metrics) = match super::serve_metrics(&self.metrics, &recent).await {
            Ok(Some((server, metrics))) => (Some(server), Some(metrics)),
            Ok(None) => (None, None),
            Err(code) => return code,
        };
        if self.stdio {
            return super::stdio::serve(provider.as_ref(), &self.options, metrics).await;
        }
        let this = recent.start();
        let ended = this.clone();
        let mut options = this
            .observe(self.options.options_with(move |e| {
                eprintln!("{}", super::summary(e));
                ended.finish(e);
            }))
            .carry_clients(!self.reconnect_clients);
        if let Some(metrics) = metrics {
            options = options.metrics(metrics);
        }
        if self.options.max_sessions.is_none() {
            // An endpoint an agent keeps working is no task that may never finish: no cap.
            options = options.max_sessions(u32::MAX);
        }
        if let Err(e) = options.validate() {
            eprintln!("outlive: {e}");
            return outlive::EXIT_USAGE;
        }
        let ready = |e: &outlive::Endpoints| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "OUTLIVE_CDP_URL={}", e.cdp_url);
            let _ = writeln!(out, "OUTLIVE_CDP_HTTP={}", e.cdp_http);
            let _ = writeln!(out, "OUTLIVE_CONTROL_URL={}", e.control_url);
            let _ = out.flush();
        };
        let stop = async {
            interrupted().await;
        };
        match outlive::serve(&provider, options, ready, stop).await {
            Ok(()) => 0,
            Err(RunError::Outlive(e)) if e.kind() == ErrorKind::GaveUp => outlive::EXIT_GAVE_UP,
            Err(e) => {
                eprintln!("outlive: {e}");
                EXIT_INTERNAL
            }
        }
    }
}
