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

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::{ConnectStream, connect_async};
use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::StreamExt;
use outlive::CdpEndpoint;
use outlive::Diagnostics;
use outlive::redact::{redact, redact_url};
use outlive::solari_browser::{Client, ClientOptions, SolariError};
use outlive::wire;
use serde::{Deserialize, Serialize};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::stats::median;
use outlive_cli::{Error, ErrorKind};

/// How long the websocket handshake to a new session may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a new session has to answer its first heartbeat (later ones get one interval).
const OPENING_TIMEOUT: Duration = Duration::from_secs(30);

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
/// # async fn demo() -> Result<(), outlive_cli::Error> {
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

/// The end of a hold.
enum Held {
    Died { cause: Cause, at: Instant },
    Alive,
}

/// A heartbeat awaiting its reply.
#[derive(Debug, Clone, Copy)]
struct Beat {
    id: u64,
    sent: Instant,
    /// Past this, with no reply, the session is silent.
    deadline: Instant,
}

/// Holds the websocket idle, heartbeating, until the session dies or `until` passes. The
/// websocket is dropped on return.
///
/// Each heartbeat must be answered before the next is due, except the first. That one is part
/// of opening the session: a browser just launched (and the provider's relay reaching it) may
/// take longer than one interval to answer anything, and that is not a death.
async fn hold(mut ws: WebSocketStream<ConnectStream>, heartbeat: Duration, until: Instant) -> Held {
    let mut tick = tokio::time::interval(heartbeat);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let give_up = tokio::time::sleep_until(until);
    tokio::pin!(give_up);
    let mut next_id: u64 = 0;
    let mut pending: Option<Beat> = None;
    loop {
        tokio::select! {
            biased;
            message = ws.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    if pending.is_some_and(|beat| wire::reply_id(text.as_bytes()) == Some(beat.id)) {
                        pending = None;
                    }
                }
                Some(Ok(Message::Close(_))) | None => return Held::Died { cause: Cause::Close, at: Instant::now() },
                Some(Ok(_)) => {}
                Some(Err(e)) => return Held::Died { cause: read_error_cause(&e), at: Instant::now() },
            },
            due = tick.tick() => {
                match pending {
                    Some(beat) if due >= beat.deadline => {
                        return Held::Died { cause: Cause::Silence, at: beat.sent };
                    }
                    // The first reply has longer; send nothing more until it comes.
                    Some(_) => continue,
                    None => {}
                }
                next_id += 1;
                let reply_within = if next_id == 1 { OPENING_TIMEOUT.max(heartbeat) } else { heartbeat };
                let beat = Beat { id: next_id, sent: due, deadline: due + reply_within };
                let text = wire::version_request(next_id);
                match tokio::time::timeout(heartbeat, ws.send(Message::Text(text.into()))).await {
                    Ok(Ok(())) => pending = Some(beat),
                    // A peer that stops reading fills the socket; that is silence too.
                    Err(_) => return Held::Died { cause: Cause::Silence, at: beat.sent },
                    Ok(Err(e)) => return Held::Died { cause: read_error_cause(&e), at: Instant::now() },
                }
            }
            _ = &mut give_up => return Held::Alive,
        }
    }
}

/// A websocket error after the handshake: the end of the close handshake is a close, any
/// other failure a reset.
fn read_error_cause(e: &WsError) -> Cause {
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => Cause::Close,
        _ => Cause::Reset,
    }
}

/// A handshake error fit for a log line. tungstenite's `Display` shows only the status of an
/// HTTP refusal (not the response, which can echo the request). A URL in the text (an
/// unreachable endpoint, token and all) is cut to scheme and host.
fn handshake_error(e: &WsError) -> String {
    redact(&e.to_string(), Diagnostics::Safe)
}

/// A created session, released on every path: by [`Lease::release`], or — if the probe is
/// dropped or panics first — by a task its `Drop` spawns.
struct Lease {
    client: Client,
    id: String,
    released: bool,
}

impl Lease {
    fn new(client: Client, id: String) -> Self {
        Lease {
            client,
            id,
            released: false,
        }
    }

    fn id(&self) -> &str {
        &self.id
    }

    /// Releases the session and waits for the answer. One attempt: a failed release is not
    /// retried by `Drop`.
    async fn release(mut self) -> Result<(), SolariError> {
        let result = self.client.sessions().release(&self.id).await;
        self.released = true;
        result
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (client, id) = (self.client.clone(), std::mem::take(&mut self.id));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = client.sessions().release(&id).await {
                        tracing::warn!(error = %redact(&e.to_string(), Diagnostics::Safe), "release on drop failed");
                    }
                });
            }
            Err(_) => tracing::warn!(
                "a probed session was dropped outside a Tokio runtime and not released"
            ),
        }
    }
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
/// [`ensure_chromium`](outlive_cli::setup::ensure_chromium) reports, and [`ErrorKind::Gateway`] if
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
            outlive_cli::setup::ensure_chromium()?;
            let gw = gateway::spawn(
                gateway::Config::new()
                    .lifetime(lifetime)
                    .jitter(lifetime / 10),
            )
            .await
            .map_err(|e| Error::with(ErrorKind::Gateway, e))?;
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
            .map_err(|e| Error::with(ErrorKind::Gateway, e))?;
    }
    Ok(samples)
}

/// A few lines for people: how many sessions, min/median/max lifetime, how many ended by
/// each cause, and what the control plane said about the dead ones.
pub fn summary(samples: &[Sample]) -> String {
    if samples.is_empty() {
        return "no sessions probed".to_owned();
    }
    let n = samples.len();
    let mut out = format!("{n} session{} probed", if n == 1 { "" } else { "s" });

    let mut lifetimes: Vec<u64> = samples.iter().filter_map(|s| s.lifetime_ms).collect();
    lifetimes.sort_unstable();
    match (lifetimes.first(), lifetimes.last()) {
        (Some(&min), Some(&max)) => out.push_str(&format!(
            "\nlifetime: min {}, median {}, max {} (over {} death{})",
            format_ms(min),
            format_ms(median(&lifetimes.iter().map(|&ms| ms as f64).collect::<Vec<_>>()) as u64),
            format_ms(max),
            lifetimes.len(),
            if lifetimes.len() == 1 { "" } else { "s" },
        )),
        _ => out.push_str("\nlifetime: no session died during its hold"),
    }

    let order = ["close", "reset", "silence", "alive", "error"];
    let mut causes: BTreeMap<(usize, &str), usize> = BTreeMap::new();
    for s in samples {
        let rank = order
            .iter()
            .position(|c| *c == s.cause)
            .unwrap_or(order.len());
        *causes.entry((rank, s.cause.as_str())).or_default() += 1;
    }
    let causes: Vec<String> = causes
        .iter()
        .map(|((_, c), k)| format!("{c} {k}"))
        .collect();
    out.push_str(&format!("\ncauses: {}", causes.join(", ")));

    let mut said: BTreeMap<&str, usize> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.lifetime_ms.is_some()) {
        *said
            .entry(s.control_plane_said.as_deref().unwrap_or("(no answer)"))
            .or_default() += 1;
    }
    if !said.is_empty() {
        let said: Vec<String> = said
            .iter()
            .map(|(status, k)| format!("\"{status}\" {k}"))
            .collect();
        out.push_str(&format!(
            "\ncontrol plane right after each death: {}",
            said.join(", ")
        ));
    }
    out
}

/// `850 ms`, `2.41 s`, `10 min 2.5 s`.
fn format_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.2} s", ms as f64 / 1_000.0),
        _ => format!(
            "{} min {:.1} s",
            ms / 60_000,
            (ms % 60_000) as f64 / 1_000.0
        ),
    }
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

    /// What the scripted CDP peer does with heartbeat `id`.
    #[derive(Clone, Copy)]
    enum Peer {
        Reply(Duration),
        Close,
        Ignore,
    }

    /// A websocket peer on 127.0.0.1 that treats each heartbeat as `script` says, and the
    /// probe's websocket to it.
    async fn scripted(script: fn(u64) -> Peer) -> WebSocketStream<ConnectStream> {
        use async_tungstenite::tungstenite::protocol::CloseFrame;
        use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut ws = async_tungstenite::tokio::accept_async(tcp).await.unwrap();
            while let Some(Ok(message)) = ws.next().await {
                // The heartbeat's id, as a browser reads a command.
                let command: Option<serde_json::Value> =
                    serde_json::from_slice(&message.into_data()).ok();
                let Some(id) = command.and_then(|c| c["id"].as_u64()) else {
                    continue;
                };
                match script(id) {
                    Peer::Reply(after) => {
                        tokio::time::sleep(after).await;
                        let reply = format!(r#"{{"id":{id},"result":{{"product":"Fake"}}}}"#);
                        let _ = ws.send(Message::Text(reply.into())).await;
                    }
                    Peer::Close => {
                        let frame = CloseFrame {
                            code: CloseCode::Away,
                            reason: "gone".into(),
                        };
                        let _ = ws.close(Some(frame)).await;
                    }
                    Peer::Ignore => {}
                }
            }
        });
        connect_async(url).await.unwrap().0
    }

    fn ms_since(start: Instant, held: &Held) -> (Cause, Option<u64>) {
        match held {
            Held::Died { cause, at } => (*cause, Some(at.duration_since(start).as_millis() as u64)),
            Held::Alive => (Cause::Alive, None),
        }
    }

    #[tokio::test]
    async fn a_slow_first_reply_is_not_silence_but_a_later_one_is() {
        let ws = scripted(|id| match id {
            1 => Peer::Reply(Duration::from_millis(350)),
            2..=4 => Peer::Reply(Duration::ZERO),
            _ => Peer::Ignore,
        })
        .await;
        let start = Instant::now();
        let held = hold(
            ws,
            Duration::from_millis(100),
            start + Duration::from_secs(10),
        )
        .await;
        // Beat 1 at 0 is answered at 350 ms; beats 2-4 at 400-600 ms are answered; beat 5,
        // sent at 700 ms, is not: silence, dated when beat 5 was sent.
        let (cause, at) = ms_since(start, &held);
        assert_eq!(cause, Cause::Silence);
        assert!((650..=900).contains(&at.unwrap()), "{at:?}");
    }

    #[tokio::test]
    async fn a_close_frame_is_a_close() {
        let ws = scripted(|id| {
            if id < 3 {
                Peer::Reply(Duration::ZERO)
            } else {
                Peer::Close
            }
        })
        .await;
        let start = Instant::now();
        let held = hold(
            ws,
            Duration::from_millis(50),
            start + Duration::from_secs(10),
        )
        .await;
        let (cause, at) = ms_since(start, &held);
        assert_eq!(cause, Cause::Close);
        assert!((100..=400).contains(&at.unwrap()), "{at:?}");
    }

    #[tokio::test]
    async fn a_session_answering_to_the_end_is_alive() {
        let ws = scripted(|_| Peer::Reply(Duration::ZERO)).await;
        let start = Instant::now();
        let held = hold(
            ws,
            Duration::from_millis(50),
            start + Duration::from_millis(400),
        )
        .await;
        assert_eq!(ms_since(start, &held), (Cause::Alive, None));
        assert!(start.elapsed() >= Duration::from_millis(400));
    }

    #[test]
    fn errors_after_the_handshake_are_closes_or_resets() {
        assert_eq!(read_error_cause(&WsError::ConnectionClosed), Cause::Close);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(read_error_cause(&WsError::Io(reset)), Cause::Reset);
    }

    #[test]
    fn samples_serialize_in_camel_case() {
        let json = serde_json::to_string(&sample(0, Some(2_400), "close", Some("active"))).unwrap();
        assert_eq!(
            json,
            r#"{"session":0,"lifetimeMs":2400,"cause":"close","controlPlaneSaid":"active"}"#
        );
    }

    #[test]
    fn summary_gives_min_median_max_and_causes() {
        let samples = [
            sample(0, Some(2_000), "close", Some("active")),
            sample(1, Some(3_000), "silence", Some("active")),
            sample(2, Some(2_500), "close", Some("active")),
            sample(3, Some(4_001), "reset", None),
            sample(4, None, "alive", Some("active")),
            sample(5, None, "error", None),
        ];
        let text = summary(&samples);
        assert!(text.starts_with("6 sessions probed"), "{text}");
        assert!(
            text.contains("min 2.00 s, median 2.75 s, max 4.00 s (over 4 deaths)"),
            "{text}"
        );
        assert!(
            text.contains("causes: close 2, reset 1, silence 1, alive 1, error 1"),
            "{text}"
        );
        assert!(text.contains(r#""(no answer)" 1, "active" 3"#), "{text}");
    }

    #[test]
    fn summary_of_nothing_and_of_no_deaths() {
        assert_eq!(summary(&[]), "no sessions probed");
        let text = summary(&[sample(0, None, "alive", Some("active"))]);
        assert!(text.contains("no session died"), "{text}");
        assert!(text.contains("causes: alive 1"), "{text}");
        assert!(!text.contains("control plane"), "{text}");
    }

    #[test]
    fn durations() {
        assert_eq!(format_ms(850), "850 ms");
        assert_eq!(format_ms(2_410), "2.41 s");
        assert_eq!(format_ms(602_500), "10 min 2.5 s");
    }
}
