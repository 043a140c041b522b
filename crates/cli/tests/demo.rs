//! The main job, end to end on short settings: the demo completes through deaths with one
//! sign-in, and leaves nothing behind.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outlive_cli::demo::{self, DemoConfig, DemoEvent};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_outlives_its_browsers() {
    let config = DemoConfig {
        lifetime: Duration::from_secs(4),
        jitter: Duration::ZERO,
        task: Duration::from_secs(9),
        death: gateway::DeathMode::Mixed,
        checkpoint_every: Duration::from_millis(500),
        ..DemoConfig::default()
    };
    let deaths = Arc::new(Mutex::new(Vec::new()));
    let seen = deaths.clone();
    let report = demo::run(&config, move |e| {
        if let DemoEvent::Died { cause, .. } = e {
            seen.lock().unwrap().push(cause);
        }
    })
    .await
    .unwrap();

    let (polls, _) = demo::plan(&config);
    assert_eq!(report.polls, polls);
    assert_eq!((report.sign_ins, report.totps_accepted), (1, 1));
    let deaths = deaths.lock().unwrap().len() as u32;
    assert!(deaths >= 2, "{deaths} deaths: {}", report.event.to_json());
    // Every death was followed by a relaunch (a failed launch would add one more).
    assert!(report.event.relaunches >= deaths);
    assert_eq!(report.event.release_failed, 0);
    assert_eq!(
        (
            report.gateway_after.live_sessions,
            report.gateway_after.chromium_processes
        ),
        (0, 0)
    );
}
