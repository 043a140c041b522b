//! No secret reaches an application's log, at TRACE, from outlive or from the libraries it
//! drives.
//!
//! The test installs the global subscriber exactly as an application does
//! (`tracing_subscriber::fmt().with_env_filter("trace").init()`, which also bridges the `log`
//! records tungstenite writes). It runs the Aurora task through the `Solari` provider against
//! the gateway with at least two relaunches and a restore. It searches everything written for the
//! session tokens, the session cookie, the planted localStorage value and the planted password.
//! It lives in its own test binary because a global subscriber can be installed only once.

mod support;

use std::time::Duration;

use gateway::DeathMode;
use outlive::{Options, Solari};
use outlive_bed::bank::{BankProgress, BankTask};
use outlive_bed::bed::Recording;
use outlive_testkit::Captured;

fn planted(what: &str) -> String {
    format!("{what}{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_an_application_log_at_trace() {
    let captured = Captured::default();
    tracing_subscriber::fmt()
        .with_env_filter("trace")
        .with_writer(captured.clone())
        .with_ansi(false)
        .init();

    let password = planted("PWSECRET");
    let pref = planted("LSSECRET");
    let bank_config = aurora::Config::new()
        .with_password(password.clone())
        .with_pref(pref.clone());
    let bank = aurora::spawn(bank_config.clone()).await.unwrap();
    let gw = gateway::spawn(
        gateway::Config::new()
            .lifetime(Duration::from_millis(2500))
            .jitter(Duration::ZERO)
            .death(DeathMode::Close),
    )
    .await
    .unwrap();
    // Notes each session's endpoint, for its CDP token (the secret in its URL).
    let provider = Recording::new(Solari::new(support::client(&gw)));

    let task = BankTask::new(
        bank.base_url(),
        &bank_config,
        60,
        Duration::from_millis(100),
    );
    let progress = BankProgress::default();
    let outlive::Reported {
        result: cookie,
        event,
    } = outlive::outlive_with_event(
        &provider,
        |page, ctx| {
            let (task, progress) = (&task, &progress);
            async move {
                task.run(&page, Some(&ctx), progress, &|_| {})
                    .await
                    .map_err(|e| e.to_string())?;
                // The session cookie's value, read through CDP (it is HttpOnly).
                let cookies = page.get_cookies().await.map_err(|e| e.to_string())?;
                cookies
                    .into_iter()
                    .find(|c| c.name == aurora::SESSION_COOKIE)
                    .map(|c| c.value)
                    .ok_or_else(|| "no session cookie".to_owned())
            }
        },
        Options::new()
            .checkpoint_every(Duration::from_millis(500))
            .max_relaunches(20),
    )
    .await;
    let cookie = cookie.unwrap();
    assert!(event.relaunches >= 2, "{event:?}");
    assert_eq!(
        progress.sign_ins(),
        1,
        "the session was restored, not signed in again"
    );
    let tokens: Vec<String> = provider.endpoints().iter().map(support::token).collect();
    assert!(tokens.len() >= 3);
    let api_key = gw.api_key().to_owned();
    gw.shutdown().await.unwrap();
    bank.shutdown().await.unwrap();

    let logs = captured.text();
    assert!(logs.contains("outlive run finished"), "the capture works");
    assert!(
        logs.lines().any(|l| l.contains("TRACE")),
        "TRACE logging was on"
    );
    let mut secrets = vec![
        ("the session cookie", cookie),
        ("the planted localStorage value", pref),
        ("the planted password", password),
        ("the gateway's API key", api_key),
    ];
    for (i, token) in tokens.into_iter().enumerate() {
        secrets.push((
            if i == 0 {
                "a session token"
            } else {
                "another session token"
            },
            token,
        ));
    }
    for (what, secret) in &secrets {
        let hits: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains(secret.as_str()))
            .collect();
        assert!(
            hits.is_empty(),
            "{what} reached {} log lines; the first: {}",
            hits.len(),
            hits[0].chars().take(400).collect::<String>()
        );
    }
}
