//! Properties of the redactor: it never panics and never returns more than `MAX_LEN`
//! characters, `Full` mode is the identity, every known secret shape is removed wherever it
//! sits in surrounding prose, and ordinary prose comes through untouched.

use outlive::Diagnostics;
use outlive::redact::{MAX_LEN, redact, redact_url};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

/// Pieces that steer random text into the redactor's patterns and its clipping.
const FRAGMENTS: &[&str] = &[
    "https://",
    "wss://",
    "://",
    "@",
    ":",
    "=",
    "&",
    "?",
    "/",
    ".",
    "#",
    "\"",
    "'",
    " ",
    "\n",
    "token",
    "password",
    "Bearer ",
    "Basic ",
    "otp code ",
    "123456",
    "eyJ",
    "0123456789abcdef0123456789abcdef",
    "[redacted]",
    "é",
    "…",
    "🦀",
    "\u{0}",
    "\u{200b}",
    "\u{3000}",
    "ſ",
    "\u{212a}",
];

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        vec(any::<char>(), 0..1200).prop_map(String::from_iter),
        vec(
            prop_oneof![select(FRAGMENTS).prop_map(str::to_owned), "[!-~]{1,8}"],
            0..120
        )
        .prop_map(|parts| parts.concat()),
    ]
}

/// A token-like secret: 12 to 40 of `[A-Za-z0-9_-]` with at least one digit, so it can't
/// pass for a prose word.
fn secret() -> impl Strategy<Value = String> {
    ("[A-Za-z0-9_-]{6,20}", "[0-9]", "[A-Za-z0-9_-]{5,19}")
        .prop_map(|(head, digit, tail)| format!("{head}{digit}{tail}"))
}

/// `scheme://host[:port]`: what a URL must be reduced to.
fn origin() -> impl Strategy<Value = String> {
    (
        select(&["http", "https", "ws", "wss"][..]),
        "[a-z][a-z0-9]{0,9}(\\.[a-z]{2,8}){1,2}",
        prop::option::of(1u16..),
    )
        .prop_map(|(scheme, host, port)| match port {
            Some(port) => format!("{scheme}://{host}:{port}"),
            None => format!("{scheme}://{host}"),
        })
}

/// Random printable words around the planted secret.
fn prose() -> impl Strategy<Value = String> {
    vec("[!-~]{1,10}", 0..5).prop_map(|words| words.join(" "))
}

/// How the prose joins the planted secret.
fn separator() -> impl Strategy<Value = &'static str> {
    select(
        &[
            " ", "\n", "\t", ", ", "; ", ": ", " (", ") ", " \"", "\" ", " '", "' ", " [", "] ",
            " <", "> ", " | ",
        ][..],
    )
}

/// A secret in one known shape: the text, what must not survive, and the origin that must.
#[derive(Debug, Clone)]
struct Planted {
    text: String,
    secrets: Vec<String>,
    origin: Option<String>,
}

impl Planted {
    fn plain(text: String, secret: String) -> Self {
        Planted {
            text,
            secrets: vec![secret],
            origin: None,
        }
    }

    fn url(origin: String, text: String, secret: String) -> Self {
        Planted {
            text,
            secrets: vec![secret],
            origin: Some(origin),
        }
    }
}

fn planted() -> impl Strategy<Value = Planted> {
    prop_oneof![4 => planted_url(), 10 => planted_elsewhere()]
}

/// A secret in a URL's query, path or userinfo.
fn planted_url() -> impl Strategy<Value = Planted> {
    let s = secret;
    prop_oneof![
        (
            origin(),
            s(),
            select(&["token", "access_token", "sig", "code"][..])
        )
            .prop_map(|(o, s, name)| Planted::url(
                o.clone(),
                format!("{o}/p?x=1&{name}={s}#frag"),
                s
            )),
        (origin(), s()).prop_map(|(o, s)| Planted::url(
            o.clone(),
            format!("{o}/accounts/{s}/x"),
            s
        )),
        (origin(), s()).prop_map(|(o, s)| {
            let (scheme, host) = o.split_once("://").expect("origin has a scheme");
            let text = format!("{scheme}://user:{s}@{host}/db");
            Planted::url(o, text, s)
        }),
        (origin(), s()).prop_map(|(o, s)| {
            let (scheme, host) = o.split_once("://").expect("origin has a scheme");
            let text = format!("{scheme}://{s}@{host}");
            Planted::url(o, text, s)
        }),
    ]
}

/// A secret outside any URL: auth schemes, credential pairs, JWTs, raw tokens, OTP codes.
fn planted_elsewhere() -> impl Strategy<Value = Planted> {
    let s = secret;
    prop_oneof![
        (s(), select(&["Bearer", "bearer", "BEARER"][..]))
            .prop_map(|(s, b)| Planted::plain(format!("{b} {s}"), s)),
        s().prop_map(|s| Planted::plain(format!("Authorization: Basic {s}"), s)),
        s().prop_map(|s| Planted::plain(format!("api_key={s}"), s)),
        s().prop_map(|s| Planted::plain(format!("password={s}"), s)),
        s().prop_map(|s| Planted::plain(format!("\"password\": \"{s}\""), s)),
        s().prop_map(|s| Planted::plain(format!("session_id={s}"), s)),
        s().prop_map(|s| Planted::plain(format!("X-Amz-Signature={s}"), s)),
        (s(), "[A-Za-z0-9_-]{8,30}", "[A-Za-z0-9_-]{8,60}").prop_map(|(s, h, p)| {
            let payload = format!("eyJ{p}");
            Planted {
                text: format!("eyJ{h}.{payload}.{s}"),
                secrets: vec![s, payload],
                origin: None,
            }
        }),
        ("[0-9a-f]{20}", "[0-9]", "[0-9a-f]{19}").prop_map(|(a, d, b)| {
            let hex = format!("{a}{d}{b}");
            Planted::plain(hex.clone(), hex)
        }),
        (
            select(
                &[
                    "otp code {}",
                    "OTP: {}",
                    "verification code is {}",
                    "2FA code {}",
                    "one-time code {}",
                    "totp {}",
                    "passcode={}",
                    "code: {}",
                    "your code is {}",
                ][..]
            ),
            "[0-9]{6,8}"
        )
            .prop_map(|(template, digits)| Planted::plain(template.replace("{}", &digits), digits)),
    ]
}

/// Prose made of ordinary words, numbers and credential-ish nouns used as nouns.
fn plain_prose() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        6 => "[a-z]{1,10}"
            .prop_filter("an OTP or auth-scheme keyword", |w| {
                !["otp", "totp", "mfa", "pin", "passcode", "bearer"].contains(&w.as_str())
            }),
        1 => "[A-Z][a-z]{1,9}",
        2 => "[0-9]{1,5}",
        2 => select(&["token", "basic", "Basic", "code", "key", "secret", "session", "auth", "cookie", "password"][..])
            .prop_map(str::to_owned),
    ];
    let punct = select(&["", "", "", ".", ","][..]);
    vec((word, punct), 0..30).prop_map(|words| {
        let mut out = Vec::new();
        let mut after_scheme = false;
        for (word, punct) in words {
            // A number right after `token`/`basic` is a credential, not prose.
            if after_scheme && word.starts_with(|c: char| c.is_ascii_digit()) {
                out.push("was".to_owned());
            }
            after_scheme = punct.is_empty() && ["token", "basic", "Basic"].contains(&word.as_str());
            out.push(format!("{word}{punct}"));
        }
        out.join(" ")
    })
}

proptest! {
    #[test]
    fn safe_output_is_bounded_and_never_panics(text in any_text()) {
        let out = redact(&text, Diagnostics::Safe);
        prop_assert!(out.chars().count() <= MAX_LEN, "{} chars", out.chars().count());
        let url = redact_url(&text);
        prop_assert!(url.chars().count() <= MAX_LEN, "{} chars", url.chars().count());
    }

    #[test]
    fn full_mode_is_identity(text in any_text()) {
        prop_assert_eq!(redact(&text, Diagnostics::Full), text);
    }

    #[test]
    fn every_secret_shape_is_removed_from_prose(
        before in prose(),
        sep_before in separator(),
        planted in planted(),
        sep_after in separator(),
        after in prose(),
    ) {
        let text = format!("{before}{sep_before}{}{sep_after}{after}", planted.text);
        // Short enough that clipping cannot be what hides the secret.
        prop_assert!(text.chars().count() <= MAX_LEN);
        let out = redact(&text, Diagnostics::Safe);
        for secret in &planted.secrets {
            prop_assert!(!out.contains(secret.as_str()), "{secret:?} survived in {out:?}");
        }
        if let Some(origin) = &planted.origin {
            prop_assert!(out.contains(origin.as_str()), "{origin:?} lost from {out:?}");
        }
        prop_assert_eq!(redact(&text, Diagnostics::Full), text);
    }

    #[test]
    fn urls_are_reduced_wherever_they_start(
        glued in "\\PC{0,10}",
        planted in planted_url(),
        after in prose(),
    ) {
        let text = format!("{glued}{} {after}", planted.text);
        let out = redact(&text, Diagnostics::Safe);
        for secret in &planted.secrets {
            prop_assert!(!out.contains(secret.as_str()), "{secret:?} survived in {out:?}");
        }
    }

    #[test]
    fn redact_url_keeps_only_the_origin(planted in planted_url()) {
        let origin = planted.origin.expect("a planted URL has an origin");
        prop_assert_eq!(redact_url(&planted.text), origin);
    }

    #[test]
    fn plain_prose_survives(text in plain_prose()) {
        prop_assert_eq!(redact(&text, Diagnostics::Safe), text);
    }
}
