//! `outlive gateway`: a Solari-compatible gateway whose sessions die on schedule.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use tokio::net::TcpListener;

use crate::error::{Error, ErrorKind};

/// The flags of `outlive gateway`: a Solari-compatible gateway whose sessions die.
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
    /// Weather: hold each connection's browser frames for HOLD, every EVERY (e.g. 1.2s/10s).
    #[arg(long, value_name = "HOLD/EVERY", value_parser = parse_stall)]
    pub stall_flow: Option<(Duration, Duration)>,
    /// Weather: hold every connection's browser frames at once, HOLD every EVERY.
    #[arg(long, value_name = "HOLD/EVERY", value_parser = parse_stall)]
    pub stall_link: Option<(Duration, Duration)>,
    /// Weather: a random extra delay of up to DUR on each browser frame, order kept.
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub frame_jitter: Option<Duration>,
    /// Page chaos: `crash` or `close` every page of each session, once.
    ///
    /// It strikes `--page-fault-after` the session's creation; the browser lives on.
    #[arg(long, requires = "page_fault_after")]
    pub page_fault: Option<gateway::PageFault>,
    /// When the page fault strikes (must be shorter than the lifetime).
    #[arg(long, value_parser = humantime::parse_duration, requires = "page_fault")]
    pub page_fault_after: Option<Duration>,
    /// Also serve an Aurora Bank (its default user, password and TOTP secret) at this address.
    ///
    /// One bank that several `outlive worker --bank-url` share, so that a run taken over by
    /// another worker is seen signed in once.
    #[arg(long, value_name = "ADDR")]
    pub bank: Option<std::net::SocketAddr>,
}

impl GatewayArgs {
    /// Serves until `shutdown` resolves, logging at `info` (or `$RUST_LOG`) to stderr.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::GatewayOptions`] before anything listens, [`ErrorKind::Listen`], and
    /// [`ErrorKind::Serve`] if the gateway or the bank fails.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
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
        let config = config.weather(weather(self.stall_flow, self.stall_link, self.frame_jitter));
        // Before anything listens: a bad option is reported, not a half-started gateway.
        config
            .validate()
            .map_err(|e| Error::with(ErrorKind::GatewayOptions, e))?;
        let listener = listen(self.listen, GATEWAY).await?;
        let bank = match self.bank {
            Some(addr) => Some((listen(addr, BANK).await?, addr)),
            None => None,
        };
        println!(
            "gateway listening on http://{}",
            local_addr(&listener, self.listen, GATEWAY)?
        );
        let shutdown = futures::FutureExt::shared(shutdown);
        let bank = async {
            let Some((bank, addr)) = bank else {
                return Ok(());
            };
            println!(
                "Aurora Bank listening on http://{}",
                local_addr(&bank, addr, BANK)?
            );
            aurora::serve(bank, aurora::Config::new(), shutdown.clone())
                .await
                .map_err(|e| Error::with(ErrorKind::Serve { server: BANK }, e))
        };
        let gateway = async {
            gateway::serve(listener, config, shutdown.clone())
                .await
                .map_err(|e| Error::with(ErrorKind::Serve { server: GATEWAY }, e))
        };
        tokio::try_join!(gateway, bank).map(|_| ())
    }
}

/// The servers, as errors name them.
const GATEWAY: &str = "the gateway";
const BANK: &str = "the bank";

/// A listener on `addr` for `server`.
async fn listen(addr: SocketAddr, server: &'static str) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| Error::with(ErrorKind::Listen { addr, server }, e))
}

/// The address `listener` (asked for `addr`) got.
fn local_addr(
    listener: &TcpListener,
    addr: SocketAddr,
    server: &'static str,
) -> Result<SocketAddr, Error> {
    listener
        .local_addr()
        .map_err(|e| Error::with(ErrorKind::Listen { addr, server }, e))
}

/// The gateway's weather from the `--stall-*` and `--frame-jitter` flags.
fn weather(
    flow: Option<(Duration, Duration)>,
    link: Option<(Duration, Duration)>,
    frame_jitter: Option<Duration>,
) -> gateway::Weather {
    let mut weather = gateway::Weather::calm();
    if let Some((hold, every)) = flow {
        weather = weather.flows(hold, every);
    }
    if let Some((hold, every)) = link {
        weather = weather.link(hold, every);
    }
    if let Some(jitter) = frame_jitter {
        weather = weather.frame_jitter(jitter);
    }
    weather
}

/// `HOLD/EVERY`, two durations (e.g. `1.2s/10s`); their range is the library's to check.
fn parse_stall(s: &str) -> Result<(Duration, Duration), String> {
    let (hold, every) = s
        .split_once('/')
        .ok_or_else(|| "expected HOLD/EVERY, e.g. 1.2s/10s".to_owned())?;
    let parse = |what: &str, d: &str| {
        humantime::parse_duration(d.trim()).map_err(|e| format!("bad {what} {d:?} ({e})"))
    };
    Ok((parse("HOLD", hold)?, parse("EVERY", every)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_parse_as_hold_over_every() {
        let ms = Duration::from_millis;
        assert_eq!(parse_stall("1.2s/10s"), Ok((ms(1200), ms(10_000))));
        assert_eq!(parse_stall("600ms / 2s"), Ok((ms(600), ms(2000))));
        for bad in ["1s", "1s/", "/2s", "x/2s", "1s/2s/3s"] {
            assert!(parse_stall(bad).is_err(), "{bad}");
        }
    }
}
