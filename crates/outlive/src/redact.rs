//! Redaction of text outlive did not write (task errors, provider failures) before it reaches
//! a log line or the wide event.
//!
//! It is a net, not a proof. It knows the common shapes of a secret and removes them: URLs
//! with paths and queries, `name=value` pairs whose name looks like a credential,
//! `Bearer …`/`Basic …`, JWTs, one-time codes and long opaque tokens. It cannot know every
//! shape. `tests/redact_props.rs` plants generated secrets in each shape inside random prose.

use std::sync::LazyLock;

use regex::Regex;

/// How much outlive may reveal in logs and the wide event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Diagnostics {
    /// URLs reduced to scheme and host, credential-shaped values blanked, text clipped to
    /// 300 characters.
    #[default]
    Safe,
    /// Raw text, neither redacted nor clipped: URLs, tokens and all. Use only where you trust
    /// every log sink.
    Full,
}

/// The longest text redaction returns, in characters.
pub const MAX_LEN: usize = 300;

static URL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)([a-z][a-z0-9+.\-]*)://(?:[^\s/?#"'<>]*@)?([^\s/?#@"'<>:]+)(:\d+)?[^\s"'<>]*"#,
    )
    .expect("valid regex")
});
static AUTH_SCHEME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer|basic|token)\s+([A-Za-z0-9\-._~+/=]+)").expect("valid regex")
});
static JWT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]*)?").expect("valid regex")
});
static PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(["']?)([A-Za-z0-9_.\-]*(?:token|key|secret|passw(?:or)?d|pwd|pass|auth|session|sig|code|cookie|credential|otp|jwt|bearer)[A-Za-z0-9_.\-]*)(["']?)(\s*[=:]\s*)((?:(?:basic|bearer|digest|token)\s+)?(?:\[redacted\]|"[^"]*"?|'[^']*'?|[^\s&,;"'}\])]+))"#,
    )
    .expect("valid regex")
});
/// One-time codes: `otp code 123456`, `verification code is 123456`, `pin 1234`.
static OTP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b((?:(?:otp|totp|2fa|mfa|one-time|verification|security|login|sms)\s+)?(?:code|passcode|otp|totp|pin))(\s+is\s+|\s*[:#=]\s*|\s+)(\d{4,10})\b",
    )
    .expect("valid regex")
});
static OPAQUE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_\-]{32,}={0,2}").expect("valid regex"));

/// Redacts `text` as `mode` says, then clips it to [`MAX_LEN`] characters.
pub fn redact(text: &str, mode: Diagnostics) -> String {
    match mode {
        Diagnostics::Full => text.to_owned(),
        Diagnostics::Safe => clip(&scrub(text), MAX_LEN),
    }
}

/// Like [`redact`], but keeps the end of the text rather than its start: for a program's
/// output, whose last lines usually say why it failed.
pub(crate) fn redact_tail(text: &str, mode: Diagnostics) -> String {
    match mode {
        Diagnostics::Full => text.to_owned(),
        Diagnostics::Safe => clip_start(&scrub(text), MAX_LEN),
    }
}

/// Reduces a URL to `scheme://host[:port]`, clipped to [`MAX_LEN`] characters; text with no
/// URL in it becomes `<url>`.
pub fn redact_url(url: &str) -> String {
    match URL.captures(url) {
        Some(found) => clip(&origin(&found), MAX_LEN),
        None => "<url>".to_owned(),
    }
}

/// `scheme://host[:port]` of a [`URL`] match.
fn origin(url: &regex::Captures<'_>) -> String {
    let port = url.get(3).map_or("", |m| m.as_str());
    format!("{}://{}{port}", &url[1], &url[2])
}

/// Reduces every URL to its origin and scrubs the text between them. The other rules never
/// see a reduced URL, so a host like `keycloak:8080` keeps its port.
fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for url in URL.captures_iter(text) {
        let whole = url.get(0).expect("group 0 always matches");
        out.push_str(&scrub_prose(&text[rest..whole.start()]));
        out.push_str(&origin(&url));
        rest = whole.end();
    }
    out.push_str(&scrub_prose(&text[rest..]));
    out
}

fn scrub_prose(text: &str) -> String {
    let text = AUTH_SCHEME.replace_all(text, |c: &regex::Captures<'_>| {
        let scheme = &c[1];
        // `bearer` is hardly ever prose; `basic` and `token` often are ("token expired").
        if scheme.eq_ignore_ascii_case("bearer") || looks_like_credential(&c[2]) {
            format!("{scheme} [redacted]")
        } else {
            c[0].to_owned()
        }
    });
    let text = JWT.replace_all(&text, "[redacted]");
    let text = OTP.replace_all(&text, |c: &regex::Captures<'_>| {
        // A bare `code` with few digits is a status or close code (`code 1006`), not an OTP.
        if c[1].eq_ignore_ascii_case("code") && c[3].len() < 6 {
            c[0].to_owned()
        } else {
            format!("{}{}[redacted]", &c[1], &c[2])
        }
    });
    let text = PAIR.replace_all(&text, "$1$2$3$4[redacted]");
    let text = OPAQUE.replace_all(&text, |c: &regex::Captures<'_>| {
        let s = &c[0];
        // Long words of letters only are prose or identifiers, not tokens.
        if s.chars().any(|ch| ch.is_ascii_digit()) {
            "[redacted]".to_owned()
        } else {
            s.to_owned()
        }
    });
    text.into_owned()
}

/// Whether the word after `basic`/`token` is a credential rather than the sentence going on:
/// it has a digit or symbol, a case change inside it, or is too long for a word.
fn looks_like_credential(word: &str) -> bool {
    let word = word.trim_end_matches('.');
    word.bytes().any(|b| !b.is_ascii_alphabetic())
        || word
            .as_bytes()
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
        || word.len() >= 24
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// Keeps the last `max` characters, marking the cut with `…`.
fn clip_start(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let mut out = String::from('…');
    out.extend(text.chars().skip(count - (max - 1)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRETS: &[(&str, &str)] = &[
        (
            "goto failed: wss://cdp.solari.dev/cdp/abc123?token=tok_live_9f8e7d",
            "tok_live_9f8e7d",
        ),
        (
            "GET https://bank.example/account/987654321/statement failed",
            "987654321",
        ),
        ("https://user:hunter2@db.example.com/x", "hunter2"),
        (
            "Authorization: Bearer sk-abcdef0123456789",
            "sk-abcdef0123456789",
        ),
        ("header bearer abc.def.ghi rejected", "abc.def.ghi"),
        (
            "request with api_key=AKIA1234SECRET failed",
            "AKIA1234SECRET",
        ),
        (
            "login password=correct-horse-battery",
            "correct-horse-battery",
        ),
        ("{\"password\": \"p@ss w0rd\"}", "p@ss w0rd"),
        ("session_id=sess_42_abcdef; path=/", "sess_42_abcdef"),
        ("totp code: 123456 rejected", "123456"),
        ("X-Amz-Signature=0badc0ffee", "0badc0ffee"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sflKxwRJSMeKKF2QT4fwpM",
            "sflKxwRJSMeKKF2QT4fwpM",
        ),
        (
            "raw token 3f9a1c2b7d8e4f60a1b2c3d4e5f60718293a4b5c",
            "3f9a1c2b7d8e4f60a1b2c3d4e5f60718293a4b5c",
        ),
        ("secret:'quoted value'", "quoted value"),
        ("{\"password\": \"hunter 2 https://x.example/\"}", "hunter"),
        ("clipped: \"token\": \"abc def", "abc def"),
        ("otp code 123456 rejected", "123456"),
        ("your verification code is 84213790", "84213790"),
        ("PIN 4821 refused", "4821"),
        ("https://user:p@ss1@db.example.com/x", "p@ss1"),
        ("_https://h.example/accounts/acct-99x7/x", "acct-99x7"),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("invalid token Zk9vYmFyYmF6", "Zk9vYmFyYmF6"),
    ];

    #[test]
    fn safe_mode_removes_every_secret_shape() {
        for (input, secret) in SECRETS {
            let out = redact(input, Diagnostics::Safe);
            assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
            assert!(out.chars().count() <= MAX_LEN);
        }
    }

    #[test]
    fn full_mode_keeps_everything() {
        for (input, secret) in SECRETS {
            let out = redact(input, Diagnostics::Full);
            assert!(out.contains(secret), "{secret:?} lost in Full mode");
            assert_eq!(&out, input);
        }
    }

    #[test]
    fn urls_keep_scheme_and_host() {
        assert_eq!(
            redact(
                "at https://bank.example:8443/a/b?x=1#f now",
                Diagnostics::Safe
            ),
            "at https://bank.example:8443 now"
        );
        assert_eq!(
            redact_url("wss://h.example/cdp/1?token=t"),
            "wss://h.example"
        );
        assert_eq!(redact_url("nonsense"), "<url>");
    }

    #[test]
    fn urls_keep_a_port_whatever_the_host_is_called() {
        assert_eq!(
            redact(
                "login at http://keycloak:8080/realms/x failed",
                Diagnostics::Safe
            ),
            "login at http://keycloak:8080 failed"
        );
        assert_eq!(
            redact_url("wss://otp.example:443/x"),
            "wss://otp.example:443"
        );
    }

    #[test]
    fn redacted_values_are_not_redacted_again() {
        let out = redact(
            "jwt=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sflKxwRJSMeKKF2QT4fwpM",
            Diagnostics::Safe,
        );
        assert_eq!(out, "jwt=[redacted]");
    }

    #[test]
    fn plain_prose_survives() {
        for text in [
            "navigation timed out after 45000 ms while loading the account page",
            "the token expired; a basic check failed",
            "websocket closed with code 1006",
        ] {
            assert_eq!(redact(text, Diagnostics::Safe), text);
        }
    }

    #[test]
    fn output_is_clipped_on_a_char_boundary() {
        let long = "é".repeat(1000);
        let out = redact(&long, Diagnostics::Safe);
        assert_eq!(out.chars().count(), MAX_LEN);
        assert!(out.ends_with('…'));
    }
}
