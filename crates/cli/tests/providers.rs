//! Every built-in cloud provider (`Cloud` with each `Dialect`) against the gateway's own
//! rendering of that cloud's API: the bank task through two deaths (kills), one sign-in,
//! completed, every session released (the gateway confirms); a wrong key refused with where
//! the key belongs.

mod support;

use std::time::Duration;

use futures::StreamExt;
use outlive::{Cloud, Dialect, Options};
use outlive_bed::bed::{Recording, TestBed};

/// Polls every 100 ms; the browser is killed after the 15th and the 30th.
const POLLS: u32 = 45;
const KILL_AT: &[u32] = &[15, 30];

/// The bank task through `dialect` on a bed of its own, its browser killed twice through the
/// gateway; answers what went wrong, if anything.
async fn survives(dialect: Dialect) -> Result<(), String> {
    let bed = TestBed::start(outlive_bed::bed::until_killed(Duration::ZERO))
        .await
        .unwrap();
    let url = format!("{}/{}", bed.gateway().base_url(), dialect.name());
    let provider = Recording::new(Cloud::new(dialect, bed.gateway().api_key()).base_url(url));
    let options = Options::new()
        .max_relaunches(10)
        .relaunch_backoff(Duration::from_millis(200));
    let kill = async || {
        let id = provider.newest_session_id().expect("a session");
        let _ = bed.gateway().kill(&id, gateway::DeathMode::Close).await;
    };
    let (outlive::Reported { result, event }, _) =
        support::bank_run_acting(&bed, &provider, POLLS, KILL_AT, options, kill).await;
    let name = dialect.name();
    let json = event.to_json();
    eprintln!("{name}: {json}");
    let checks = [
        (result.as_ref().ok() == Some(&POLLS), "completed"),
        (event.relaunches >= 2, "two deaths at least"),
        (event.release_failed == 0, "no release failed"),
        (
            event.sessions as usize == provider.endpoints().len(),
            "every session counted",
        ),
        (bed.bank().counters().totps_accepted == 1, "one sign-in"),
    ];
    if let Some((_, what)) = checks.iter().find(|(ok, _)| !ok) {
        return Err(format!("{name}: not {what}: {result:?} {json}"));
    }
    support::assert_gateway_clean(bed.gateway()).await;
    let status = bed.shutdown().await.unwrap();
    if (
        status.live_sessions,
        status.dead_sessions,
        status.chromium_processes,
    ) != (0, 0, 0)
    {
        return Err(format!("{name}: sessions left unreleased: {status:?}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cloud_dialect_carries_the_bank_task_through_deaths() {
    // Two at a time: a 2-core machine.
    let failures: Vec<String> = futures::stream::iter(Dialect::ALL)
        .map(survives)
        .buffer_unordered(2)
        .filter_map(|r| async move { r.err() })
        .collect()
        .await;
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_is_refused_with_where_to_put_it() {
    let bed = TestBed::start(gateway::Config::new()).await.unwrap();
    for dialect in Dialect::ALL {
        let url = format!("{}/{}", bed.gateway().base_url(), dialect.name());
        let provider = Cloud::new(dialect, "wrong").base_url(url).retries(0);
        let e = outlive::Provider::launch(&provider).await.err().unwrap();
        let message = e.to_string();
        assert!(message.contains("HTTP 401"), "{message}");
        assert!(message.contains(dialect.key_env()), "{message}");
    }
    support::shutdown_clean(bed).await;
}
