//! Checkpoint values never reach a log line: unique cookie and localStorage values are
//! planted, the task runs through two deaths with tracing at TRACE, and everything captured
//! is searched.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outlive::chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use outlive::{Options, WideEvent, outlive};
use support::{Kill, Killable, Profiles, Site, text};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn no_checkpoint_value_reaches_a_trace_log() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let cookie_secret = format!("CKSECRET{}", uuid_like());
    let storage_secret = format!("LSSECRET{}", uuid_like());
    let site = Site::start().await;
    let profiles = Profiles::new();
    let provider = Killable::new(&profiles.path());
    let event: Arc<Mutex<Option<WideEvent>>> = Arc::default();
    let slot = event.clone();

    let seen = outlive(
        &provider,
        |page, ctx| {
            let (site, provider, cookie_secret, storage_secret) =
                (&site, &provider, &cookie_secret, &storage_secret);
            async move {
                if ctx.attempt() == 1 {
                    page.goto(NavigateParams::new(format!(
                        "{}/login/{cookie_secret}",
                        site.base
                    )))
                    .await?;
                    page.evaluate(format!("localStorage.setItem('k', '{storage_secret}')"))
                        .await?;
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
                page.goto(NavigateParams::new(format!("{}/whoami", site.base)))
                    .await?;
                let cookie = text(&page, "#cookie").await?;
                let item: String = page
                    .evaluate("localStorage.getItem('k')")
                    .await?
                    .into_value()?;
                Ok::<_, outlive::chromiumoxide::error::CdpError>((cookie, item))
            }
        },
        Options::new()
            .checkpoint_every(Duration::from_millis(200))
            .on_event(move |e| *slot.lock().unwrap() = Some(e.clone())),
    )
    .await
    .unwrap();

    // The values really went through two restores…
    assert_eq!(seen.0, format!("sid={cookie_secret}"));
    assert_eq!(seen.1, storage_secret);
    let event = event.lock().unwrap().clone().unwrap();
    assert_eq!(event.attempts, 3);
    // …and reached no log line and not the event.
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
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
