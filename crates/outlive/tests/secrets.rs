//! Checkpoint values never reach a log line: unique cookie and localStorage values are
//! planted, the task runs through two deaths with tracing at TRACE, and everything captured
//! is searched.

mod support;

use std::time::Duration;

use outlive::{Options, outlive_with_event};
use outlive_testkit::Captured;
use support::{Kill, sign_in, whoami};

#[tokio::test(flavor = "current_thread")]
async fn no_checkpoint_value_reaches_a_trace_log() {
    let (captured, _guard) = Captured::trace_on_this_thread();

    let cookie_secret = format!("CKSECRET{}", uuid_like());
    let storage_secret = format!("LSSECRET{}", uuid_like());
    let (site, profiles, provider) = support::start().await;

    let outlive::Reported {
        result: seen,
        event,
    } = outlive_with_event(
        &provider,
        |page, ctx| {
            let (site, provider, cookie_secret, storage_secret) =
                (&site, &provider, &cookie_secret, &storage_secret);
            async move {
                if ctx.attempt() == 1 {
                    sign_in(&page, site, cookie_secret, storage_secret).await?;
                    ctx.checkpoint().await;
                }
                if ctx.attempt() < 3 {
                    provider.kill(if ctx.attempt() == 1 {
                        Kill::Sigkill
                    } else {
                        Kill::CloseFrame
                    });
                    page.evaluate("1").await?;
                }
                whoami(&page, site).await
            }
        },
        Options::new().checkpoint_every(Duration::from_millis(200)),
    )
    .await;
    let seen = seen.unwrap();

    // The values really went through two restores…
    assert_eq!(seen.0, format!("sid={cookie_secret}"));
    assert_eq!(seen.1, storage_secret);
    assert_eq!(event.attempts, 3);
    // …and reached no log line and not the event.
    let logs = captured.text();
    assert!(logs.contains("outlive run finished"), "the capture works");
    assert!(logs.lines().count() > 20, "TRACE logging was on");
    for secret in [&cookie_secret, &storage_secret] {
        assert!(
            !logs.contains(secret.as_str()),
            "{secret} reached a log line"
        );
        assert!(!event.to_json().contains(secret.as_str()));
    }
    profiles.assert_nothing_left();
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{:x}{:x}", nanos, std::process::id())
}
