//! outlive with the Solari provider against the gateway: the Aurora task completes in every
//! death mode, the baseline does not, nothing leaks and no token reaches a log line.

mod support;

use std::time::Duration;

use gateway::DeathMode;
use outlive::{Options, SolariLaunch};
use outlive_bed::bank::BankProgress;
use outlive_bed::bed::{Recording, TestBed};
use outlive_testkit::Captured;
use support::{BANK_POLLS as POLLS, bank_run as run_outlive};

async fn bed(death: DeathMode, lifetime: Duration, doa: f64) -> TestBed {
    TestBed::start(
        gateway::Config::new()
            .lifetime(lifetime)
            .jitter(Duration::ZERO)
            .death(death)
            .doa(doa),
    )
    .await
    .unwrap()
}

/// The survival runs go one at a time: each keeps a gateway busy relaunching Chromium every
/// few seconds. Four at once on a 2-core machine made launches take most of a lifetime
/// (the dead-on-arrival run then gave up now and then).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn completes_in(death: DeathMode, doa: f64) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let bed = bed(death, Duration::from_millis(3000), doa).await;
    let provider = bed.provider();
    let (result, event, progress) = run_outlive(&bed, &provider).await;
    eprintln!("{death:?} doa {doa}: {}", event.to_json());
    assert_eq!(result, Ok(POLLS), "event: {}", event.to_json());
    assert!(
        event.relaunches >= 2,
        "at least 3 session lifetimes: {}",
        event.to_json()
    );
    assert_eq!(event.release_failed, 0);
    assert_eq!(
        bed.bank().counters().totps_accepted,
        1,
        "the login survived every relaunch"
    );
    assert_eq!(progress.sign_ins(), 1);
    support::shutdown_released(bed).await;
}

/// One test per way of dying, each a [`completes_in`] run.
macro_rules! completes_in_each {
    ($($name:ident: $death:expr, doa $doa:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            completes_in($death, $doa).await;
        }
    )*};
}

completes_in_each! {
    completes_when_sessions_die_by_close_frame: DeathMode::Close, doa 0.0;
    completes_when_sessions_die_by_tcp_reset: DeathMode::Reset, doa 0.0;
    completes_when_sessions_go_silent: DeathMode::Silence, doa 0.0;
    completes_when_browsers_arrive_dead: DeathMode::Mixed, doa 0.3;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_baseline_fails_at_the_first_death() {
    use futures::StreamExt;
    use outlive::chromiumoxide::Browser;
    use outlive::chromiumoxide::handler::HandlerConfig;

    let bed = bed(DeathMode::Close, Duration::from_millis(2500), 0.0).await;
    let client = bed.client();
    let session = client.sessions().create(Default::default()).await.unwrap();
    let config = HandlerConfig {
        request_timeout: Duration::from_secs(5),
        ..HandlerConfig::default()
    };
    let (browser, mut handler) = Browser::connect_with_config(session.cdp_endpoint.clone(), config)
        .await
        .unwrap();
    let pump = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let page = browser.new_page("about:blank").await.unwrap();
    let mut task = bed.task(POLLS, Duration::from_millis(100));
    task.step_timeout = Duration::from_secs(5);
    let progress = BankProgress::default();
    let result = task.run(&page, None, &progress, &|_| {}).await;
    assert!(
        result.is_err(),
        "plain chromiumoxide cannot outlive the session"
    );
    assert!(progress.polls_done() < POLLS);
    pump.abort();
    client.sessions().release(&session.id).await.unwrap();
    let status = bed.shutdown().await.unwrap();
    assert_eq!(status.chromium_processes, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn no_log_line_carries_a_cdp_token() {
    let (captured, _guard) = Captured::trace_on_this_thread();

    let bed = bed(DeathMode::Mixed, Duration::from_millis(2500), 0.2).await;
    let provider = Recording::new(
        bed.provider()
            .launch_options(SolariLaunch::new().retries(2).probe(true)),
    );
    let (result, event, _) = run_outlive(&bed, &provider).await;
    assert!(result.is_ok(), "{}", event.to_json());
    bed.shutdown().await.unwrap();

    let logs = captured.text();
    assert!(logs.contains("outlive run finished"), "the capture works");
    let endpoints = provider.endpoints();
    assert!(!endpoints.is_empty());
    for endpoint in &endpoints {
        let token = support::token(endpoint);
        assert!(token.len() >= 16);
        assert!(!logs.contains(&token), "a CDP token reached a log line");
        assert!(!event.to_json().contains(&token));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_provider_makes_a_launch_wait_instead_of_failing_the_run() {
    // One session allowed: the second run's launch is answered 429 ConcurrencyLimitExceeded
    // until the first run releases its session; it waits and completes, with no launch
    // counted as failed.
    let bed = TestBed::start(
        gateway::Config::new()
            .lifetime(Duration::from_secs(300))
            .jitter(Duration::ZERO)
            .max_sessions(1),
    )
    .await
    .unwrap();
    let provider = bed.provider();
    let holding = std::sync::Arc::new(tokio::sync::Notify::new());
    let run = |hold: Option<std::sync::Arc<tokio::sync::Notify>>| {
        let provider = &provider;
        async move {
            outlive::outlive_with_event(
                provider,
                |page, _ctx| {
                    let hold = hold.clone();
                    async move {
                        page.evaluate("1").await?;
                        if let Some(hold) = hold {
                            // Holds the only session a while after the other run asked.
                            hold.notify_one();
                            tokio::time::sleep(Duration::from_millis(1500)).await;
                        }
                        Ok::<_, outlive::chromiumoxide::error::CdpError>(())
                    }
                },
                Options::new().max_relaunches(0),
            )
            .await
        }
    };
    let first = run(Some(holding.clone()));
    let second = async {
        holding.notified().await;
        run(None).await
    };
    let (first, second) = tokio::join!(first, second);
    let outlive::Reported {
        result: r1,
        event: e1,
    } = first;
    let outlive::Reported {
        result: r2,
        event: e2,
    } = second;
    assert!(r1.is_ok(), "{}", e1.to_json());
    assert!(r2.is_ok(), "{}", e2.to_json());
    assert_eq!(
        e2.sessions,
        1,
        "one launch, no failed one: {}",
        e2.to_json()
    );
    assert!(
        e2.total_ms >= 1_000,
        "the second run waited for the session: {}",
        e2.to_json()
    );
    assert_eq!(bed.gateway().status().peak_sessions, 1);
    support::shutdown_clean(bed).await;
}
