//! A cookie-keeping visitor and page scraping shared by the integration tests.

#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use aurora::{Aurora, Config};
use reqwest::header::HeaderMap;
use reqwest::redirect::Policy;
use reqwest::{RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;

/// Starts a bank with `config` and a visitor that has not signed in yet.
pub async fn start(config: Config) -> (Aurora, Visitor) {
    let bank = aurora::spawn(config).await.expect("bank starts");
    let visitor = Visitor::new(&bank);
    (bank, visitor)
}

/// One browser's worth of state against one server: a cookie jar and the server's origin.
/// Redirects are shown, not followed, so tests can check where they point.
pub struct Visitor {
    http: reqwest::Client,
    base_url: String,
    config: Config,
}

impl Visitor {
    /// A fresh visitor (empty cookie jar) to `bank`.
    pub fn new(bank: &Aurora) -> Self {
        Self::at(bank.base_url(), bank.config().clone())
    }

    /// A fresh visitor to a server at `base_url` that runs with `config`.
    pub fn at(base_url: String, config: Config) -> Self {
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(Policy::none())
            .build()
            .expect("client builds");
        Self {
            http,
            base_url,
            config,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.http.get(self.url(path))).await
    }

    /// `GET path` sending `cookie` as the `Cookie` header.
    pub async fn get_with_cookie(&self, path: &str, cookie: &str) -> Reply {
        self.send(self.http.get(self.url(path)).header("cookie", cookie))
            .await
    }

    /// `POST path` with a form-urlencoded `body`, sent as is so tests can malform it.
    pub async fn post_form(&self, path: &str, body: &str) -> Reply {
        let request = self
            .http
            .post(self.url(path))
            .header("content-type", "application/x-www-form-urlencoded");
        self.send(request.body(body.to_owned())).await
    }

    /// `POST path` with `body` and no content type.
    pub async fn post_untyped(&self, path: &str, body: &str) -> Reply {
        self.send(self.http.post(self.url(path)).body(body.to_owned()))
            .await
    }

    /// The password step: `POST /login`.
    pub async fn login(&self, username: &str, password: &str) -> Reply {
        let body = format!("username={username}&password={password}");
        self.post_form("/login", &body).await
    }

    /// The second factor: `POST /totp`.
    pub async fn totp(&self, code: &str) -> Reply {
        self.post_form("/totp", &format!("code={code}")).await
    }

    /// Signs in with the configured password and the current TOTP code; returns the
    /// `Set-Cookie` header that issued the session.
    pub async fn sign_in(&self) -> String {
        let config = &self.config;
        let login = self.login(config.username(), config.password()).await;
        assert_eq!(login.status, StatusCode::SEE_OTHER);
        let verified = self.totp(&config.current_totp()).await;
        assert_eq!(verified.status, StatusCode::SEE_OTHER);
        assert_eq!(verified.location(), "/account?welcome=1");
        verified
            .set_cookie(aurora::SESSION_COOKIE)
            .expect("session cookie set")
            .to_owned()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    async fn send(&self, request: RequestBuilder) -> Reply {
        let response = request.send().await.expect("request sent");
        Reply {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.expect("body read"),
        }
    }
}

/// A whole response, read.
pub struct Reply {
    /// The status code.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// The `Location` header, or `""`.
    pub fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
    }

    /// The `Set-Cookie` header that sets `name`.
    pub fn set_cookie(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}=");
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find(|value| value.starts_with(&prefix))
    }

    /// The text inside the element with `id` (which must contain no markup).
    pub fn text_of(&self, id: &str) -> Option<String> {
        let start = self.body.find(&format!("id=\"{id}\""))?;
        let rest = &self.body[start..];
        let open = rest.find('>')? + 1;
        let close = rest[open..].find('<')?;
        Some(rest[open..open + close].to_owned())
    }

    /// Whether the body contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.body.contains(needle)
    }

    /// Fails the test unless the page has an element with each of `ids`.
    #[track_caller]
    pub fn assert_ids(&self, ids: &[&str]) {
        for id in ids {
            assert!(
                self.contains(&format!("id=\"{id}\"")),
                "page lacks #{id}:\n{}",
                self.body
            );
        }
    }

    /// Fails the test unless this is a `status` page showing an `#error`.
    #[track_caller]
    pub fn assert_refused(&self, status: StatusCode) {
        assert_eq!(self.status, status, "{}", self.body);
        assert!(self.text_of("error").is_some(), "no #error:\n{}", self.body);
    }

    /// The body parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.body).expect("body is the expected JSON")
    }
}

/// A six-digit code that no clock within a minute of now would accept.
pub fn wrong_code(config: &Config) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let nearby: Vec<String> = [-60, -30, 0, 30, 60]
        .into_iter()
        .map(|offset| {
            config
                .totp_secret()
                .code_at(now.saturating_add_signed(offset))
        })
        .collect();
    (0..1_000_000)
        .map(|n| format!("{n:06}"))
        .find(|code| !nearby.contains(code))
        .expect("a free code")
}
