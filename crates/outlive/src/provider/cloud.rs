//! [`Cloud`]: browsers from a cloud that creates sessions with one REST call and releases them
//! with another. Each cloud is a [`Dialect`], data rather than code: where to create, how
//! to authenticate, which field of the answer holds the CDP URL and the id, how to release,
//! and which create field sets the session's lifetime. The dialects are checked against each
//! provider's official SDK source; `docs/providers.md` cites what was read.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use serde_json::{Map, Value};

use super::contract::{BoxFuture, ByIdSession, Provider, Session};
use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ErrorKind};
use crate::redact::{Diagnostics, redact, redact_url};

/// How a request carries the API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    /// In this header, as it is.
    Header(&'static str),
    /// `Authorization: Bearer KEY`.
    Bearer,
    /// In this query parameter.
    Query(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
    Put,
    Delete,
}

/// The unit of a lifetime field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Millis,
    Seconds,
    Minutes,
}

impl Unit {
    fn of(self, d: Duration) -> u64 {
        match self {
            Unit::Millis => d.as_millis() as u64,
            Unit::Seconds => d.as_secs(),
            Unit::Minutes => d.as_secs() / 60,
        }
    }
}

/// One cloud's session API. The seven built in are [`Dialect::ALL`]; [`Dialect::named`]
/// finds one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    name: &'static str,
    base_url: &'static str,
    key_env: &'static str,
    auth: Auth,
    create: &'static str,
    /// Dotted paths in the create's answer.
    id_field: &'static str,
    cdp_field: &'static str,
    /// A query parameter the CDP URL needs the key in (the answer leaves it out).
    cdp_key: Option<&'static str>,
    /// Where to ask for the CDP URL when the create's answer has none: a path with `{id}`
    /// and the dotted field of its answer.
    cdp_lookup: Option<(&'static str, &'static str)>,
    release: (Method, &'static str),
    release_body: Option<&'static str>,
    /// The create body's lifetime field (dotted) and its unit.
    lifetime_field: Option<(&'static str, Unit)>,
    /// The lifetime a session gets when the create asks for none, where the SDK documents it.
    default_lifetime: Option<Duration>,
    /// A second connection to a session's CDP URL reaches the same browser without side
    /// effects ([`crate::Session::second_connection`]; `docs/providers.md`).
    second_connection: bool,
}

impl Dialect {
    /// Browserbase (`@browserbasehq/sdk`): `POST /v1/sessions` → `connectUrl`; released by
    /// `POST /v1/sessions/{id}` `{"status":"REQUEST_RELEASE"}`; `timeout` in seconds.
    pub const BROWSERBASE: Dialect = Dialect {
        name: "browserbase",
        base_url: "https://api.browserbase.com",
        key_env: "BROWSERBASE_API_KEY",
        auth: Auth::Header("X-BB-API-Key"),
        create: "/v1/sessions",
        id_field: "id",
        cdp_field: "connectUrl",
        cdp_key: None,
        cdp_lookup: None,
        release: (Method::Post, "/v1/sessions/{id}"),
        release_body: Some(r#"{"status":"REQUEST_RELEASE"}"#),
        lifetime_field: Some(("timeout", Unit::Seconds)),
        default_lifetime: None,
        second_connection: false,
    };

    /// Steel (`steel-sdk`): `POST /v1/sessions` → `websocketUrl`, which takes the key as
    /// `apiKey`; released by `POST /v1/sessions/{id}/release`; `timeout` in ms, 5 min default.
    pub const STEEL: Dialect = Dialect {
        name: "steel",
        base_url: "https://api.steel.dev",
        key_env: "STEEL_API_KEY",
        auth: Auth::Header("steel-api-key"),
        create: "/v1/sessions",
        id_field: "id",
        cdp_field: "websocketUrl",
        cdp_key: Some("apiKey"),
        cdp_lookup: None,
        release: (Method::Post, "/v1/sessions/{id}/release"),
        release_body: None,
        lifetime_field: Some(("timeout", Unit::Millis)),
        default_lifetime: Some(Duration::from_secs(300)),
        second_connection: true,
    };

    /// Browserless (Session API, docs.browserless.io): `POST /session?token=…` →
    /// `browserWSEndpoint`, which takes the token too; released by `DELETE /session/{id}`;
    /// `ttl` in ms.
    pub const BROWSERLESS: Dialect = Dialect {
        name: "browserless",
        base_url: "https://production-sfo.browserless.io",
        key_env: "BROWSERLESS_TOKEN",
        auth: Auth::Query("token"),
        create: "/session",
        id_field: "id",
        cdp_field: "browserWSEndpoint",
        cdp_key: Some("token"),
        cdp_lookup: None,
        release: (Method::Delete, "/session/{id}"),
        release_body: None,
        lifetime_field: Some(("ttl", Unit::Millis)),
        default_lifetime: None,
        second_connection: false,
    };

    /// Hyperbrowser (`@hyperbrowser/sdk`): `POST /api/session` → `wsEndpoint`; released by
    /// `PUT /api/session/{id}/stop`; `timeoutMinutes`.
    pub const HYPERBROWSER: Dialect = Dialect {
        name: "hyperbrowser",
        base_url: "https://api.hyperbrowser.ai",
        key_env: "HYPERBROWSER_API_KEY",
        auth: Auth::Header("x-api-key"),
        create: "/api/session",
        id_field: "id",
        cdp_field: "wsEndpoint",
        cdp_key: None,
        cdp_lookup: None,
        release: (Method::Put, "/api/session/{id}/stop"),
        release_body: None,
        lifetime_field: Some(("timeoutMinutes", Unit::Minutes)),
        default_lifetime: None,
        second_connection: false,
    };

    /// Anchor (`anchorbrowser`): `POST /v1/sessions` → `data.cdp_url`; released by
    /// `DELETE /v1/sessions/{id}`; `session.timeout.max_duration` in minutes, 20 by default.
    pub const ANCHOR: Dialect = Dialect {
        name: "anchor",
        base_url: "https://api.anchorbrowser.io",
        key_env: "ANCHORBROWSER_API_KEY",
        auth: Auth::Header("anchor-api-key"),
        create: "/v1/sessions",
        id_field: "data.id",
        cdp_field: "data.cdp_url",
        cdp_key: None,
        cdp_lookup: None,
        release: (Method::Delete, "/v1/sessions/{id}"),
        release_body: None,
        lifetime_field: Some(("session.timeout.max_duration", Unit::Minutes)),
        default_lifetime: Some(Duration::from_secs(20 * 60)),
        second_connection: true,
    };

    /// Kernel (`@onkernel/sdk`): `POST /browsers` → `cdp_ws_url`, `session_id`; released by
    /// `DELETE /browsers/{id}`. Its `timeout_seconds` is an idle timeout, not a lifetime.
    pub const KERNEL: Dialect = Dialect {
        name: "kernel",
        base_url: "https://api.onkernel.com",
        key_env: "KERNEL_API_KEY",
        auth: Auth::Bearer,
        create: "/browsers",
        id_field: "session_id",
        cdp_field: "cdp_ws_url",
        cdp_key: None,
        cdp_lookup: None,
        release: (Method::Delete, "/browsers/{id}"),
        release_body: None,
        lifetime_field: None,
        default_lifetime: None,
        second_connection: true,
    };

    /// Notte (`notte-sdk`): `POST /sessions/start` → `session_id` and `cdp_url`, or else
    /// `GET /sessions/{id}/debug` → `ws.cdp`; released by `DELETE /sessions/{id}/stop`;
    /// `max_duration_minutes`, 15 by default.
    pub const NOTTE: Dialect = Dialect {
        name: "notte",
        base_url: "https://api.notte.cc",
        key_env: "NOTTE_API_KEY",
        auth: Auth::Bearer,
        create: "/sessions/start",
        id_field: "session_id",
        cdp_field: "cdp_url",
        cdp_key: None,
        cdp_lookup: Some(("/sessions/{id}/debug", "ws.cdp")),
        release: (Method::Delete, "/sessions/{id}/stop"),
        release_body: None,
        lifetime_field: Some(("max_duration_minutes", Unit::Minutes)),
        default_lifetime: Some(Duration::from_secs(15 * 60)),
        second_connection: false,
    };

    /// Every built-in dialect.
    pub const ALL: [Dialect; 7] = [
        Dialect::BROWSERBASE,
        Dialect::STEEL,
        Dialect::BROWSERLESS,
        Dialect::HYPERBROWSER,
        Dialect::ANCHOR,
        Dialect::KERNEL,
        Dialect::NOTTE,
    ];

    /// The built-in dialect called `name` (`browserbase`, `steel`, …).
    pub fn named(name: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.name == name)
    }

    /// Its name, as [`Dialect::named`] takes it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether outlive may confirm a silent browser of this cloud by a second connection to
    /// its CDP URL ([`crate::Session::second_connection`]). Where not, silence is judged by
    /// time alone.
    pub fn second_connection(&self) -> bool {
        self.second_connection
    }

    /// The environment variable its SDKs read the key from.
    pub fn key_env(&self) -> &'static str {
        self.key_env
    }

    /// The API's base URL.
    pub fn base_url(&self) -> &'static str {
        self.base_url
    }

    /// The lifetime its sessions get unless the create asks otherwise, where documented.
    pub fn default_lifetime(&self) -> Option<Duration> {
        self.default_lifetime
    }

    /// Whether a create can ask for a lifetime ([`Cloud::timeout`]).
    pub fn sets_lifetime(&self) -> bool {
        self.lifetime_field.is_some()
    }
}

/// A provider of cloud browser sessions through the cloud's REST API, as its [`Dialect`] says.
///
/// ```no_run
/// # fn demo() -> Result<(), outlive::Error> {
/// let steel = outlive::Cloud::new(outlive::Dialect::STEEL, std::env::var("STEEL_API_KEY").unwrap_or_default())
///     .timeout(std::time::Duration::from_secs(900));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cloud {
    dialect: Dialect,
    key: String,
    base_url: String,
    options: Map<String, Value>,
    timeout: Option<Duration>,
    retries: u32,
    http: reqwest::Client,
}

impl std::fmt::Debug for Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cloud")
            .field("dialect", &self.dialect.name)
            .field("base_url", &redact_url(&self.base_url))
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl Cloud {
    /// Sessions from `dialect`'s API with `key`.
    pub fn new(dialect: Dialect, key: impl Into<String>) -> Self {
        Cloud {
            dialect,
            key: key.into(),
            base_url: dialect.base_url.to_owned(),
            options: Map::new(),
            timeout: None,
            retries: 2,
            http: reqwest::Client::new(),
        }
    }

    /// The API's base URL (self-hosted, a proxy, a test bed).
    ///
    /// # Default
    ///
    /// The cloud's own ([`Dialect::base_url`]).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    /// Members of every create's JSON body (project id, region, proxy, …), as the cloud names
    /// them.
    ///
    /// # Default
    ///
    /// None.
    pub fn session_options(mut self, options: Map<String, Value>) -> Self {
        self.options = options;
        self
    }

    /// The lifetime each session asks for, in the dialect's lifetime field; rotation then
    /// leaves each browser before it. Ignored by a dialect without one.
    ///
    /// # Default
    ///
    /// None: the cloud's default ([`Dialect::default_lifetime`] where documented).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Extra attempts when a create fails transiently (a transport failure, a 5xx or a 429),
    /// with an exponential backoff (500 ms doubling, at most 10 s, jittered).
    ///
    /// # Default
    ///
    /// 2.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// The full URL of `path` (with `{id}` replaced), the key in its query if the dialect
    /// says so.
    fn url(&self, path: &str, id: &str) -> String {
        let url = format!("{}{}", self.base_url, path.replace("{id}", id));
        match self.dialect.auth {
            Auth::Query(param) => with_query(&url, param, &self.key),
            _ => url,
        }
    }

    fn request(&self, method: Method, url: &str) -> reqwest::RequestBuilder {
        let request = match method {
            Method::Get => self.http.get(url),
            Method::Post => self.http.post(url),
            Method::Put => self.http.put(url),
            Method::Delete => self.http.delete(url),
        };
        let request = request.timeout(Duration::from_secs(60));
        match self.dialect.auth {
            Auth::Header(name) => request.header(name, &self.key),
            Auth::Bearer => request.bearer_auth(&self.key),
            Auth::Query(_) => request,
        }
    }

    /// The create's body: the session options, and the lifetime asked for.
    fn create_body(&self) -> Value {
        let mut body = Value::Object(self.options.clone());
        if let (Some(t), Some((field, unit))) = (self.timeout, self.dialect.lifetime_field) {
            set_dotted(&mut body, field, Value::from(unit.of(t)));
        }
        body
    }

    /// The lifetime a session states: the one asked for, or the documented default.
    fn stated_lifetime(&self) -> Option<Duration> {
        self.dialect.lifetime_field?;
        self.timeout.or(self.dialect.default_lifetime)
    }

    async fn create_once(&self) -> Result<ByIdSession<Cloud>, (Error, bool)> {
        let url = self.url(self.dialect.create, "");
        let answer = self
            .request(Method::Post, &url)
            .json(&self.create_body())
            .send()
            .await;
        let body = self.answer("creating a session", answer).await?;
        let id = field_str(&body, self.dialect.id_field)
            .ok_or_else(|| (self.missing(self.dialect.id_field), false))?
            .to_owned();
        let mut session = ByIdSession::new(self.clone(), id, self.stated_lifetime());
        session.second_connection = self.dialect.second_connection;
        // From here the session exists: an error drops it, and the drop releases it.
        let cdp = match field_str(&body, self.dialect.cdp_field) {
            Some(url) => url.to_owned(),
            None => self
                .look_up_cdp(&session.id)
                .await
                .map_err(|e| (e, false))?,
        };
        let cdp = match self.dialect.cdp_key {
            Some(param) => with_query(&cdp, param, &self.key),
            None => cdp,
        };
        session.endpoint = Some(CdpEndpoint::new(cdp).map_err(|e| (e, false))?);
        Ok(session)
    }

    /// The CDP URL of session `id`, from the dialect's lookup.
    async fn look_up_cdp(&self, id: &str) -> Result<String, Error> {
        let Some((path, field)) = self.dialect.cdp_lookup else {
            return Err(self.missing(self.dialect.cdp_field));
        };
        let answer = self.request(Method::Get, &self.url(path, id)).send().await;
        let body = self
            .answer("asking for a session's CDP URL", answer)
            .await
            .map_err(|(e, _)| e)?;
        field_str(&body, field)
            .map(str::to_owned)
            .ok_or_else(|| self.missing(field))
    }

    /// The JSON of a 2xx answer, or the error (and whether it is worth another try).
    async fn answer(
        &self,
        what: &str,
        answer: reqwest::Result<reqwest::Response>,
    ) -> Result<Value, (Error, bool)> {
        let name = self.dialect.name;
        let response = answer.map_err(|e| {
            let message = format!(
                "{name}: {what} failed: {}",
                redact(&e.to_string(), Diagnostics::Safe)
            );
            (Error::new(ErrorKind::Launch, message), true)
        })?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            let transient = status.is_server_error() || status.as_u16() == 429;
            let message = format!(
                "{name}: {what} failed (HTTP {}): {}{}",
                status.as_u16(),
                redact(&text, Diagnostics::Safe),
                hint(status.as_u16(), self.dialect)
            );
            return Err((Error::new(ErrorKind::Launch, message), transient));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| {
            let message = format!("{name}: {what}: the answer is not JSON ({e})");
            (Error::new(ErrorKind::Launch, message), false)
        })
    }

    fn missing(&self, field: &str) -> Error {
        Error::new(
            ErrorKind::Launch,
            format!(
                "{}: the API's answer has no `{field}`; is the base URL {} this cloud's API?",
                self.dialect.name,
                redact_url(&self.base_url)
            ),
        )
    }

    async fn release_session(&self, id: &str) -> Result<(), Error> {
        let (method, path) = self.dialect.release;
        let mut request = self.request(method, &self.url(path, id));
        if let Some(body) = self.dialect.release_body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        self.answer("releasing a session", request.send().await)
            .await
            .map(drop)
            .map_err(|(e, _)| Error::new(ErrorKind::Release, e.to_string()))
    }
}

/// What to do about a refusal, when it is the caller's to fix.
fn hint(status: u16, dialect: Dialect) -> String {
    match status {
        401 | 403 => format!(" — check the key in {}", dialect.key_env),
        _ => String::new(),
    }
}

/// `url` with `param=value` added to its query.
fn with_query(url: &str, param: &str, value: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.query_pairs_mut().append_pair(param, value);
            u.into()
        }
        Err(_) => url.to_owned(),
    }
}

/// The string at a dotted path (`data.cdp_url`).
fn field_str<'v>(value: &'v Value, dotted: &str) -> Option<&'v str> {
    dotted
        .split('.')
        .try_fold(value, |v, key| v.get(key))?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Sets the member at a dotted path, making the objects on the way.
fn set_dotted(value: &mut Value, dotted: &str, to: Value) {
    let mut at = value;
    let mut keys = dotted.split('.').peekable();
    while let Some(key) = keys.next() {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let obj = at.as_object_mut().expect("made an object");
        if keys.peek().is_none() {
            obj.insert(key.to_owned(), to);
            return;
        }
        at = obj.entry(key).or_insert_with(|| Value::Object(Map::new()));
    }
}

impl Provider for Cloud {
    fn name(&self) -> &str {
        self.dialect.name
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, Error>> {
        Box::pin(async move {
            let policy = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(10))
                .with_max_times(self.retries as usize)
                .with_jitter();
            (|| self.create_once())
                .retry(policy)
                .sleep(tokio::time::sleep)
                .when(|(_, transient)| *transient)
                .notify(|(e, _), after| {
                    tracing::debug!(error = %e, ?after, "cloud launch failed; retrying");
                })
                .await
                .map(|s| Box::new(s) as Box<dyn Session>)
                .map_err(|(e, _)| e)
        })
    }

    fn release_id(&self, id: &str) -> BoxFuture<'_, Result<(), Error>> {
        let id = id.to_owned();
        Box::pin(async move { self.release_session(&id).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_fields_are_read_and_written() {
        let v = serde_json::json!({"data": {"cdp_url": "ws://h/x", "id": ""}});
        assert_eq!(field_str(&v, "data.cdp_url"), Some("ws://h/x"));
        assert_eq!(field_str(&v, "data.id"), None, "empty is missing");
        let mut body = serde_json::json!({"session": {"recording": false}});
        set_dotted(&mut body, "session.timeout.max_duration", 5.into());
        assert_eq!(
            body,
            serde_json::json!({"session": {"recording": false, "timeout": {"max_duration": 5}}})
        );
    }

    #[test]
    fn a_lifetime_goes_in_the_dialects_field_and_unit() {
        let t = Duration::from_secs(600);
        let body = |d| Cloud::new(d, "k").timeout(t).create_body();
        assert_eq!(body(Dialect::STEEL)["timeout"], 600_000);
        assert_eq!(body(Dialect::BROWSERBASE)["timeout"], 600);
        assert_eq!(
            body(Dialect::ANCHOR)["session"]["timeout"]["max_duration"],
            10
        );
        assert_eq!(body(Dialect::KERNEL), serde_json::json!({}));
        assert_eq!(
            Cloud::new(Dialect::KERNEL, "k")
                .timeout(t)
                .stated_lifetime(),
            None
        );
        assert_eq!(
            Cloud::new(Dialect::STEEL, "k").stated_lifetime(),
            Some(Duration::from_secs(300))
        );
    }

    #[test]
    fn the_key_goes_where_the_dialect_says() {
        let url = Cloud::new(Dialect::BROWSERLESS, "t0k").url("/session/{id}", "abc");
        assert_eq!(
            url,
            "https://production-sfo.browserless.io/session/abc?token=t0k"
        );
        assert_eq!(
            with_query("wss://h/?sessionId=1", "apiKey", "k"),
            "wss://h/?sessionId=1&apiKey=k"
        );
        assert!(
            Dialect::ALL
                .iter()
                .all(|d| Dialect::named(d.name()) == Some(*d))
        );
    }
}
