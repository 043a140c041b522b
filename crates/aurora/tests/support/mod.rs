//! Clients and page scraping shared by the integration tests.

#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use aurora::{Aurora, Config};
use reqwest::redirect::Policy;
use reqwest::{Client, StatusCode};

/// A client with a cookie jar that shows redirects instead of following them.
pub fn client() -> Client {
    Client::builder()
        .cookie_store(true)
        .redirect(Policy::none())
        .build()
        .expect("client builds")
}

/// Posts a form-urlencoded body.
pub async fn post_form(client: &Client, url: &str, body: &str) -> reqwest::Response {
    client
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned())
        .send()
        .await
        .expect("request sent")
}

/// Signs in with the configured password and the current TOTP code; returns the
/// `Set-Cookie` header that issued the session.
pub async fn sign_in(bank: &Aurora, client: &Client) -> String {
    let config = bank.config();
    let login = format!(
        "username={}&password={}",
        config.username(),
        config.password()
    );
    let response = post_form(client, &bank.url("/login"), &login).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let code = format!("code={}", config.current_totp());
    let response = post_form(client, &bank.url("/totp"), &code).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/account?welcome=1");
    set_cookie(&response, aurora::SESSION_COOKIE).expect("session cookie set")
}

/// The `Set-Cookie` header that sets `name`.
pub fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

/// The `Location` header.
pub fn location(response: &reqwest::Response) -> &str {
    response
        .headers()
        .get("location")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
}

/// The text inside the element with `id` (which must contain no markup).
pub fn text_of(html: &str, id: &str) -> Option<String> {
    let start = html.find(&format!("id=\"{id}\""))?;
    let rest = &html[start..];
    let open = rest.find('>')? + 1;
    let close = rest[open..].find('<')?;
    Some(rest[open..open + close].to_owned())
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
