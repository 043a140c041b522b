//! No secret reaches an application's log, at TRACE, from outlive or from the libraries it
//! drives.
//!
//! The test installs the global subscriber exactly as an application does
//! (`tracing_subscriber::fmt().with_env_filter("trace").init()`, which also bridges the `log`
//! records tungstenite writes), runs the Aurora task through the `Solari` provider against the
//! gateway with at least two relaunches and a restore, and searches everything written for the
//! session tokens, the session cookie, the planted localStorage value and the planted password.
//! It lives in its own test binary because a global subscriber can be installed only once.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use gateway::DeathMode;
use outlive::{BoxFuture, CdpEndpoint, Options, Provider, Session, Solari};
use outlive_cli::bank::{BankProgress, BankTask};
use support::Captured;

/// The Solari provider, noting each session's CDP token (the secret in its endpoint URL).
struct Recording {
    inner: Solari,
    tokens: Mutex<Vec<String>>,
}

struct Recorded(Box<dyn Session>);

impl Session for Recorded {
    fn endpoint(&self) -> &CdpEndpoint {
        self.0.endpoint()
    }
    fn exited(&self) -> BoxFuture<'static, ()> {
        self.0.exited()
    }
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), outlive::Error>> {
        self.0.release()
    }
}

impl Provider for Recording {
    fn name(&self) -> &str {
        "recording-solari"
    }
    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(async move {
            let session = self.inner.launch().await?;
            let url = url::Url::parse(session.endpoint().expose()).unwrap();
            let token = url
                .query_pairs()
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v.into_owned())
                .expect("a Solari CDP endpoint carries a token");
            self.tokens.lock().unwrap().push(token);
            Ok(Box::new(Recorded(session)) as Box<dyn Session>)
        })
    }
}

fn planted(what: &str) -> String {
    format!("{what}{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_an_application_log_at_trace() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter("trace")
        .with_writer(move || writer.clone())
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
    let provider = Recording {
        inner: Solari::new(support::client(&gw)),
        tokens: Mutex::default(),
    };

    let task = BankTask::new(
        bank.base_url(),
        &bank_config,
        60,
        Duration::from_millis(100),
    );
    let progress = BankProgress::default();
    let (cookie, event) = outlive::outlive_with_event(
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
    let tokens = provider.tokens.lock().unwrap().clone();
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
