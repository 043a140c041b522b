//! [`Config`]: how long sessions live, how they and their pages die, and how the gateway is
//! reached.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use outlive::LocalChromium;

use crate::error::Error;
use crate::weather::Weather;

/// How a session's browser dies, as its client sees it.
///
/// Each mode is what a connection open at the death meets. A connection that arrives after
/// the death is closed with `1011` ("the browser is unreachable"): the browser is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeathMode {
    /// A websocket close frame (code 1001, "going away"), then a clean TCP close.
    #[default]
    Close,
    /// A TCP reset: the relay drops the client socket with `SO_LINGER` 0.
    Reset,
    /// The relay stops forwarding and stops reading the client socket (pings go unanswered);
    /// the socket stays open until the session is released or the gateway stops.
    Silence,
    /// One of [`Close`](DeathMode::Close), [`Reset`](DeathMode::Reset) or
    /// [`Silence`](DeathMode::Silence), picked at random per session.
    Mixed,
    /// [`Close`](DeathMode::Close), [`Reset`](DeathMode::Reset) and
    /// [`Silence`](DeathMode::Silence) in turn, by the order sessions are created: every mode
    /// met, deterministically.
    Cycle,
}

impl DeathMode {
    /// The lowercase name used on the wire (`close`, `reset`, `silence`, `mixed`, `cycle`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeathMode::Close => "close",
            DeathMode::Reset => "reset",
            DeathMode::Silence => "silence",
            DeathMode::Mixed => "mixed",
            DeathMode::Cycle => "cycle",
        }
    }
}

impl fmt::Display for DeathMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of `close`, `reset`, `silence`, `mixed`, `cycle`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseDeathModeError(());

impl fmt::Display for ParseDeathModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected one of close, reset, silence, mixed, cycle")
    }
}

impl std::error::Error for ParseDeathModeError {}

impl FromStr for DeathMode {
    type Err = ParseDeathModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "close" => Ok(DeathMode::Close),
            "reset" => Ok(DeathMode::Reset),
            "silence" => Ok(DeathMode::Silence),
            "mixed" => Ok(DeathMode::Mixed),
            "cycle" => Ok(DeathMode::Cycle),
            _ => Err(ParseDeathModeError(())),
        }
    }
}

/// How a session's pages die while its browser, and the client's connection to it, live on.
///
/// A page fault hits every page target of the session's browser. Clients see it as CDP events
/// on their own connection, the way a crashed or closed tab shows up on a real cloud browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageFault {
    /// Each page's renderer crashes (CDP `Page.crash`): clients see `Target.targetCrashed`
    /// (with target discovery on) and `Inspector.targetCrashed` (on an attached session with
    /// `Inspector` enabled). The target stays, dead, until it is reloaded or closed.
    Crash,
    /// Each page target is closed (CDP `Target.closeTarget`): clients see
    /// `Target.targetDestroyed`, and their sessions attached to it detach.
    Close,
}

impl PageFault {
    /// The lowercase name used on the wire (`crash`, `close`).
    pub fn as_str(self) -> &'static str {
        match self {
            PageFault::Crash => "crash",
            PageFault::Close => "close",
        }
    }
}

impl fmt::Display for PageFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of `crash`, `close`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsePageFaultError(());

impl fmt::Display for ParsePageFaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected one of crash, close")
    }
}

impl std::error::Error for ParsePageFaultError {}

impl FromStr for PageFault {
    type Err = ParsePageFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "crash" => Ok(PageFault::Crash),
            "close" => Ok(PageFault::Close),
            _ => Err(ParsePageFaultError(())),
        }
    }
}

/// Everything a gateway needs to know, validated once by [`Config::validate`] (which
/// [`serve`](crate::serve) and [`spawn`](crate::spawn) call before starting anything).
///
/// ```
/// use std::time::Duration;
/// let config = gateway::Config::new()
///     .lifetime(Duration::from_secs(5))
///     .jitter(Duration::ZERO)
///     .death(gateway::DeathMode::Reset);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone)]
pub struct Config {
    pub(crate) api_key: String,
    pub(crate) lifetime: Duration,
    pub(crate) jitter: Duration,
    pub(crate) death: DeathMode,
    pub(crate) page_fault: Option<(PageFault, Duration)>,
    pub(crate) doa: f64,
    pub(crate) honest: bool,
    pub(crate) rtt: Duration,
    pub(crate) max_sessions: usize,
    pub(crate) connections_per_session: usize,
    pub(crate) weather: Weather,
    pub(crate) chromium: LocalChromium,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

/// Hand-written so the API key is never printed.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("api_key", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .field("jitter", &self.jitter)
            .field("death", &self.death)
            .field("page_fault", &self.page_fault)
            .field("doa", &self.doa)
            .field("honest", &self.honest)
            .field("rtt", &self.rtt)
            .field("max_sessions", &self.max_sessions)
            .field("connections_per_session", &self.connections_per_session)
            .field("weather", &self.weather)
            .field("chromium", &self.chromium)
            .finish()
    }
}

impl Config {
    /// A configuration with every default below.
    pub fn new() -> Self {
        Self {
            api_key: "test-key".to_owned(),
            lifetime: Duration::from_secs(600),
            jitter: Duration::from_secs(10),
            death: DeathMode::Close,
            page_fault: None,
            doa: 0.0,
            honest: false,
            rtt: Duration::ZERO,
            max_sessions: 2,
            connections_per_session: 4,
            weather: Weather::calm(),
            chromium: LocalChromium::new(),
        }
    }

    /// The bearer token REST clients must send (`Authorization: Bearer <key>`). Must be
    /// non-empty visible ASCII.
    ///
    /// # Default
    ///
    /// `test-key`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = key.into();
        self
    }

    /// How long after its creation a session's browser dies (before jitter).
    ///
    /// # Default
    ///
    /// 600 s, about what Solari gives.
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// Each session's death time is `lifetime ± jitter`, uniformly. Must not exceed `lifetime`.
    ///
    /// # Default
    ///
    /// 10 s.
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// How sessions die. One session can override it at create time with
    /// `userMetadata: {"chaos.death": "reset"}` (see the crate docs).
    ///
    /// # Default
    ///
    /// [`DeathMode::Close`].
    pub fn death(mut self, mode: DeathMode) -> Self {
        self.death = mode;
        self
    }

    /// Faults each session's pages `after` its creation, once, while its browser lives on:
    /// every page then open crashes or closes (see [`PageFault`]). A session dies on schedule
    /// all the same; if that comes first, its pages are never faulted. One session can choose
    /// for itself at create time with `userMetadata: {"chaos.pageFault": "close",
    /// "chaos.pageFaultAfterMs": 2000}` (see the crate docs). `after` must be greater than
    /// zero and less than [`lifetime`](Self::lifetime).
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = gateway::Config::new()
    ///     .lifetime(Duration::from_secs(60))
    ///     .page_fault(gateway::PageFault::Crash, Duration::from_secs(5));
    /// assert!(config.validate().is_ok());
    /// ```
    ///
    /// # Default
    ///
    /// No page fault.
    pub fn page_fault(mut self, fault: PageFault, after: Duration) -> Self {
        self.page_fault = Some((fault, after));
        self
    }

    /// Probability (0.0–1.0) that a created session's browser is dead on arrival: the create
    /// succeeds, but the browser is killed at once and a relay connection is closed (1011)
    /// right after the upgrade.
    ///
    /// # Default
    ///
    /// 0.0.
    pub fn doa(mut self, probability: f64) -> Self {
        self.doa = probability;
        self
    }

    /// Whether `GET /sessions/:id` admits that a dead session is dead (`status: "ended"`).
    /// When false it keeps answering `"active"`, as Solari's control plane does.
    ///
    /// # Default
    ///
    /// `false`.
    pub fn honest(mut self, honest: bool) -> Self {
        self.honest = honest;
        self
    }

    /// Round-trip latency added to every relayed CDP message: each direction is delayed by
    /// half of it, order preserved.
    ///
    /// # Default
    ///
    /// Zero.
    pub fn rtt(mut self, rtt: Duration) -> Self {
        self.rtt = rtt;
        self
    }

    /// How many unreleased sessions (alive or dead) may exist at once; one more create is
    /// answered `429 ConcurrencyLimitExceeded`. At least 1.
    ///
    /// # Default
    ///
    /// 2.
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max;
        self
    }

    /// How many CDP connections one session accepts at once (as Browserbase and Browserless
    /// accept several; a provider that allows one is `1`); one more is answered `409
    /// SessionBusy`. Every connection meets the session's death. At least 1.
    ///
    /// # Default
    ///
    /// 4.
    pub fn connections_per_session(mut self, max: usize) -> Self {
        self.connections_per_session = max;
        self
    }

    /// Network weather on the relay: stalls of each connection or of the whole link, and
    /// frame jitter, on the browser's frames to the client (see [`Weather`]). Nothing is
    /// dropped; a stalled connection is slow, not dead.
    ///
    /// # Default
    ///
    /// [`Weather::calm`].
    pub fn weather(mut self, weather: Weather) -> Self {
        self.weather = weather;
        self
    }

    /// The launcher for each session's Chromium.
    ///
    /// # Default
    ///
    /// `outlive::LocalChromium::new()` (`$CHROME` or `/usr/bin/chromium`, headless).
    pub fn chromium(mut self, launcher: LocalChromium) -> Self {
        self.chromium = launcher;
        self
    }

    /// Checks every option.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the first option
    /// out of range.
    pub fn validate(&self) -> Result<(), Error> {
        if self.api_key.is_empty() || !self.api_key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::invalid_config(
                "api_key",
                "api_key must be non-empty visible ASCII (it travels in an HTTP header)",
            ));
        }
        if self.lifetime.is_zero() {
            return Err(Error::invalid_config(
                "lifetime",
                "lifetime must be greater than zero",
            ));
        }
        if self.jitter > self.lifetime {
            return Err(Error::invalid_config(
                "jitter",
                format!(
                    "jitter ({:?}) must not exceed lifetime ({:?}); set jitter explicitly when shortening lifetime",
                    self.jitter, self.lifetime
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.doa) {
            return Err(Error::invalid_config(
                "doa",
                format!(
                    "doa is a probability and must be within 0.0..=1.0, got {}",
                    self.doa
                ),
            ));
        }
        if self.connections_per_session == 0 {
            return Err(Error::invalid_config(
                "connections_per_session",
                "connections_per_session must be at least 1",
            ));
        }
        if self.max_sessions == 0 {
            return Err(Error::invalid_config(
                "max_sessions",
                "max_sessions must be at least 1",
            ));
        }
        if let Some((_, after)) = self.page_fault {
            if after.is_zero() {
                return Err(Error::invalid_config(
                    "page_fault",
                    "page_fault's delay must be greater than zero: at creation no client has a page yet",
                ));
            }
            if after >= self.lifetime {
                return Err(Error::invalid_config(
                    "page_fault",
                    format!(
                        "page_fault's delay ({after:?}) must be less than lifetime ({:?}): the browser would die before its pages",
                        self.lifetime
                    ),
                ));
            }
        }
        if self.rtt > Duration::from_secs(60) {
            return Err(Error::invalid_config(
                "rtt",
                format!("rtt must be at most 60 s, got {:?}", self.rtt),
            ));
        }
        self.weather.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(Config::new().validate().is_ok());
    }

    #[test]
    fn each_bad_option_is_named() {
        let cases = [
            (Config::new().api_key(""), "api_key"),
            (Config::new().api_key("a b"), "api_key"),
            (Config::new().lifetime(Duration::ZERO), "lifetime"),
            (Config::new().lifetime(Duration::from_secs(2)), "jitter"),
            (Config::new().doa(1.5), "doa"),
            (Config::new().doa(f64::NAN), "doa"),
            (Config::new().max_sessions(0), "max_sessions"),
            (Config::new().rtt(Duration::from_secs(61)), "rtt"),
            (
                Config::new()
                    .weather(Weather::calm().flows(Duration::from_secs(2), Duration::from_secs(1))),
                "weather",
            ),
            (
                Config::new().page_fault(PageFault::Crash, Duration::ZERO),
                "page_fault",
            ),
            (
                Config::new().page_fault(PageFault::Close, Duration::from_secs(600)),
                "page_fault",
            ),
        ];
        for (config, option) in cases {
            let err = config.validate().unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig);
            assert_eq!(err.option(), Some(option), "{err}");
        }
    }

    #[test]
    fn debug_hides_the_api_key() {
        let shown = format!("{:?}", Config::new().api_key("s3cret-key"));
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn death_modes_parse_from_their_names() {
        for mode in [
            DeathMode::Close,
            DeathMode::Reset,
            DeathMode::Silence,
            DeathMode::Mixed,
        ] {
            assert_eq!(mode.as_str().parse::<DeathMode>(), Ok(mode));
        }
        assert!("doa".parse::<DeathMode>().is_err());
    }

    #[test]
    fn page_faults_parse_from_their_names() {
        for fault in [PageFault::Crash, PageFault::Close] {
            assert_eq!(fault.as_str().parse::<PageFault>(), Ok(fault));
            assert_eq!(fault.to_string(), fault.as_str());
        }
        assert_eq!("CRASH".parse::<PageFault>(), Ok(PageFault::Crash));
        assert!("hang".parse::<PageFault>().is_err());
    }
}
