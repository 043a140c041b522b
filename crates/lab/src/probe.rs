//! `outlive-lab probe`: how long a provider's browser sessions really live.
//!
//! For each session in turn: create it through the Solari control plane, open its CDP
//! websocket and hold it idle with a `Browser.getVersion` heartbeat. Then time its death: a
//! close frame, a read error or reset, or a heartbeat left unanswered. Then ask the control
//! plane what it thinks of the session (Solari keeps answering `active` for a dead one) and
//! release it, on every path.
//!
//! The CDP endpoint carries a bearer token in its query; it goes to the websocket connect and
//! nowhere else — not into a [`Sample`], an [`Error`] or a tracing field.

mod hold; // the idle websocket and its heartbeat
mod lease; // the release on every path
mod report; // the summary

pub use report::summary;

use std::fmt;
use std::time::Duration;

use async_tungstenite::tokio::connect_async;
use outlive::CdpEndpoint;
use outlive::Diagnostics;
use outlive::redact::{redact, redact_url};
use outlive::solari_browser::{Client, ClientOptions};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, ErrorKind};
use hold::{Held, handshake_error, hold};
use lease::Lease;

/// How long the websocket handshake to a new session may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// What to probe, and how. Build it with [`ProbeConfig::new`] and adjust the public fields;
/// [`probe`] validates it before creating anything.
#[derive(Clone)]
pub struct ProbeConfig {
    /// The control plane's base URL, `http(s)://host[:port]`.
    pub base_url: String,
    /// The API key for the control plane.
    pub api_key: String,
    /// How many sessions to hold, one after another. At least 1.
    ///
    /// # Default
    ///
    /// 3.
    pub sessions: u32,
    /// How long to wait for a session to die, counted from its create request; a session
    /// still alive then is sampled as `alive`. Greater than zero.
    ///
    /// # Default
    ///
    /// 20 minutes (Solari's sessions are meant to last 10).
    pub max_hold: Duration,
    /// How often a `Browser.getVersion` is sent on the idle websocket; it is also the reply
    /// deadline, so a heartbeat unanswered when the next is due is a death by silence. (The
    /// first heartbeat, sent on connect, may take up to 30 s to be answered: a browser just
    /// launched can be slow to answer anything.) Greater than zero.
    ///
    /// # Default
    ///
    /// 5 s.
    pub heartbeat: Duration,
}

impl ProbeConfig {
    /// A probe of the control plane at `base_url`, with every default.
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        ProbeConfig {
            base_url: base_url.into(),
            api_key: api_key.into(),
            sessions: 3,
            max_hold: Duration::from_secs(20 * 60),
            heartbeat: Duration::from_secs(5),
        }
    }

    /// Checks every option.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`] naming the first option out of range.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid =
            |option, message| Err(Error::new(ErrorKind::InvalidOption { option, message }));
        let scheme_ok = ["http://", "https://"].iter().any(|s| {
            self.base_url.len() > s.len() && self.base_url[..s.len()].eq_ignore_ascii_case(s)
        });
        if !scheme_ok {
            return invalid("base_url", "must be an http:// or https:// URL with a host");
        }
        if self.api_key.is_empty() || !self.api_key.bytes().all(|b| b.is_ascii_graphic()) {
            return invalid("api_key", "must be non-empty visible ASCII");
        }
        if self.sessions == 0 {
            return invalid("sessions", "must be at least 1");
        }
        if self.max_hold.is_zero() {
            return invalid("max_hold", "must be greater than zero");
        }
        if self.heartbeat.is_zero() {
            return invalid("heartbeat", "must be greater than zero");
        }
        Ok(())
    }
}

/// Hand-written so the API key is never printed.
impl fmt::Debug for ProbeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeConfig")
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &"<redacted>")
            .field("sessions", &self.sessions)
            .field("max_hold", &self.max_hold)
            .field("heartbeat", &self.heartbeat)
            .finish()
    }
}

/// One session's measurement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// The session's index in the probe, from 0 (not the provider's id).
    pub session: u32,
    /// From the create request to the death; `None` if the session was still alive at
    /// `max_hold`, or could not be held. For a death by silence it is when the unanswered
    /// heartbeat was sent (the death came before it, after the previous reply).
    pub lifetime_ms: Option<u64>,
    /// How it ended: `close` (a close frame, or the connection ended cleanly), `reset` (a
    /// read or write error), `silence` (a heartbeat unanswered within the interval; the first
    /// within 30 s), `alive`
    /// (still alive at `max_hold`) or `error` (the websocket could not be opened).
    pub cause: String,
    /// The `status` that `GET /sessions/:id` answered right after the hold ended; `None` if
    /// the request failed or the answer had no status.
    pub control_plane_said: Option<String>,
}

/// A client error's text with URLs cut to scheme and host and credential-shaped values
/// blanked: a create's protocol error can echo the response body, endpoints and all.
fn redacted(e: &dyn fmt::Display) -> Box<dyn std::error::Error + Send + Sync> {
    redact(&e.to_string(), Diagnostics::Safe).into()
}

/// How a held session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Close,
    Reset,
    Silence,
    Alive,
    Error,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Close => "close",
            Cause::Reset => "reset",
            Cause::Silence => "silence",
            Cause::Alive => "alive",
            Cause::Error => "error",
        }
    }
}

/// Probes `config.sessions` sessions one after another and returns a sample for each;
/// `on_sample` sees each sample as soon as its session is released.
///
/// ```no_run
/// # async fn demo() -> Result<(), outlive_lab::Error> {
/// use outlive_lab::probe::{probe, summary, ProbeConfig};
///
/// let config = ProbeConfig::new("https://api.solari.dev", "sk-…");
/// let samples = probe(&config, |s| println!("{s:?}")).await?;
/// println!("{}", summary(&samples));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`ErrorKind::InvalidOption`] before anything starts; [`ErrorKind::Client`] if the
/// client cannot be built; [`ErrorKind::Create`] if the control plane refuses a session
/// (the probe stops there: every session before it was released and passed to `on_sample`).
/// A session that is created but whose websocket cannot be opened is a sample with cause
/// `error`, not an error.
#[tracing::instrument(skip_all, fields(provider = %redact_url(&config.base_url), sessions = config.sessions))]
pub async fn probe(
    config: &ProbeConfig,
    on_sample: impl Fn(&Sample),
) -> Result<Vec<Sample>, Error> {
    config.validate()?;
    let client = Client::new(ClientOptions::new(
        config.api_key.clone(),
        config.base_url.clone(),
    ))
    .map_err(|e| Error::with(ErrorKind::Client, redacted(&e)))?;
    let mut samples = Vec::with_capacity(config.sessions as usize);
    for index in 0..config.sessions {
        let sample = probe_one(&client, config, index)
            .instrument(tracing::info_span!("probe_session", session = index))
            .await?;
        on_sample(&sample);
        samples.push(sample);
    }
    Ok(samples)
}

async fn probe_one(client: &Client, config: &ProbeConfig, index: u32) -> Result<Sample, Error> {
    let asked = Instant::now();
    let session = client
        .sessions()
        .create(Default::default())
        .await
        .map_err(|e| {
            let kind = ErrorKind::Create {
                session: index,
                status: e.status(),
            };
            Error::with(kind, redacted(&e))
        })?;
    let lease = Lease::new(client.clone(), session.id);
    tracing::debug!("session created");

    let (cause, died_at) = match CdpEndpoint::new(session.cdp_endpoint) {
        Err(e) => {
            tracing::warn!(error = %e, "the control plane gave an unusable CDP endpoint");
            (Cause::Error, None)
        }
        Ok(endpoint) => {
            match tokio::time::timeout(CONNECT_TIMEOUT, connect_async(endpoint.expose())).await {
                Err(_) => {
                    tracing::warn!(endpoint = %endpoint, timeout = ?CONNECT_TIMEOUT, "the CDP websocket did not open in time");
                    (Cause::Error, None)
                }
                Ok(Err(e)) => {
                    tracing::warn!(endpoint = %endpoint, error = %handshake_error(&e), "the CDP websocket did not open");
                    (Cause::Error, None)
                }
                Ok(Ok((ws, _))) => {
                    match hold(ws, config.heartbeat, asked + config.max_hold).await {
                        Held::Died { cause, at } => (cause, Some(at)),
                        Held::Alive => (Cause::Alive, None),
                    }
                }
            }
        }
    };
    let lifetime_ms = died_at.map(|at| at.saturating_duration_since(asked).as_millis() as u64);

    let control_plane_said = match client.sessions().get(lease.id()).await {
        Ok(view) => view.status,
        Err(e) => {
            tracing::debug!(error = %redact(&e.to_string(), Diagnostics::Safe), "could not ask the control plane");
            None
        }
    };
    tracing::info!(
        cause = cause.as_str(),
        lifetime_ms,
        control_plane_said = control_plane_said.as_deref(),
        "session ended"
    );
    if let Err(e) = lease.release().await {
        tracing::warn!(error = %redact(&e.to_string(), Diagnostics::Safe), "release failed");
    }
    Ok(Sample {
        session: index,
        lifetime_ms,
        cause: cause.as_str().to_owned(),
        control_plane_said,
    })
}

/// One line for people: `session 1: 10.2 s, close (control plane said: active)`.
impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lifetime = self.lifetime_ms.map_or("still alive".to_owned(), |ms| {
            format!("{:.1} s", ms as f64 / 1000.0)
        });
        let said = self.control_plane_said.as_deref().unwrap_or("?");
        write!(
            f,
            "session {}: {lifetime}, {} (control plane said: {said})",
            self.session + 1,
            self.cause
        )
    }
}

/// Whose sessions `outlive-lab probe` measures.
#[derive(Clone)]
pub enum Target {
    /// A Solari-compatible control plane.
    Provider {
        /// Its base URL, `http(s)://host[:port]`.
        base_url: String,
        /// Its API key.
        api_key: String,
    },
    /// A gateway started for the probe, whose sessions live `lifetime` ± a tenth (needs
    /// Chromium).
    Embedded {
        /// The gateway's session lifetime.
        lifetime: Duration,
    },
}

/// Hand-written so the API key is never printed.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Provider { base_url, .. } => f
                .debug_struct("Provider")
                .field("base_url", &redact_url(base_url))
                .field("api_key", &"<redacted>")
                .finish(),
            Target::Embedded { lifetime } => f
                .debug_struct("Embedded")
                .field("lifetime", lifetime)
                .finish(),
        }
    }
}

/// `outlive-lab probe`: probes `target`'s sessions with the [`ProbeConfig`] settings given,
/// printing each sample as it comes and then the [`summary`]. An embedded gateway is shut
/// down at the end.
///
/// # Errors
///
/// What [`probe`] reports; for an embedded gateway also what
/// [`ensure_chromium`](outlive_bed::setup::ensure_chromium) reports, and [`ErrorKind::Bed`] if
/// the gateway does not start or stop cleanly.
pub async fn run(
    target: Target,
    sessions: u32,
    max_hold: Duration,
    heartbeat: Duration,
) -> Result<Vec<Sample>, Error> {
    let (base_url, api_key, embedded) = match target {
        Target::Provider { base_url, api_key } => (base_url, api_key, None),
        Target::Embedded { lifetime } => {
            outlive_bed::setup::ensure_chromium()?;
            let gw = gateway::spawn(
                gateway::Config::new()
                    .lifetime(lifetime)
                    .jitter(lifetime / 10),
            )
            .await
            .map_err(|e| Error::with(ErrorKind::Bed(outlive_bed::ErrorKind::Gateway), e))?;
            (gw.base_url().to_owned(), gw.api_key().to_owned(), Some(gw))
        }
    };
    let config = ProbeConfig {
        sessions,
        max_hold,
        heartbeat,
        ..ProbeConfig::new(base_url, api_key)
    };
    println!(
        "probing {} sessions, one after another (heartbeat {:?})",
        config.sessions, config.heartbeat
    );
    let samples = probe(&config, |s| println!("  {s}")).await?;
    println!("{}", summary(&samples));
    if let Some(gw) = embedded {
        gw.shutdown()
            .await
            .map_err(|e| Error::with(ErrorKind::Bed(outlive_bed::ErrorKind::Gateway), e))?;
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(session: u32, lifetime_ms: Option<u64>, cause: &str, said: Option<&str>) -> Sample {
        Sample {
            session,
            lifetime_ms,
            cause: cause.to_owned(),
            control_plane_said: said.map(str::to_owned),
        }
    }

    #[test]
    fn defaults_are_valid() {
        assert!(
            ProbeConfig::new("http://127.0.0.1:7070", "test-key")
                .validate()
                .is_ok()
        );
        let config = ProbeConfig::new("https://api.example.com", "k");
        assert_eq!(config.heartbeat, Duration::from_secs(5));
        assert!(config.validate().is_ok());
    }

    #[test]
    fn each_bad_option_is_named() {
        let base = || ProbeConfig::new("http://127.0.0.1:7070", "test-key");
        let cases = [
            (
                ProbeConfig {
                    base_url: "127.0.0.1:7070".into(),
                    ..base()
                },
                "base_url",
            ),
            (
                ProbeConfig {
                    base_url: "http://".into(),
                    ..base()
                },
                "base_url",
            ),
            (
                ProbeConfig {
                    api_key: String::new(),
                    ..base()
                },
                "api_key",
            ),
            (
                ProbeConfig {
                    api_key: "a b".into(),
                    ..base()
                },
                "api_key",
            ),
            (
                ProbeConfig {
                    sessions: 0,
                    ..base()
                },
                "sessions",
            ),
            (
                ProbeConfig {
                    max_hold: Duration::ZERO,
                    ..base()
                },
                "max_hold",
            ),
            (
                ProbeConfig {
                    heartbeat: Duration::ZERO,
                    ..base()
                },
                "heartbeat",
            ),
        ];
        for (config, option) in cases {
            match config.validate().map_err(|e| e.kind().clone()) {
                Err(ErrorKind::InvalidOption { option: named, .. }) => assert_eq!(named, option),
                other => panic!("{option}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn an_invalid_config_fails_before_any_request() {
        let config = ProbeConfig {
            sessions: 0,
            ..ProbeConfig::new("http://127.0.0.1:9", "k")
        };
        let err = probe(&config, |_| panic!("no sample")).await.unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::InvalidOption {
                    option: "sessions",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_refused_create_is_an_error_without_urls_or_keys() {
        // Nothing listens on port 9 of localhost: the create fails in transport.
        let config = ProbeConfig {
            sessions: 2,
            ..ProbeConfig::new(
                "http://127.0.0.1:9/some/path?token=abc123secret",
                "sk-very-secret-key",
            )
        };
        let err = probe(&config, |_| panic!("no sample")).await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::Create { session: 0, .. }),
            "{err:?}"
        );
        let mut chain = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(s) = source {
            chain.push_str(&format!(" | {s}"));
            source = s.source();
        }
        for secret in ["abc123secret", "sk-very-secret-key", "/some/path"] {
            assert!(!chain.contains(secret), "{secret} in {chain}");
        }
    }

    #[test]
    fn the_probe_future_is_send() {
        fn is_send<T: Send>(_: &T) {}
        let config = ProbeConfig::new("http://127.0.0.1:9", "k");
        is_send(&probe(&config, |_| {}));
    }

    #[test]
    fn debug_hides_the_api_key_and_url_path() {
        let shown = format!(
            "{:?}",
            ProbeConfig::new("https://h.example/x?token=t0ken", "s3cret")
        );
        assert!(
            !shown.contains("s3cret") && !shown.contains("t0ken"),
            "{shown}"
        );
        assert!(shown.contains("https://h.example"), "{shown}");
    }

    #[test]
    fn samples_serialize_in_camel_case() {
        let json = serde_json::to_string(&sample(0, Some(2_400), "close", Some("active"))).unwrap();
        assert_eq!(
            json,
            r#"{"session":0,"lifetimeMs":2400,"cause":"close","controlPlaneSaid":"active"}"#
        );
    }
}
