//! [`Solari`]: browsers from Solari (or anything speaking its REST contract), through the
//! official `solari-browser` crate's control plane.

use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use backon::{ExponentialBuilder, Retryable};
use futures::StreamExt;
use solari_browser::{Client, CreateSessionOptions, SolariError, SolariErrorCode};

use super::contract::{BoxFuture, Provider, Session};
use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ErrorKind};
use crate::redact::Diagnostics;
use crate::redact::redact;
use crate::setters::setters;

/// How each Solari browser is launched.
#[derive(Debug, Clone)]
pub struct SolariLaunch {
    create: CreateSessionOptions,
    retries: u32,
    probe: bool,
    probe_timeout: Duration,
    busy_wait: Duration,
}

impl Default for SolariLaunch {
    fn default() -> Self {
        Self::new()
    }
}

impl SolariLaunch {
    /// The defaults below.
    pub fn new() -> Self {
        Self {
            create: CreateSessionOptions::default(),
            retries: 0,
            probe: false,
            probe_timeout: Duration::from_secs(2),
            busy_wait: Duration::from_secs(600),
        }
    }

    setters! {
        /// Options passed to `POST /sessions` for every browser.
        ///
        /// # Default
        ///
        /// `CreateSessionOptions::default()`.
        fn create(create: CreateSessionOptions);

        /// Extra attempts when creating a session fails transiently or the probe fails, with an
        /// exponential backoff (200 ms doubling, at most 5 s, jittered). Each failed attempt's
        /// session is released first. What is transient follows the official `solari-browser`
        /// crate's own rule: transport, connect and protocol failures and 5xx answers. Not 429
        /// (`ConcurrencyLimitExceeded`: see [`busy_wait`](Self::busy_wait)), and not a
        /// 502 `PoolResponseUnparseable`: after it the session may exist, and a fresh create
        /// would make a second one.
        ///
        /// # Default
        ///
        /// 0. `2` is worth considering: about one Solari browser in ten comes back dead.
        fn retries(retries: u32);

        /// Before handing a session out, open its CDP websocket and require an answer to
        /// `Browser.getVersion` within the probe timeout.
        ///
        /// # Default
        ///
        /// Off.
        fn probe(on: bool);

        /// How long the probe waits.
        ///
        /// # Default
        ///
        /// 2 s.
        fn probe_timeout(timeout: Duration);

        /// How long a launch waits while Solari answers `429 ConcurrencyLimitExceeded` (the
        /// account's sessions are all in use): it asks again with a backoff (500 ms doubling,
        /// at most 10 s, jittered) for up to this long, and only then fails. A busy provider
        /// slows a run down; it does not end it. Zero fails at once.
        ///
        /// # Default
        ///
        /// 10 minutes.
        fn busy_wait(wait: Duration);
    }
}

/// A provider of Solari browser sessions. The client stays yours; outlive only creates and
/// releases sessions with it. Liveness never comes from `GET /sessions/:id` (it reports
/// dead sessions as active for minutes): it comes from the connection.
///
/// ```no_run
/// use outlive::solari_browser::{Client, ClientOptions};
/// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::new(ClientOptions::new("sk_live_…", "https://api.solari.example"))?;
/// let provider = outlive::Solari::new(client)
///     .launch_options(outlive::SolariLaunch::new().retries(2).probe(true));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Solari {
    client: Client,
    launch: SolariLaunch,
}

impl std::fmt::Debug for Solari {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Solari")
            .field(
                "base_url",
                &crate::redact::redact_url(self.client.base_url()),
            )
            .field("launch", &self.launch)
            .finish()
    }
}

impl Solari {
    /// A provider using `client` with default launch options.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            launch: SolariLaunch::new(),
        }
    }

    /// How every browser is launched.
    ///
    /// # Default
    ///
    /// [`SolariLaunch::new()`].
    pub fn launch_options(mut self, launch: SolariLaunch) -> Self {
        self.launch = launch;
        self
    }

    async fn create_once(&self) -> Result<SolariSession, (Error, Retry)> {
        let session = self
            .client
            .sessions()
            .create(self.launch.create.clone())
            .await
            .map_err(|e| {
                (
                    solari_error("creating a Solari session failed", &e),
                    retry(&e),
                )
            })?;
        let endpoint =
            CdpEndpoint::new(session.cdp_endpoint.clone()).map_err(|e| (e, Retry::No))?;
        let session = SolariSession {
            client: self.client.clone(),
            id: session.id.clone(),
            endpoint,
            released: false,
        };
        if self.launch.probe {
            if let Err(e) = probe(&session.endpoint, self.launch.probe_timeout).await {
                let _ = Box::new(session).release().await;
                return Err((e, Retry::Transient));
            }
        }
        Ok(session)
    }
}

/// What to do after a failed create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Give up.
    No,
    /// Try again soon ([`SolariLaunch::retries`]).
    Transient,
    /// All sessions in use: wait and ask again ([`SolariLaunch::busy_wait`]).
    Busy,
}

fn retry(e: &SolariError) -> Retry {
    match e {
        SolariError::Api { status: 429, .. } => Retry::Busy,
        e if is_transient(e) => Retry::Transient,
        _ => Retry::No,
    }
}

/// Whether a failed create is worth another: the official crate's rule (its `session.rs`).
fn is_transient(e: &SolariError) -> bool {
    match e {
        SolariError::Transport { .. }
        | SolariError::Protocol { .. }
        | SolariError::Connect { .. } => true,
        // The pool may already have created the session: a fresh create would make a second.
        SolariError::Api { status, code, .. } => {
            (*status == 0 || *status >= 500)
                && !matches!(code, Some(SolariErrorCode::Other(c)) if c == "PoolResponseUnparseable")
        }
        SolariError::Config { .. } => false,
    }
}

fn solari_error(what: &str, e: &SolariError) -> Error {
    let status = e
        .status()
        .map(|s| format!(" (HTTP {s})"))
        .unwrap_or_default();
    Error::new(
        ErrorKind::Launch,
        format!(
            "{what}{status}: {}",
            redact(&e.to_string(), Diagnostics::Safe)
        ),
    )
}

fn release_error(e: &SolariError) -> Error {
    let err = solari_error("releasing a Solari session failed", e);
    Error::new(ErrorKind::Release, err.to_string())
}

/// The largest message the probe reads: tungstenite's default (a version reply is small).
const PROBE_MAX_MESSAGE: usize = 64 << 20;

/// Opens the endpoint and asks for `Browser.getVersion`, within `timeout`.
async fn probe(endpoint: &CdpEndpoint, timeout: Duration) -> Result<(), Error> {
    let attempt = async {
        let mut ws = crate::websocket::connect_with(endpoint, PROBE_MAX_MESSAGE)
            .await
            .ok()?;
        ws.send(Message::Text(
            r#"{"id":1,"method":"Browser.getVersion"}"#.into(),
        ))
        .await
        .ok()?;
        while let Some(Ok(msg)) = ws.next().await {
            if let Message::Text(t) = msg {
                if t.as_str().starts_with(r#"{"id":1,"#) {
                    let _ = ws.close(None).await;
                    return Some(());
                }
            }
        }
        None
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Some(())) => Ok(()),
        _ => Err(Error::new(
            ErrorKind::Launch,
            format!(
                "the new browser at {} did not pass its health probe within {timeout:?}",
                endpoint.redacted()
            ),
        )),
    }
}

impl Provider for Solari {
    fn name(&self) -> &str {
        "solari"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, Error>> {
        Box::pin(async move {
            let policy = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(5))
                .with_max_times(self.launch.retries as usize)
                .with_jitter();
            let busy = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(10))
                .without_max_times()
                .with_total_delay(Some(self.launch.busy_wait))
                .with_jitter();
            let once = || {
                (|| self.create_once())
                    .retry(policy)
                    .sleep(tokio::time::sleep)
                    .when(|(_, retry)| *retry == Retry::Transient)
                    .notify(|(e, _), after| {
                        tracing::debug!(error = %e, ?after, "Solari launch failed; retrying");
                    })
            };
            once.retry(busy)
                .sleep(tokio::time::sleep)
                .when(|(_, retry)| *retry == Retry::Busy)
                .notify(|_, after| {
                    tracing::info!(?after, "Solari is at its concurrency limit; waiting");
                })
                .await
                .map(|s| Box::new(s) as Box<dyn Session>)
                .map_err(|(e, _)| e)
        })
    }

    fn release_id(&self, id: &str) -> BoxFuture<'_, Result<(), Error>> {
        let id = id.to_owned();
        Box::pin(async move {
            self.client
                .sessions()
                .release(&id)
                .await
                .map_err(|e| release_error(&e))
        })
    }
}

/// One Solari session, released with `DELETE /sessions/:id` (confirmed by its answer).
struct SolariSession {
    client: Client,
    id: String,
    endpoint: CdpEndpoint,
    released: bool,
}

impl Session for SolariSession {
    fn endpoint(&self) -> &CdpEndpoint {
        &self.endpoint
    }

    fn id(&self) -> Option<&str> {
        Some(&self.id)
    }

    fn second_connection(&self) -> bool {
        true
    }

    fn release(mut self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        self.released = true;
        let (client, id) = (self.client.clone(), self.id.clone());
        Box::pin(async move {
            client
                .sessions()
                .release(&id)
                .await
                .map_err(|e| release_error(&e))
        })
    }
}

impl Drop for SolariSession {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (client, id) = (self.client.clone(), self.id.clone());
        super::contract::release_later(async move {
            client
                .sessions()
                .release(&id)
                .await
                .map_err(|e| release_error(&e))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: Option<&str>) -> SolariError {
        SolariError::Api {
            status,
            code: code.map(SolariErrorCode::from),
            message: "x".into(),
        }
    }

    #[test]
    fn retries_follow_the_official_clients_rule() {
        assert!(is_transient(&SolariError::Transport {
            message: "x".into()
        }));
        assert!(is_transient(&api(503, Some("BrowserUnhealthy"))));
        assert!(is_transient(&api(0, None)));
        // A concurrency limit is not fixed by asking again at once.
        assert!(!is_transient(&api(429, Some("ConcurrencyLimitExceeded"))));
        assert_eq!(
            retry(&api(429, Some("ConcurrencyLimitExceeded"))),
            Retry::Busy
        );
        assert_eq!(retry(&api(503, None)), Retry::Transient);
        assert_eq!(retry(&api(400, None)), Retry::No);
        assert!(!is_transient(&api(400, None)));
        // The session may exist already: another create would make a second one.
        assert!(!is_transient(&api(502, Some("PoolResponseUnparseable"))));
        assert!(!is_transient(&SolariError::Config {
            message: "x".into()
        }));
    }
}
