//! The page layer through the Solari provider and the gateway. The gateway crashes or closes
//! the page of a live session mid-task (its page chaos). The Aurora task completes on a
//! fresh page of the same session — signed in once, no relaunch, nothing left behind.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::PageFault;
use outlive::{Milestone, Options};
use outlive_bed::bed::TestBed;
use support::Tracked;

async fn page_fails_mid_task(fault: PageFault) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let bed = TestBed::start(gateway::Config::new().lifetime(Duration::from_secs(600)))
        .await
        .unwrap();
    let provider = Tracked::new(bed.gateway(), 0);
    let causes: Arc<Mutex<Vec<outlive::DeathCause>>> = Arc::default();
    let seen = causes.clone();
    let options = Options::new()
        // Not a test of detection: a browser slow to answer its probe on a loaded machine
        // must not end the session. (A local CI run at 9471e72 found the session ended
        // before the fault, after the relay had cut its client; cause not proven).
        .heartbeat_timeout(Duration::from_secs(6))
        .on_milestone(move |m| {
            if let Milestone::PageFailed { cause, .. } | Milestone::Died { cause, .. } = m {
                seen.lock().unwrap().push(*cause);
            }
        });
    // The fifth poll of the first entry asks for the fault (after the sign-in's checkpoint).
    let fail_page = async || {
        let id = provider.newest();
        let hit = bed.gateway().fail_page(&id, fault).await.unwrap();
        assert!(hit >= 1, "the gateway found the task's page");
    };
    let (outlive::Reported { result, event }, progress) =
        support::bank_run_acting(&bed, &provider, 30, &[5], options, fail_page).await;

    assert_eq!(
        result.map_err(|e| e.to_string()),
        Ok(30),
        "{}",
        event.to_json()
    );
    let expected = match fault {
        PageFault::Crash => outlive::DeathCause::PageCrashed,
        _ => outlive::DeathCause::PageClosed,
    };
    assert_eq!(*causes.lock().unwrap(), vec![expected]);
    assert_eq!(
        (event.relaunches, event.page_recoveries, event.attempts),
        (0, 1, 2),
        "{}",
        event.to_json()
    );
    assert_eq!(
        provider.ids.lock().unwrap().len(),
        1,
        "one session for the whole run"
    );
    assert_eq!(bed.bank().counters().totps_accepted, 1, "signed in once");
    assert_eq!(progress.sign_ins(), 1);
    assert_eq!(event.release_failed, 0);
    support::shutdown_clean(bed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_crashed_by_the_gateway_is_recovered_in_the_same_session() {
    page_fails_mid_task(PageFault::Crash).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_closed_by_the_gateway_is_recovered_in_the_same_session() {
    page_fails_mid_task(PageFault::Close).await;
}
