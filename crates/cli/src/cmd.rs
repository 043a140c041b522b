//! The commands that run a user's program or serve a client: one `#[derive(Args)]` struct per
//! command, with its own `run`. The flags they share (the provider, the run options) are
//! [`ProviderArgs`] and [`RunOptionArgs`].

pub mod demo;
pub mod durable;
pub mod gateway;
pub mod run;
pub mod serve;
pub mod stdio;
pub mod ui;

use std::time::Duration;

use clap::Args;
use outlive::solari_browser::{Client, ClientOptions};
use outlive::{
    Cloud, Diagnostics, Dialect, Dialogs, Endpoint, LocalChromium, Options, Provider,
    ProviderCommand, Rotation, Solari, WideEvent,
};

use crate::error::{Error, ErrorKind};
use crate::traces::Traces;

/// Where browsers come from: local Chromium unless one of these is given.
#[derive(Args)] // no Debug: it holds a secret (an API key or a database URL)
pub struct ProviderArgs {
    /// A Solari-compatible API base URL to launch browsers from (key in SOLARI_API_KEY).
    #[arg(long, conflicts_with_all = ["cdp_url", "provider_cmd"])]
    pub solari_url: Option<String>,
    /// Its API key.
    #[arg(long, env = "SOLARI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Any CDP websocket URL (Browserless, Steel, …): each launch connects to it.
    #[arg(long, conflicts_with = "provider_cmd")]
    pub cdp_url: Option<String>,
    /// A program that launches browsers, and releases them.
    ///
    /// Run as given, it prints one JSON line, {"cdpUrl": URL, "id": ID} and an optional
    /// "lifetimeMs"; run with `release ID` appended, it releases that session. Split as a POSIX shell would
    /// (quotes; no variables or pipes).
    #[arg(long, value_name = "'PROG ARGS…'", conflicts_with = "provider")]
    pub provider_cmd: Option<String>,
    /// A cloud, by name: browserbase, steel, browserless, hyperbrowser, anchor, kernel or notte.
    ///
    /// Its key comes from its usual variable (BROWSERBASE_API_KEY, STEEL_API_KEY, …).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["solari_url", "cdp_url"])]
    pub provider: Option<String>,
    /// The cloud's API base URL (self-hosted, a proxy, a test bed).
    #[arg(long, requires = "provider")]
    pub provider_url: Option<String>,
    /// Members of every session's create body, as a JSON object.
    ///
    /// In the cloud's own names (project id, region, proxy, …).
    #[arg(long, value_name = "JSON", requires = "provider")]
    pub session_options: Option<String>,
    /// The lifetime each session asks for (its `timeout`, `ttl`, …).
    ///
    /// Rotation leaves each browser before it.
    #[arg(long, value_parser = humantime::parse_duration, requires = "provider")]
    pub session_timeout: Option<Duration>,
}

impl ProviderArgs {
    /// Whether a provider was named (else: local Chromium, or the worker's own test bed).
    pub fn given(&self) -> bool {
        self.solari_url.is_some()
            || self.cdp_url.is_some()
            || self.provider_cmd.is_some()
            || self.provider.is_some()
    }

    /// The provider the flags name.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Flag`] for a flag that is wrong or lacks what it needs,
    /// [`ErrorKind::LocalChromium`] when no flag names a provider and there is no Chromium.
    pub fn provider(&self) -> Result<Box<dyn Provider>, Error> {
        if let Some(line) = &self.provider_cmd {
            return Ok(Box::new(provider_command(line)?));
        }
        if let Some(name) = &self.provider {
            return Ok(Box::new(self.cloud(name)?));
        }
        match (&self.solari_url, &self.cdp_url) {
            (Some(url), _) => {
                let Some(key) = &self.api_key else {
                    return Err(Error::flag(
                        "--solari-url",
                        "needs an API key: set SOLARI_API_KEY (or --api-key)",
                    ));
                };
                let client = Client::new(ClientOptions::new(key.clone(), url.clone()))
                    .map_err(|e| Error::flag("--solari-url", e.to_string()))?;
                Ok(Box::new(Solari::new(client)))
            }
            (None, Some(url)) => {
                outlive::CdpEndpoint::new(url.clone())
                    .map_err(|e| Error::flag("--cdp-url", e.to_string()))?;
                let url = url.clone();
                Ok(Box::new(Endpoint::new(move || {
                    let url = url.clone();
                    async move { Ok(url) }
                })))
            }
            (None, None) => {
                let local = LocalChromium::new();
                local
                    .resolve_executable()
                    .map_err(|e| Error::with(ErrorKind::LocalChromium, e))?;
                Ok(Box::new(local))
            }
        }
    }
}

impl ProviderArgs {
    /// The cloud of `--provider NAME`, its key from its variable.
    fn cloud(&self, name: &str) -> Result<Cloud, Error> {
        let Some(dialect) = Dialect::named(name) else {
            let known: Vec<&str> = Dialect::ALL.iter().map(|d| d.name()).collect();
            return Err(Error::flag(
                "--provider",
                format!("no such provider {name}; use one of {}", known.join(", ")),
            ));
        };
        let key = std::env::var(dialect.key_env()).unwrap_or_default();
        if key.is_empty() {
            return Err(Error::flag(
                "--provider",
                format!("{name} needs its API key in {}", dialect.key_env()),
            ));
        }
        let mut cloud = Cloud::new(dialect, key);
        if let Some(url) = &self.provider_url {
            url::Url::parse(url).map_err(|e| Error::flag("--provider-url", e.to_string()))?;
            cloud = cloud.base_url(url.clone());
        }
        if let Some(json) = &self.session_options {
            let options: serde_json::Value = serde_json::from_str(json)
                .map_err(|e| Error::flag("--session-options", format!("not JSON: {e}")))?;
            let serde_json::Value::Object(options) = options else {
                return Err(Error::flag("--session-options", "must be a JSON object"));
            };
            cloud = cloud.session_options(options);
        }
        if let Some(timeout) = self.session_timeout {
            if !dialect.sets_lifetime() {
                return Err(Error::flag(
                    "--session-timeout",
                    format!("{name} sessions take no lifetime at their create"),
                ));
            }
            cloud = cloud.timeout(timeout);
        }
        Ok(cloud)
    }
}

/// The provider of `--provider-cmd 'PROG ARGS…'`, its program found now.
fn provider_command(line: &str) -> Result<ProviderCommand, Error> {
    const FLAG: &str = "--provider-cmd";
    let words = shlex::split(line).ok_or_else(|| {
        Error::flag(
            FLAG,
            "does not parse (an unclosed quote or a trailing backslash?)",
        )
    })?;
    let Some((program, args)) = words.split_first() else {
        return Err(Error::flag(
            FLAG,
            "empty: give the program that launches browsers",
        ));
    };
    outlive::Command::new(program)
        .find_program()
        .map_err(|why| Error::flag(FLAG, format!("`{program}` {why}")))?;
    Ok(ProviderCommand::new(program).args(args))
}

/// The cap on sessions when `--max-sessions` is not given (the library's); `serve` has none.
const DEFAULT_MAX_SESSIONS: u32 = 100;

/// The run options of library mode, as flags (durations as `2s`, `500ms`).
#[derive(Debug, Args)]
pub struct RunOptionArgs {
    /// Interval of the automatic checkpoint.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub checkpoint_every: Duration,
    /// Browser deaths (and failed launches) in a row without progress before the run gives up.
    ///
    /// New progress posted to the control URL (under `serve`, a client's command) starts the
    /// count again.
    #[arg(long, default_value_t = 5)]
    pub max_relaunches: u32,
    /// Page failures in a live browser, in a row without progress, before the run gives up.
    #[arg(long, default_value_t = 10)]
    pub max_page_recoveries: u32,
    /// Browser sessions the whole run may use before it gives up, progress or not.
    ///
    /// [default: 100; no cap under `serve`, an endpoint left running]
    #[arg(long)]
    pub max_sessions: Option<u32>,
    /// The page's first URL (before any checkpoint).
    #[arg(long)]
    pub start_url: Option<String>,
    /// Cap on the resume navigation.
    ///
    /// Also how long a client connecting between browsers waits for the next.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub navigation_timeout: Duration,
    /// Heartbeat interval on the browser connection (silence detection).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub heartbeat: Option<Duration>,
    /// Leave each browser before its predicted death: `expected:600s` or `learned`.
    #[arg(long, value_parser = parse_rotation)]
    pub rotate: Option<Rotation>,
    /// Keep a warm standby browser for deaths nobody predicted.
    #[arg(long)]
    pub standby: bool,
    /// Do not keep typed form fields, scroll positions and back/forward lists across a death.
    ///
    /// Kept by default, except passwords, `autocomplete="off"` and file fields.
    #[arg(long)]
    pub no_page_state: bool,
    /// JavaScript dialogs on the page: `leave`, `dismiss` or `accept` them.
    ///
    /// `leave` leaves them to the script's client: the default for a command, since
    /// Playwright dismisses those no handler takes.
    #[arg(long, value_parser = parse_dialogs)]
    pub dialogs: Option<Dialogs>,
    /// Write the run's wide event here, as JSON.
    #[arg(long)]
    pub event_file: Option<std::path::PathBuf>,
    /// Wait after a launch that failed (a death relaunches at once).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub relaunch_backoff: Duration,
    /// Size of the page, `WIDTHxHEIGHT`.
    #[arg(long, default_value = "1280x800", value_parser = parse_viewport)]
    pub viewport: (u32, u32),
    /// What logs and the wide event may reveal: `safe` or `full`.
    ///
    /// `safe`: URLs reduced to hosts, credentials blanked. `full`: raw text.
    #[arg(long, default_value = "safe", value_parser = parse_diagnostics)]
    pub diagnostics: Diagnostics,
}

fn parse_viewport(s: &str) -> Result<(u32, u32), String> {
    s.split_once(['x', 'X'])
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .ok_or_else(|| "use WIDTHxHEIGHT, e.g. 1280x800".to_owned())
}

fn parse_diagnostics(s: &str) -> Result<Diagnostics, String> {
    match s {
        "safe" => Ok(Diagnostics::Safe),
        "full" => Ok(Diagnostics::Full),
        _ => Err("use safe or full".to_owned()),
    }
}

fn parse_dialogs(s: &str) -> Result<Dialogs, String> {
    match s {
        "dismiss" => Ok(Dialogs::Dismiss),
        "accept" => Ok(Dialogs::Accept),
        "leave" => Ok(Dialogs::Leave),
        _ => Err("use dismiss, accept or leave".to_owned()),
    }
}

fn parse_rotation(s: &str) -> Result<Rotation, String> {
    match s.split_once(':') {
        None if s == "learned" => Ok(Rotation::Learned),
        None if s == "off" => Ok(Rotation::Off),
        Some(("expected", d)) => humantime::parse_duration(d)
            .map(Rotation::Expected)
            .map_err(|e| format!("expected:DURATION, e.g. expected:600s ({e})")),
        _ => Err("use expected:DURATION (e.g. expected:600s), learned or off".to_owned()),
    }
}

impl RunOptionArgs {
    /// The library's options; the wide event goes to `--event-file` and, summarised, to
    /// stderr.
    pub fn options(&self) -> Options {
        self.options_with(|e| eprintln!("{}", summary(e)))
    }

    /// The library's options; the wide event goes to `--event-file` and to `sink`.
    pub fn options_with(&self, sink: impl Fn(&WideEvent) + Send + Sync + 'static) -> Options {
        let mut o = Options::new()
            .checkpoint_every(self.checkpoint_every)
            .max_relaunches(self.max_relaunches)
            .max_page_recoveries(self.max_page_recoveries)
            .max_sessions(self.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS))
            .navigation_timeout(self.navigation_timeout)
            .standby(self.standby)
            .page_state(!self.no_page_state)
            .relaunch_backoff(self.relaunch_backoff)
            .viewport(self.viewport.0, self.viewport.1)
            .diagnostics(self.diagnostics);
        // Unset: a lifetime the provider's sessions state.
        if let Some(rotation) = self.rotate {
            o = o.rotation(rotation);
        }
        if let Some(url) = &self.start_url {
            o = o.start_url(url.clone());
        }
        if let Some(h) = self.heartbeat {
            o = o.heartbeat_interval(h);
        }
        if let Some(d) = self.dialogs {
            o = o.dialogs(d);
        }
        let file = self.event_file.clone();
        o.on_event(move |e| {
            if let Some(path) = &file {
                if let Err(err) = std::fs::write(path, e.to_json() + "\n") {
                    eprintln!(
                        "outlive: could not write the event to {}: {err}",
                        path.display()
                    );
                }
            }
            sink(e);
        })
    }
}

/// `--metrics`, served with the runs of `runs` at `/`, and the handle runs record into; or,
/// when it cannot be served, the exit status (the error said on stderr).
pub async fn serve_metrics(
    flags: &crate::metrics::MetricsArgs,
    runs: &crate::ui::RecentRuns,
) -> Result<Option<(crate::metrics::MetricsServer, outlive::Metrics)>, i32> {
    let runs = std::sync::Arc::new(runs.clone());
    flags
        .serve(outlive::Metrics::register, runs)
        .await
        .map_err(|e| {
            eprintln!("outlive: {}", chain(&e));
            outlive::EXIT_USAGE
        })
}

/// An error and its causes, as one line: `what failed: why: …`.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    line
}

/// The wide event in one line.
pub fn summary(e: &WideEvent) -> String {
    let mut line = format!(
        "outlive: {} in {:.1} s — {} attempt{}, {} relaunch{}, {} rotation{}, {} checkpoint{}, redone {:.1} s",
        e.outcome.as_str(),
        e.total_ms as f64 / 1000.0,
        e.attempts,
        if e.attempts == 1 { "" } else { "s" },
        e.relaunches,
        if e.relaunches == 1 { "" } else { "es" },
        e.rotations,
        if e.rotations == 1 { "" } else { "s" },
        e.checkpoint_count,
        if e.checkpoint_count == 1 { "" } else { "s" },
        e.redone_ms as f64 / 1000.0,
    );
    if let Some(err) = &e.error {
        line.push_str(&format!(" — {err}"));
    }
    line
}

/// The first SIGINT or SIGTERM, as its number. The handlers are in place when this returns,
/// before the future is first polled.
pub fn interrupted() -> impl Future<Output = i32> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    async move {
        tokio::select! {
            _ = int.recv() => 2,
            _ = term.recv() => 15,
        }
    }
}

/// The command line as `C`, or the exit status to leave with: 0 after `--help` or
/// `--version`, [`EXIT_USAGE`](outlive::EXIT_USAGE) after a bad command line (clap has printed
/// either).
pub fn parse<C: clap::Parser>() -> Result<C, std::process::ExitCode> {
    C::try_parse().map_err(|e| {
        let _ = e.print();
        std::process::ExitCode::from(if e.use_stderr() {
            outlive::EXIT_USAGE as u8
        } else {
            0
        })
    })
}

/// Sends tracing to stderr, filtered by `RUST_LOG`, when it is set; and outlive's spans to an
/// OTLP collector, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. Keep the answer until the
/// process ends: dropping it sends the last spans.
pub fn log_to_stderr() -> Option<Traces> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _};
    let log = EnvFilter::try_from_env("RUST_LOG").ok().map(|filter| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
    });
    let traces = Traces::from_env().unwrap_or_else(|e| {
        // A build error may quote the endpoint, and a token in it.
        let e = outlive::redact::redact(&e.to_string(), outlive::Diagnostics::Safe);
        eprintln!("outlive: traces are off: {e}");
        None
    });
    if log.is_none() && traces.is_none() {
        return None;
    }
    let otel = traces.as_ref().map(Traces::layer);
    tracing_subscriber::registry().with(log).with(otel).init();
    traces
}

/// An exit status as the process's.
pub fn status(code: i32) -> std::process::ExitCode {
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Runs `work` until it ends or SIGINT/SIGTERM arrives. On a signal, `work` is dropped (and,
/// as `main` returns, every task it spawned), which ends each browser it started and removes
/// its profile; `program` says so, and the exit status is 128 + the signal's number.
pub async fn until_interrupted(
    program: &str,
    work: impl Future<Output = Result<(), Error>>,
) -> Result<std::process::ExitCode, Error> {
    let interrupted = interrupted();
    tokio::select! {
        done = work => done.map(|()| std::process::ExitCode::SUCCESS),
        signal = interrupted => {
            eprintln!("{program}: interrupted; its browsers are closed");
            Ok(status(128 + signal))
        }
    }
}
